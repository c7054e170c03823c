//! Issue 31, item 13: what a token limited to some projects sees, what its grant covers, and
//! what outlives it. `GET /api/metrics` shows a limited token its projects only; a grant is
//! bound to the ids of the projects it names, so a later project of the same slug is not
//! covered; deploy hooks and webhook secrets are the project's credentials, not the token's:
//! they work after the token that made them is revoked, until deleted or rotated.

use serde_json::json;

use crate::support::{TestDaemon, TestResponse};

async fn create_token(daemon: &TestDaemon, body: serde_json::Value) -> String {
    let created = daemon.api("POST", "/api/tokens", Some(body)).await;
    assert_eq!(created.status, 201, "{}", created.text());
    created.json()["token"].as_str().unwrap().to_owned()
}

async fn create_project(daemon: &TestDaemon, slug: &str) -> String {
    let created = daemon
        .api("POST", "/api/projects", Some(json!({ "slug": slug })))
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    created.json()["id"].as_str().unwrap().to_owned()
}

async fn get_as(daemon: &TestDaemon, token: &str, path: &str) -> TestResponse {
    daemon.api_as(token, "GET", path, None, Vec::new()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_token_sees_only_its_projects_in_metrics() {
    let daemon = TestDaemon::start();
    create_project(&daemon, "web").await;
    create_project(&daemon, "other").await;
    let limited = create_token(
        &daemon,
        json!({"name": "web-only", "scope": "read", "projects": ["web"]}),
    )
    .await;
    let unlimited = create_token(&daemon, json!({"name": "all", "scope": "read"})).await;

    let page = get_as(&daemon, &limited, "/api/metrics").await;
    assert_eq!(page.status, 200, "{}", page.text());
    let text = page.text();
    assert!(
        text.contains(r#"slipway_http_requests_total{project="web",code="2xx"}"#),
        "{text}"
    );
    assert!(
        !text.contains(r#"project="other""#),
        "another project's figures:\n{text}"
    );
    for daemon_wide in [
        "slipway_provisioning_runs_total",
        "slipway_router_connections",
        "process_resident_memory_bytes",
    ] {
        assert!(
            !text.contains(daemon_wide),
            "{daemon_wide} is the operator's:\n{text}"
        );
    }
    assert!(text.contains("slipway_build_info"));

    for token in [&daemon.token, &unlimited] {
        let text = get_as(&daemon, token, "/api/metrics").await.text();
        assert!(text.contains(r#"project="web""#) && text.contains(r#"project="other""#));
        assert!(text.contains("slipway_provisioning_runs_total"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_does_not_cover_a_later_project_of_the_same_slug() {
    let daemon = TestDaemon::start();
    let first_id = create_project(&daemon, "web").await;
    let limited = create_token(
        &daemon,
        json!({"name": "web-ci", "scope": "deploy", "projects": ["web"]}),
    )
    .await;
    assert_eq!(
        get_as(&daemon, &limited, "/api/projects/web").await.status,
        200
    );

    // The project is deleted and someone else's project takes its slug.
    let deleted = daemon.api("DELETE", "/api/projects/web", None).await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    let second_id = create_project(&daemon, "web").await;
    assert_ne!(first_id, second_id, "project ids are never reused");
    get_as(&daemon, &limited, "/api/projects/web")
        .await
        .assert_error(403, "FORBIDDEN");
    get_as(
        &daemon,
        &limited,
        &format!("/api/projects/{second_id}/env-vars"),
    )
    .await
    .assert_error(403, "FORBIDDEN");
    let set = daemon
        .api_as(
            &limited,
            "POST",
            "/api/projects/web/env-vars",
            Some("application/json"),
            json!({"PLANTED": "1"}).to_string().into(),
        )
        .await;
    set.assert_error(403, "FORBIDDEN");
    let listed = get_as(&daemon, &limited, "/api/projects").await.json();
    assert_eq!(listed["projects"], json!([]), "{listed}");
    let metrics = get_as(&daemon, &limited, "/api/metrics").await.text();
    assert!(!metrics.contains(r#"project="web""#), "{metrics}");

    // The same after a restart (the grant is bound in the store, not in memory).
    let mut daemon = daemon;
    daemon.restart();
    get_as(&daemon, &limited, "/api/projects/web")
        .await
        .assert_error(403, "FORBIDDEN");

    // A grant must name projects that exist: none is held for a slug nobody has yet.
    let ahead = daemon
        .api(
            "POST",
            "/api/tokens",
            Some(json!({"name": "ahead", "scope": "deploy", "projects": ["not-yet"]})),
        )
        .await;
    ahead.assert_error(404, "NOT_FOUND");
    assert!(ahead.text().contains("not-yet"), "{}", ahead.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_hooks_and_webhook_secrets_outlive_their_token_until_deleted_or_rotated() {
    let daemon = TestDaemon::start();
    create_project(&daemon, "hooked").await;
    // Port 9 on loopback: nothing listens, so a run fails at once without leaving the machine.
    let patched = daemon
        .api(
            "PATCH",
            "/api/projects/hooked",
            Some(json!({"gitUrl": "http://127.0.0.1:9/hooked.git"})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text());
    let created = daemon
        .api(
            "POST",
            "/api/tokens",
            Some(json!({"name": "ci", "scope": "deploy", "projects": ["hooked"]})),
        )
        .await
        .json();
    let (token, token_id) = (
        created["token"].as_str().unwrap().to_owned(),
        created["id"].as_str().unwrap().to_owned(),
    );
    let post = |path: &'static str, body: serde_json::Value| {
        let (daemon, token) = (&daemon, token.clone());
        async move {
            daemon
                .api_as(
                    &token,
                    "POST",
                    path,
                    Some("application/json"),
                    body.to_string().into(),
                )
                .await
        }
    };
    let hook = post(
        "/api/projects/hooked/deploy-hooks",
        json!({"name": "cms", "branch": "main"}),
    )
    .await;
    assert_eq!(hook.status, 201, "{}", hook.text());
    let hook_id = hook.json()["id"].as_str().unwrap().to_owned();
    let hook_url = hook.json()["url"].as_str().unwrap().to_owned();
    let hook_path = hook_url[hook_url.find("/api/hooks/").unwrap()..].to_owned();
    let webhook = post("/api/projects/hooked/webhook-secret", json!({})).await;
    assert_eq!(webhook.status, 201, "{}", webhook.text());
    let secret = webhook.json()["secret"].as_str().unwrap().to_owned();

    // The token is revoked: the token is refused, the project's hook and secret still work.
    let revoked = daemon
        .api("DELETE", &format!("/api/tokens/{token_id}"), None)
        .await;
    assert_eq!(revoked.status, 200, "{}", revoked.text());
    get_as(&daemon, &token, "/api/projects/hooked")
        .await
        .assert_error(401, "UNAUTHORIZED");
    let control_host = daemon.control_host();
    let fire = || daemon.request("POST", &control_host, &hook_path, &[], Vec::new());
    let fired = fire().await;
    assert_eq!(
        fired.status,
        202,
        "the hook is the project's: {}",
        fired.text()
    );
    let pinged = daemon.github_ping("hooked", &secret, "after-revoke").await;
    assert_eq!(pinged.status, 202, "{}", pinged.text());

    // Both are listed where an admin finds them, and both can be taken back.
    let listed = daemon
        .api("GET", "/api/projects/hooked/deploy-hooks", None)
        .await
        .json();
    assert_eq!(listed["deployHooks"][0]["id"], hook_id.as_str(), "{listed}");
    let deleted = daemon
        .api(
            "DELETE",
            &format!("/api/projects/hooked/deploy-hooks/{hook_id}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    fire().await.assert_error(404, "NOT_FOUND");
    let rotated = daemon
        .api("POST", "/api/projects/hooked/webhook-secret", None)
        .await;
    assert_eq!(rotated.status, 201, "{}", rotated.text());
    let stale = daemon.github_ping("hooked", &secret, "after-rotate").await;
    assert_eq!(stale.status, 401, "{}", stale.text());
}
