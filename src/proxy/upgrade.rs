//! WebSocket pass-through: forwards the upgrade handshake to the app and, when the app
//! switches protocols, splices the visitor's upgraded connection to the app's with
//! `copy_bidirectional` in a tracked task. Every tunnel holds a permit of the proxy's tunnel
//! budget (in all and per client) and ends after `tunnel_idle_timeout` without a byte either
//! way; it counts in its instance's load while open. The handshake goes to the next instance
//! when one refuses the connection. Called by [`Proxy::forward`](super::Proxy::forward).

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::upstream::{Conn, Pool};
use super::{bad_gateway, headers, Forwarded, Proxy};
use crate::http_util::{empty, Body};
use crate::pages::VisitorPage;
use crate::upstreams::{Choice, Upstreams};

/// The visitor asking for a tunnel.
pub(super) struct Visitor {
    pub client: IpAddr,
    /// The visitor's connection once upgraded (`None`: served without upgrades).
    pub connection: Option<OnUpgrade>,
}

/// Sends the upgrade request `head` (body-less) to the first instance of `choice` that
/// accepts a connection, and sets up the tunnel on a 101.
pub(super) async fn forward(
    proxy: &Proxy,
    head: Request<Body>,
    visitor: Visitor,
    upstreams: &Upstreams,
    choice: Choice,
    forwarded: &Forwarded,
) -> Response<Body> {
    let Some(connection) = visitor.connection else {
        tracing::warn!("proxy: WebSocket request on a connection served without upgrades");
        return VisitorPage::UpgradeUnavailable.response();
    };
    if proxy.close_tunnels.is_cancelled() {
        return VisitorPage::ShuttingDown.response();
    }
    let permit = match proxy.tunnel_budget.admit(visitor.client) {
        Ok(permit) => permit,
        Err(refusal) => {
            tracing::debug!(client = %visitor.client, ?refusal, "proxy: WebSocket tunnel refused");
            return VisitorPage::Busy.response();
        }
    };
    let Some((served, conn, upstream)) = connect(proxy, upstreams, choice).await else {
        return VisitorPage::AppNotAnswering.response();
    };
    let in_flight = upstreams.enter(served);
    let sent = Pool::send_upgrade(conn, upstream, head, proxy.settings.response_timeout).await;
    let mut response = match sent {
        Ok(response) => response,
        Err(error) => return bad_gateway(upstream, &error),
    };
    let secure = forwarded.proto == "https";
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        let mut response = super::from_upstream(response.map(crate::http_util::from_incoming));
        upstreams.set_affinity_cookie(choice, served, secure, response.headers_mut());
        return response;
    }

    let app = hyper::upgrade::on(&mut response);
    let cancelled = proxy.close_tunnels.clone();
    let idle_timeout = proxy.settings.tunnel_idle_timeout;
    proxy.tunnels.spawn(async move {
        let _permit = permit;
        let _in_flight = in_flight;
        let activity = Arc::new(LastByte::new());
        let tunnel = async {
            let (visitor, app) = tokio::try_join!(connection, app)?;
            let mut visitor = Watched::new(TokioIo::new(visitor), activity.clone());
            let mut app = Watched::new(TokioIo::new(app), activity.clone());
            let (sent, received) = tokio::io::copy_bidirectional(&mut visitor, &mut app).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((sent, received))
        };
        tokio::select! {
            result = tunnel => match result {
                Ok((sent, received)) => tracing::debug!(%upstream, sent, received, "proxy: WebSocket closed"),
                Err(error) => tracing::debug!(%upstream, %error, "proxy: WebSocket ended with an error"),
            },
            () = activity.idle(idle_timeout) => tracing::debug!(%upstream, "proxy: idle WebSocket closed"),
            () = cancelled.cancelled() => tracing::debug!(%upstream, "proxy: WebSocket closed for shutdown"),
        }
    });

    let (mut parts, _body) = response.into_parts();
    headers::from_upstream(&mut parts.headers, true);
    upstreams.set_affinity_cookie(choice, served, secure, &mut parts.headers);
    Response::from_parts(parts, empty())
}

/// A new connection to the first instance of `choice` that accepts one, trying each once;
/// with its index and address.
async fn connect(
    proxy: &Proxy,
    upstreams: &Upstreams,
    choice: Choice,
) -> Option<(usize, Conn, SocketAddr)> {
    let pool = proxy.pool();
    for (index, instance, address) in upstreams.attempts(choice.first) {
        match pool.connect(address).await {
            Ok(conn) => return Some((index, conn, address)),
            Err(error) => {
                tracing::warn!(%address, instance = instance.name(), %error, "proxy: WebSocket handshake could not reach the instance");
            }
        }
    }
    None
}

/// When a tunnel last moved a byte, either way.
struct LastByte {
    started: Instant,
    /// Milliseconds after `started`.
    at_ms: AtomicU64,
}

impl LastByte {
    fn new() -> LastByte {
        LastByte {
            started: Instant::now(),
            at_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        self.at_ms.store(now, Ordering::Relaxed);
    }

    /// Resolves once no byte moved for `timeout`.
    async fn idle(&self, timeout: Duration) {
        loop {
            let last = Duration::from_millis(self.at_ms.load(Ordering::Relaxed));
            let deadline = self.started + last + timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// One side of a tunnel, noting every byte it moves in the tunnel's `LastByte`.
struct Watched<T> {
    inner: T,
    activity: Arc<LastByte>,
}

impl<T> Watched<T> {
    fn new(inner: T, activity: Arc<LastByte>) -> Watched<T> {
        Watched { inner, activity }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        poll
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = &poll {
            if *n > 0 {
                self.activity.touch();
            }
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
