//! A Pebble ACME CA for tests, on loopback: `pebble-challtestsrv` as its DNS (every name is
//! 127.0.0.1), Pebble itself with a TLS certificate made here, validation ports pointed at the
//! test's own listeners, and no artificial validation sleeps. Both processes die with the
//! fixture. `start` returns a reason to skip when the Debian package `pebble` is missing.

use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::files::TestCa;
use crate::support::TlsSetup;

pub struct Pebble {
    pub directory: String,
    /// Pebble's API CA and its issuing root: what `tls.acme_ca_file` points at.
    pub acme_ca_file: PathBuf,
    /// Pebble's issuing root only: what a client of the apps trusts.
    pub root_file: PathBuf,
    /// pebble-challtestsrv's management API (its DNS answers).
    dns_management_port: u16,
    _children: Vec<tokio::process::Child>,
    _dir: tempfile::TempDir,
}

fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// `N` distinct ports free for both TCP and UDP on 127.0.0.1 (DNS uses both). Each is held
/// until all are chosen: ports picked one by one and released can repeat.
fn free_ports<const N: usize>() -> [u16; N] {
    let mut held = Vec::with_capacity(N);
    for _ in 0..N * 50 {
        if held.len() == N {
            break;
        }
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = tcp.local_addr().unwrap().port();
        if let Ok(udp) = UdpSocket::bind(("127.0.0.1", port)) {
            held.push((port, tcp, udp));
        }
    }
    assert_eq!(held.len(), N, "no {N} free ports for TCP and UDP");
    std::array::from_fn(|i| held[i].0)
}

fn wait_for_port(port: u16, within: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < within {
        if TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_millis(200),
        )
        .is_ok()
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

impl Pebble {
    /// The `[tls]` setup of a daemon that gets its certificates from this Pebble as `email`.
    pub fn tls_setup(&self, email: &str) -> TlsSetup {
        TlsSetup::Acme {
            directory: self.directory.clone(),
            email: email.to_owned(),
            ca_file: self.acme_ca_file.clone(),
        }
    }

    /// Makes Pebble's DNS answer `address` for `name` (instead of 127.0.0.1): a name that
    /// does not point at the daemon.
    pub async fn point(&self, name: &str, address: &str) {
        let body = serde_json::json!({"host": format!("{name}."), "addresses": [address]});
        let output = tokio::process::Command::new("curl")
            .args([
                "--silent",
                "--show-error",
                "--fail",
                "--max-time",
                "10",
                "--data",
            ])
            .arg(body.to_string())
            .arg(format!(
                "http://127.0.0.1:{}/add-a",
                self.dns_management_port
            ))
            .output()
            .await
            .unwrap();
        assert!(
            output.status.success(),
            "challtestsrv add-a: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Pebble's own log so far (e.g. its `Issued certificate serial …` lines).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("pebble.log")).unwrap_or_default()
    }

    pub async fn start(http_port: u16, tls_port: u16) -> Result<Pebble, String> {
        let pebble =
            find_binary("pebble").ok_or("pebble is not installed (Debian package `pebble`)")?;
        let challtestsrv = find_binary("pebble-challtestsrv")
            .ok_or("pebble-challtestsrv is not installed (Debian package `pebble`)")?;
        find_binary("curl").ok_or("curl is not installed")?;
        let dir = tempfile::tempdir().unwrap();
        let log = |name: &str| Stdio::from(std::fs::File::create(dir.path().join(name)).unwrap());

        let api_ca = TestCa::new("Pebble API test CA");
        let (api_cert, api_key) = api_ca.leaf(&["127.0.0.1", "localhost"]);
        let (cert_path, key_path, api_ca_path) = (
            dir.path().join("api.pem"),
            dir.path().join("api.key"),
            dir.path().join("api-ca.pem"),
        );
        std::fs::write(&cert_path, api_cert).unwrap();
        std::fs::write(&key_path, api_key).unwrap();
        std::fs::write(&api_ca_path, &api_ca.cert_pem).unwrap();

        let [dns_port, dns_management_port, acme_port, management_port] = free_ports();
        let dns = tokio::process::Command::new(challtestsrv)
            .args([
                "-http01",
                "",
                "-https01",
                "",
                "-tlsalpn01",
                "",
                "-defaultIPv6",
                "",
            ])
            .args([
                "-defaultIPv4",
                "127.0.0.1",
                "-dns01",
                &format!("127.0.0.1:{dns_port}"),
            ])
            .args(["-management", &format!("127.0.0.1:{dns_management_port}")])
            .stdout(log("challtestsrv.log"))
            .stderr(log("challtestsrv.err"))
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("cannot start pebble-challtestsrv: {error}"))?;

        let config = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{acme_port}"),
            "managementListenAddress": format!("127.0.0.1:{management_port}"),
            "certificate": cert_path,
            "privateKey": key_path,
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        let config_path = dir.path().join("pebble.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let ca = tokio::process::Command::new(pebble)
            .arg("-config")
            .arg(&config_path)
            .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdout(log("pebble.log"))
            .stderr(log("pebble.err"))
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("cannot start pebble: {error}"))?;
        let children = vec![dns, ca];
        let ready = tokio::task::spawn_blocking(move || {
            wait_for_port(dns_management_port, Duration::from_secs(10))
                && wait_for_port(acme_port, Duration::from_secs(10))
                && wait_for_port(management_port, Duration::from_secs(10))
        });
        if !ready.await.unwrap() {
            let log = std::fs::read_to_string(dir.path().join("pebble.log")).unwrap_or_default();
            panic!("pebble did not start within 10 s: {log}");
        }

        let root = tokio::process::Command::new("curl")
            .args([
                "--silent",
                "--show-error",
                "--fail",
                "--max-time",
                "10",
                "--cacert",
            ])
            .arg(&api_ca_path)
            .arg(format!("https://127.0.0.1:{management_port}/roots/0"))
            .output()
            .await
            .unwrap();
        assert!(
            root.status.success(),
            "cannot fetch Pebble's root: {}",
            String::from_utf8_lossy(&root.stderr)
        );
        let root_pem = String::from_utf8(root.stdout).unwrap();
        let root_file = dir.path().join("pebble-root.pem");
        std::fs::write(&root_file, &root_pem).unwrap();
        let acme_ca_file = dir.path().join("acme-ca.pem");
        std::fs::write(&acme_ca_file, format!("{}{}", api_ca.cert_pem, root_pem)).unwrap();

        Ok(Pebble {
            directory: format!("https://127.0.0.1:{acme_port}/dir"),
            acme_ca_file,
            root_file,
            dns_management_port,
            _children: children,
            _dir: dir,
        })
    }
}
