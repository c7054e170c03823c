//! `slipway deployments PROJECT` and `slipway previews PROJECT`: what was deployed where, by
//! what, from which branch and commit, and the previews a project has now.

use std::process::ExitCode;

use crate::api::types::{Deployment, DeploymentList, Environment, PreviewList, Trigger};

use super::display::table;
use super::http::ApiClient;
use super::{path_segment, ClientError};

pub async fn deployments(api: &ApiClient, project: &str) -> Result<ExitCode, ClientError> {
    let list: DeploymentList = api
        .get(&format!(
            "/api/projects/{}/deployments?limit=50",
            path_segment(project)
        ))
        .await?;
    if list.deployments.is_empty() {
        eprintln!("{project} has no deployments yet");
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", deployments_table(&list.deployments));
    Ok(ExitCode::SUCCESS)
}

/// Newest first: id, environment, branch, commit, trigger, state, when and how long.
pub fn deployments_table(deployments: &[Deployment]) -> String {
    let mut rows = vec![[
        "DEPLOYMENT",
        "ENV",
        "BRANCH",
        "COMMIT",
        "TRIGGER",
        "STATE",
        "CREATED",
        "DURATION",
    ]
    .map(str::to_owned)
    .to_vec()];
    for d in deployments {
        let state = serde_json::to_value(d.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let duration = d
            .finished_at
            .as_deref()
            .and_then(|end| Some(seconds(end)? - seconds(&d.created_at)?))
            .map_or_else(|| "-".to_owned(), |s| format!("{s} s"));
        rows.push(vec![
            d.id.clone(),
            match d.environment {
                Environment::Production => "production",
                Environment::Preview => "preview",
            }
            .to_owned(),
            d.branch.clone().unwrap_or_else(|| "-".into()),
            d.commit
                .as_deref()
                .map_or_else(|| "-".into(), |c| c[..c.len().min(7)].to_owned()),
            match d.trigger {
                Trigger::Api => "api",
                Trigger::Webhook => "webhook",
                Trigger::Hook => "hook",
                Trigger::Rollback => "rollback",
                Trigger::Cli => "cli",
            }
            .to_owned(),
            if d.live {
                format!("{state} (serving)")
            } else {
                state
            },
            d.created_at.chars().take(19).collect(),
            duration,
        ]);
    }
    table(&rows)
}

/// Seconds since the epoch of an RFC 3339 UTC time as the API writes it.
fn seconds(at: &str) -> Option<i64> {
    let parse = |range: std::ops::Range<usize>| at.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (parse(0..4)?, parse(5..7)?, parse(8..10)?);
    let (hour, minute, second) = (parse(11..13)?, parse(14..16)?, parse(17..19)?);
    // Days from 1970-01-01 (Howard Hinnant's civil-from-days inverse).
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second)
}

pub async fn previews(api: &ApiClient, project: &str) -> Result<ExitCode, ClientError> {
    let list: PreviewList = api
        .get(&format!("/api/projects/{}/previews", path_segment(project)))
        .await?;
    if list.previews.is_empty() {
        eprintln!(
            "{project} has no previews (set \"previews\": true in its settings and push a branch)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = vec![["PREVIEW", "FROM", "STATE", "UPDATED", "URL"]
        .map(str::to_owned)
        .to_vec()];
    for p in &list.previews {
        let from = match (p.pull_request, &p.branch) {
            (Some(n), Some(branch)) => format!("#{n} ({branch})"),
            (Some(n), None) => format!("#{n}"),
            (None, Some(branch)) => branch.clone(),
            (None, None) => "-".into(),
        };
        rows.push(vec![
            p.name.clone(),
            from,
            p.state.clone(),
            p.updated_at.chars().take(19).collect(),
            p.url.clone(),
        ]);
    }
    print!("{}", table(&rows));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_times_become_seconds() {
        assert_eq!(seconds("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(seconds("2026-11-24T20:00:05.123Z"), Some(1_795_550_405));
        assert_eq!(
            seconds("2024-03-01T00:00:00Z").unwrap() - seconds("2024-02-28T00:00:00Z").unwrap(),
            2 * 86_400,
            "a leap year"
        );
        assert_eq!(seconds("nonsense"), None);
    }
}
