//! Accept loops: plain HTTP and HTTPS listeners, connection limits, handshake/header/idle
//! timeouts and graceful drain. Knows nothing about routes: every request goes to
//! [`crate::dispatch::Dispatch::handle`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::dispatch::{Dispatch, Scheme};

/// Bounds applied to every connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    /// TLS handshake, and the wait for the first byte of a plain connection.
    pub handshake_timeout: Duration,
    /// Reading one request's headers, and the idle wait for the next request on keep-alive.
    pub header_timeout: Duration,
    pub max_header_bytes: usize,
}

impl ConnectionLimits {
    pub fn from_config(limits: &crate::config::Limits) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: limits.max_connections,
            handshake_timeout: Duration::from_secs(limits.handshake_timeout_s),
            header_timeout: Duration::from_secs(limits.header_timeout_s),
            max_header_bytes: limits.max_header_kb * 1024,
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
pub async fn serve(
    listener: TcpListener,
    kind: ListenerKind,
    dispatch: Arc<Dispatch>,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
    drain: Duration,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let local = listener.local_addr().ok();
    loop {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = permits.clone().acquire_owned() => permit.expect("semaphore never closes"),
        };
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
        let _ = stream.set_nodelay(true);
        let dispatch = dispatch.clone();
        let kind = kind.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            serve_connection(stream, client, kind, dispatch, limits, watcher).await;
        });
    }
    drop(listener);
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

async fn serve_connection(
    stream: TcpStream,
    client: SocketAddr,
    kind: ListenerKind,
    dispatch: Arc<Dispatch>,
    limits: ConnectionLimits,
    watcher: hyper_util::server::graceful::Watcher,
) {
    match kind {
        ListenerKind::Plain => {
            // A client that never sends a byte must not hold a connection forever.
            let mut first = [0u8; 1];
            match tokio::time::timeout(limits.handshake_timeout, stream.peek(&mut first)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
            let service = service_fn(move |request: http::Request<Incoming>| {
                let dispatch = dispatch.clone();
                async move {
                    Ok::<_, std::convert::Infallible>(
                        dispatch.handle(request, client, Scheme::Http).await,
                    )
                }
            });
            let builder = auto_builder(&limits);
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            if let Err(error) = watcher.watch(connection.into_owned()).await {
                tracing::debug!(%client, %error, "connection ended with an error");
            }
        }
        ListenerKind::Tls(acceptor) => {
            let tls = match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream))
                .await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => {
                    tracing::debug!(%client, %error, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let alpn = tls.get_ref().1.alpn_protocol();
            if alpn == Some(crate::tls::ACME_TLS_ALPN) {
                // A TLS-ALPN-01 validation probe: the handshake was the whole point.
                return;
            }
            let h2 = alpn == Some(b"h2");
            let service = service_fn(move |request: http::Request<Incoming>| {
                let dispatch = dispatch.clone();
                async move {
                    Ok::<_, std::convert::Infallible>(
                        dispatch.handle(request, client, Scheme::Https).await,
                    )
                }
            });
            let builder = auto_builder(&limits);
            let builder = if h2 {
                builder.http2_only()
            } else {
                builder.http1_only()
            };
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            let result = watcher.watch(connection.into_owned()).await;
            if let Err(error) = result {
                tracing::debug!(%client, %error, "TLS connection ended with an error");
            }
        }
    }
}

/// HTTP/1 and HTTP/2 settings shared by every listener: header limits and timeouts, and the
/// HTTP/2 rapid-reset and window settings.
fn auto_builder(
    limits: &ConnectionLimits,
) -> hyper_util::server::conn::auto::Builder<TokioExecutor> {
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
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
