//! Issue 31 item 11: a captured signed push replayed later (under a new delivery id, or with
//! none: the header is not signed) must not roll production back. Pushes of a real git
//! repository through the real webhook route, for GitHub, Gitea and GitLab; the operator's
//! rollback through the API still works, and the next real push deploys again.

use serde_json::json;

use super::fixtures::*;
use crate::support::TestDaemon;

fn push(name: &str, before: &str, after: &str) -> Vec<u8> {
    payload(
        name,
        &[
            ("REF", "refs/heads/main".into()),
            ("BEFORE", before.into()),
            ("AFTER", after.into()),
            ("DELETED", "false".into()),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_older_push_deploys_nothing_and_rollbacks_still_work() {
    let Some(git) = GitServer::start() else {
        return;
    };
    let daemon = TestDaemon::start_with(options());
    let web = set_up(&daemon, "replay", json!({"gitUrl": git.url()})).await;
    let one = git.commit("main", &[("public/index.html", "<h1>version one</h1>")]);
    let first = web
        .github("push", "r-1", push("github/push.json", ZERO, &one))
        .await;
    let first = web.completed(&first, "deploy").await;
    let two = git.commit("main", &[("public/index.html", "<h1>version two</h1>")]);
    let second = web
        .github("push", "r-2", push("github/push.json", &one, &two))
        .await;
    web.completed(&second, "deploy").await;
    assert!(web.page("replay.localhost").await.text().contains("two"));
    let deployments = web.deployment_count().await;

    // The first push again, byte for byte and signed, under a new delivery id, with none,
    // and as Gitea and GitLab would sign it; the current head again.
    let old = push("github/push.json", ZERO, &one);
    let mut answers = vec![
        web.github("push", "r-3", old.clone()).await,
        web.deliver(
            &[
                ("x-github-event", "push".into()),
                (
                    "x-hub-signature-256",
                    format!("sha256={}", hmac_hex(&web.secret, &old)),
                ),
            ],
            old,
        )
        .await,
    ];
    let gitea = push("gitea/push.json", ZERO, &one);
    answers.push(
        web.deliver(
            &[
                ("x-gitea-event", "push".into()),
                ("x-gitea-delivery", "g-9".into()),
                ("x-gitea-signature", hmac_hex(&web.secret, &gitea)),
            ],
            gitea,
        )
        .await,
    );
    answers.push(
        web.deliver(
            &[
                ("x-gitlab-event", "Push Hook".into()),
                ("x-gitlab-token", web.secret.clone()),
            ],
            push("gitlab/push.json", ZERO, &one),
        )
        .await,
    );
    let head_again = web
        .github("push", "r-4", push("github/push.json", &one, &two))
        .await;
    for answer in answers.iter().chain([&head_again]) {
        assert_eq!(answer.status, 202, "{}", answer.text());
        let json = answer.json();
        assert_eq!(json["action"], "ignored", "{json}");
        assert!(
            json["reason"].as_str().unwrap().contains("stale push"),
            "{json}"
        );
        assert!(json.get("deploymentId").is_none(), "{json}");
    }
    assert!(head_again.json()["reason"]
        .as_str()
        .unwrap()
        .contains("already the head"));
    assert_eq!(web.deployment_count().await, deployments, "a run started");
    assert!(web.page("replay.localhost").await.text().contains("two"));

    // The operator can still go back, through the API.
    let rollback = daemon
        .api(
            "POST",
            "/api/projects/replay/rollback",
            Some(json!({"deploymentId": first["deploymentId"]})),
        )
        .await;
    assert_eq!(rollback.status, 202, "{}", rollback.text());
    daemon
        .wait_complete(&rollback.json(), std::time::Duration::from_secs(60))
        .await;
    assert!(web.page("replay.localhost").await.text().contains("one"));
    // And the next real push deploys.
    let three = git.commit("main", &[("public/index.html", "<h1>version three</h1>")]);
    let third = web
        .github("push", "r-5", push("github/push.json", &two, &three))
        .await;
    web.completed(&third, "deploy").await;
    assert!(web.page("replay.localhost").await.text().contains("three"));
}
