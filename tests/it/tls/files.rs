//! `tls.mode = "files"`: the operator's wildcard certificate, swapped without a restart when
//! the files change.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use slipway::config::TlsMode;
use slipway::tls::{MemoryTlsStore, SystemClock, TlsManager};
use tokio_util::sync::CancellationToken;

use super::support::{bind, serve_https, tls_config};
use crate::support::missing_tool;
use crate::support::tls::{curl_https, served_leaf};

/// A test CA, standing in for the operator's public CA.
pub struct TestCa {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new(common_name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf for `names` (wildcards allowed) and its key, both PEM.
    pub fn leaf(&self, names: &[&str]) -> (String, String) {
        let mut params = CertificateParams::new(
            names
                .iter()
                .map(|name| name.to_string())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        params.distinguished_name.push(DnType::CommonName, names[0]);
        params.not_before = (std::time::SystemTime::now() - Duration::from_secs(3600)).into();
        params.not_after = (std::time::SystemTime::now() + Duration::from_secs(30 * 86_400)).into();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// Writes or replaces a file the way an operator's tooling should: aside with mode 600, then
/// a rename over the old one.
pub(crate) fn replace(path: &Path, contents: &str) {
    use std::os::unix::fs::PermissionsExt;
    let temporary = path.with_extension("new");
    std::fs::write(&temporary, contents).unwrap();
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

#[tokio::test]
async fn replacing_the_files_changes_the_served_certificate_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Operator test CA");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let (first_cert, first_key) = ca.leaf(&["*.apps.test", "slipway.apps.test"]);
    replace(&cert_file, &first_cert);
    replace(&key_file, &first_key);

    let mut config = tls_config(TlsMode::Files);
    config.cert_file = Some(cert_file.clone());
    config.key_file = Some(key_file.clone());
    config.acme_ca_file = Some(ca_file.clone());
    let manager = TlsManager::new(
        &config,
        "apps.test",
        "slipway.apps.test",
        Arc::new(MemoryTlsStore::new()),
        Arc::new(SystemClock),
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    tokio::spawn(Arc::clone(&manager).run_renewals(shutdown.clone()));
    let (listener, addr) = bind().await;
    serve_https(listener, Arc::new(ArcSwap::new(Arc::clone(&manager))));

    // The wildcard covers any app; the pipeline's steps pass.
    manager.ensure_certificate("shop.apps.test").await.unwrap();
    manager
        .wait_ready("shop.apps.test", Duration::from_secs(1))
        .await
        .unwrap();
    manager.verify("shop.apps.test", addr).await.unwrap();
    let first = served_leaf(addr, "shop.apps.test").await.unwrap();
    if !missing_tool("curl", "the part that checks the chain with curl") {
        let output = curl_https("shop.apps.test", addr, &ca_file, &[]).await;
        assert!(
            output.status.success(),
            "curl failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    // A half-done replacement (new certificate, old key) keeps the old certificate in service.
    let (second_cert, second_key) = ca.leaf(&["*.apps.test"]);
    replace(&cert_file, &second_cert);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(served_leaf(addr, "shop.apps.test").await.unwrap(), first);

    // Once the key follows, the next handshakes get the new certificate.
    replace(&key_file, &second_key);
    let started = Instant::now();
    let mut served = first.clone();
    while served == first && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        served = served_leaf(addr, "shop.apps.test").await.unwrap();
    }
    assert_ne!(
        served, first,
        "the new files were not picked up within 10 s"
    );
    manager.verify("shop.apps.test", addr).await.unwrap();
    shutdown.cancel();
}
