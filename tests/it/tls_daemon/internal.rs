//! `tls.mode = "internal"` through the real daemon: `slipway ca export` prints the root curl
//! then trusts, apps answer over HTTP/2, names outside `apps_domain` get no certificate, the
//! control host's API works over HTTPS, plain HTTP redirects with the right port, and a deleted
//! project's certificate is gone (also after a restart).

use std::time::Duration;

use crate::support::tls::{assert_curl_page, curl_https, curl_https_path, served_leaf};
use crate::support::{
    eventually, http_request, missing_tool, DaemonOptions, TestDaemon, TlsSetup, BIN,
};

#[tokio::test]
async fn internal_ca_serves_apps_over_http2_and_drops_a_deleted_projects_certificate() {
    if missing_tool("curl", "curl is the client trusting only the exported root") {
        return;
    }
    let options = DaemonOptions::default()
        .apps_domain("apps.test")
        .tls(TlsSetup::Internal);
    let mut daemon = TestDaemon::start_with(options);
    let status = daemon
        .deploy_verified("site", "<h1>internal site</h1>")
        .await;
    assert_eq!(status["status"], "provisioning_complete");
    daemon.deploy_verified("other", "<h1>other site</h1>").await;
    let https = daemon.https_addr();

    // The root, as an operator gets it: through the admin socket of the running daemon.
    let export = tokio::process::Command::new(BIN)
        .args(["ca", "export", "--data-dir"])
        .arg(daemon.data_dir())
        .output()
        .await
        .unwrap();
    assert!(
        export.status.success(),
        "ca export: {}",
        String::from_utf8_lossy(&export.stderr)
    );
    let root_pem = String::from_utf8(export.stdout).unwrap();
    assert!(
        root_pem.starts_with("-----BEGIN CERTIFICATE-----"),
        "{root_pem}"
    );
    assert_eq!(
        root_pem.matches("BEGIN CERTIFICATE").count(),
        1,
        "the root only"
    );
    let root_file = daemon.dir.path().join("root.pem");
    std::fs::write(&root_file, &root_pem).unwrap();

    // HTTP/2 with curl trusting only that root.
    let output = curl_https(
        "site.apps.test",
        https,
        &root_file,
        &["--fail", "--http2", "--write-out", "\n%{http_version}"],
    )
    .await;
    assert!(
        output.status.success(),
        "curl --http2: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("<h1>internal site</h1>"), "{stdout}");
    assert_eq!(stdout.lines().last(), Some("2"), "HTTP version: {stdout}");

    // Names outside apps_domain (or more than one label under it) get no certificate at all.
    for name in ["evil.example", "deep.site.apps.test", "apps.test"] {
        assert!(
            served_leaf(https, name).await.is_err(),
            "{name} got a certificate"
        );
        let output = curl_https(name, https, &root_file, &[]).await;
        assert!(!output.status.success(), "curl {name} succeeded");
    }

    // The control host: the API over HTTPS with a token.
    let auth = format!("authorization: Bearer {}", daemon.token);
    let listing = curl_https_path(
        &daemon.control_host(),
        "/api/projects",
        https,
        &root_file,
        &["--fail", "-H", &auth],
    )
    .await;
    assert!(
        listing.status.success(),
        "API over HTTPS: {}",
        String::from_utf8_lossy(&listing.stderr)
    );
    let listing: serde_json::Value = serde_json::from_slice(&listing.stdout).unwrap();
    assert!(listing.to_string().contains("\"site\""), "{listing}");

    // Plain HTTP to an app: 308 to the same path on the HTTPS port.
    let redirect = http_request(
        daemon.http,
        "GET",
        "site.apps.test",
        "/a/b?c=1",
        &[],
        vec![],
    )
    .await;
    assert_eq!(redirect.status, 308);
    assert_eq!(
        redirect.header("location"),
        Some(format!("https://site.apps.test:{}/a/b?c=1", https.port()).as_str())
    );
    // The control host from loopback is served over plain HTTP (the CLI's local access).
    let plain = daemon.api("GET", "/api/projects", None).await;
    assert_eq!(plain.status, 200, "{}", plain.text());

    // Deleting a project drops its certificate; the other project keeps its own.
    let deleted = daemon.api("DELETE", "/api/projects/site", None).await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    assert!(
        eventually(Duration::from_secs(5), || async {
            served_leaf(https, "site.apps.test").await.is_err()
        })
        .await,
        "site.apps.test is still served a certificate after the deletion"
    );
    let output = curl_https("site.apps.test", https, &root_file, &[]).await;
    assert!(!output.status.success(), "curl of a deleted project's name");
    assert_curl_page("other.apps.test", https, &root_file, "other site").await;

    // And it stays gone after a restart, while the CA and the other leaf survive it.
    daemon.restart();
    let https = daemon.https_addr();
    assert!(served_leaf(https, "site.apps.test").await.is_err());
    assert_curl_page("other.apps.test", https, &root_file, "other site").await;
}
