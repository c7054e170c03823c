//! Forwarding visitors' requests to a server-mode app: one pooled HTTP/1.1 client per daemon,
//! streamed bodies, `X-Forwarded-*`, WebSocket pass-through, and the error pages visitors see
//! when the app cannot answer. The router calls [`Proxy::forward`] for every request whose
//! host resolves to a live server-mode deployment.
//!
//! Architecture invariants:
//! - Upstream connections are always HTTP/1.1 in origin form, whatever the visitor spoke.
//! - `X-Forwarded-For` / `X-Real-IP` carry the peer address of the visitor's connection and
//!   nothing the visitor sent; `Forwarded` from the visitor is dropped.
//! - Every failure to get a response from the app becomes a 502 page here; the router never
//!   sees an upstream error.
//! - WebSocket tunnels are tracked by [`Proxy::tunnels`] and end on [`Proxy::close_tunnels`].

mod headers;
mod metered;

pub use headers::Forwarded;
#[cfg(test)]
pub(crate) mod test_harness;
#[cfg(test)]
mod tests;
mod upgrade;

use std::error::Error as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Response, Uri, Version};
use hyper::body::{Body as _, Incoming};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::http_util::{empty, from_incoming, Body};
use crate::metrics::ProjectMetrics;
use crate::pages::VisitorPage;
use http_body_util::BodyExt as _;

/// Timeouts and pool bounds of the upstream client.
#[derive(Clone, Debug)]
pub struct ProxySettings {
    /// TCP connect to the app.
    pub connect_timeout: Duration,
    /// From sending the request to receiving the response head.
    pub response_timeout: Duration,
    /// Idle pooled connections are closed after this; keep it below the apps' own keep-alive
    /// timeout (Node closes idle sockets after 5 s) so the pool rarely holds a dead one.
    pub pool_idle_timeout: Duration,
    /// Idle connections kept per app.
    pub max_idle_per_app: usize,
    /// Open WebSocket tunnels, in all and per client (IPv4 address or IPv6 /64); each holds
    /// two sockets, so these bound the daemon's file descriptors.
    pub max_tunnels: usize,
    pub max_tunnels_per_client: u32,
    /// A tunnel with no byte either way for this long is closed.
    pub tunnel_idle_timeout: Duration,
}

impl ProxySettings {
    /// The settings [`Proxy::new`] uses.
    pub const STANDARD: ProxySettings = ProxySettings {
        connect_timeout: Duration::from_secs(3),
        response_timeout: Duration::from_secs(60),
        pool_idle_timeout: Duration::from_secs(4),
        max_idle_per_app: 256,
        max_tunnels: 4096,
        max_tunnels_per_client: 64,
        tunnel_idle_timeout: Duration::from_secs(300),
    };
}

/// The daemon's one reverse proxy to apps. Cheap to share behind an `Arc`.
pub struct Proxy {
    client: Client<HttpConnector, Body>,
    settings: ProxySettings,
    tunnels: TaskTracker,
    /// A permit per open tunnel.
    tunnel_budget: std::sync::Arc<crate::budget::ConnectionBudget>,
    close_tunnels: CancellationToken,
}

impl Default for Proxy {
    fn default() -> Proxy {
        Proxy::new()
    }
}

impl Proxy {
    /// A proxy with [`ProxySettings::STANDARD`].
    pub fn new() -> Proxy {
        Proxy::with_settings(ProxySettings::STANDARD)
    }

    pub fn with_settings(settings: ProxySettings) -> Proxy {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(settings.connect_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(settings.pool_idle_timeout)
            .pool_max_idle_per_host(settings.max_idle_per_app)
            .pool_timer(TokioTimer::new())
            .build(connector);
        let tunnel_budget = crate::budget::ConnectionBudget::new(crate::budget::BudgetLimits {
            max_connections: settings.max_tunnels,
            control_reserved: 0,
            max_per_client: settings.max_tunnels_per_client,
        });
        Proxy {
            client,
            settings,
            tunnels: TaskTracker::new(),
            tunnel_budget,
            close_tunnels: CancellationToken::new(),
        }
    }

    /// Forwards one visitor request to the app at `upstream` and returns the app's response
    /// (streamed), or a 502 page when the app cannot be reached or does not answer in time.
    /// `forwarded` says who asked, over which scheme, for which host (what the app sees in
    /// `X-Forwarded-*` and `Host`). A WebSocket upgrade needs the visitor's HTTP/1 connection
    /// to be served `with_upgrades()`.
    pub async fn forward(
        &self,
        request: Request<Incoming>,
        upstream: SocketAddr,
        forwarded: &Forwarded,
    ) -> Response<Body> {
        self.forward_metered(request, upstream, forwarded, None)
            .await
    }

    /// [`Proxy::forward`] that also counts, in `metrics`, the response body bytes sent to the
    /// visitor and the requests the app did not answer.
    pub async fn forward_metered(
        &self,
        request: Request<Incoming>,
        upstream: SocketAddr,
        forwarded: &Forwarded,
        metrics: Option<&Arc<ProjectMetrics>>,
    ) -> Response<Body> {
        let (parts, body) = request.into_parts();
        if parts.method == Method::CONNECT {
            return VisitorPage::ConnectNotAllowed.response();
        }
        let websocket =
            parts.version == Version::HTTP_11 && headers::is_websocket_upgrade(&parts.headers);
        let upstream_headers = headers::to_upstream(parts.headers, forwarded, websocket);
        let uri = match upstream_uri(upstream, parts.uri.path_and_query()) {
            Ok(uri) => uri,
            Err(error) => {
                tracing::warn!(%upstream, %error, "proxy: cannot build the upstream URI");
                return VisitorPage::BadRequest.response();
            }
        };
        let mut head = Request::new(empty());
        *head.method_mut() = parts.method;
        *head.uri_mut() = uri;
        *head.version_mut() = Version::HTTP_11;
        *head.headers_mut() = upstream_headers;

        if websocket {
            let mut extensions = parts.extensions;
            let visitor = upgrade::Visitor {
                client: forwarded.client,
                connection: extensions.remove::<hyper::upgrade::OnUpgrade>(),
            };
            return upgrade::forward(self, head, visitor, upstream).await;
        }

        // A request without body to an idempotent method can be sent again when the pooled
        // connection it went out on turns out to have been closed by the app.
        let replayable = body.is_end_stream() && head.method().is_idempotent();
        let replay = replayable.then(|| clone_head(&head));
        if !body.is_end_stream() {
            *head.body_mut() = from_incoming(body);
        }
        let first = self.send(head).await;
        let response = match (first, replay) {
            (Err(SendError::Closed(error)), Some(again)) => {
                tracing::debug!(%upstream, %error, "proxy: pooled connection was closed, retrying once");
                self.send(again).await
            }
            (result, _) => result,
        };
        match response {
            Ok(response) => from_upstream(response, metrics),
            Err(error) => {
                if let Some(metrics) = metrics {
                    metrics.upstream_error();
                }
                bad_gateway(upstream, &error)
            }
        }
    }

    /// The WebSocket tunnels in flight; wait on it (after [`Proxy::close_tunnels`]) at shutdown.
    pub fn tunnels(&self) -> &TaskTracker {
        &self.tunnels
    }

    /// Ends every WebSocket tunnel; new ones are refused with 503 from then on.
    pub fn close_tunnels(&self) {
        self.tunnels.close();
        self.close_tunnels.cancel();
    }

    async fn send(&self, request: Request<Body>) -> Result<Response<Incoming>, SendError> {
        match tokio::time::timeout(self.settings.response_timeout, self.client.request(request))
            .await
        {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) if closed_before_response(&error) => Err(SendError::Closed(error)),
            Ok(Err(error)) => Err(SendError::Failed(error)),
            Err(_elapsed) => Err(SendError::TimedOut(self.settings.response_timeout)),
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error("the app closed the connection before answering: {0}")]
    Closed(#[source] hyper_util::client::legacy::Error),
    #[error("cannot reach the app: {0}")]
    Failed(#[source] hyper_util::client::legacy::Error),
    #[error("the app did not answer within {0:?}")]
    TimedOut(Duration),
}

/// `http://<upstream><path?query>`; the client turns it into origin form on the wire.
fn upstream_uri(
    upstream: SocketAddr,
    path_and_query: Option<&PathAndQuery>,
) -> Result<Uri, http::Error> {
    let authority = Authority::try_from(upstream.to_string())?;
    let path_and_query = path_and_query
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    Uri::builder()
        .scheme(Scheme::HTTP)
        .authority(authority)
        .path_and_query(path_and_query)
        .build()
}

fn clone_head(head: &Request<Body>) -> Request<Body> {
    let mut copy = Request::new(empty());
    *copy.method_mut() = head.method().clone();
    *copy.uri_mut() = head.uri().clone();
    *copy.version_mut() = head.version();
    *copy.headers_mut() = head.headers().clone();
    copy
}

/// "connection closed before message completed": the app (or the kernel) closed a pooled
/// connection just as the request went out on it.
fn closed_before_response(error: &hyper_util::client::legacy::Error) -> bool {
    let mut source = error.source();
    while let Some(cause) = source {
        if let Some(hyper_error) = cause.downcast_ref::<hyper::Error>() {
            return hyper_error.is_incomplete_message();
        }
        source = cause.source();
    }
    false
}

fn from_upstream(
    response: Response<Incoming>,
    metrics: Option<&Arc<ProjectMetrics>>,
) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    headers::from_upstream(&mut parts.headers, false);
    // The visitor's connection has its own version; an HTTP/1.0 app must not downgrade it.
    parts.version = Version::HTTP_11;
    let body = match metrics {
        Some(metrics) => metered::Counted::new(body, metrics.clone()).boxed(),
        None => from_incoming(body),
    };
    Response::from_parts(parts, body)
}

fn bad_gateway(upstream: SocketAddr, error: &SendError) -> Response<Body> {
    tracing::warn!(%upstream, %error, "proxy: app did not answer");
    match error {
        SendError::TimedOut(_) => VisitorPage::AppTooSlow.response(),
        SendError::Closed(_) | SendError::Failed(_) => VisitorPage::AppNotAnswering.response(),
    }
}
