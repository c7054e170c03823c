//! `slipway scale web=2 worker=1 [--memory worker=256]` and `slipway ps`: a project's
//! process types and their instances, over `GET`/`PATCH /api/projects/{projectId}/formation`.
//! The arguments are parsed by clap (`cli::parse_type_setting`); this file joins them into
//! the API's body and prints the answers as tables.

use std::collections::BTreeMap;
use std::process::ExitCode;

use crate::api::types::{
    DeployStrategy, Formation, FormationPatch, InstanceState, ProcessTypePatch, ProcessTypeView,
    RunningInstance,
};
use crate::cli::TypeSetting;
use crate::formation::InstanceId;

use super::commands::project_or_here;
use super::display::table;
use super::http::ApiClient;
use super::usage::human_bytes;
use super::{path_segment, ClientError};

/// `slipway scale`: sends the change, then prints the formation the API answers with.
pub async fn scale(
    api: &ApiClient,
    change: FormationPatch,
    project: Option<&str>,
) -> Result<ExitCode, ClientError> {
    let project = project_or_here(project)?;
    let path = format!("/api/projects/{}/formation", path_segment(&project));
    let formation: Formation = api.patch_json(&path, &change).await?;
    print!("{}", types_table(&formation));
    Ok(ExitCode::SUCCESS)
}

/// `slipway ps`: the live deployment's instances, or the API's JSON with `--json`.
pub async fn ps(
    api: &ApiClient,
    project: Option<&str>,
    json: bool,
) -> Result<ExitCode, ClientError> {
    let project = project_or_here(project)?;
    let path = format!("/api/projects/{}/formation", path_segment(&project));
    if json {
        return api.print_json(&path).await;
    }
    let formation: Formation = api.get(&path).await?;
    match formation.deployment_id {
        None => eprintln!(
            "{project} has no live server deployment: nothing runs (nothing deployed yet, or a \
             static site, which has no processes)"
        ),
        Some(_) => print!("{}", instances_table(&formation)),
    }
    Ok(ExitCode::SUCCESS)
}

/// The body of `PATCH …/formation` from `TYPE=N` instance counts and `--memory TYPE=MB`
/// limits; a type named twice in the same list is a usage error.
pub fn scale_body(
    instances: &[TypeSetting],
    memory: &[TypeSetting],
) -> Result<FormationPatch, ClientError> {
    let mut change: BTreeMap<String, ProcessTypePatch> = BTreeMap::new();
    for setting in instances {
        let entry = change.entry(setting.process.clone()).or_default();
        if entry.instances.replace(setting.value).is_some() {
            return Err(ClientError::Usage(format!(
                "`{}` is named twice; give each type's instances once",
                setting.process
            )));
        }
    }
    for setting in memory {
        let entry = change.entry(setting.process.clone()).or_default();
        if entry.memory_mb.replace(setting.value).is_some() {
            return Err(ClientError::Usage(format!(
                "`--memory {}=…` is given twice; give each type's memory once",
                setting.process
            )));
        }
    }
    if change.is_empty() {
        return Err(ClientError::Usage(
            "name at least one type: `slipway scale web=2` or `--memory worker=256`".into(),
        ));
    }
    Ok(FormationPatch(change))
}

/// One line per type: how many instances it asks and runs, its limits and command (what
/// `slipway scale` prints).
pub fn types_table(formation: &Formation) -> String {
    let Some(deployment) = &formation.deployment_id else {
        return "no live server deployment: nothing runs\n".to_owned();
    };
    let mut rows = vec![vec![
        "TYPE".to_owned(),
        "INSTANCES".to_owned(),
        "RUNNING".to_owned(),
        "MEMORY".to_owned(),
        "CPUS".to_owned(),
        "DEPLOY".to_owned(),
        "COMMAND".to_owned(),
    ]];
    for (name, process) in &formation.types {
        rows.push(vec![
            name.clone(),
            process.instances.to_string(),
            process.running.len().to_string(),
            format!("{} MiB", process.memory_mb),
            format!("{}", process.cpus),
            deploy_name(process.deploy).to_owned(),
            process.command.clone(),
        ]);
    }
    format!("deployment {deployment}\n{}", table(&rows))
}

/// One line per running instance (what `slipway ps` prints), then a line for each type
/// scaled to 0 or running fewer instances than asked (kept out of the table, whose columns
/// they would stretch).
pub fn instances_table(formation: &Formation) -> String {
    let mut rows = vec![vec![
        "TYPE".to_owned(),
        "INSTANCE".to_owned(),
        "STATE".to_owned(),
        "PID".to_owned(),
        "ADDRESS".to_owned(),
        "MEMORY".to_owned(),
        "RESTARTS".to_owned(),
        "STARTED".to_owned(),
    ]];
    let mut notes = String::new();
    for (name, process) in &formation.types {
        if process.instances == 0 {
            notes.push_str(&format!("{name}: scaled to 0, no instances run\n"));
            continue;
        }
        let mut running: Vec<&RunningInstance> = process.running.iter().collect();
        running.sort_by_key(|instance| InstanceId::parse(&instance.instance));
        for instance in &running {
            rows.push(instance_row(name, process, instance));
        }
        let asked = process.instances as usize;
        if running.len() < asked {
            notes.push_str(&format!(
                "{name}: {} of {asked} instances not running\n",
                asked - running.len()
            ));
        }
    }
    if rows.len() == 1 {
        return notes;
    }
    // On a cluster: where each instance runs (`local`: this machine), after its state.
    let clustered = formation
        .types
        .values()
        .any(|t| t.running.iter().any(|i| i.node.is_some()));
    if clustered {
        rows[0].insert(3, "NODE".to_owned());
        let shown = formation.types.values().filter(|p| p.instances != 0);
        let nodes = shown.flat_map(|process| {
            let mut running: Vec<&RunningInstance> = process.running.iter().collect();
            running.sort_by_key(|instance| InstanceId::parse(&instance.instance));
            running
                .into_iter()
                .map(|i| i.node.clone().unwrap_or_else(|| "local".into()))
        });
        for (row, node) in rows[1..].iter_mut().zip(nodes) {
            row.insert(3, node);
        }
    }
    table(&rows) + &notes
}

fn instance_row(name: &str, process: &ProcessTypeView, instance: &RunningInstance) -> Vec<String> {
    let state = match instance.state {
        InstanceState::Starting => "starting",
        InstanceState::Running => "running",
        InstanceState::Restarting => "restarting",
    };
    let used = instance
        .memory_bytes
        .map(human_bytes)
        .unwrap_or_else(|| "-".to_owned());
    vec![
        name.to_owned(),
        instance.instance.clone(),
        state.to_owned(),
        instance
            .pid
            .map(|pid| pid.to_string())
            .unwrap_or_else(|| "-".to_owned()),
        instance.address.clone().unwrap_or_else(|| "-".to_owned()),
        format!("{used} / {} MiB", process.memory_mb),
        instance.restarts.to_string(),
        instance.started_at.clone(),
    ]
}

fn deploy_name(strategy: DeployStrategy) -> &'static str {
    match strategy {
        DeployStrategy::Overlap => "overlap",
        DeployStrategy::Replace => "replace",
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use serde_json::json;

    use super::*;
    use crate::cli::{parse_type_setting, Cli, ClientCommand, Command};

    fn setting(process: &str, value: u32) -> TypeSetting {
        TypeSetting {
            process: process.into(),
            value,
        }
    }

    #[test]
    fn type_settings_parse_or_say_what_is_wrong() {
        assert_eq!(parse_type_setting("web=2"), Ok(setting("web", 2)));
        assert_eq!(parse_type_setting("worker_2=0"), Ok(setting("worker_2", 0)));
        for (text, says) in [
            ("web", "expected TYPE=N"),
            ("web=", "is not a whole number"),
            ("web=two", "is not a whole number"),
            ("web=-1", "is not a whole number"),
            ("web=1.5", "is not a whole number"),
            ("=2", "process type"),
            ("Web=2", "process type"),
            ("web-1=2", "process type"),
        ] {
            let error = parse_type_setting(text).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    #[test]
    fn scale_parses_pairs_and_memory_and_refuses_malformed_ones_with_exit_2() {
        let parsed = Cli::try_parse_from([
            "slipway",
            "scale",
            "web=2",
            "worker=1",
            "--memory",
            "worker=256",
        ])
        .unwrap();
        let Command::Client(ClientCommand::Scale {
            instances,
            memory,
            project,
        }) = parsed.command
        else {
            panic!("not scale: {parsed:?}");
        };
        assert_eq!(instances, [setting("web", 2), setting("worker", 1)]);
        assert_eq!(memory, [setting("worker", 256)]);
        assert_eq!(project, None);
        // Memory alone is a change too.
        assert!(Cli::try_parse_from(["slipway", "scale", "--memory", "web=64"]).is_ok());
        for args in [
            &["slipway", "scale"][..],
            &["slipway", "scale", "web"],
            &["slipway", "scale", "web=x"],
            &["slipway", "scale", "web=2", "--memory", "worker"],
        ] {
            let error = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{args:?}: {error}");
        }
    }

    #[test]
    fn the_body_names_only_the_given_types_and_fields() {
        let body = scale_body(
            &[setting("web", 2), setting("worker", 1)],
            &[setting("worker", 256), setting("clock", 64)],
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&body).unwrap(),
            json!({
                "web": {"instances": 2},
                "worker": {"instances": 1, "memoryMb": 256},
                "clock": {"memoryMb": 64},
            })
        );
        for (instances, memory) in [
            (vec![setting("web", 2), setting("web", 3)], vec![]),
            (vec![], vec![setting("web", 64), setting("web", 128)]),
            (vec![], vec![]),
        ] {
            let error = scale_body(&instances, &memory).unwrap_err();
            assert!(matches!(error, ClientError::Usage(_)), "{error:?}");
        }
    }

    fn formation() -> Formation {
        serde_json::from_value(json!({
            "projectId": "prj_1",
            "deploymentId": "dpl_1",
            "types": {
                "web": {"command": "node server.js", "instances": 2, "memoryMb": 512, "cpus": 1.0,
                    "deploy": "overlap", "affinity": "none", "minHealthy": 2, "running": [
                    {"instance": "web.2", "state": "starting", "pid": null, "node": null,
                     "address": "127.0.0.1:40002", "restarts": 0,
                     "startedAt": "2025-01-02T03:04:06Z", "memoryBytes": null},
                    {"instance": "web.1", "state": "running", "pid": 4242, "node": null,
                     "address": "127.0.0.1:40001", "restarts": 3,
                     "startedAt": "2025-01-02T03:04:05Z", "memoryBytes": 24_117_248u64}]},
                "worker": {"command": "node worker.js", "instances": 0, "memoryMb": 256,
                    "cpus": 0.5, "deploy": "replace", "affinity": "none", "minHealthy": 0,
                    "running": []},
                "clock": {"command": "node clock.js", "instances": 1, "memoryMb": 128,
                    "cpus": 0.25, "deploy": "replace", "affinity": "none", "minHealthy": 1,
                    "running": []},
            }
        }))
        .unwrap()
    }

    #[test]
    fn the_instances_table_lines_up_and_says_what_does_not_run() {
        assert_eq!(
            instances_table(&formation()),
            "TYPE  INSTANCE  STATE     PID   ADDRESS          MEMORY              RESTARTS  STARTED\n\
             web   web.1     running   4242  127.0.0.1:40001  23.0 MiB / 512 MiB  3         2025-01-02T03:04:05Z\n\
             web   web.2     starting  -     127.0.0.1:40002  - / 512 MiB         0         2025-01-02T03:04:06Z\n\
             clock: 1 of 1 instances not running\n\
             worker: scaled to 0, no instances run\n"
        );
        let mut stopped = formation();
        stopped.types.retain(|name, _| name == "worker");
        assert_eq!(
            instances_table(&stopped),
            "worker: scaled to 0, no instances run\n"
        );
    }

    #[test]
    fn the_types_table_shows_each_types_settings() {
        assert_eq!(
            types_table(&formation()),
            "deployment dpl_1\n\
             TYPE    INSTANCES  RUNNING  MEMORY   CPUS  DEPLOY   COMMAND\n\
             clock   1          0        128 MiB  0.25  replace  node clock.js\n\
             web     2          2        512 MiB  1     overlap  node server.js\n\
             worker  0          0        256 MiB  0.5   replace  node worker.js\n"
        );
        let nothing: Formation = serde_json::from_value(
            json!({"projectId": "prj_1", "deploymentId": null, "types": {}}),
        )
        .unwrap();
        assert!(types_table(&nothing).contains("no live server deployment"));
    }
}
