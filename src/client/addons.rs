//! `slipway addons list|create|show|delete|link|unlink|upgrade|rollback|credentials`: a project's PostgreSQL
//! and Redis add-ons over `/api/projects/{projectId}/addons` and `/api/addons/{addonId}`.
//! Tables and values go to stdout, notes to stderr; `--json` prints the API's answer.

use std::process::ExitCode;

use crate::api::types::{
    Addon, AddonCredentials, AddonDeleted, AddonList, CreateAddon, UpgradeAddon,
};
use crate::cli::{AddonKindArg, AddonModeArg, AddonsAction, CreateAddonArgs};

use super::commands::project_or_here;
use super::display::table;
use super::http::ApiClient;
use super::usage::human_bytes;
use super::{path_segment, ClientError};

pub async fn addons(api: &ApiClient, action: AddonsAction) -> Result<ExitCode, ClientError> {
    match action {
        AddonsAction::List { project, json } => {
            let project = project_or_here(project.as_deref())?;
            let path = format!("/api/projects/{}/addons?limit=1000", path_segment(&project));
            if json {
                return api.print_json(&path).await;
            }
            let list: AddonList = api.get(&path).await?;
            match list.addons.is_empty() {
                true => eprintln!(
                    "{project} has no add-ons: `slipway addons create postgres` makes one"
                ),
                false => print!("{}", addons_table(&list.addons)),
            }
        }
        AddonsAction::Create(args) => create(api, args).await?,
        AddonsAction::Show { id, json } => {
            let path = format!("/api/addons/{}", path_segment(&id));
            if json {
                return api.print_json(&path).await;
            }
            let addon: Addon = api.get(&path).await?;
            print!("{}", details(&addon));
        }
        AddonsAction::Delete { id, confirm } => delete(api, &id, &confirm).await?,
        AddonsAction::Link { id, project } => {
            let addon = set_link(api, &id, &project, true).await?;
            println!(
                "{}: linked {project} (links: {})",
                addon.id,
                addon.links.join(", ")
            );
            eprintln!("(its next production deployment gets {})", addon.env_name);
        }
        AddonsAction::Unlink { id, project } => {
            let addon = set_link(api, &id, &project, false).await?;
            println!(
                "{}: unlinked {project} (links: {})",
                addon.id,
                addon.links.join(", ")
            );
            eprintln!("(from its next deployment on)");
        }
        AddonsAction::Upgrade { id, version } => upgrade(api, &id, version).await?,
        AddonsAction::Rollback { id } => {
            let path = format!("/api/addons/{}/rollback", path_segment(&id));
            let addon: Addon = api.post_json(&path, &serde_json::json!({})).await?;
            let back = addon.upgraded_from.unwrap_or_default();
            println!(
                "rolling {} back to {back}: the links move back to it",
                addon.id
            );
        }
        AddonsAction::Credentials { id, json } => {
            let path = format!("/api/addons/{}/credentials", path_segment(&id));
            if json {
                return api.print_json(&path).await;
            }
            let credentials: AddonCredentials = api.get(&path).await?;
            print!("{}", credentials_text(&credentials));
            eprintln!("(reachable from linked projects only; from here: `slipway db proxy {id}`)");
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn create(api: &ApiClient, args: CreateAddonArgs) -> Result<(), ClientError> {
    let project = project_or_here(args.project.as_deref())?;
    let body = CreateAddon {
        kind: kind_word(args.kind).to_owned(),
        memory_mb: args.memory,
        disk_mb: args.disk,
        env_name: args.env_name,
        mode: args.mode.map(|mode| mode_word(mode).to_owned()),
        pitr: args.pitr.then_some(true),
    };
    eprintln!("Creating a {} add-on for {project} …", body.kind);
    let path = format!("/api/projects/{}/addons", path_segment(&project));
    let addon: Addon = api.post_json(&path, &body).await?;
    print!("{}", addons_table(std::slice::from_ref(&addon)));
    eprintln!(
        "{project}'s production gets {} from its next deployment; `slipway db connect {}` \
         opens a console",
        addon.env_name, addon.id
    );
    Ok(())
}

async fn delete(api: &ApiClient, id: &str, confirm: &str) -> Result<(), ClientError> {
    let path = format!(
        "/api/addons/{}?confirm={}",
        path_segment(id),
        path_segment(confirm)
    );
    eprintln!("Taking a final backup of {id} and proving it …");
    let deleted: AddonDeleted = api.delete(&path).await?;
    println!("deleted {}", deleted.id);
    eprintln!(
        "its backups{} are kept until {}; POST /api/addons/{}/restore {{\"backupId\", \
         \"target\": \"new\"}} brings one back",
        deleted
            .final_backup_id
            .map(|b| format!(" (final: {b})"))
            .unwrap_or_default(),
        deleted.backups_kept_until,
        deleted.id
    );
    Ok(())
}

async fn upgrade(api: &ApiClient, id: &str, version: Option<String>) -> Result<(), ClientError> {
    let path = format!("/api/addons/{}/upgrade", path_segment(id));
    let into: Addon = api.post_json(&path, &UpgradeAddon { version }).await?;
    let new = &into.id;
    println!("upgrading {id} into {new}");
    eprintln!(
        "{id} stops taking writes; its data is dumped, restored into {new} and counted, then the \
         links move (`slipway addons show {new}` follows it; `slipway addons rollback {new}` goes \
         back)"
    );
    Ok(())
}

async fn set_link(
    api: &ApiClient,
    id: &str,
    project: &str,
    link: bool,
) -> Result<Addon, ClientError> {
    let path = format!(
        "/api/addons/{}/links/{}",
        path_segment(id),
        path_segment(project)
    );
    match link {
        true => api.put(&path).await,
        false => api.delete(&path).await,
    }
}

/// ID, KIND, VERSION, STATE, MEMORY, DISK (used / size), ENV, LINKS.
pub fn addons_table(addons: &[Addon]) -> String {
    let mut rows = vec![[
        "ID", "KIND", "VERSION", "STATE", "MEMORY", "DISK", "ENV", "LINKS",
    ]
    .map(str::to_owned)
    .to_vec()];
    for addon in addons {
        rows.push(vec![
            addon.id.clone(),
            kind_and_mode(addon),
            addon.version.clone(),
            state(addon),
            format!("{} MiB", addon.memory_mb),
            disk(addon),
            addon.env_name.clone(),
            addon.links.len().to_string(),
        ]);
    }
    table(&rows)
}

fn kind_word(kind: AddonKindArg) -> &'static str {
    match kind {
        AddonKindArg::Postgres => "postgres",
        AddonKindArg::Redis => "redis",
    }
}

fn mode_word(mode: AddonModeArg) -> &'static str {
    match mode {
        AddonModeArg::Persistent => "persistent",
        AddonModeArg::Cache => "cache",
    }
}

/// `slipway addons show`: one field a line.
pub fn details(addon: &Addon) -> String {
    let recovery = match (&addon.pitr, &addon.pitr_window) {
        (false, _) => None,
        (true, Some(window)) => Some(format!("point in time, {} to {}", window.from, window.to)),
        (true, None) => Some("point in time (no proven base backup yet)".to_owned()),
    };
    let rows: Vec<Vec<String>> = [
        ("id", addon.id.clone()),
        ("kind", kind_and_mode(addon)),
        ("version", addon.version.clone()),
        ("state", state(addon)),
        ("project", addon.project_id.clone()),
        ("memory", format!("{} MiB", addon.memory_mb)),
        ("disk", disk(addon)),
        ("env", addon.env_name.clone()),
        ("address", format!("{}:{}", addon.host, addon.port)),
        ("links", addon.links.join(", ")),
        ("created", addon.created_at.clone()),
    ]
    .into_iter()
    .chain(recovery.map(|text| ("recovery", text)))
    .map(|(name, value)| vec![name.to_owned(), value])
    .collect();
    table(&rows)
}

/// `slipway addons credentials`: url, then the parts.
pub fn credentials_text(credentials: &AddonCredentials) -> String {
    let mut rows = vec![vec!["url".to_owned(), credentials.url.clone()]];
    if let Some(user) = &credentials.user {
        rows.push(vec!["user".into(), user.clone()]);
    }
    rows.push(vec!["password".into(), credentials.password.clone()]);
    rows.push(vec!["host".into(), credentials.host.clone()]);
    rows.push(vec!["port".into(), credentials.port.to_string()]);
    if let Some(database) = &credentials.database {
        rows.push(vec!["database".into(), database.clone()]);
    }
    table(&rows)
}

fn kind_and_mode(addon: &Addon) -> String {
    match addon.mode.as_str() {
        "cache" => format!("{} (cache)", addon.kind),
        _ => addon.kind.clone(),
    }
}

fn state(addon: &Addon) -> String {
    format!("{:?}", addon.state).to_lowercase()
}

fn disk(addon: &Addon) -> String {
    format!(
        "{} / {} MiB",
        human_bytes(addon.disk_used_bytes),
        addon.disk_mb
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addon() -> Addon {
        serde_json::from_value(serde_json::json!({
            "id": "adn_x", "kind": "redis", "version": "7.0.15", "projectId": "prj_1",
            "state": "running", "memoryMb": 256, "diskMb": 1024, "diskUsedBytes": 2048,
            "envName": "REDIS_URL", "mode": "cache", "links": ["prj_1", "prj_2"],
            "host": "10.1.0.5", "port": 6379, "createdAt": "2026-11-27T00:00:00Z"
        }))
        .unwrap()
    }

    #[test]
    fn tables_read_well() {
        let text = addons_table(&[addon()]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("ID     KIND"), "{text}");
        assert!(lines[1].contains("redis (cache)"), "{text}");
        assert!(lines[1].contains("running"), "{text}");
        assert!(lines[1].ends_with("REDIS_URL  2"), "{text}");
        let shown = details(&addon());
        assert!(shown.contains("address  10.1.0.5:6379\n"), "{shown}");
        assert!(shown.contains("links    prj_1, prj_2\n"), "{shown}");
    }
}
