//! `tls.mode = "acme"` through the real daemon against Pebble: a project provisions with a
//! Pebble-issued certificate over HTTP-01 (answered by the daemon's plain HTTP listener), a
//! project whose HTTP-01 is refused gets one over TLS-ALPN-01 (answered by the daemon's HTTPS
//! listener), and a restart issues nothing new.

use std::time::Duration;

use crate::support::tls::{assert_curl_page, curl_https_path, served_leaf};
use crate::support::{eventually, missing_tool, step_state, TestDaemon};
use crate::tls::pebble::Pebble;

use super::relay::AcmeSetup;

/// Certificates Pebble issued and orders it was given, from its log.
fn pebble_counts(pebble: &Pebble) -> (usize, usize) {
    let log = pebble.log();
    (
        log.matches("Issued certificate serial").count(),
        log.matches("Added order").count(),
    )
}

#[tokio::test]
async fn pebble_issues_through_the_daemon_over_http01_and_tls_alpn01_and_a_restart_issues_nothing()
{
    if missing_tool("curl", "curl is the client trusting only Pebble's root") {
        return;
    }
    // Pebble validates HTTP-01 on the relay (which forwards to the daemon's plain listener,
    // bound on port 0) and TLS-ALPN-01 on the daemon's HTTPS port, which has to be fixed
    // before Pebble starts. The reservation is held until the daemon binds it.
    let Some(mut acme) = AcmeSetup::start(&["alpn.apps.test"]).await else {
        return;
    };
    let options = acme.daemon_options();
    let AcmeSetup {
        relay,
        pebble,
        https_port,
        ..
    } = acme;
    let mut daemon = TestDaemon::start_with(options);
    relay.forward_to(daemon.http);
    let https = daemon.https_addr();
    assert_eq!(https.port(), https_port);

    // HTTP-01: the pipeline starts issuance at domain_binding and ssl_verification waits for it.
    let web = daemon
        .deploy_verified("web", "<h1>web over acme</h1>")
        .await;
    assert_eq!(step_state(&web, "domain_binding"), "succeeded");
    assert_curl_page("web.apps.test", https, &pebble.root_file, "web over acme").await;
    let (forwarded, refused) = relay.counts("web.apps.test");
    assert!(
        forwarded >= 1 && refused == 0,
        "Pebble validated web over HTTP-01 through the daemon ({forwarded} forwarded)"
    );

    // TLS-ALPN-01: the relay refuses this name's HTTP-01 validation, so the manager falls
    // back and Pebble validates over an acme-tls/1 handshake with the daemon's HTTPS listener.
    daemon
        .deploy_verified("alpn", "<h1>alpn over acme</h1>")
        .await;
    assert_curl_page("alpn.apps.test", https, &pebble.root_file, "alpn over acme").await;
    let (forwarded, refused) = relay.counts("alpn.apps.test");
    assert_eq!(forwarded, 0);
    assert!(refused >= 1, "Pebble tried HTTP-01 for alpn first");
    let log = daemon.log_text();
    assert!(
        log.lines()
            .any(|line| line.contains("ACME validation failed") && line.contains("alpn.apps.test")),
        "the daemon logged the refused HTTP-01; log:\n{log}"
    );

    // The control host gets its certificate from the renewal pass at start; the API answers
    // over HTTPS trusting only Pebble's root.
    let control = "slipway.apps.test";
    assert!(
        eventually(Duration::from_secs(60), || async {
            served_leaf(https, control).await.is_ok()
        })
        .await,
        "no certificate for the control host within 60 s; log:\n{}",
        daemon.log_text()
    );
    let health = curl_https_path(control, "/healthz", https, &pebble.root_file, &["--fail"]).await;
    assert!(
        health.status.success(),
        "control host over HTTPS: {}",
        String::from_utf8_lossy(&health.stderr)
    );

    // Restart: the same leaves are served and Pebble is asked for nothing, not even by a new
    // provisioning of an app that already has its certificate.
    let names = ["web.apps.test", "alpn.apps.test", control];
    let mut before = Vec::new();
    for name in names {
        before.push(served_leaf(https, name).await.unwrap());
    }
    let counts_before = pebble_counts(&pebble);
    assert_eq!(
        counts_before.0,
        3,
        "web, alpn and the control host:\n{}",
        pebble.log()
    );
    daemon.restart();
    relay.forward_to(daemon.http);
    assert_eq!(daemon.https_addr(), https);
    for (name, leaf) in names.iter().zip(&before) {
        assert_eq!(
            &served_leaf(https, name).await.unwrap(),
            leaf,
            "{name} after the restart"
        );
    }
    daemon.deploy_verified("web", "<h1>web again</h1>").await;
    assert_curl_page("web.apps.test", https, &pebble.root_file, "web again").await;
    assert_eq!(
        served_leaf(https, "web.apps.test").await.unwrap(),
        before[0]
    );
    // Give the renewal pass that runs at start time to act, were it going to.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        pebble_counts(&pebble),
        counts_before,
        "Pebble issued or ordered after the restart"
    );
}
