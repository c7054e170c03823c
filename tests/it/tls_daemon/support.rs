//! Support for the daemon-level TLS tests: [`Daemon`] is the shared `TestDaemon` with a chosen
//! `apps_domain`, `[tls]` table and HTTPS port, and deploys static sites checked over TLS;
//! [`ChallengeRelay`] stands between Pebble and the daemon's plain HTTP listener and can refuse
//! HTTP-01 validations for chosen names, which drives the daemon to TLS-ALPN-01.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::support::{targz, DaemonOptions, TestDaemon, TestResponse};

/// The real daemon with its own domains; the `TestDaemon` inside owns the process, the temp
/// dir, the log and the SIGTERM-on-drop.
pub struct Daemon {
    pub inner: TestDaemon,
    pub apps_domain: String,
}

/// A TCP port on loopback that was free a moment ago, and the listener holding it until the
/// caller drops it (bind-to-0-then-release; the daemon then binds it itself).
pub fn reserve_port() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0")
}

impl Daemon {
    /// Starts `slipway serve` with `apps_domain`, control host `slipway.<apps_domain>`, plain
    /// HTTP on port 0, HTTPS on `https_port` (0: any) and `tls_table` as the `[tls]` body.
    pub fn start(apps_domain: &str, https_port: u16, tls_table: &str) -> Daemon {
        let inner = TestDaemon::start_with(DaemonOptions {
            apps_domain: apps_domain.to_owned(),
            https_port,
            tls_table: Some(tls_table.to_owned()),
            ..DaemonOptions::default()
        });
        Daemon {
            inner,
            apps_domain: apps_domain.to_owned(),
        }
    }

    /// SIGTERM, then the same config again.
    pub fn restart(&mut self) {
        self.inner.restart();
    }

    pub fn https(&self) -> SocketAddr {
        self.inner.https.expect("the daemon has an HTTPS listener")
    }

    pub fn host(&self, slug: &str) -> String {
        format!("{slug}.{}", self.apps_domain)
    }

    /// An authenticated API request to the control host over plain HTTP from loopback.
    pub async fn api(&self, method: &str, path: &str, body: Option<Value>) -> TestResponse {
        self.inner.api(method, path, body).await
    }

    /// Uploads `public/index.html` with `page` and provisions it as a static site (no install,
    /// no build); returns the final status of the run, whatever it is.
    pub async fn deploy_page(&self, slug: &str, page: &str) -> Value {
        let archive = targz(&[("public/index.html", page, 0o644)]);
        let upload = self.inner.upload(slug, archive).await;
        assert_eq!(upload.status, 201, "upload: {}", upload.text());
        let body = json!({"projectSlug": slug, "installCommand": "", "buildCommand": ""});
        let path = format!("/api/projects/{slug}/provision");
        let started = self.api("POST", &path, Some(body)).await;
        assert_eq!(started.status, 202, "provision: {}", started.text());
        let provisioning_id = started.json()["provisioningId"]
            .as_str()
            .unwrap()
            .to_owned();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let path = format!("/api/provisioning/{provisioning_id}/status");
            let status = self.api("GET", &path, None).await;
            assert_eq!(status.status, 200, "{}", status.text());
            let status = status.json();
            if status["status"] != "provisioning_in_progress" {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "run {provisioning_id} still in progress: {status}\nlog:\n{}",
                self.inner.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// [`Daemon::deploy_page`] that must end `provisioning_complete` with `ssl_verification`
    /// `succeeded` and the https URL of the app.
    pub async fn deploy_verified(&self, slug: &str, page: &str) -> Value {
        let status = self.deploy_page(slug, page).await;
        assert_eq!(
            status["status"],
            "provisioning_complete",
            "{status}\nlog:\n{}",
            self.inner.log_text()
        );
        assert_eq!(
            step_state(&status, "ssl_verification"),
            "succeeded",
            "{status}"
        );
        assert_eq!(
            status["url"],
            format!("https://{}:{}", self.host(slug), self.https().port())
        );
        status
    }
}

/// The state of one step in a provisioning status.
pub fn step_state<'s>(status: &'s Value, step: &str) -> &'s str {
    status["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["name"] == step))
        .and_then(|s| s["state"].as_str())
        .unwrap_or_else(|| panic!("no step {step} in {status}"))
}

/// Asserts curl got `expected` in the body of `https://<name>:<port>/`, trusting `ca_file`.
pub async fn assert_curl_page(name: &str, addr: SocketAddr, ca_file: &Path, expected: &str) {
    let output = crate::tls::support::curl_https(name, addr, ca_file, &["--fail"]).await;
    assert!(
        output.status.success(),
        "curl https://{name}:{}/ failed: {}",
        addr.port(),
        String::from_utf8_lossy(&output.stderr)
    );
    let body = String::from_utf8_lossy(&output.stdout);
    assert!(body.contains(expected), "curl {name}: {body}");
}

/// curl with arbitrary arguments, bounded by a 10 s `--max-time`.
pub async fn curl(args: &[&str]) -> Output {
    tokio::process::Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "10"])
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .expect("run curl")
}

/// Polls `check` every 100 ms until it is true or `within` has passed; returns the last result.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if check().await {
            return true;
        }
        if started.elapsed() > within {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A plain HTTP relay for Pebble's HTTP-01 validations: forwards each connection to the
/// daemon's HTTP listener, except requests whose Host is refused, which get a 404 here.
/// Records every Host it saw with whether it was forwarded.
pub struct ChallengeRelay {
    pub port: u16,
    target: watch::Sender<Option<SocketAddr>>,
    seen: Arc<Mutex<Vec<(String, bool)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ChallengeRelay {
    pub async fn start(refused: &[&str]) -> ChallengeRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (target, _) = watch::channel(None);
        let seen: Arc<Mutex<Vec<(String, bool)>>> = Default::default();
        let refused: Arc<HashSet<String>> =
            Arc::new(refused.iter().map(|name| name.to_string()).collect());
        let (task_target, task_seen) = (target.clone(), Arc::clone(&seen));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let target = task_target.subscribe();
                let (seen, refused) = (Arc::clone(&task_seen), Arc::clone(&refused));
                tokio::spawn(async move {
                    let exchange = relay_one(stream, target, &refused, &seen);
                    let _ = tokio::time::timeout(Duration::from_secs(30), exchange).await;
                });
            }
        });
        ChallengeRelay {
            port,
            target,
            seen,
            task,
        }
    }

    /// Where forwarded connections go: the daemon's plain HTTP listener, known once it runs
    /// (a validation arriving before that waits for it).
    pub fn forward_to(&self, addr: SocketAddr) {
        self.target.send_replace(Some(addr));
    }

    /// How many requests for `host` were forwarded and how many refused.
    pub fn counts(&self, host: &str) -> (usize, usize) {
        let seen = self.seen.lock().unwrap();
        let of_host = || seen.iter().filter(|(seen, _)| seen == host);
        (
            of_host().filter(|(_, forwarded)| *forwarded).count(),
            of_host().filter(|(_, forwarded)| !*forwarded).count(),
        )
    }
}

impl Drop for ChallengeRelay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay_one(
    mut client: tokio::net::TcpStream,
    mut target: watch::Receiver<Option<SocketAddr>>,
    refused: &HashSet<String>,
    seen: &Mutex<Vec<(String, bool)>>,
) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = client.read(&mut buf).await?;
        if n == 0 || head.len() > 64 * 1024 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let host = text
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("host").then(|| value.trim())
        })
        .unwrap_or("");
    let host = host.split(':').next().unwrap_or("").to_ascii_lowercase();
    let forward = !refused.contains(&host);
    seen.lock().unwrap().push((host, forward));
    if !forward {
        let refusal = "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        return client.write_all(refusal.as_bytes()).await;
    }
    let target = target
        .wait_for(Option::is_some)
        .await
        .map_err(std::io::Error::other)?
        .expect("waited for Some");
    let mut upstream = tokio::net::TcpStream::connect(target).await?;
    upstream.write_all(&head).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}
