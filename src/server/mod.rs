//! Accept loops: plain HTTP and HTTPS listeners, the connection budget (`budget.rs`: global,
//! per client, a reserve for the control host), handshake/header/idle/write timeouts
//! (`activity.rs`) and graceful drain. Knows nothing about routes: every request goes to
//! [`crate::dispatch::Dispatch::handle`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::dispatch::{Dispatch, Scheme};

mod activity;
mod coalesce;
pub mod listeners;
pub mod threads;

pub use crate::budget::{BudgetLimits, ConnectionBudget};
use activity::{Activity, DeadlineIo, TrackedBody};
use coalesce::Coalesced;

/// Bounds applied to every connection (the connection counts are in `BudgetLimits`).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// TLS handshake, and the wait for the first byte of a plain connection.
    pub handshake_timeout: Duration,
    /// Reading one request's headers, and the idle wait for the next request on keep-alive.
    pub header_timeout: Duration,
    pub max_header_bytes: usize,
    /// No request in flight for this long: the connection is closed (every protocol; HTTP/2
    /// pings do not count as use).
    pub idle_timeout: Duration,
    /// A write that makes no progress for this long fails: the client stopped reading.
    pub write_timeout: Duration,
}

impl ConnectionLimits {
    pub fn from_config(limits: &crate::config::Limits) -> ConnectionLimits {
        ConnectionLimits {
            handshake_timeout: Duration::from_secs(limits.handshake_timeout_s),
            header_timeout: Duration::from_secs(limits.header_timeout_s),
            max_header_bytes: limits.max_header_kb * 1024,
            idle_timeout: Duration::from_secs(limits.idle_timeout_s),
            write_timeout: Duration::from_secs(limits.write_timeout_s),
        }
    }
}

impl BudgetLimits {
    pub fn from_config(limits: &crate::config::Limits) -> BudgetLimits {
        BudgetLimits {
            max_connections: limits.max_connections,
            control_reserved: limits.control_reserved_connections,
            max_per_client: limits.max_connections_per_client,
        }
    }
}

/// Which protocol a listener speaks.
#[derive(Clone)]
pub enum ListenerKind {
    Plain,
    Tls(tokio_rustls::TlsAcceptor),
}

/// Accepts connections until `shutdown`, then waits up to `drain` for open ones to finish.
/// Every connection needs a permit of the shared `budget`; while it has none to give, the loop
/// stops accepting (the kernel's backlog holds new clients).
pub async fn serve(
    listener: TcpListener,
    kind: ListenerKind,
    dispatch: Arc<Dispatch>,
    budget: Arc<ConnectionBudget>,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
    drain: Duration,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let local = listener.local_addr().ok();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = budget.room() => {}
        }
        let (stream, client) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let permit = match budget.admit(client.ip()) {
            Ok(permit) => permit,
            Err(refusal) => {
                tracing::debug!(%client, ?refusal, "connection refused");
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            client,
            dispatch: dispatch.clone(),
            limits,
            control_only: permit.control_only,
        };
        let kind = kind.clone();
        let watcher = graceful.watcher();
        threads::spawn_connection(stream, move |stream| async move {
            let _permit = permit;
            connection.serve(stream, kind, watcher).await;
        });
    }
    drop(listener);
    if graceful.count() > 0 {
        // A connection accepted just before shutdown may not have sent its first request yet
        // (its TLS handshake still running): the graceful shutdown would close it unanswered,
        // and a client of the socket unit would see a reset during `systemctl restart`. Give
        // such connections a moment; a request that started then finishes under the drain.
        tokio::time::sleep(FIRST_REQUEST_GRACE.min(limits.handshake_timeout)).await;
    }
    tracing::debug!(
        ?local,
        connections = graceful.count(),
        "listener closed; draining"
    );
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?local,
            "connections still open after the drain deadline; closing them"
        );
    }
}

/// How long connections accepted before shutdown get to start their first request.
const FIRST_REQUEST_GRACE: Duration = Duration::from_millis(1000);

/// One accepted connection and what serving it needs.
struct Connection {
    client: SocketAddr,
    dispatch: Arc<Dispatch>,
    limits: ConnectionLimits,
    /// Admitted from the control host's reserve: other hosts get 503 on it.
    control_only: bool,
}

impl Connection {
    async fn serve(
        self,
        stream: TcpStream,
        kind: ListenerKind,
        watcher: hyper_util::server::graceful::Watcher,
    ) {
        let stream = DeadlineIo::new(stream, self.limits.write_timeout);
        match kind {
            ListenerKind::Plain => {
                // A client that never sends a byte must not hold a connection forever.
                let first = first_bytes(stream.get_ref(), self.limits.handshake_timeout);
                let Some((first, n)) = first.await else {
                    return;
                };
                // The reserve serves HTTP/1 only, whose Host is checked per request: a
                // prior-knowledge HTTP/2 client could hold it without naming a host.
                let h2 = first[..n].starts_with(b"PRI");
                if self.control_only && h2 {
                    return;
                }
                let builder = auto_builder(&self.limits);
                self.run(builder, stream, Scheme::Http, h2, watcher).await;
            }
            ListenerKind::Tls(acceptor) => {
                let accept = acceptor.accept(stream);
                let tls = match tokio::time::timeout(self.limits.handshake_timeout, accept).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(error)) => {
                        tracing::debug!(client = %self.client, %error, "TLS handshake failed");
                        return;
                    }
                    Err(_) => return,
                };
                let session = tls.get_ref().1;
                let alpn = session.alpn_protocol();
                if alpn == Some(crate::tls::ACME_TLS_ALPN) {
                    // A TLS-ALPN-01 validation probe: the handshake was the whole point.
                    return;
                }
                let control = session
                    .server_name()
                    .is_some_and(|name| self.dispatch.is_control_host(name));
                if self.control_only && !control {
                    return;
                }
                let h2 = alpn == Some(b"h2");
                let mut limits = self.limits;
                if control {
                    // Apps are siblings of the control host and can set cookies for their
                    // parent domain: a cookie bomb must not lock the operator out.
                    limits.max_header_bytes = limits.max_header_bytes.max(CONTROL_MAX_HEADER_BYTES);
                }
                let builder = auto_builder(&limits);
                let builder = if h2 {
                    builder.http2_only()
                } else {
                    builder.http1_only()
                };
                self.run(builder, tls, Scheme::Https, h2, watcher).await;
            }
        }
    }

    /// Serves requests until the client leaves, the connection idles out, or shutdown.
    async fn run<I>(
        self,
        builder: hyper_util::server::conn::auto::Builder<TokioExecutor>,
        io: I,
        scheme: Scheme,
        h2: bool,
        watcher: hyper_util::server::graceful::Watcher,
    ) where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let activity = Activity::new();
        let mut idle_timeout = self.limits.idle_timeout;
        if !h2 {
            // HTTP/1 reads a request's head only while no request is in flight: the header
            // timeout (the wait for the next request and the reading of its head) is this
            // connection's idle bound. One lazily re-armed timer per connection instead of
            // hyper's `header_read_timeout`, which registers a timer for every request.
            idle_timeout = idle_timeout.min(self.limits.header_timeout);
        }
        if self.control_only {
            // Reserve connections give their room back quickly.
            idle_timeout = idle_timeout.min(self.limits.handshake_timeout);
        }
        let Connection {
            client,
            dispatch,
            limits: _,
            control_only,
        } = self;
        let requests = activity.clone();
        let service = service_fn(move |request: http::Request<Incoming>| {
            let dispatch = dispatch.clone();
            let busy = requests.begin();
            async move {
                let response = if control_only && !dispatch.is_control_request(&request) {
                    dispatch.busy_response()
                } else {
                    dispatch.handle(request, client, scheme).await
                };
                Ok::<_, std::convert::Infallible>(response.map(|body| TrackedBody::new(body, busy)))
            }
        });
        // HTTP/2 answers many requests at once: their frames leave together (`coalesce.rs`).
        let io = TokioIo::new(Coalesced::new(io, h2));
        let connection = builder.serve_connection_with_upgrades(io, service);
        tokio::select! {
            biased;
            result = watcher.watch(connection.into_owned()) => {
                if let Err(error) = result {
                    tracing::debug!(%client, %error, "connection ended with an error");
                }
            }
            _ = activity.idle(idle_timeout) => {
                tracing::debug!(%client, "closing an idle connection");
            }
        }
    }
}

/// The first (up to) three bytes a plain client sends, without consuming them; `None` when it
/// sends nothing within `timeout`.
async fn first_bytes(stream: &TcpStream, timeout: Duration) -> Option<([u8; 3], usize)> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut first = [0u8; 3];
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(&mut first))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        if n == first.len() || tokio::time::Instant::now() >= deadline {
            return Some((first, n));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Header bytes the control host accepts over TLS: browsers keep up to 180 cookies of up to
/// 4 KiB per site (Chrome, Firefox), about 737 KB, all of which an app on a sibling host can
/// set. The buffer grows only as bytes arrive; per-client connection caps bound the total.
const CONTROL_MAX_HEADER_BYTES: usize = 1024 * 1024;

/// HTTP/1 and HTTP/2 settings shared by every listener: header limits and timeouts, and the
/// HTTP/2 rapid-reset and window settings.
fn auto_builder(
    limits: &ConnectionLimits,
) -> hyper_util::server::conn::auto::Builder<TokioExecutor> {
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // Enforced by the connection's idle timer instead (`Connection::run`).
        .header_read_timeout(None)
        .max_buf_size(limits.max_header_bytes.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(limits.max_header_bytes as u32)
        .max_concurrent_streams(250)
        .max_pending_accept_reset_streams(50)
        .max_local_error_reset_streams(Some(1024))
        .adaptive_window(true)
        .keep_alive_interval(Some(Duration::from_secs(30)));
    builder
}
