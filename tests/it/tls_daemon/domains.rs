//! Custom domains over HTTPS through the real daemon, in each TLS mode (issue 11): `acme`
//! gets a Pebble certificate for the owner's name (served over HTTP/2, redirects with 308,
//! a name that does not point here fails with `lastError`, a restart issues nothing new);
//! `internal` signs it with the custom-domains root that `ca export --domains` prints (and
//! not with the name-constrained apps root); `files` is `active` only when the operator's
//! certificate lists the name.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::notifications::receiver::Receiver;
use crate::support::tls::{assert_curl_page, curl_https, curl_https_path, served_leaf};
use crate::support::{eventually, missing_tool, DaemonOptions, TestDaemon, TlsSetup, BIN};
use crate::tls::files::{replace, TestCa};

use super::relay::AcmeSetup;

async fn add_domain(
    daemon: &TestDaemon,
    project: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let response = daemon
        .api(
            "POST",
            &format!("/api/projects/{project}/domains"),
            Some(body),
        )
        .await;
    assert_eq!(response.status, 201, "{}", response.text());
    response.json()
}

async fn domain(daemon: &TestDaemon, project: &str, name: &str) -> serde_json::Value {
    let response = daemon
        .api(
            "GET",
            &format!("/api/projects/{project}/domains/{name}"),
            None,
        )
        .await;
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()
}

/// Waits until the domain's status is `want`; returns the record.
async fn await_status(
    daemon: &TestDaemon,
    project: &str,
    name: &str,
    want: &str,
) -> serde_json::Value {
    let reached = eventually(Duration::from_secs(90), || async {
        domain(daemon, project, name).await["status"] == want
    })
    .await;
    let record = domain(daemon, project, name).await;
    assert!(
        reached,
        "{name} never became {want}: {record}\nlog:\n{}",
        daemon.log_text()
    );
    record
}

/// The HTTP version curl used and the body, trusting only `ca_file`.
async fn curl_http2(name: &str, daemon: &TestDaemon, ca_file: &Path) -> (String, String) {
    let output = curl_https(
        name,
        daemon.https_addr(),
        ca_file,
        &["--fail", "--http2", "--write-out", "\n%{http_version}"],
    )
    .await;
    assert!(
        output.status.success(),
        "curl {name}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, version) = text.rsplit_once('\n').unwrap();
    (version.to_owned(), body.to_owned())
}

#[tokio::test]
async fn acme_issues_for_a_custom_domain_redirects_and_a_restart_issues_nothing() {
    if missing_tool("curl", "curl is the client trusting only Pebble's root") {
        return;
    }
    let Some(mut acme) = AcmeSetup::start(&[]).await else {
        return;
    };
    let options = acme
        .daemon_options()
        .extra_toml(&crate::notifications::allow_loopback());
    let AcmeSetup {
        relay,
        pebble,
        https_port,
        ..
    } = acme;
    let mut daemon = TestDaemon::start_with(options);
    relay.forward_to(daemon.http);
    daemon
        .deploy_verified("web", "<h1>web on its own domain</h1>")
        .await;
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap()).await;
    let subscribed = daemon
        .api(
            "POST",
            "/api/notifications",
            Some(json!({"url": receiver.url("/hook"), "events": ["domain.active"]})),
        )
        .await;
    assert_eq!(subscribed.status, 201, "{}", subscribed.text());

    let added = add_domain(&daemon, "web", json!({"domain": "www.example.test"})).await;
    assert!(
        added["status"] == "pending" || added["status"] == "active",
        "{added}"
    );
    let active = await_status(&daemon, "web", "www.example.test", "active").await;
    assert!(
        active["certificate"]["issuer"]
            .as_str()
            .unwrap()
            .contains("Pebble"),
        "{active}"
    );
    assert!(active["lastError"].is_null());
    let (version, body) = curl_http2("www.example.test", &daemon, &pebble.root_file).await;
    assert_eq!(version, "2");
    assert!(body.contains("web on its own domain"));
    let (forwarded, _) = relay.counts("www.example.test");
    assert!(
        forwarded >= 1,
        "Pebble validated the custom domain over HTTP-01"
    );
    assert!(
        eventually(Duration::from_secs(30), || async {
            !receiver.events("/hook", "domain.active").is_empty()
        })
        .await,
        "no domain.active event; log:\n{}",
        daemon.log_text()
    );
    let event = receiver.events("/hook", "domain.active")[0].json();
    assert_eq!(event["project"], "web");
    assert_eq!(event["url"], "https://www.example.test");

    // The apex redirects to www, path and query kept, over HTTPS with its own certificate.
    add_domain(
        &daemon,
        "web",
        json!({"domain": "example.test", "redirectTo": "www.example.test"}),
    )
    .await;
    await_status(&daemon, "web", "example.test", "active").await;
    let moved = curl_https_path(
        "example.test",
        "/docs/page?lang=en",
        daemon.https_addr(),
        &pebble.root_file,
        &["--http2", "--include", "--output", "-"],
    )
    .await;
    let head = String::from_utf8_lossy(&moved.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/2 308"), "{head}");
    assert!(
        head.contains(&format!(
            "location: https://www.example.test:{https_port}/docs/page?lang=en"
        )),
        "{head}"
    );

    // A name that does not point at this machine fails, with the CA's reason.
    pebble.point("elsewhere.example.test", "127.0.0.2").await;
    add_domain(&daemon, "web", json!({"domain": "elsewhere.example.test"})).await;
    let failed = await_status(&daemon, "web", "elsewhere.example.test", "failed").await;
    let error = failed["lastError"].as_str().unwrap();
    assert!(error.contains("next attempt after"), "{failed}");
    assert!(failed["certificate"].is_null());

    // A restart serves the same certificates and asks Pebble for nothing.
    let leaf = served_leaf(daemon.https_addr(), "www.example.test")
        .await
        .unwrap();
    let issued = pebble.log().matches("Issued certificate serial").count();
    daemon.restart();
    relay.forward_to(daemon.http);
    assert_eq!(
        served_leaf(daemon.https_addr(), "www.example.test")
            .await
            .unwrap(),
        leaf
    );
    assert_eq!(
        domain(&daemon, "web", "www.example.test").await["status"],
        "active"
    );
    assert_curl_page(
        "www.example.test",
        daemon.https_addr(),
        &pebble.root_file,
        "web on its own domain",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        pebble.log().matches("Issued certificate serial").count(),
        issued,
        "Pebble issued after the restart"
    );

    // Deleting the domain stops serving it at once and drops its certificate.
    let deleted = daemon
        .api("DELETE", "/api/projects/web/domains/example.test", None)
        .await;
    assert_eq!(deleted.status, 200);
    assert!(served_leaf(daemon.https_addr(), "example.test")
        .await
        .is_err());
}

#[tokio::test]
async fn internal_mode_signs_custom_domains_with_the_domains_root_only() {
    if missing_tool(
        "curl",
        "curl is the client trusting only the exported roots",
    ) {
        return;
    }
    let daemon = TestDaemon::start_with(
        DaemonOptions::default()
            .apps_domain("apps.test")
            .tls(TlsSetup::Internal),
    );
    daemon
        .deploy_verified("web", "<h1>internal custom</h1>")
        .await;
    let export = |domains: bool| {
        let mut command = std::process::Command::new(BIN);
        command
            .args(["ca", "export", "--data-dir"])
            .arg(daemon.data_dir());
        if domains {
            command.arg("--domains");
        }
        command.output().unwrap()
    };
    assert!(
        !export(true).status.success(),
        "no domains root before the first domain"
    );

    let added = add_domain(&daemon, "web", json!({"domain": "www.example.test"})).await;
    assert_eq!(added["status"], "active", "{added}");
    assert!(added["certificate"]["notAfter"].is_string());
    let output = export(true);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let domains_root = daemon.dir.path().join("domains-root.pem");
    std::fs::write(&domains_root, &output.stdout).unwrap();
    let apps_root = daemon.dir.path().join("apps-root.pem");
    std::fs::write(&apps_root, export(false).stdout).unwrap();

    let (version, body) = curl_http2("www.example.test", &daemon, &domains_root).await;
    assert_eq!(version, "2");
    assert!(body.contains("internal custom"));
    let refused = curl_https(
        "www.example.test",
        daemon.https_addr(),
        &apps_root,
        &["--fail"],
    )
    .await;
    assert!(
        !refused.status.success(),
        "the name-constrained apps root vouched for a custom domain"
    );
}

#[tokio::test]
async fn files_mode_is_active_only_for_names_the_operators_certificate_lists() {
    if missing_tool("curl", "curl checks the served certificate") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Operator test CA");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    let (leaf, key) = ca.leaf(&["*.apps.test", "www.example.test"]);
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    replace(&cert_file, &format!("{leaf}{}", ca.cert_pem));
    replace(&key_file, &key);
    let daemon = TestDaemon::start_with(DaemonOptions::default().apps_domain("apps.test").tls(
        TlsSetup::Files {
            cert_file,
            key_file,
        },
    ));
    daemon.deploy_verified("shop", "<h1>shop</h1>").await;

    let covered = add_domain(&daemon, "shop", json!({"domain": "www.example.test"})).await;
    assert_eq!(covered["status"], "active", "{covered}");
    assert!(covered["certificate"]["issuer"]
        .as_str()
        .unwrap()
        .contains("Operator test CA"));
    assert_curl_page("www.example.test", daemon.https_addr(), &ca_file, "shop").await;

    let uncovered = add_domain(&daemon, "shop", json!({"domain": "shop.other.test"})).await;
    assert_eq!(uncovered["status"], "failed", "{uncovered}");
    let error = uncovered["lastError"].as_str().unwrap();
    assert!(error.contains("does not cover shop.other.test"), "{error}");
}
