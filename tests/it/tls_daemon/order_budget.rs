//! The ACME order budget (issue 31, item 6) through the real daemon against Pebble: with one
//! new order per project an hour, a project's second name is deferred with a `lastError`
//! that says so, and neither deleting and adding it again nor restarting the daemon places
//! an order for it; a name whose ownership is not proven gets no order at all.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{eventually, missing_tool, TestDaemon};

use super::relay::AcmeSetup;

async fn domain(daemon: &TestDaemon, name: &str) -> Value {
    let response = daemon
        .api("GET", &format!("/api/projects/web/domains/{name}"), None)
        .await;
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()
}

async fn add(daemon: &TestDaemon, name: &str) -> Value {
    let response = daemon
        .api(
            "POST",
            "/api/projects/web/domains",
            Some(json!({ "domain": name })),
        )
        .await;
    assert_eq!(response.status, 201, "{}", response.text());
    response.json()
}

/// How many ACME orders the daemon's log shows for `name`.
fn orders_for(daemon: &TestDaemon, name: &str) -> usize {
    daemon
        .log_text()
        .lines()
        .filter(|line| {
            line.contains("requesting a certificate over ACME")
                && line.contains(&format!("name={name}"))
        })
        .count()
}

async fn assert_deferred(daemon: &TestDaemon, name: &str) {
    let record = domain(daemon, name).await;
    assert_eq!(record["status"], "failed", "{record}");
    let error = record["lastError"].as_str().unwrap_or_default();
    assert!(error.contains("ACME order budget spent"), "{record}");
    assert!(
        error.contains("acme_orders_per_project_per_hour = 1"),
        "{record}"
    );
    assert_eq!(orders_for(daemon, name), 0, "{}", daemon.log_text());
}

#[tokio::test]
async fn the_order_budget_survives_a_delete_and_a_restart() {
    if missing_tool("curl", "the Pebble set-up needs it") {
        return;
    }
    let Some(mut acme) = AcmeSetup::start(&[]).await else {
        return;
    };
    let options = acme
        .daemon_options()
        .tls_keys("acme_orders_per_project_per_hour = 1\n");
    // Pebble stays up while `acme` is in scope.
    let AcmeSetup { relay, .. } = acme;
    let mut daemon = TestDaemon::start_with(options);
    relay.forward_to(daemon.http);
    daemon.deploy_verified("web", "<h1>web</h1>").await;

    add(&daemon, "one.example.test").await;
    let issued = eventually(Duration::from_secs(90), || async {
        domain(&daemon, "one.example.test").await["status"] == "active"
    })
    .await;
    assert!(issued, "{}", daemon.log_text());
    assert_eq!(orders_for(&daemon, "one.example.test"), 1);

    add(&daemon, "two.example.test").await;
    assert_deferred(&daemon, "two.example.test").await;

    // Not proven (no trusted suffix, no TXT record): no order at all.
    let unproven = add(&daemon, "shop.example.org").await;
    assert_eq!(unproven["status"], "unverified", "{unproven}");
    assert_eq!(orders_for(&daemon, "shop.example.org"), 0);

    let deleted = daemon
        .api("DELETE", "/api/projects/web/domains/two.example.test", None)
        .await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    add(&daemon, "two.example.test").await;
    assert_deferred(&daemon, "two.example.test").await;

    daemon.restart();
    relay.forward_to(daemon.http);
    assert_deferred(&daemon, "two.example.test").await;
    assert_eq!(orders_for(&daemon, "one.example.test"), 1);
}
