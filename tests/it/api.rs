//! The daemon foundation: errors, auth, tokens, rate limits, projects, env vars, restarts.

use serde_json::json;

use crate::support::{dir_contains, raw_exchange, DaemonOptions, TestDaemon, BIN};

#[tokio::test]
async fn every_error_has_the_envelope() {
    let daemon = TestDaemon::start();
    let host = "slipway.localhost";

    // 401: missing, malformed, unknown.
    daemon
        .request("GET", host, "/api/projects", &[], vec![])
        .await
        .assert_error(401, "UNAUTHORIZED");
    daemon
        .request(
            "GET",
            host,
            "/api/projects",
            &[("authorization", "Token abc".into())],
            vec![],
        )
        .await
        .assert_error(401, "UNAUTHORIZED");
    daemon
        .request(
            "GET",
            host,
            "/api/projects",
            &[("authorization", "Bearer slw_nope".into())],
            vec![],
        )
        .await
        .assert_error(401, "UNAUTHORIZED");
    // 404: unknown route and unknown project.
    daemon
        .api("GET", "/api/nothing-here", None)
        .await
        .assert_error(404, "NOT_FOUND");
    daemon
        .api("GET", "/api/projects/prj_doesnotexist", None)
        .await
        .assert_error(404, "NOT_FOUND");
    daemon
        .api("GET", "/api/projects/no-such-slug", None)
        .await
        .assert_error(404, "NOT_FOUND");
    // 405 with Allow.
    let response = daemon.api("PUT", "/api/projects", None).await;
    response.assert_error(405, "METHOD_NOT_ALLOWED");
    assert!(response.header("allow").unwrap().contains("GET"));
    // 413.
    // 413 from the declared length alone: the daemon answers without reading the body.
    let headers = [
        ("authorization", format!("Bearer {}", daemon.token)),
        ("content-type", "application/json".into()),
    ];
    let raw = raw_exchange(
        daemon.http,
        &format!(
            "POST /api/projects/web/env-vars HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            daemon.token,
            41 * 1024 * 1024
        ),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
    assert!(
        raw.contains(r#""code":"PAYLOAD_TOO_LARGE""#) && raw.contains(r#""status":413"#),
        "{raw}"
    );
    // 413 for a streamed (chunked) body that passes the limit.
    let big = vec![b' '; 41 * 1024 * 1024];
    let streamed = raw_exchange(
        daemon.http,
        &format!(
            "POST /api/projects/web/env-vars HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n0\r\n\r\n",
            daemon.token,
            big.len(),
            String::from_utf8(big).unwrap()
        ),
    )
    .await;
    assert!(
        streamed.starts_with("HTTP/1.1 413"),
        "{}",
        &streamed[..streamed.len().min(200)]
    );
    // 400s.
    daemon
        .api("POST", "/api/projects", Some(json!({"slug": "Bad_Slug"})))
        .await
        .assert_error(400, "INVALID_SLUG_FORMAT");
    daemon
        .api("POST", "/api/projects", Some(json!({"slug": "slipway"})))
        .await
        .assert_error(400, "INVALID_SLUG_RESERVED");
    daemon
        .api(
            "POST",
            "/api/projects",
            Some(json!({"slug": "ok-slug", "extra": 1})),
        )
        .await
        .assert_error(400, "INVALID_BODY");
    daemon
        .api("POST", "/api/projects", Some(json!({"slug": 7})))
        .await
        .assert_error(400, "INVALID_BODY");
    daemon
        .request(
            "POST",
            host,
            "/api/projects",
            &[
                headers[0].clone(),
                ("content-type", "application/json".into()),
            ],
            b"{nope".to_vec(),
        )
        .await
        .assert_error(400, "INVALID_JSON");
    daemon
        .request(
            "POST",
            host,
            "/api/projects",
            &[headers[0].clone(), ("content-type", "text/plain".into())],
            b"{}".to_vec(),
        )
        .await
        .assert_error(400, "INVALID_CONTENT_TYPE");
    daemon
        .api(
            "POST",
            "/api/projects/web/env-vars",
            Some(json!({"1BAD": "x"})),
        )
        .await
        .assert_error(400, "INVALID_ENV_KEY");
    daemon
        .api(
            "POST",
            "/api/projects/web/env-vars",
            Some(json!({"GOOD": 5})),
        )
        .await
        .assert_error(400, "INVALID_ENV_VALUE");
    // Nothing of the refused requests created a project.
    let projects = daemon.api("GET", "/api/projects", None).await.json();
    assert_eq!(projects["projects"], json!([]));
    // Healthz needs no token and is not an API path.
    let health = daemon.request("GET", host, "/healthz", &[], vec![]).await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json(), json!({"status": "ok"}));
    assert!(health.header("x-request-id").is_some());
    assert!(health.header("x-ratelimit-limit").is_none());
}

#[tokio::test]
async fn slug_edges() {
    let daemon = TestDaemon::start();
    for good in ["ab", &"a".repeat(63), "my-app-2"] {
        let response = daemon
            .api("POST", "/api/projects", Some(json!({"slug": good})))
            .await;
        assert_eq!(response.status, 201, "{good}: {}", response.text());
        let body = response.json();
        assert_eq!(body["slug"], good);
        assert!(body["id"].as_str().unwrap().starts_with("prj_"));
        assert_eq!(body["state"], "new");
        assert!(body["url"]
            .as_str()
            .unwrap()
            .starts_with(&format!("http://{good}.localhost:")));
    }
    for bad in [
        "a",
        &"a".repeat(64),
        "Upper",
        "-lead",
        "trail-",
        "dou--ble",
        "under_score",
    ] {
        daemon
            .api("POST", "/api/projects", Some(json!({"slug": bad})))
            .await
            .assert_error(400, "INVALID_SLUG_FORMAT");
        daemon
            .api(
                "POST",
                &format!("/api/projects/{bad}/env-vars"),
                Some(json!({"A": "b"})),
            )
            .await
            .assert_error(400, "INVALID_SLUG_FORMAT");
    }
    // A taken slug is refused; the project is reachable by id and by slug.
    daemon
        .api("POST", "/api/projects", Some(json!({"slug": "ab"})))
        .await
        .assert_error(409, "CONFLICT");
    let by_slug = daemon.api("GET", "/api/projects/ab", None).await.json();
    let by_id = daemon
        .api(
            "GET",
            &format!("/api/projects/{}", by_slug["id"].as_str().unwrap()),
            None,
        )
        .await
        .json();
    assert_eq!(by_slug, by_id);
    let list = daemon.api("GET", "/api/projects", None).await.json();
    assert_eq!(list["projects"].as_array().unwrap().len(), 3);
    // Delete, then it is gone.
    assert_eq!(
        daemon.api("DELETE", "/api/projects/ab", None).await.status,
        200
    );
    daemon
        .api("GET", "/api/projects/ab", None)
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn sixty_first_request_in_a_minute_is_limited() {
    let daemon = TestDaemon::start();
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for i in 0..60 {
        let response = daemon.api("GET", "/api/projects", None).await;
        assert_eq!(response.status, 200, "request {}", i + 1);
        assert_eq!(response.header("x-ratelimit-limit"), Some("60"));
        assert_eq!(
            response
                .header("x-ratelimit-remaining")
                .unwrap()
                .parse::<u32>()
                .unwrap(),
            59 - i
        );
    }
    let response = daemon.api("GET", "/api/projects", None).await;
    response.assert_error(429, "RATE_LIMITED");
    assert_eq!(response.header("x-ratelimit-limit"), Some("60"));
    assert_eq!(response.header("x-ratelimit-remaining"), Some("0"));
    let retry: u64 = response.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&retry), "retry-after {retry}");
    let reset: u64 = response
        .header("x-ratelimit-reset")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        reset >= start + 55 && reset <= start + 125,
        "reset {reset} vs now {start}"
    );
    // Another token has its own budget.
    let other = daemon
        .api("POST", "/api/tokens", Some(json!({"name": "other"})))
        .await;
    other.assert_error(429, "RATE_LIMITED");
}

#[tokio::test]
async fn thirty_first_post_to_one_endpoint_is_limited() {
    let daemon = TestDaemon::start();
    for i in 0..30 {
        let response = daemon
            .api(
                "POST",
                &format!("/api/projects/p{i:02}/env-vars"),
                Some(json!({"A": "1"})),
            )
            .await;
        assert_eq!(response.status, 200, "POST {}: {}", i + 1, response.text());
    }
    let limited = daemon
        .api(
            "POST",
            "/api/projects/p99/env-vars",
            Some(json!({"A": "1"})),
        )
        .await;
    limited.assert_error(429, "RATE_LIMITED");
    assert_eq!(limited.header("x-ratelimit-limit"), Some("30"));
    // Another POST endpoint still passes, and so do GETs.
    let other = daemon
        .api("POST", "/api/projects", Some(json!({"slug": "another"})))
        .await;
    assert_eq!(other.status, 201, "{}", other.text());
    assert_eq!(daemon.api("GET", "/api/projects", None).await.status, 200);
    // The refused request created nothing.
    daemon
        .api("GET", "/api/projects/p99", None)
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn env_vars_round_trip_all_or_nothing() {
    let daemon = TestDaemon::start();
    let set = daemon
        .api(
            "POST",
            "/api/projects/web/env-vars",
            Some(json!({"API_KEY": "s3cret", "MODE": "prod"})),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.text());
    assert_eq!(set.json()["updated"], json!(["API_KEY", "MODE"]));
    let project_id = set.json()["projectId"].as_str().unwrap().to_owned();
    let got = daemon
        .api("GET", "/api/projects/web/env-vars", None)
        .await
        .json();
    assert_eq!(
        got,
        json!({"projectId": project_id, "envVars": {"API_KEY": "s3cret", "MODE": "prod"},
               "scopes": {"API_KEY": {"environments": ["production", "preview"]},
                          "MODE": {"environments": ["production", "preview"]}}})
    );
    // PORT is reserved; a bad key next to a good one stores neither.
    daemon
        .api(
            "POST",
            "/api/projects/web/env-vars",
            Some(json!({"PORT": "1"})),
        )
        .await
        .assert_error(400, "INVALID_ENV_KEY");
    daemon
        .api(
            "POST",
            "/api/projects/web/env-vars",
            Some(json!({"NEW_GOOD": "x", "bad-key": "y"})),
        )
        .await
        .assert_error(400, "INVALID_ENV_KEY");
    daemon
        .api(
            "POST",
            "/api/projects/web/env-vars",
            Some(json!({"NEW_GOOD": "x", "BIG": "v".repeat(64 * 1024 + 1)})),
        )
        .await
        .assert_error(400, "INVALID_ENV_VALUE");
    let got = daemon
        .api("GET", &format!("/api/projects/{project_id}/env-vars"), None)
        .await
        .json();
    assert_eq!(got["envVars"], json!({"API_KEY": "s3cret", "MODE": "prod"}));
    // Delete one; deleting it again is 404.
    let deleted = daemon
        .api("DELETE", "/api/projects/web/env-vars/MODE", None)
        .await;
    assert_eq!(
        deleted.json(),
        json!({"projectId": project_id, "deleted": "MODE"})
    );
    daemon
        .api("DELETE", "/api/projects/web/env-vars/MODE", None)
        .await
        .assert_error(404, "NOT_FOUND");
    daemon
        .api("GET", "/api/projects/prj_unknownid/env-vars", None)
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn tokens_revoke_at_once_and_everything_survives_restart() {
    let mut daemon = TestDaemon::start();
    let created = daemon
        .api("POST", "/api/tokens", Some(json!({"name": "ci"})))
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let created = created.json();
    let secret = created["token"].as_str().unwrap().to_owned();
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("slw_"));
    let auth = [("authorization", format!("Bearer {secret}"))];
    assert_eq!(
        daemon
            .request("GET", "slipway.localhost", "/api/projects", &auth, vec![])
            .await
            .status,
        200
    );
    let list = daemon.api("GET", "/api/tokens", None).await.json();
    assert_eq!(list["tokens"].as_array().unwrap().len(), 2);
    assert!(
        !list.to_string().contains(&secret),
        "list never shows secrets"
    );

    // Revoke: the very next request fails.
    assert_eq!(
        daemon
            .api("DELETE", &format!("/api/tokens/{id}"), None)
            .await
            .status,
        200
    );
    daemon
        .request("GET", "slipway.localhost", "/api/projects", &auth, vec![])
        .await
        .assert_error(401, "UNAUTHORIZED");
    daemon
        .api("DELETE", &format!("/api/tokens/{id}"), None)
        .await
        .assert_error(404, "NOT_FOUND");

    // State that must survive a restart.
    let kept = daemon
        .api("POST", "/api/tokens", Some(json!({"name": "kept"})))
        .await
        .json();
    let kept_secret = kept["token"].as_str().unwrap().to_owned();
    let env_value = "very-secret-value-4242";
    assert_eq!(
        daemon
            .api(
                "POST",
                "/api/projects/keep-me/env-vars",
                Some(json!({"DB_PASSWORD": env_value}))
            )
            .await
            .status,
        200
    );
    assert_eq!(daemon.stop(), Some(0), "SIGTERM exits 0");

    // The data dir never holds the env value or a token secret in plain text.
    for needle in [
        env_value.as_bytes(),
        kept_secret.as_bytes(),
        daemon.token.as_bytes(),
    ] {
        let found = dir_contains(&daemon.data_dir(), needle);
        let allowed = daemon.data_dir().join("initial-admin-token");
        assert!(
            found.is_none() || found.as_deref() == Some(allowed.as_path()),
            "plain text secret found in {found:?}"
        );
    }
    std::fs::remove_file(daemon.data_dir().join("initial-admin-token")).unwrap();
    assert!(dir_contains(&daemon.data_dir(), daemon.token.as_bytes()).is_none());
    let admin_token = daemon.token.clone();
    std::fs::write(daemon.data_dir().join("initial-admin-token"), &admin_token).unwrap();

    daemon.restart();
    assert_eq!(daemon.token, admin_token, "no second bootstrap token");
    let auth = [("authorization", format!("Bearer {kept_secret}"))];
    let project = daemon
        .request(
            "GET",
            "slipway.localhost",
            "/api/projects/keep-me",
            &auth,
            vec![],
        )
        .await;
    assert_eq!(project.status, 200);
    let env = daemon
        .api("GET", "/api/projects/keep-me/env-vars", None)
        .await
        .json();
    assert_eq!(env["envVars"]["DB_PASSWORD"], env_value);
}

#[tokio::test]
async fn openapi_lists_the_routes() {
    let daemon = TestDaemon::start();
    let doc = daemon.api("GET", "/api/openapi.json", None).await;
    assert_eq!(doc.status, 200);
    let doc = doc.json();
    assert_eq!(doc["openapi"], "3.1.0");
    for path in [
        "/api/projects",
        "/api/projects/{projectId}/env-vars",
        "/api/tokens/{tokenId}",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} documented");
    }
    // The shapes come from the handlers' types; the log stream is not JSON.
    let provision = &doc["paths"]["/api/projects/{projectId}/provision"]["post"];
    assert_eq!(
        provision["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/ProvisionBody"
    );
    assert_eq!(
        doc["components"]["schemas"]["ProvisionBody"]["required"],
        json!(["projectSlug"])
    );
    let stream = &doc["paths"]["/api/deployments/{deploymentId}/logs/stream"]["get"];
    assert!(stream["responses"]["200"]["content"]["text/event-stream"].is_object());
    assert!(stream["responses"]["200"]["content"]["application/json"].is_null());
    assert!(doc["components"]["schemas"]["ErrorEnvelope"].is_object());
}

#[tokio::test]
async fn config_errors_exit_78_and_a_second_daemon_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "apps_domain = \"a.example\"\nhttp_lisen = \"x\"\n").unwrap();
    for args in [vec!["check-config", "--config"], vec!["serve", "--config"]] {
        let output = std::process::Command::new(BIN)
            .args(&args)
            .arg(&bad)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(78), "{args:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("http_lisen"));
    }
    let good = dir.path().join("good.toml");
    std::fs::write(&good, "apps_domain = \"a.example\"\n").unwrap();
    let output = std::process::Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0));

    let daemon = TestDaemon::start();
    let output = std::process::Command::new(BIN)
        .args(["serve", "--config"])
        .arg(daemon.config_path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("already using the data directory"),
        "{stderr}"
    );
    // The first daemon still answers.
    assert_eq!(daemon.api("GET", "/api/projects", None).await.status, 200);
}

#[tokio::test]
async fn token_cli_through_the_admin_socket() {
    let daemon = TestDaemon::start();
    let data_dir = daemon.data_dir();
    let run = |args: &[&str]| {
        let output = std::process::Command::new(BIN)
            .args(args)
            .arg("--data-dir")
            .arg(&data_dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    let created = run(&["token", "create", "--name", "from-cli"]);
    let secret = created["token"].as_str().unwrap().to_owned();
    let auth = [("authorization", format!("Bearer {secret}"))];
    assert_eq!(
        daemon
            .request("GET", "slipway.localhost", "/api/projects", &auth, vec![])
            .await
            .status,
        200
    );
    let listed = run(&["token", "list"]);
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "from-cli"));
    run(&["token", "revoke", created["id"].as_str().unwrap()]);
    daemon
        .request("GET", "slipway.localhost", "/api/projects", &auth, vec![])
        .await
        .assert_error(401, "UNAUTHORIZED");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(data_dir.join("admin.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let mode = std::fs::metadata(data_dir.join("initial-admin-token"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test]
async fn hosts_dispatch_and_unknown_hosts_get_the_404_page() {
    let daemon = TestDaemon::start_with(DaemonOptions::default());
    let response = daemon
        .request("GET", "nobody.localhost", "/", &[], vec![])
        .await;
    assert_eq!(response.status, 404);
    assert!(response.text().contains("No application"));
    assert_eq!(
        daemon
            .api("POST", "/api/projects", Some(json!({"slug": "waiting"})))
            .await
            .status,
        201
    );
    let response = daemon
        .request("GET", "waiting.localhost", "/", &[], vec![])
        .await;
    assert_eq!(response.status, 503);
    assert!(response.header("retry-after").is_some());
    let dashboard = daemon
        .request("GET", "slipway.localhost", "/", &[], vec![])
        .await;
    assert_eq!(dashboard.status, 200);
    assert!(dashboard.text().contains("/assets/app.js"));
}
