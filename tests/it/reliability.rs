//! The API's promises to scripts and agents (issue 13): `Idempotency-Key` replays (also after
//! a restart) and refuses a reused key, and the audit log records every request that changed
//! or tried to change something, with its final status.

use serde_json::json;

use crate::support::TestDaemon;

async fn post_with_key(
    daemon: &TestDaemon,
    path: &str,
    key: &str,
    body: serde_json::Value,
) -> crate::support::TestResponse {
    let headers = vec![
        ("authorization", format!("Bearer {}", daemon.token)),
        ("content-type", "application/json".to_owned()),
        ("idempotency-key", key.to_owned()),
    ];
    daemon
        .request(
            "POST",
            &daemon.control_host(),
            path,
            &headers,
            body.to_string().into_bytes(),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_replays_the_first_answer_even_after_a_restart() {
    let mut daemon = TestDaemon::start();
    let first = post_with_key(
        &daemon,
        "/api/projects",
        "create-web-1",
        json!({"slug": "web"}),
    )
    .await;
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.header("idempotent-replayed"), None);
    let again = post_with_key(
        &daemon,
        "/api/projects",
        "create-web-1",
        json!({"slug": "web"}),
    )
    .await;
    assert_eq!(
        again.status,
        201,
        "a replay, not a 409 CONFLICT: {}",
        again.text()
    );
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json(), first.json());

    daemon.restart();
    let after_restart = post_with_key(
        &daemon,
        "/api/projects",
        "create-web-1",
        json!({"slug": "web"}),
    )
    .await;
    assert_eq!(after_restart.status, 201);
    assert_eq!(after_restart.header("idempotent-replayed"), Some("true"));
    assert_eq!(after_restart.json()["id"], first.json()["id"]);
    let projects = daemon.api("GET", "/api/projects", None).await.json();
    assert_eq!(
        projects["projects"].as_array().unwrap().len(),
        1,
        "one project only"
    );

    // The same key for another request is refused, and changes nothing.
    let reused = post_with_key(
        &daemon,
        "/api/projects",
        "create-web-1",
        json!({"slug": "other"}),
    )
    .await;
    reused.assert_error(400, "INVALID_IDEMPOTENCY_KEY");
    let bad = post_with_key(&daemon, "/api/projects", "has space", json!({"slug": "x2"})).await;
    bad.assert_error(400, "INVALID_IDEMPOTENCY_KEY");
    assert_eq!(
        daemon.api("GET", "/api/projects", None).await.json()["projects"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // An error answer is kept too: the retry of a refused request is refused the same way.
    let taken = post_with_key(
        &daemon,
        "/api/projects",
        "create-web-2",
        json!({"slug": "web"}),
    )
    .await;
    taken.assert_error(409, "CONFLICT");
    let taken_again = post_with_key(
        &daemon,
        "/api/projects",
        "create-web-2",
        json!({"slug": "web"}),
    )
    .await;
    assert_eq!(taken_again.status, 409);
    assert_eq!(taken_again.header("idempotent-replayed"), Some("true"));
}

/// Issue 31, item 10: the answers kept for `Idempotency-Key` carry new secrets (a token's, a
/// project's webhook secret, a deploy hook's URL); the store file keeps none of them, and the
/// replay (also after a restart) still gives the same secrets back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_token_creation_leaves_no_secret_in_the_store() {
    let mut daemon = TestDaemon::start();
    let body = json!({"name": "ci", "scope": "deploy"});
    let created = post_with_key(&daemon, "/api/tokens", "token-ci-1", body.clone()).await;
    assert_eq!(created.status, 201, "{}", created.text());
    let token = created.json()["token"].as_str().unwrap().to_owned();
    let project = post_with_key(&daemon, "/api/projects", "p-1", json!({"slug": "kept"})).await;
    assert_eq!(project.status, 201, "{}", project.text());
    let patched = daemon
        .api(
            "PATCH",
            "/api/projects/kept",
            Some(json!({"gitUrl": "https://git.example.invalid/kept.git"})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text());
    let webhook = post_with_key(
        &daemon,
        "/api/projects/kept/webhook-secret",
        "wh-1",
        json!({}),
    )
    .await;
    assert_eq!(webhook.status, 201, "{}", webhook.text());
    let webhook_secret = webhook.json()["secret"].as_str().unwrap().to_owned();
    let hook = post_with_key(
        &daemon,
        "/api/projects/kept/deploy-hooks",
        "hook-1",
        json!({"name": "cms", "branch": "main"}),
    )
    .await;
    assert_eq!(hook.status, 201, "{}", hook.text());
    let hook_url = hook.json()["url"].as_str().unwrap().to_owned();
    let hook_secret = hook_url.rsplit('/').next().unwrap().to_owned();

    daemon.stop();
    for (what, secret) in [
        ("the token", &token),
        (
            "the token without its prefix",
            &token["slw_".len()..].to_owned(),
        ),
        ("the webhook secret", &webhook_secret),
        ("the deploy hook's secret", &hook_secret),
    ] {
        let store = std::fs::read(daemon.data_dir().join("slipway.redb")).unwrap();
        assert!(
            !store.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{what} is in slipway.redb in plain text"
        );
        assert_eq!(
            crate::support::dir_contains(&daemon.data_dir(), secret.as_bytes()),
            None,
            "{what} is in the data dir"
        );
    }

    daemon.start_again();
    let replayed = post_with_key(&daemon, "/api/tokens", "token-ci-1", body).await;
    assert_eq!(replayed.status, 201, "{}", replayed.text());
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        replayed.json(),
        created.json(),
        "the same answer, secret included"
    );
    let replayed_hook = post_with_key(
        &daemon,
        "/api/projects/kept/deploy-hooks",
        "hook-1",
        json!({"name": "cms", "branch": "main"}),
    )
    .await;
    assert_eq!(replayed_hook.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed_hook.json()["url"], hook_url.as_str());
    let tokens = daemon.api("GET", "/api/tokens", None).await.json();
    let named_ci = tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == "ci")
        .count();
    assert_eq!(named_ci, 1, "the replay made no second token");
    // The secret the replay gave back works.
    let listed = daemon
        .api_as(&token, "GET", "/api/projects", None, Vec::new())
        .await;
    assert_eq!(listed.status, 200, "{}", listed.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_records_every_change_with_its_final_status() {
    let daemon = TestDaemon::start();
    let created = daemon
        .api("POST", "/api/projects", Some(json!({"slug": "web"})))
        .await;
    assert_eq!(created.status, 201);
    let project_id = created.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        daemon
            .api(
                "POST",
                "/api/projects/web/env-vars",
                Some(json!({"A": "1"}))
            )
            .await
            .status,
        200
    );
    let missing = daemon
        .api("DELETE", "/api/projects/web/env-vars/NOPE", None)
        .await;
    assert_eq!(missing.status, 404);
    let taken = daemon
        .api("POST", "/api/projects", Some(json!({"slug": "web"})))
        .await;
    assert_eq!(taken.status, 409);
    // Reads are not audited.
    daemon.api("GET", "/api/projects", None).await;

    let log = daemon.api("GET", "/api/audit?limit=10", None).await;
    assert_eq!(log.status, 200, "{}", log.text());
    let entries = log.json()["entries"].as_array().unwrap().clone();
    let summary: Vec<(String, String, u64)> = entries
        .iter()
        .map(|e| {
            (
                e["method"].as_str().unwrap().to_owned(),
                e["route"].as_str().unwrap().to_owned(),
                e["status"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("POST".into(), "/api/projects".into(), 409),
            (
                "DELETE".into(),
                "/api/projects/{projectId}/env-vars/{key}".into(),
                404
            ),
            (
                "POST".into(),
                "/api/projects/{projectId}/env-vars".into(),
                200
            ),
            ("POST".into(), "/api/projects".into(), 201),
        ],
        "newest first"
    );
    assert_eq!(entries[3]["projectId"], project_id, "{:?}", entries[3]);
    assert_eq!(entries[0]["tokenName"], "initial-admin");
    assert_eq!(entries[0]["ip"], "127.0.0.1");

    let filtered = daemon
        .api("GET", &format!("/api/audit?projectId={project_id}"), None)
        .await
        .json();
    assert_eq!(filtered["entries"].as_array().unwrap().len(), 3);
    let page = daemon.api("GET", "/api/audit?limit=1", None).await.json();
    let cursor = page["nextCursor"].as_str().unwrap().to_owned();
    let next = daemon
        .api("GET", &format!("/api/audit?limit=1&cursor={cursor}"), None)
        .await
        .json();
    assert_eq!(next["entries"][0]["status"], 404);
}

/// Issue 31 item 7: failures of the public routes before authentication (a forged webhook, an
/// unknown project, an unknown deploy hook) are counted in `GET /api/audit`, not stored one
/// by one; the admin's entries are all that is in the log. (The 200,000-failure flood is
/// `api::audit`'s unit test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_failures_are_counted_not_stored() {
    let daemon = TestDaemon::start_with(crate::support::DaemonOptions::default().extra_toml(
        "[rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n",
    ));
    let created = daemon
        .api("POST", "/api/projects", Some(json!({"slug": "kept"})))
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let secret = daemon
        .api("POST", "/api/projects/kept/webhook-secret", None)
        .await;
    assert_eq!(secret.status, 201, "{}", secret.text());
    let before = daemon
        .api("GET", "/api/audit?limit=1000", None)
        .await
        .json();
    assert_eq!(before["entries"].as_array().unwrap().len(), 2, "{before}");
    let host = daemon.control_host();
    let forged = [
        ("x-github-event", "push".to_owned()),
        ("x-hub-signature-256", format!("sha256={}", "00".repeat(32))),
    ];
    for i in 0..100 {
        let answer = daemon
            .request("POST", &host, "/api/webhooks/kept", &forged, b"{}".to_vec())
            .await;
        assert_eq!(answer.status, 401, "{}", answer.text());
        let path = format!("/api/webhooks/nobody-{i}");
        let answer = daemon
            .request("POST", &host, &path, &forged, Vec::new())
            .await;
        assert_eq!(answer.status, 404, "{}", answer.text());
        let path = format!("/api/hooks/dh_guess{i}");
        let answer = daemon.request("POST", &host, &path, &[], Vec::new()).await;
        assert_eq!(answer.status, 404, "{}", answer.text());
    }
    let after = daemon
        .api("GET", "/api/audit?limit=1000", None)
        .await
        .json();
    assert_eq!(after["entries"], before["entries"], "no failure was stored");
    let counts = &after["unauthenticatedFailures"];
    assert_eq!(counts["webhook"], 200, "{after}");
    assert_eq!(counts["deployHook"], 100, "{after}");
    assert!(counts["lastAt"].is_string(), "{after}");
}
