//! Is an app healthy: a TCP connect to its port (and a 2xx/3xx answer to its
//! `healthCheckPath`), polled until it comes up, and probed while it runs. Used by the
//! supervisor's app loop.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::AppSpec;

/// Failed probes in a row after which a live app counts as hung (or cut off) and restarts.
pub(super) const UNRESPONSIVE_PROBES: u32 = 3;

/// Probes a live app every `interval`; returns once [`UNRESPONSIVE_PROBES`] in a row failed.
pub(super) async fn unresponsive(address: SocketAddr, spec: &AppSpec, interval: Duration) {
    let mut misses = 0;
    loop {
        tokio::time::sleep(interval).await;
        if probe(address, spec.health_check_path.as_deref(), &spec.slug).await {
            misses = 0;
        } else {
            misses += 1;
            if misses >= UNRESPONSIVE_PROBES {
                return;
            }
        }
    }
}

/// Polls until `address` accepts a connection (and answers `path` with 2xx/3xx) or `timeout`.
pub async fn wait_healthy(
    address: SocketAddr,
    path: Option<&str>,
    slug: &str,
    timeout: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = Duration::from_millis(20);
    while tokio::time::Instant::now() < deadline {
        if probe(address, path, slug).await {
            return true;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(250));
    }
    false
}

async fn probe(address: SocketAddr, path: Option<&str>, slug: &str) -> bool {
    let connect = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(address),
    )
    .await;
    let Ok(Ok(mut stream)) = connect else {
        return false;
    };
    let Some(path) = path else { return true };
    let request = format!("GET {path} HTTP/1.1\r\nHost: {slug}\r\nUser-Agent: slipway-health\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    match tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut head)).await {
        Ok(Ok(_)) => {
            let status = std::str::from_utf8(&head[9..12])
                .ok()
                .and_then(|s| s.parse::<u16>().ok())
                .unwrap_or(0);
            (200..400).contains(&status)
        }
        _ => false,
    }
}
