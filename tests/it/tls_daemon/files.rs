//! `tls.mode = "files"` through the real daemon: the operator's wildcard certificate (made
//! here with rcgen, signed by a test CA) serves a provisioned app, and replacing the files
//! changes the served certificate without a restart.

use std::time::Duration;

use crate::support::tls::{assert_curl_page, served_leaf};
use crate::support::{eventually, missing_tool, DaemonOptions, TestDaemon, TlsSetup};
use crate::tls::files::{replace, TestCa};

/// The SHA-256 of the first certificate in a PEM chain.
fn leaf_sha256(chain_pem: &str) -> String {
    let chain = slipway::tls::certs::parse_chain(chain_pem).unwrap();
    slipway::ids::sha256_hex(&chain[0])
}

/// Sandboxes see `/etc`, where operators keep wildcard keys: a key other users can read is
/// refused at start, with the fix in the message.
#[tokio::test]
async fn a_key_other_users_can_read_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Operator test CA");
    let (leaf, key) = ca.leaf(&["*.apps.test"]);
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_file, format!("{leaf}{}", ca.cert_pem)).unwrap();
    std::fs::write(&key_file, &key).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let (code, log) =
        TestDaemon::run_to_exit(DaemonOptions::default().apps_domain("apps.test").tls(
            TlsSetup::Files {
                cert_file,
                key_file,
            },
        ));
    assert_ne!(code, Some(0), "{log}");
    assert!(log.contains("chmod 600"), "{log}");
}

#[tokio::test]
async fn an_operator_wildcard_serves_apps_and_is_swapped_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("Operator test CA");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca.cert_pem).unwrap();
    // The chain ends with the operator's root, which is how ssl_verification trusts it.
    let (leaf, key) = ca.leaf(&["*.apps.test"]);
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    replace(&cert_file, &format!("{leaf}{}", ca.cert_pem));
    replace(&key_file, &key);
    let tls = TlsSetup::Files {
        cert_file: cert_file.clone(),
        key_file: key_file.clone(),
    };

    let daemon = TestDaemon::start_with(DaemonOptions::default().apps_domain("apps.test").tls(tls));
    daemon.deploy_verified("shop", "<h1>shop</h1>").await;
    let https = daemon.https_addr();
    let first = served_leaf(https, "shop.apps.test").await.unwrap();
    assert_eq!(first, leaf_sha256(&leaf));
    let with_curl = !missing_tool("curl", "the parts that check the chain with curl");
    if with_curl {
        assert_curl_page("shop.apps.test", https, &ca_file, "<h1>shop</h1>").await;
    }

    // New files: the key first, then the certificate (between the two the pair does not
    // match and the old certificate stays in service).
    let (second_leaf, second_key) = ca.leaf(&["*.apps.test"]);
    let second = leaf_sha256(&second_leaf);
    replace(&key_file, &second_key);
    replace(&cert_file, &format!("{second_leaf}{}", ca.cert_pem));
    let swapped = eventually(Duration::from_secs(10), || async {
        served_leaf(https, "shop.apps.test").await.ok().as_deref() == Some(second.as_str())
    })
    .await;
    assert!(
        swapped,
        "the new files were not served within 10 s; log:\n{}",
        daemon.log_text()
    );
    if with_curl {
        assert_curl_page("shop.apps.test", https, &ca_file, "<h1>shop</h1>").await;
    }
    // A new provisioning verifies against the new certificate.
    daemon.deploy_verified("shop", "<h1>shop v2</h1>").await;
    assert_eq!(served_leaf(https, "shop.apps.test").await.unwrap(), second);
}
