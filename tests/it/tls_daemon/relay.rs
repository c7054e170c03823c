//! [`ChallengeRelay`] stands between Pebble and the daemon's plain HTTP listener and can refuse
//! HTTP-01 validations for chosen names, which drives the daemon to TLS-ALPN-01. Used by
//! `tls_daemon::acme`.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

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

/// Pebble with its challenge relay, and the HTTPS port the daemon will bind reserved before
/// Pebble starts (TLS-ALPN-01 is validated there): what every ACME test through the daemon
/// sets up. `*.apps.test` apps, `ops@apps.test` as the account.
pub struct AcmeSetup {
    pub relay: ChallengeRelay,
    pub pebble: crate::tls::pebble::Pebble,
    pub https_port: u16,
    reservation: Option<std::net::TcpListener>,
}

impl AcmeSetup {
    /// `None`, with a printed SKIP, where Pebble cannot run. `refused`: names the relay
    /// refuses HTTP-01 for.
    pub async fn start(refused: &[&str]) -> Option<AcmeSetup> {
        let reservation = crate::support::reserve_port();
        let https_port = reservation.local_addr().unwrap().port();
        let relay = ChallengeRelay::start(refused).await;
        match crate::tls::pebble::Pebble::start(relay.port, https_port).await {
            Ok(pebble) => Some(AcmeSetup {
                relay,
                pebble,
                https_port,
                reservation: Some(reservation),
            }),
            Err(reason) => {
                eprintln!("SKIP: {reason}");
                None
            }
        }
    }

    /// The daemon's options for ACME against this Pebble on the reserved port; the
    /// reservation is let go, for the daemon started next to bind it.
    pub fn daemon_options(&mut self) -> crate::support::DaemonOptions {
        self.reservation.take();
        crate::support::DaemonOptions::default()
            .apps_domain("apps.test")
            .https_port(self.https_port)
            .tls(self.pebble.tls_setup("ops@apps.test"))
    }
}
