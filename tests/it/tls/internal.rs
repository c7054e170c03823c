//! `tls.mode = "internal"`: the local CA, leaves per app, curl trusting only the exported root,
//! names outside `apps_domain`, restart and renewal.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use slipway::config::TlsMode;
use slipway::tls::{
    Clock, ManualClock, MemoryTlsStore, SystemClock, TlsError, TlsManager, TlsStore,
};

use super::support::{bind, serve_https, tls_config};
use crate::support::missing_tool;
use crate::support::tls::{curl_https, served_leaf};

const APPS_DOMAIN: &str = "apps.test";
const CONTROL_HOST: &str = "slipway.apps.test";

fn internal_manager(store: Arc<dyn TlsStore>, clock: Arc<dyn Clock>) -> Arc<TlsManager> {
    TlsManager::new(
        &tls_config(TlsMode::Internal),
        APPS_DOMAIN,
        CONTROL_HOST,
        store,
        clock,
    )
    .unwrap()
}

#[tokio::test]
async fn curl_trusting_only_the_exported_root_gets_a_page_over_http2() {
    if missing_tool("curl", "curl is the client trusting only the exported root") {
        return;
    }
    let manager = internal_manager(Arc::new(MemoryTlsStore::new()), Arc::new(SystemClock));
    manager.ensure_certificate("myapp.apps.test").await.unwrap();
    manager
        .wait_ready("myapp.apps.test", Duration::from_secs(1))
        .await
        .unwrap();
    let (listener, addr) = bind().await;
    serve_https(listener, Arc::new(ArcSwap::new(Arc::clone(&manager))));

    let dir = tempfile::tempdir().unwrap();
    let root_file = dir.path().join("root.pem");
    std::fs::write(&root_file, manager.root_pem().unwrap()).unwrap();

    let output = curl_https(
        "myapp.apps.test",
        addr,
        &root_file,
        &["--http2", "--write-out", "%{http_version}"],
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.starts_with("hello myapp.apps.test over HTTP/2.0"),
        "{stdout}"
    );
    assert!(stdout.ends_with('2'), "not HTTP/2: {stdout}");

    // The control host has its certificate from the start, and HTTP/1.1 works too.
    let output = curl_https(CONTROL_HOST, addr, &root_file, &["--http1.1"]).await;
    assert!(
        output.status.success(),
        "curl failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("over HTTP/1.1"));

    // The ssl_verification step passes against the real listener.
    manager.verify("myapp.apps.test", addr).await.unwrap();
}

#[tokio::test]
async fn a_name_outside_apps_domain_gets_no_certificate() {
    let manager = internal_manager(Arc::new(MemoryTlsStore::new()), Arc::new(SystemClock));
    for name in [
        "evil.example.com",
        "a.b.apps.test",
        "apps.test",
        "*.apps.test",
    ] {
        let error = manager.ensure_certificate(name).await.unwrap_err();
        assert!(
            matches!(error, TlsError::NameNotAllowed(_)),
            "{name}: {error}"
        );
    }
    let (listener, addr) = bind().await;
    serve_https(listener, Arc::new(ArcSwap::new(Arc::clone(&manager))));
    let handshake = served_leaf(addr, "evil.example.com").await;
    assert!(
        handshake.is_err(),
        "a certificate was served for evil.example.com"
    );
    assert!(manager.verify("evil.example.com", addr).await.is_err());
    // An allowed name that was never bound has no certificate either.
    assert!(served_leaf(addr, "unbound.apps.test").await.is_err());
    assert!(matches!(
        manager.verify("unbound.apps.test", addr).await,
        Err(TlsError::NoCertificate(_))
    ));
}

#[tokio::test]
async fn ca_and_leaves_survive_a_restart_and_forget_drops_a_name() {
    let store: Arc<dyn TlsStore> = Arc::new(MemoryTlsStore::new());
    let first = internal_manager(Arc::clone(&store), Arc::new(SystemClock));
    first.ensure_certificate("keep.apps.test").await.unwrap();
    first.ensure_certificate("drop.apps.test").await.unwrap();
    let leaf = first.served_leaf_sha256("keep.apps.test").unwrap();
    first.forget("drop.apps.test").await.unwrap();
    assert!(first.served_leaf_sha256("drop.apps.test").is_none());

    let second = internal_manager(Arc::clone(&store), Arc::new(SystemClock));
    assert_eq!(second.root_pem(), first.root_pem());
    assert_eq!(
        second.served_leaf_sha256("keep.apps.test"),
        Some(leaf.clone())
    );
    assert!(second.served_leaf_sha256("drop.apps.test").is_none());
    second.ensure_certificate("keep.apps.test").await.unwrap();
    assert_eq!(
        second.served_leaf_sha256("keep.apps.test"),
        Some(leaf),
        "a fresh leaf was re-issued"
    );
}

#[tokio::test]
async fn leaves_renew_when_a_third_of_their_life_is_left() {
    let store: Arc<dyn TlsStore> = Arc::new(MemoryTlsStore::new());
    let clock = Arc::new(ManualClock::starting_now());
    let manager = internal_manager(Arc::clone(&store), clock.clone());
    manager.ensure_certificate("renew.apps.test").await.unwrap();
    let original = manager.served_leaf_sha256("renew.apps.test").unwrap();

    // Leaves live 90 days: nothing happens at day 59, a new leaf at day 61.
    clock.advance(Duration::from_secs(59 * 86_400));
    manager.check_renewals().await.unwrap();
    assert_eq!(
        manager.served_leaf_sha256("renew.apps.test").unwrap(),
        original
    );
    clock.advance(Duration::from_secs(2 * 86_400));
    manager.check_renewals().await.unwrap();
    let renewed = manager.served_leaf_sha256("renew.apps.test").unwrap();
    assert_ne!(renewed, original);

    // The renewed leaf is what a restart serves.
    let restarted = internal_manager(store, clock);
    assert_eq!(
        restarted.served_leaf_sha256("renew.apps.test").unwrap(),
        renewed
    );
}

#[tokio::test]
async fn verification_fails_when_the_listener_serves_another_leaf() {
    let store: Arc<dyn TlsStore> = Arc::new(MemoryTlsStore::new());
    let clock = Arc::new(ManualClock::starting_now());
    let serving = internal_manager(Arc::clone(&store), clock.clone());
    serving.ensure_certificate("stale.apps.test").await.unwrap();
    let (listener, addr) = bind().await;
    serve_https(listener, Arc::new(ArcSwap::new(Arc::clone(&serving))));
    serving.verify("stale.apps.test", addr).await.unwrap();

    // A second manager on the same store renews the leaf; the listener still serves the old one.
    clock.advance(Duration::from_secs(61 * 86_400));
    let other = internal_manager(store, clock);
    other.check_renewals().await.unwrap();
    let error = other.verify("stale.apps.test", addr).await.unwrap_err();
    assert!(error.to_string().contains("stored one"), "{error}");
}
