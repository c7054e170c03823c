//! The smaller client commands: `login`, `logs`, `env set|ls|rm`, `projects` and `rollback`
//! (which waits for its run like `deploy`). Output meant for scripts (values, tables, the URL)
//! goes to stdout; notes and errors to stderr.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use crate::api::types::{
    EnvVarDeleted, EnvVarScope, EnvVars, EnvVarsBody, EnvVarsUpdated, Environment, LogPage,
    Project, ProjectList, ProvisionAccepted, RollbackBody, ScopedEnvVarsBody,
};

use super::credentials::{self, Credentials};
use super::deploy::report_run;
use super::display::{format_log_line, Display};
use super::follow::{follow_logs, follow_run};
use super::http::ApiClient;
use super::project_file::ProjectFile;
use super::{path_segment, ClientError};
use crate::cli::{EnvAction, EnvEnvironment};

/// Most pages `logs` reads (5000 lines at most each, so far past any retention).
const MAX_LOG_PAGES: usize = 10_000;

/// `slipway login`: checks the token against the API, then saves URL and token (0600).
pub async fn login(url: &str, token: Option<String>) -> Result<ExitCode, ClientError> {
    let token = match token {
        Some(token) => token,
        None => {
            eprint!("API token: ");
            let _ = std::io::stderr().flush();
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .map_err(|error| ClientError::Io(format!("reading the token: {error}")))?;
            line
        }
    };
    let credentials = Credentials {
        url: url.trim().trim_end_matches('/').to_owned(),
        token: token.trim().to_owned(),
    };
    if credentials.token.is_empty() {
        return Err(ClientError::Config("the token is empty".into()));
    }
    let api = super::api_client(&credentials)?;
    let _: ProjectList = api.get("/api/projects").await?;
    let path = credentials::credentials_path(
        std::env::var("XDG_CONFIG_HOME").ok().as_deref(),
        std::env::var("HOME").ok().as_deref(),
    )
    .ok_or_else(|| {
        ClientError::Config("neither HOME nor XDG_CONFIG_HOME is set: nowhere to save".into())
    })?;
    credentials::save(&path, &credentials)?;
    eprintln!(
        "Logged in to {}; credentials saved to {} (SLIPWAY_URL and SLIPWAY_TOKEN override them)",
        api.base_url(),
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `slipway logs DEPLOYMENT [-f]`.
pub async fn logs(
    api: &ApiClient,
    deployment: &str,
    follow: bool,
) -> Result<ExitCode, ClientError> {
    let deployment = path_segment(deployment);
    let mut display = Display::for_terminal();
    if follow {
        follow_logs(api, &deployment, &mut display).await?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut since = 0;
    let mut stdout = std::io::stdout().lock();
    for _ in 0..MAX_LOG_PAGES {
        let page: LogPage = api
            .get(&format!(
                "/api/deployments/{deployment}/logs?since={since}&limit=5000"
            ))
            .await?;
        for line in &page.logs {
            writeln!(stdout, "{}", format_log_line(line))
                .map_err(|error| ClientError::Io(format!("writing the log: {error}")))?;
        }
        if !page.has_more || page.next_since <= since {
            break;
        }
        since = page.next_since;
    }
    Ok(ExitCode::SUCCESS)
}

/// `slipway env set|ls|rm` for `--project`, else the project named in ./slipway.toml.
pub async fn env(
    api: &ApiClient,
    action: EnvAction,
    project: Option<&str>,
) -> Result<ExitCode, ClientError> {
    let project = project_or_here(project)?;
    let base = format!("/api/projects/{}/env-vars", path_segment(&project));
    match action {
        EnvAction::Set {
            pairs,
            environments,
            branch,
        } => {
            let vars = parse_pairs(&pairs)?;
            let answer: EnvVarsUpdated = match scoped_body(&vars, &environments, branch) {
                Some(scoped) => api.post_json(&base, &scoped).await?,
                None => api.post_json(&base, &vars).await?,
            };
            println!("{project}: set {}", answer.updated.join(", "));
            eprintln!("(applies to the next deployment)");
        }
        EnvAction::Ls => {
            let answer: EnvVars = api.get(&base).await?;
            if answer.env_vars.is_empty() {
                eprintln!("{project} has no environment variables");
            }
            // `KEY=VALUE` lines, as a shell reads them; a variable that does not apply
            // everywhere says where it does.
            for (key, value) in &answer.env_vars {
                let everywhere = |scope: &EnvVarScope| {
                    scope.branch.is_none()
                        && scope.environments.contains(&Environment::Production)
                        && scope.environments.contains(&Environment::Preview)
                };
                match answer.scopes.get(key).filter(|scope| !everywhere(scope)) {
                    Some(scope) => println!("{key}={value}  ({})", scope_in_words(scope)),
                    None => println!("{key}={value}"),
                }
            }
        }
        EnvAction::Rm { key } => {
            let _: EnvVarDeleted = api
                .delete(&format!("{base}/{}", path_segment(&key)))
                .await?;
            println!("{project}: removed {key}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The scoped form of `POST …/env-vars` when `--environment` or `--branch` was given; `None`
/// (Part one's flat body: everywhere) otherwise. `--branch` alone means that branch's previews.
fn scoped_body(
    vars: &EnvVarsBody,
    environments: &[EnvEnvironment],
    branch: Option<String>,
) -> Option<ScopedEnvVarsBody> {
    if environments.is_empty() && branch.is_none() {
        return None;
    }
    let mut named: Vec<Environment> = environments
        .iter()
        .map(|environment| match environment {
            EnvEnvironment::Production => Environment::Production,
            EnvEnvironment::Preview => Environment::Preview,
        })
        .collect();
    if named.is_empty() {
        named.push(Environment::Preview);
    }
    Some(ScopedEnvVarsBody {
        vars: vars
            .iter()
            .map(|(key, value)| (key.clone(), serde_json::Value::String(value.clone())))
            .collect(),
        environments: Some(named),
        branch,
    })
}

/// "production", "previews", "production and previews of feature-x", …
pub fn scope_in_words(scope: &EnvVarScope) -> String {
    let previews = match &scope.branch {
        Some(branch) => format!("previews of {branch}"),
        None => "previews".to_owned(),
    };
    let production = scope.environments.contains(&Environment::Production);
    match (
        production,
        scope.environments.contains(&Environment::Preview),
    ) {
        (true, true) => format!("production and {previews}"),
        (true, false) => "production".to_owned(),
        (false, true) => previews,
        (false, false) => "nowhere".to_owned(),
    }
}

/// `--project`, else the `project` of ./slipway.toml.
pub fn project_or_here(project: Option<&str>) -> Result<String, ClientError> {
    if let Some(project) = project {
        return Ok(project.to_owned());
    }
    let here = std::env::current_dir()
        .map_err(|error| ClientError::Io(format!("no current directory: {error}")))?;
    ProjectFile::load(&here)?
        .and_then(|file| file.project)
        .ok_or_else(|| {
            ClientError::Config(
                "which project? Pass --project SLUG, or run this where a slipway.toml sets `project`"
                    .into(),
            )
        })
}

/// `KEY=value` arguments into the API's body; a value may contain `=`.
pub fn parse_pairs(pairs: &[String]) -> Result<EnvVarsBody, ClientError> {
    let mut body = EnvVarsBody::new();
    for pair in pairs {
        match pair.split_once('=') {
            Some((key, value)) if !key.is_empty() => {
                body.insert(key.to_owned(), value.to_owned());
            }
            _ => return Err(ClientError::Config(format!("{pair:?} is not KEY=VALUE"))),
        }
    }
    Ok(body)
}

/// `slipway projects`: a table of slug, state, URL and live deployment.
pub async fn projects(api: &ApiClient) -> Result<ExitCode, ClientError> {
    let answer: ProjectList = api.get("/api/projects").await?;
    let projects = &answer.projects;
    if projects.is_empty() {
        eprintln!("no projects yet: `slipway deploy` creates one");
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", projects_table(projects));
    Ok(ExitCode::SUCCESS)
}

/// The `projects` table, columns padded to their widest cell.
pub fn projects_table(projects: &[Project]) -> String {
    let mut rows = vec![vec![
        "SLUG".to_owned(),
        "STATE".to_owned(),
        "URL".to_owned(),
        "LIVE DEPLOYMENT".to_owned(),
    ]];
    for project in projects {
        let state = serde_json::to_value(project.state)
            .ok()
            .and_then(|value| value.as_str().map(str::to_owned))
            .unwrap_or_default();
        rows.push(vec![
            project.slug.clone(),
            state,
            project.url.clone(),
            project
                .live_deployment_id
                .clone()
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    super::display::table(&rows)
}

/// `slipway rollback PROJECT DEPLOYMENT`: re-activates the build and waits for the run.
pub async fn rollback(
    api: &ApiClient,
    project: &str,
    deployment: &str,
) -> Result<ExitCode, ClientError> {
    let started: ProvisionAccepted = api
        .post_json(
            &format!("/api/projects/{}/rollback", path_segment(project)),
            &RollbackBody {
                deployment_id: deployment.to_owned(),
            },
        )
        .await?;
    let provisioning_id = started.provisioning_id.as_str();
    eprintln!("Rolling {project} back to {deployment} (run {provisioning_id})");
    let mut display = Display::for_terminal();
    // The rollback's lines land in the old deployment's log after its first run's; polling the
    // status alone keeps the output to this run.
    let status = follow_run(api, provisioning_id, deployment, false, &mut display).await?;
    Ok(report_run(&status, "rollback", &mut display))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pairs_split_at_the_first_equals_sign() {
        let body =
            parse_pairs(&["A=1".into(), "URL=postgres://x?a=b".into(), "EMPTY=".into()]).unwrap();
        assert_eq!(
            serde_json::to_value(body).unwrap(),
            json!({"A": "1", "URL": "postgres://x?a=b", "EMPTY": ""})
        );
        assert!(parse_pairs(&["NOVALUE".into()]).is_err());
        assert!(parse_pairs(&["=x".into()]).is_err());
    }

    #[test]
    fn the_projects_table_lines_up() {
        let project = |value| serde_json::from_value::<Project>(value).unwrap();
        let table = projects_table(&[
            project(
                json!({"id":"prj_1","createdAt":"t","slug":"web","state":"live","url":"https://web.localhost","liveDeploymentId":"dpl_1"}),
            ),
            project(
                json!({"id":"prj_2","createdAt":"t","slug":"api-server","state":"new","url":"https://api-server.localhost","liveDeploymentId":null}),
            ),
        ]);
        assert_eq!(
            table,
            "SLUG        STATE  URL                           LIVE DEPLOYMENT\n\
             web         live   https://web.localhost         dpl_1\n\
             api-server  new    https://api-server.localhost  -\n"
        );
    }
}
