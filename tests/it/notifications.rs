//! Webhook notifications (issue 15), against receivers on loopback: deployment success and
//! failure and an app crash arrive signed (the test checks the HMAC itself) or in the slack
//! format; a receiver that is down at first gets the delivery once it is back, across a
//! daemon restart; bad subscriptions are refused and store nothing.

mod destinations;
pub mod receiver;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{eventually, DaemonOptions, TestDaemon};
use receiver::{Received, Receiver};

/// The `[notifications]` line that lets these tests' daemons post to receivers on loopback
/// (refused by default).
pub const ALLOW_LOOPBACK: &str = "allow_destinations = [\"127.0.0.0/8\", \"::1\"]\n";

/// `[notifications]` with [`ALLOW_LOOPBACK`].
pub fn allow_loopback() -> String {
    format!("[notifications]\n{ALLOW_LOOPBACK}")
}

/// `sha256=<hex HMAC-SHA256(secret, body)>`, computed here independently of the daemon.
fn expected_signature(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let tag = ring::hmac::sign(&key, body);
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

#[track_caller]
fn assert_signed(received: &Received, secret: &str) {
    assert_eq!(
        received.signature.as_deref(),
        Some(expected_signature(secret, &received.body).as_str()),
        "bad signature on {}",
        String::from_utf8_lossy(&received.body)
    );
    // The check can fail: one changed byte and the signature no longer matches.
    let mut tampered = received.body.clone();
    tampered[0] ^= 1;
    assert_ne!(
        received.signature.as_deref(),
        Some(expected_signature(secret, &tampered).as_str())
    );
}

async fn subscribe(daemon: &TestDaemon, body: Value) -> Value {
    let response = daemon.api("POST", "/api/notifications", Some(body)).await;
    assert_eq!(response.status, 201, "{}", response.text());
    response.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn success_failure_and_crash_events_arrive_signed() {
    if crate::support::missing_tool("node", "the crashing app is a node server") {
        return;
    }
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap()).await;
    let daemon = TestDaemon::start_with(
        DaemonOptions::default()
            .extra_toml("[rate_limits]\nrequests_per_minute = 1000\n")
            .extra_toml(&allow_loopback()),
    );
    let created = subscribe(
        &daemon,
        json!({
            "url": receiver.url("/hook"),
            "events": ["deployment.started", "deployment.succeeded", "deployment.failed", "app.crashed"],
            "format": "json"
        }),
    )
    .await;
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(
        secret.starts_with("whsec_") && secret.len() > 40,
        "{created}"
    );
    assert_eq!(created["format"], "json");
    let slack = subscribe(
        &daemon,
        json!({"url": receiver.url("/slack"), "events": ["deployment.failed"], "format": "slack"}),
    )
    .await;
    // The secret is shown once: listing and reading never show it.
    let listed = daemon.api("GET", "/api/notifications", None).await;
    assert_eq!(listed.status, 200);
    assert!(!listed.text().contains(&secret));
    assert_eq!(listed.json()["notifications"].as_array().unwrap().len(), 2);
    let one = daemon
        .api(
            "GET",
            &format!("/api/notifications/{}", created["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(one.status, 200);
    assert!(one.json().get("secret").is_none());

    // Success.
    let status = daemon
        .deploy(
            "crashy",
            &[("server.js", crate::pipeline::NODE_APP, 0o644)],
            json!({"startCommand": "node server.js"}),
        )
        .await;
    let deployment = status["deploymentId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // Failure: a build that exits 7.
    let upload = daemon
        .upload(
            "crashy",
            crate::support::targz(&[("public/index.html", "x", 0o644)]),
        )
        .await;
    assert_eq!(upload.status, 201);
    let failed = daemon
        .provision(
            "crashy",
            json!({"buildCommand": "exit 7", "installCommand": ""}),
        )
        .await;
    let failed_run = daemon
        .wait_run(
            failed["provisioningId"].as_str().unwrap(),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(failed_run["status"], "provisioning_failed", "{failed_run}");
    // A crash of the live app.
    assert_eq!(daemon.app_get("crashy", "/crash", &[]).await.status, 200);

    let all_arrived = eventually(Duration::from_secs(30), || async {
        receiver.events("/hook", "deployment.started").len() == 2
            && receiver.events("/hook", "deployment.succeeded").len() == 1
            && receiver.events("/hook", "deployment.failed").len() == 1
            && !receiver.events("/hook", "app.crashed").is_empty()
            && receiver.events("/slack", "deployment.failed").len() == 1
    })
    .await;
    assert!(
        all_arrived,
        "received: {:#?}\nlog:\n{}",
        receiver.got(),
        daemon.log_text()
    );

    for received in receiver.got().iter().filter(|r| r.path == "/hook") {
        assert_signed(received, &secret);
        assert!(received.delivery.as_deref().unwrap().starts_with("dlv_"));
        let body = received.json();
        assert_eq!(body["event"], received.event_header.as_deref().unwrap());
        assert_eq!(body["project"], "crashy");
        assert!(body["at"].as_str().unwrap().ends_with('Z'), "{body}");
        for field in ["deployment", "url", "error"] {
            assert!(body.get(field).is_some(), "{field} missing from {body}");
        }
    }
    let succeeded = receiver.events("/hook", "deployment.succeeded")[0].json();
    assert_eq!(succeeded["deployment"], deployment);
    assert_eq!(
        succeeded["url"],
        format!("http://crashy.localhost:{}", daemon.http.port())
    );
    assert_eq!(succeeded["error"], Value::Null);
    let failure = receiver.events("/hook", "deployment.failed")[0].json();
    assert_eq!(failure["deployment"], failed["deploymentId"]);
    assert!(
        failure["error"].as_str().unwrap().contains("BUILD_FAILED"),
        "{failure}"
    );
    let crash = receiver.events("/hook", "app.crashed")[0].json();
    assert_eq!(crash["deployment"], deployment);
    assert!(
        crash["error"]
            .as_str()
            .unwrap()
            .contains("exited with code 1"),
        "{crash}"
    );
    // Slack gets {"text"} and no signature.
    let slack_body = receiver.events("/slack", "deployment.failed")[0].clone();
    assert_eq!(slack_body.signature, None);
    let text = slack_body.json()["text"].as_str().unwrap().to_owned();
    assert!(text.contains("deployment of crashy failed"), "{text}");

    // The delivery log: successful attempts, newest first.
    let deliveries = daemon
        .api(
            "GET",
            &format!(
                "/api/notifications/{}/deliveries",
                created["id"].as_str().unwrap()
            ),
            None,
        )
        .await
        .json();
    let attempts = deliveries["deliveries"].as_array().unwrap();
    assert!(attempts.len() >= 5, "{deliveries}");
    assert!(attempts
        .iter()
        .all(|a| a["status"] == 200 && a["error"].is_null()));
    assert_eq!(attempts.last().unwrap()["event"], "deployment.started");

    // Deleting a subscription stops its deliveries.
    let id = slack["id"].as_str().unwrap();
    let deleted = daemon
        .api("DELETE", &format!("/api/notifications/{id}"), None)
        .await;
    assert_eq!(deleted.status, 200);
    assert_eq!(deleted.json()["deleted"], true);
    daemon
        .api("GET", &format!("/api/notifications/{id}"), None)
        .await
        .assert_error(404, "NOT_FOUND");
    daemon
        .api("GET", &format!("/api/notifications/{id}/deliveries"), None)
        .await
        .assert_error(404, "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_is_down_gets_the_delivery_after_a_daemon_restart() {
    // A port nobody listens on yet; the receiver takes it later.
    let port = crate::support::reserve_port().local_addr().unwrap().port();
    let hook: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut daemon = TestDaemon::start_with(
        DaemonOptions::default()
            .extra_toml("[notifications]\nretry_first_ms = 300\nretry_max_ms = 1500\n")
            .extra_toml(ALLOW_LOOPBACK),
    );
    let created = subscribe(
        &daemon,
        json!({"url": format!("http://{hook}/hook"), "events": ["deployment.succeeded"]}),
    )
    .await;
    let id = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert_eq!(created["format"], "json", "json is the default format");
    let status = daemon.deploy_page("site", "<p>up</p>").await;
    assert_eq!(status["status"], "provisioning_complete");

    // At least one attempt failed: nobody listens.
    let path = format!("/api/notifications/{id}/deliveries");
    let failed = eventually(Duration::from_secs(20), || async {
        let log = daemon.api("GET", &path, None).await.json();
        log["deliveries"]
            .as_array()
            .is_some_and(|attempts| !attempts.is_empty())
    })
    .await;
    assert!(failed, "no attempt was made:\n{}", daemon.log_text());
    let log = daemon.api("GET", &path, None).await.json();
    let first = &log["deliveries"][0];
    assert_eq!(first["status"], Value::Null, "{log}");
    // Said the same for a closed port, a filtered one or a failed handshake (no port map).
    assert_eq!(
        first["error"].as_str().unwrap(),
        "no HTTP answer from the receiver (the daemon's log has the cause)",
        "{log}"
    );
    assert_eq!(first["event"], "deployment.succeeded");

    // The daemon goes away, the receiver comes up, the daemon comes back.
    daemon.stop();
    // The signing secret is stored sealed, never as written.
    assert_eq!(
        crate::support::dir_contains(&daemon.data_dir(), secret.as_bytes()),
        None,
        "the webhook secret is in the data dir in plain text"
    );
    let receiver = Receiver::start(hook).await;
    daemon.restart();
    let delivered = eventually(Duration::from_secs(30), || async {
        !receiver.events("/hook", "deployment.succeeded").is_empty()
    })
    .await;
    assert!(
        delivered,
        "never delivered after the restart:\n{}",
        daemon.log_text()
    );
    let received = receiver.events("/hook", "deployment.succeeded");
    assert_eq!(received.len(), 1, "{received:#?}");
    assert_signed(&received[0], &secret);
    assert_eq!(received[0].json()["project"], "site");
    // The receiver has the body a moment before the daemon has recorded its answer.
    let recorded = eventually(Duration::from_secs(10), || async {
        daemon.api("GET", &path, None).await.json()["deliveries"][0]["status"] == 200
    })
    .await;
    let log = daemon.api("GET", &path, None).await.json();
    let last = &log["deliveries"][0];
    assert!(recorded, "{log}");
    assert_eq!(last["status"], 200, "{log}");
    assert!(last["attempt"].as_u64().unwrap() >= 2, "{log}");
    assert_eq!(last["deliveryId"], log["deliveries"][1]["deliveryId"]);
}

#[tokio::test]
async fn bad_subscriptions_are_refused_and_store_nothing() {
    let daemon = TestDaemon::start();
    for (body, needle) in [
        (
            json!({"url": "ftp://example.com/x", "events": ["app.crashed"]}),
            "http://",
        ),
        (
            json!({"url": "http://x/ y", "events": ["app.crashed"]}),
            "spaces",
        ),
        (
            json!({"url": "/relative", "events": ["app.crashed"]}),
            "http://",
        ),
        (json!({"url": "http://x/", "events": []}), "at least one"),
        (
            json!({"url": "http://x/", "events": ["deployment.*"]}),
            "unknown event",
        ),
        (
            json!({"url": "http://x/", "events": ["app.crashed"], "format": "xml"}),
            "format",
        ),
        (
            json!({"url": "http://x/", "events": ["app.crashed"], "secret": "mine"}),
            "unknown field",
        ),
        (
            json!({"url": "http://x/", "events": "app.crashed"}),
            "expected",
        ),
        (json!({"events": ["app.crashed"]}), "url"),
    ] {
        let response = daemon
            .api("POST", "/api/notifications", Some(body.clone()))
            .await;
        response.assert_error(400, "INVALID_BODY");
        let message = response.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(message.contains(needle), "{body}: {message}");
    }
    let too_long = format!("http://x/{}", "a".repeat(3000));
    daemon
        .api(
            "POST",
            "/api/notifications",
            Some(json!({"url": too_long, "events": ["app.crashed"]})),
        )
        .await
        .assert_error(400, "INVALID_BODY");
    let listed = daemon.api("GET", "/api/notifications", None).await.json();
    assert_eq!(listed["notifications"], json!([]));
    daemon
        .api("DELETE", "/api/notifications/ntf_nope", None)
        .await
        .assert_error(404, "NOT_FOUND");
}

/// A run superseded by a newer one of the same project ends canceled: `deployment.canceled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_run_sends_deployment_canceled() {
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap()).await;
    let daemon = TestDaemon::start_with(DaemonOptions::default().extra_toml(&allow_loopback()));
    let created = subscribe(
        &daemon,
        json!({"url": receiver.url("/hook"), "events": ["deployment.canceled", "deployment.succeeded"]}),
    )
    .await;
    let secret = created["secret"].as_str().unwrap().to_owned();
    let upload = daemon
        .upload(
            "slow",
            crate::support::targz(&[("public/index.html", "<p>x</p>", 0o644)]),
        )
        .await;
    assert_eq!(upload.status, 201);
    let first = daemon
        .provision(
            "slow",
            json!({"buildCommand": "sleep 30", "installCommand": ""}),
        )
        .await;
    // Wait until the first run is building, then supersede it.
    let building = eventually(Duration::from_secs(20), || async {
        let status = daemon
            .api(
                "GET",
                &format!(
                    "/api/provisioning/{}/status",
                    first["provisioningId"].as_str().unwrap()
                ),
                None,
            )
            .await
            .json();
        crate::support::step_state(&status, "build") == "running"
    })
    .await;
    assert!(building, "the first run never reached its build step");
    let second = daemon
        .provision("slow", json!({"buildCommand": "", "installCommand": ""}))
        .await;
    daemon.wait_complete(&second, Duration::from_secs(60)).await;
    let arrived = eventually(Duration::from_secs(20), || async {
        !receiver.events("/hook", "deployment.canceled").is_empty()
            && !receiver.events("/hook", "deployment.succeeded").is_empty()
    })
    .await;
    assert!(arrived, "received: {:#?}", receiver.got());
    let canceled = &receiver.events("/hook", "deployment.canceled")[0];
    assert_signed(canceled, &secret);
    let body = canceled.json();
    assert_eq!(body["deployment"], first["deploymentId"]);
    assert!(
        body["error"].as_str().unwrap().contains("superseded"),
        "{body}"
    );
}
