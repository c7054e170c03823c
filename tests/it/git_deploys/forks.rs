//! Issue 31 item 1: a pull request whose fork was deleted (GitHub and Gitea send
//! `head.repo: null`, GitLab no `source_project_id`) is still a fork's, so its code never runs
//! with the project's variables; an `edited` title builds nothing either. Signed deliveries
//! through the real webhook route; the project's `gitUrl` leads nowhere, since nothing may
//! start (the old code answered `preview` and started a run).

use serde_json::{json, Value};

use super::fixtures::*;
use crate::support::TestDaemon;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

/// A fixture of a pull request from the fork `mallory/site` (repository id 18).
fn from_fork(name: &str, action: &str) -> Value {
    let body = payload(
        name,
        &[
            ("ACTION", action.into()),
            ("NUMBER", "9".into()),
            ("HEAD_REF", "main".into()),
            ("HEAD_SHA", SHA.into()),
            ("HEAD_OWNER", "mallory".into()),
            ("HEAD_REPO", "mallory/site".into()),
            ("HEAD_REPO_ID", "18".into()),
            ("BASE_SHA", SHA.into()),
            ("SOURCE_PROJECT", "18".into()),
        ],
    );
    serde_json::from_slice(&body).unwrap()
}

/// The same pull request once the fork is deleted.
fn deleted_fork(name: &str, action: &str) -> Vec<u8> {
    let mut json = from_fork(name, action);
    match name.starts_with("gitlab/") {
        true => {
            let attributes = json["object_attributes"].as_object_mut().unwrap();
            attributes.remove("source_project_id");
        }
        false => {
            json["pull_request"]["head"]["repo"] = Value::Null;
            json["changes"] = json!({"title": {"from": "Add a login page (WIP)"}});
        }
    }
    serde_json::to_vec(&json).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_forks_pull_request_builds_nothing_on_any_provider() {
    let daemon = TestDaemon::start_with(options());
    let web = set_up(
        &daemon,
        "forked",
        json!({"gitUrl": "git://127.0.0.1:9/site", "previews": true}),
    )
    .await;
    let github = |action: &'static str, delivery: &'static str| {
        let body = deleted_fork("github/pull_request.json", action);
        let web = &web;
        async move { web.github("pull_request", delivery, body).await }
    };
    let gitea = |action: &'static str, delivery: &'static str| {
        let body = deleted_fork("gitea/pull_request.json", action);
        let signature = hmac_hex(&web.secret, &body);
        let web = &web;
        async move {
            let headers = [
                ("x-gitea-event", "pull_request".into()),
                ("x-gitea-delivery", delivery.into()),
                ("x-gitea-signature", signature),
            ];
            web.deliver(&headers, body).await
        }
    };
    let gitlab = |action: &'static str, delivery: &'static str| {
        let body = deleted_fork("gitlab/merge_request.json", action);
        let web = &web;
        async move {
            let headers = [
                ("x-gitlab-event", "Merge Request Hook".into()),
                ("x-gitlab-event-uuid", delivery.into()),
                ("x-gitlab-token", web.secret.clone()),
            ];
            web.deliver(&headers, body).await
        }
    };
    // While the fork is there, its pull request is ignored.
    let body = serde_json::to_vec(&from_fork("github/pull_request.json", "opened")).unwrap();
    let opened = web.github("pull_request", "f-0", body).await;
    assert_eq!(opened.json()["action"], "ignored", "{}", opened.text());
    let answers = [
        ("GitHub edited", github("edited", "f-1").await),
        ("GitHub reopened", github("reopened", "f-2").await),
        ("Gitea edited", gitea("edited", "f-3").await),
        ("Gitea synchronized", gitea("synchronized", "f-4").await),
        ("GitLab update", gitlab("update", "f-5").await),
        ("GitLab reopen", gitlab("reopen", "f-6").await),
    ];
    for (what, answer) in answers {
        assert_eq!(answer.status, 202, "{what}: {}", answer.text());
        assert_eq!(
            answer.json()["action"],
            "ignored",
            "{what}: {}",
            answer.text()
        );
    }
    assert_eq!(web.deployment_count().await, 0, "no run was started");
    let previews = daemon
        .api("GET", "/api/projects/forked/previews", None)
        .await
        .json();
    assert_eq!(previews["previews"], json!([]), "{previews}");
}
