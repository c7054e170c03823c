//! Previews sleep too (issue 35): with the operator's `[sleep] previews_idle_timeout_s`, a
//! server app's preview (built by a deploy hook for its branch) sleeps on its own once idle,
//! its process gone, while production (no setting: never sleeps) keeps serving; the first
//! request to the preview's host wakes it; it stays asleep across a daemon restart; the API
//! puts it to sleep and wakes it on request (`…/previews/{name}/sleep`, `…/wake`).

use std::time::Duration;

use serde_json::json;

use super::fixtures::*;
use crate::support::{eventually, missing_tool, TestDaemon};

const PREVIEW: &str = "beta--api.localhost";

async fn preview_state(daemon: &TestDaemon) -> String {
    let list = daemon
        .api("GET", "/api/projects/api/previews", None)
        .await
        .json();
    list["previews"][0]["appState"]
        .as_str()
        .unwrap_or("?")
        .to_owned()
}

async fn wait_preview_state(daemon: &TestDaemon, state: &str) {
    let reached = eventually(Duration::from_secs(20), || async {
        preview_state(daemon).await == state
    })
    .await;
    assert!(reached, "the preview never became {state}");
}

/// Fires a deploy hook for `branch` and waits for its run.
async fn deploy_branch(daemon: &TestDaemon, branch: &str) {
    let hook = daemon
        .api(
            "POST",
            "/api/projects/api/deploy-hooks",
            Some(json!({"name": branch, "branch": branch})),
        )
        .await;
    assert_eq!(hook.status, 201, "{}", hook.text());
    let url = hook.json()["url"].as_str().unwrap().to_owned();
    let path = &url[url.find("/api/hooks/").unwrap()..];
    fire_hook(daemon, path).await;
}

fn alive(pid: &str) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previews_sleep_by_the_operators_default_and_wake_on_their_host() {
    if missing_tool("git", "the test serves a repository with git daemon")
        || missing_tool("python3", "the app is a python server")
    {
        return;
    }
    let Some(git) = GitServer::start() else {
        return;
    };
    git.commit("main", &[("app.py", &python_app("str(os.getpid())"))]);
    git.commit("beta", &[("README.md", "beta")]);
    let sleep = "[sleep]\ntick_ms = 200\npreviews_idle_timeout_s = 2\n";
    let mut daemon = TestDaemon::start_with(options().extra_toml(sleep));
    let api = set_up(
        &daemon,
        "api",
        json!({"gitUrl": git.url(), "startCommand": "python3 app.py", "previews": true}),
    )
    .await;
    deploy_branch(&daemon, "main").await;
    deploy_branch(&daemon, "beta").await;
    let production = api.page("api.localhost").await.text();
    let preview = api.page(PREVIEW).await.text();
    assert_ne!(production, preview, "two processes");
    assert_eq!(preview_state(&daemon).await, "running");

    // Idle for 2 s: the preview sleeps, its process gone; production serves on.
    wait_preview_state(&daemon, "sleeping").await;
    assert!(
        eventually(Duration::from_secs(10), || async { !alive(&preview) }).await,
        "the sleeping preview's process {preview} still runs"
    );
    let project = daemon.api("GET", "/api/projects/api", None).await.json();
    assert_eq!(
        project["appState"], "running",
        "production sleeps only when set"
    );
    assert_eq!(api.page("api.localhost").await.text(), production);

    // Its first request wakes it, on a new process.
    let woken = api.page(PREVIEW).await;
    assert_eq!(woken.status, 200, "{}", woken.text());
    assert_ne!(woken.text(), preview);
    assert_eq!(preview_state(&daemon).await, "running");

    // Asleep again, and across a restart: start-up does not start it; a request does.
    wait_preview_state(&daemon, "sleeping").await;
    daemon.restart();
    assert_eq!(preview_state(&daemon).await, "sleeping");
    let again = daemon.request("GET", PREVIEW, "/", &[], Vec::new()).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert!(alive(&again.text()));
    let project = daemon.api("GET", "/api/projects/api", None).await.json();
    assert_eq!(project["appState"], "running");

    // Asked through the API: the preview sleeps now (its process gone) and wakes again.
    let pid = again.text();
    let slept = daemon
        .api("POST", "/api/projects/api/previews/beta/sleep", None)
        .await;
    assert_eq!(slept.status, 202, "{}", slept.text());
    assert_eq!(slept.json()["appState"], "sleeping", "{}", slept.text());
    assert!(
        eventually(Duration::from_secs(10), || async { !alive(&pid) }).await,
        "the preview's process {pid} still runs"
    );
    let woken = daemon
        .api("POST", "/api/projects/api/previews/beta/wake", None)
        .await;
    assert_eq!(woken.status, 202, "{}", woken.text());
    let state = woken.json()["appState"].as_str().unwrap().to_owned();
    assert!(state == "waking" || state == "running", "{state}");
    let served = daemon.request("GET", PREVIEW, "/", &[], Vec::new()).await;
    assert_eq!(served.status, 200, "{}", served.text());
    assert_ne!(served.text(), pid, "a new process");
    let unknown = daemon
        .api("POST", "/api/projects/api/previews/gamma/sleep", None)
        .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());

    // The same from the CLI.
    let slept = crate::support::cli(&daemon, &["sleep", "api", "--preview", "beta"]);
    assert!(slept.contains("is sleeping"), "{slept}");
    let woken = crate::support::cli(&daemon, &["wake", "api", "--preview", "beta"]);
    assert!(woken.contains("is running"), "{woken}");
}
