//! `slipway sleep PROJECT [--preview NAME]` and `slipway wake PROJECT [--preview NAME]`
//! (issue 35), over `POST /api/projects/{projectId}/sleep|wake` (or a preview's
//! `…/previews/{name}/sleep|wake`); `wake` then polls the app until its `appState` is
//! `running` and says how long the start took.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::api::types::{AppState, Preview, PreviewList, Project};

use super::http::ApiClient;
use super::{path_segment, ClientError};

/// How long `slipway wake` waits for the app.
const WAKE_WAIT: Duration = Duration::from_secs(180);

/// Which app: production's, or a preview's.
struct App<'a> {
    project: String,
    preview: Option<&'a str>,
}

impl<'a> App<'a> {
    fn new(project: &str, preview: Option<&'a str>) -> App<'a> {
        App {
            project: path_segment(project),
            preview,
        }
    }

    /// The path of its `sleep` or `wake` call.
    fn action(&self, action: &str) -> String {
        match self.preview {
            None => format!("/api/projects/{}/{action}", self.project),
            Some(name) => format!(
                "/api/projects/{}/previews/{}/{action}",
                self.project,
                path_segment(name)
            ),
        }
    }

    /// Asks for `action`; the app's name and state in the answer.
    async fn call(&self, api: &ApiClient, action: &str) -> Result<(String, AppState), ClientError> {
        let path = self.action(action);
        Ok(match self.preview {
            None => {
                let project: Project = api.post(&path).await?;
                (project.slug, project.app_state)
            }
            Some(_) => {
                let preview: Preview = api.post(&path).await?;
                (preview.url, preview.app_state)
            }
        })
    }

    /// The app's state now.
    async fn state(&self, api: &ApiClient) -> Result<AppState, ClientError> {
        let Some(name) = self.preview else {
            let project: Project = api.get(&format!("/api/projects/{}", self.project)).await?;
            return Ok(project.app_state);
        };
        let mut cursor = String::new();
        loop {
            let path = format!("/api/projects/{}/previews?limit=100{cursor}", self.project);
            let page: PreviewList = api.get(&path).await?;
            if let Some(preview) = page.previews.into_iter().find(|p| p.name == name) {
                return Ok(preview.app_state);
            }
            match page.next_cursor {
                Some(next) => cursor = format!("&cursor={}", path_segment(&next)),
                None => return Ok(AppState::Stopped),
            }
        }
    }
}

pub async fn sleep(
    api: &ApiClient,
    project: &str,
    preview: Option<&str>,
) -> Result<ExitCode, ClientError> {
    let (name, state) = App::new(project, preview).call(api, "sleep").await?;
    println!("{name} is {}", state_word(state));
    Ok(ExitCode::SUCCESS)
}

pub async fn wake(
    api: &ApiClient,
    project: &str,
    preview: Option<&str>,
) -> Result<ExitCode, ClientError> {
    let app = App::new(project, preview);
    let started = Instant::now();
    let (name, mut state) = app.call(api, "wake").await?;
    while state == AppState::Waking && started.elapsed() < WAKE_WAIT {
        tokio::time::sleep(Duration::from_millis(100)).await;
        state = app.state(api).await?;
    }
    match state {
        AppState::Running => {
            println!("{name} is running ({} ms)", started.elapsed().as_millis());
            Ok(ExitCode::SUCCESS)
        }
        other => {
            eprintln!(
                "{name} is {} (its deployment's log says why)",
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
