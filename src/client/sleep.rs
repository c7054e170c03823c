//! `slipway sleep PROJECT` and `slipway wake PROJECT` (issue 35), over
//! `POST /api/projects/{projectId}/sleep|wake`; `wake` then polls the project until its
//! `appState` is `running` and says how long the start took.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::api::types::{AppState, Project};

use super::http::ApiClient;
use super::{path_segment, ClientError};

/// How long `slipway wake` waits for the app.
const WAKE_WAIT: Duration = Duration::from_secs(180);

pub async fn sleep(api: &ApiClient, project: &str) -> Result<ExitCode, ClientError> {
    let path = format!("/api/projects/{}/sleep", path_segment(project));
    let answer: Project = api.post(&path).await?;
    println!("{} is {}", answer.slug, state_word(answer.app_state));
    Ok(ExitCode::SUCCESS)
}

pub async fn wake(api: &ApiClient, project: &str) -> Result<ExitCode, ClientError> {
    let segment = path_segment(project);
    let started = Instant::now();
    let mut answer: Project = api.post(&format!("/api/projects/{segment}/wake")).await?;
    while answer.app_state == AppState::Waking && started.elapsed() < WAKE_WAIT {
        tokio::time::sleep(Duration::from_millis(100)).await;
        answer = api.get(&format!("/api/projects/{segment}")).await?;
    }
    match answer.app_state {
        AppState::Running => {
            println!(
                "{} is running ({} ms)",
                answer.slug,
                started.elapsed().as_millis()
            );
            Ok(ExitCode::SUCCESS)
        }
        other => {
            eprintln!(
                "{} is {} (its deployment's log says why)",
                answer.slug,
                state_word(other)
            );
            Ok(ExitCode::FAILURE)
        }
    }
}

fn state_word(state: AppState) -> &'static str {
    match state {
        AppState::Running => "running",
        AppState::Sleeping => "sleeping",
        AppState::Waking => "waking",
        AppState::Stopped => "stopped (nothing live)",
    }
}
