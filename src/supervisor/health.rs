//! Is an app healthy: a TCP connect to its port (and a 2xx/3xx answer to its
//! `healthCheckPath`), polled until it comes up, and probed while it runs. Used by the
//! supervisor's app loop.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::AppSpec;
use crate::sandbox::Reachable;

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
/// The first probe waits until the address is `reachable`: one sent before the sandbox's link
/// is up is lost, and TCP tries again only a second later.
pub async fn wait_healthy(
    address: SocketAddr,
    path: Option<&str>,
    slug: &str,
    timeout: Duration,
    reachable: Reachable,
) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    match tokio::time::timeout_at(deadline, reachable.wait()).await {
        Ok(Ok(())) => {}
        // The helper is gone: its exit, which the caller waits for too, says why.
        Ok(Err(_)) => {
            tokio::time::sleep_until(deadline).await;
            return false;
        }
        Err(_) => return false,
    }
    let mut delay = START_POLL_FIRST;
    while tokio::time::Instant::now() < deadline {
        if probe(address, path, slug).await {
            return true;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(START_POLL_MAX);
    }
    false
}

/// A starting app is probed again after this, then at doubling intervals up to
/// [`START_POLL_MAX`]: at most that much is added to its boot time.
const START_POLL_FIRST: Duration = Duration::from_millis(10);
/// A probe of an app that does not listen yet costs a SYN and a reset on its own link (or on
/// loopback), so a starting app can be asked often.
const START_POLL_MAX: Duration = Duration::from_millis(50);

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

/// The answer an app's first start owes [`super::Supervisor::start`]; later starts owe none.
pub(super) struct FirstStart {
    pub(super) answer:
        Option<tokio::sync::oneshot::Sender<Result<Option<SocketAddr>, super::StartFailure>>>,
    pub(super) after_failure: super::FirstFailure,
}

impl FirstStart {
    /// Reports a failed first start; whether the loop ends (it was the first, and the
    /// instance is not to be tried again).
    pub(super) fn fail(&mut self, code: crate::error_code::ErrorCode, message: String) -> bool {
        let Some(first) = self.answer.take() else {
            return false;
        };
        let _ = first.send(Err(super::StartFailure { code, message }));
        self.after_failure == super::FirstFailure::GiveUp
    }

    /// Reports a healthy first start; whether this was the first answer.
    pub(super) fn succeed(&mut self, address: Option<SocketAddr>) -> bool {
        let Some(first) = self.answer.take() else {
            return false;
        };
        let _ = first.send(Ok(address));
        true
    }
}

/// What a start that never became healthy is told, with what to do.
pub(super) fn not_healthy(port: u16, spec: &super::AppSpec, health_timeout: Duration) -> String {
    let what = match &spec.health_check_path {
        Some(path) => format!("accept connections on port {port} and answer {path} with 2xx/3xx"),
        None => format!("accept connections on port {port}"),
    };
    format!(
        "the app did not {what} within {} s; make it listen on the port in $PORT",
        health_timeout.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::LogPipe;
    use std::io::Write;

    /// A "reachable" pipe as the sandbox helper holds it: the test writes its byte.
    fn helper_pipe() -> (Reachable, std::fs::File) {
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let pipe = LogPipe::from_owned_fd(read).unwrap();
        (Reachable::from_helper(pipe), std::fs::File::from(write))
    }

    /// Issue 29 §4: a probe sent before the sandbox's link is up is lost for a second, so
    /// none may leave until the helper says the address is reachable.
    #[tokio::test]
    async fn no_probe_leaves_before_the_address_is_reachable() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (reachable, mut helper) = helper_pipe();
        let waiting = tokio::spawn(wait_healthy(
            address,
            None,
            "app",
            Duration::from_secs(30),
            reachable,
        ));
        let early = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
        assert!(early.is_err(), "a probe left before the link was up");
        helper.write_all(b"r").unwrap();
        let (_probe, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .expect("no probe once the address was reachable")
            .unwrap();
        assert!(waiting.await.unwrap());
    }

    /// A helper that exits before the link is up sends no probe anywhere; the step's exit
    /// tells what happened.
    #[tokio::test]
    async fn a_helper_gone_before_its_link_was_up_gets_no_probe() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (reachable, helper) = helper_pipe();
        drop(helper);
        let healthy = wait_healthy(address, None, "app", Duration::from_millis(300), reachable);
        assert!(!healthy.await);
        let probe = tokio::time::timeout(Duration::from_millis(50), listener.accept()).await;
        assert!(
            probe.is_err(),
            "a probe left for a sandbox whose helper died"
        );
    }
}
