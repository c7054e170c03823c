//! Issue 31 item 12: webhooks never reach internal addresses unless the operator allows them
//! (at subscription time, and at delivery time for a name that resolves there), a receiver
//! that never answers does not delay another subscriber's deliveries, and a subscription's
//! queue is capped with a visible count of what it dropped.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::receiver::Receiver;
use super::{allow_loopback, ALLOW_LOOPBACK};
use crate::support::{eventually, DaemonOptions, TestDaemon};

/// These tests poll the deliveries list.
const POLLING: &str = "[rate_limits]\nrequests_per_minute = 1000\n";

async fn subscribe(daemon: &TestDaemon, url: &str, events: &[&str]) -> String {
    let response = daemon
        .api(
            "POST",
            "/api/notifications",
            Some(json!({"url": url, "events": events})),
        )
        .await;
    assert_eq!(response.status, 201, "{}", response.text());
    response.json()["id"].as_str().unwrap().to_owned()
}

async fn deliveries(daemon: &TestDaemon, id: &str) -> Value {
    daemon
        .api("GET", &format!("/api/notifications/{id}/deliveries"), None)
        .await
        .json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_destinations_are_refused_when_subscribing() {
    let daemon = TestDaemon::start();
    for url in [
        "http://127.0.0.1:9/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]:9/",
        "http://[::ffff:127.0.0.1]:9/",
        "http://[::ffff:169.254.169.254]/",
        "http://10.0.0.1/",
        "http://172.16.5.4/",
        "http://192.168.0.1/",
        "http://100.64.0.1/",
        "http://0.0.0.0:9/",
        "http://[fe80::1]/",
        "http://[fd00::1]/",
        "http://localhost:9/",
    ] {
        let response = daemon
            .api(
                "POST",
                "/api/notifications",
                Some(json!({"url": url, "events": ["deployment.failed"]})),
            )
            .await;
        response.assert_error(403, "FORBIDDEN");
        let message = response.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(message.contains("allow_destinations"), "{url}: {message}");
    }
    let listed = daemon.api("GET", "/api/notifications", None).await.json();
    assert_eq!(listed["notifications"], json!([]));

    // The operator's allow-list opens only the blocks it names.
    let allowed = TestDaemon::start_with(DaemonOptions::default().extra_toml(&allow_loopback()));
    subscribe(&allowed, "http://127.0.0.1:9/hook", &["deployment.failed"]).await;
    allowed
        .api(
            "POST",
            "/api/notifications",
            Some(json!({"url": "http://169.254.169.254/", "events": ["deployment.failed"]})),
        )
        .await
        .assert_error(403, "FORBIDDEN");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_resolves_to_loopback_is_refused_at_delivery() {
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap()).await;
    let port = receiver.url("").rsplit(':').next().unwrap().to_owned();
    // Subscribed while the operator allowed loopback; then the allowance is taken away.
    let mut daemon = TestDaemon::start_with(DaemonOptions::default().extra_toml(&allow_loopback()));
    let url = format!("http://localhost:{port}/hook");
    let id = subscribe(&daemon, &url, &["deployment.succeeded"]).await;
    daemon.stop();
    daemon.options = DaemonOptions::default().extra_toml(POLLING);
    daemon.start_again();
    let status = daemon.deploy_page("site", "<p>up</p>").await;
    assert_eq!(status["status"], "provisioning_complete");
    let attempted = eventually(Duration::from_secs(20), || async {
        deliveries(&daemon, &id).await["deliveries"]
            .as_array()
            .is_some_and(|all| !all.is_empty())
    })
    .await;
    assert!(attempted, "no attempt:\n{}", daemon.log_text());
    let log = deliveries(&daemon, &id).await;
    let error = log["deliveries"][0]["error"].as_str().unwrap().to_owned();
    assert!(error.contains("localhost is a loopback address"), "{log}");
    assert_eq!(log["deliveries"][0]["status"], Value::Null);
    assert!(receiver.got().is_empty(), "{:#?}", receiver.got());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_does_not_delay_another() {
    // Takes connections and never answers a byte.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("http://{}/hook", silent.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap()).await;
    let daemon = TestDaemon::start_with(
        DaemonOptions::default()
            .extra_toml(&allow_loopback())
            .extra_toml(POLLING),
    );
    let events = ["deployment.started", "deployment.succeeded"];
    let slow = subscribe(&daemon, &silent_url, &events).await;
    subscribe(&daemon, &receiver.url("/hook"), &events).await;

    let started = Instant::now();
    let status = daemon.deploy_page("site", "<p>up</p>").await;
    assert_eq!(status["status"], "provisioning_complete");
    let both = eventually(Duration::from_secs(30), || async {
        events
            .iter()
            .all(|e| !receiver.events("/hook", e).is_empty())
    })
    .await;
    let took = started.elapsed();
    assert!(both, "{:#?}", receiver.got());
    eprintln!("the answering receiver had both events {took:?} after the deploy began");
    // Each attempt on the silent receiver waits 10 s for an answer.
    assert!(
        took < Duration::from_secs(6),
        "delayed by the silent receiver: {took:?}"
    );

    // The silent receiver's attempt ends at its deadline, said like any other failure.
    let timed_out = eventually(Duration::from_secs(20), || async {
        deliveries(&daemon, &slow).await["deliveries"]
            .as_array()
            .is_some_and(|all| !all.is_empty())
    })
    .await;
    assert!(timed_out, "{}", daemon.log_text());
    let log = deliveries(&daemon, &slow).await;
    assert_eq!(
        log["deliveries"][0]["error"],
        "no HTTP answer from the receiver (the daemon's log has the cause)",
        "{log}"
    );
    hold.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_is_capped_and_counts_what_it_dropped() {
    // Nobody listens: every attempt fails and waits ten minutes for its retry.
    let port = crate::support::reserve_port().local_addr().unwrap().port();
    let daemon = TestDaemon::start_with(DaemonOptions::default().extra_toml(POLLING).extra_toml(
        &format!(
            "[notifications]\nqueue_per_subscription = 3\nretry_first_ms = 600000\n\
         retry_max_ms = 600000\n{ALLOW_LOOPBACK}"
        ),
    ));
    let id = subscribe(
        &daemon,
        &format!("http://127.0.0.1:{port}/hook"),
        &["deployment.started", "deployment.succeeded"],
    )
    .await;
    for _ in 0..3 {
        let status = daemon.deploy_page("site", "<p>up</p>").await;
        assert_eq!(status["status"], "provisioning_complete");
    }
    // Six events for a queue of three: the three oldest were dropped, and say so.
    let capped = eventually(Duration::from_secs(20), || async {
        let log = deliveries(&daemon, &id).await;
        log["queued"] == 3 && log["dropped"] == 3
    })
    .await;
    let log = deliveries(&daemon, &id).await;
    assert!(capped, "{log}");
    let one = daemon
        .api("GET", &format!("/api/notifications/{id}"), None)
        .await
        .json();
    assert_eq!(one["dropped"], 3, "{one}");
}
