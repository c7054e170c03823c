//! Forwarding visitors' requests to a server-mode app: pooled HTTP/1.1 connections driven on
//! the visitor's task (`upstream.rs`), streamed bodies, `X-Forwarded-*`, WebSocket pass-through, and the error pages visitors see
//! when the app cannot answer. The router calls [`Proxy::forward`] for every request whose
//! host resolves to a live server-mode deployment, with the deployment's instances
//! ([`Upstreams`]): each request goes to the instance they choose, counted in its load until
//! the response body ends, and to the next one when that one refuses the connection.
//!
//! Architecture invariants:
//! - Upstream connections are always HTTP/1.1 in origin form, whatever the visitor spoke.
//! - `X-Forwarded-For` / `X-Real-IP` carry the peer address of the visitor's connection and
//!   nothing the visitor sent; `Forwarded` from the visitor is dropped.
//! - Every failure to get a response from the app becomes a 502 page here; the router never
//!   sees an upstream error.
//! - WebSocket tunnels are tracked by [`Proxy::tunnels`] and end on [`Proxy::close_tunnels`].
//! - A request goes to another instance only when the one tried got none of it: no
//!   connection could be made, or the connection ended before the request went out — or,
//!   for a body-less idempotent request (GET, HEAD, …), when the connection ended before any
//!   answer (the instance was killed mid-request; RFC 9110 §9.2.2 lets a proxy retry those).
//!   Each instance is tried at most once; a request with a body that was (partly) sent is
//!   never sent again, and no request is retried after a response timeout.

mod headers;

pub use headers::Forwarded;
#[cfg(test)]
mod instance_tests;
#[cfg(test)]
mod pool_tests;
#[cfg(test)]
pub(crate) mod test_harness;
#[cfg(test)]
mod tests;
mod upgrade;
mod upstream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::uri::PathAndQuery;
use http::{Method, Request, Response, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::{Body as _, Incoming};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::http_util::{empty, from_incoming, Body};
use crate::metrics::ProjectMetrics;
use crate::pages::VisitorPage;
use crate::upstreams::Upstreams;
use upstream::{Failure, Pool, SendError, UpstreamBody};

thread_local! {
    /// Whether this thread keeps its own pools ([`pools_per_thread`]).
    static OWN_POOLS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// This thread's own pools, one per `Proxy` (by [`Proxy::id`]).
    static POOLS: std::cell::RefCell<Vec<(u64, Arc<Pool>)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Makes every proxy keep this thread's app connections in pools of its own: called once by
/// each router thread before its runtime starts (`server::threads`), so that a connection is
/// used only on the runtime that opened it.
pub fn pools_per_thread() {
    OWN_POOLS.set(true);
}

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
    /// Idle connections kept per app, by each pool (one per router thread). Above the
    /// number of requests in flight at peaks, or connections are closed and opened again as
    /// the load moves (HTTP/2 visitors keep hundreds of requests in flight); idle ones close
    /// after `pool_idle_timeout` anyway.
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
        max_idle_per_app: 1024,
        max_tunnels: 4096,
        max_tunnels_per_client: 64,
        tunnel_idle_timeout: Duration::from_secs(300),
    };
}

/// The daemon's one reverse proxy to apps. Cheap to share behind an `Arc`.
pub struct Proxy {
    /// Connections made on the main runtime; each router thread keeps its own ([`Proxy::pool`]).
    pool: Arc<Pool>,
    /// Tells this proxy's pools apart in the router threads' maps.
    id: u64,
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
        let pool = new_pool(&settings);
        let tunnel_budget = crate::budget::ConnectionBudget::new(crate::budget::BudgetLimits {
            max_connections: settings.max_tunnels,
            control_reserved: 0,
            max_per_client: settings.max_tunnels_per_client,
        });
        static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Proxy {
            pool,
            id: IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            settings,
            tunnels: TaskTracker::new(),
            tunnel_budget,
            close_tunnels: CancellationToken::new(),
        }
    }

    /// Forwards one visitor request to one of the app's instances (`upstreams` choose) and
    /// returns its response (streamed), or a 502 page when no instance can be reached or the
    /// one that got the request does not answer in time. `forwarded` says who asked, over
    /// which scheme, for which host (what the app sees in `X-Forwarded-*` and `Host`). A
    /// WebSocket upgrade needs the visitor's HTTP/1 connection to be served `with_upgrades()`.
    pub async fn forward(
        &self,
        request: Request<Incoming>,
        upstreams: &Upstreams,
        forwarded: &Forwarded,
    ) -> Response<Body> {
        self.forward_metered(request, upstreams, forwarded, None)
            .await
    }

    /// [`Proxy::forward`] that also counts, in `metrics`, the response body bytes sent to the
    /// visitor and the requests the app did not answer.
    pub async fn forward_metered(
        &self,
        request: Request<Incoming>,
        upstreams: &Upstreams,
        forwarded: &Forwarded,
        metrics: Option<&Arc<ProjectMetrics>>,
    ) -> Response<Body> {
        let (parts, body) = request.into_parts();
        if parts.method == Method::CONNECT {
            return VisitorPage::ConnectNotAllowed.response();
        }
        let Some(choice) = upstreams.choose(&parts.headers) else {
            return VisitorPage::AppRestarting.response();
        };
        let websocket =
            parts.version == Version::HTTP_11 && headers::is_websocket_upgrade(&parts.headers);
        let upstream_headers = headers::to_upstream(parts.headers, forwarded, websocket);
        let mut head = Request::new(empty());
        *head.method_mut() = parts.method;
        *head.uri_mut() = origin_form(parts.uri);
        *head.version_mut() = Version::HTTP_11;
        *head.headers_mut() = upstream_headers;

        if websocket {
            let mut extensions = parts.extensions;
            let visitor = upgrade::Visitor {
                client: forwarded.client,
                connection: extensions.remove::<hyper::upgrade::OnUpgrade>(),
            };
            return upgrade::forward(self, head, visitor, upstreams, choice, forwarded).await;
        }

        // A request without body to an idempotent method can be sent again when the pooled
        // connection it went out on turns out to have been closed by the app.
        let replayable = body.is_end_stream() && head.method().is_idempotent();
        if !body.is_end_stream() {
            *head.body_mut() = match metrics {
                None => from_incoming(body),
                Some(metrics) => counted(body, metrics.clone()),
            };
        }
        let mut request = head;
        let mut failed = None;
        for (index, instance, address) in upstreams.attempts(choice.first) {
            let in_flight = upstreams.enter(index);
            let replay = replayable.then(|| clone_head(&request));
            match self.send(request, address, replayable, metrics).await {
                Ok(mut response) => {
                    response.body_mut().hold(in_flight);
                    let mut response = from_upstream(response.map(BodyExt::boxed));
                    let secure = forwarded.proto == "https";
                    upstreams.set_affinity_cookie(choice, index, secure, response.headers_mut());
                    return response;
                }
                Err(Failure {
                    error,
                    unsent: Some(unsent),
                }) => {
                    tracing::debug!(%address, instance = instance.name(), %error, "proxy: instance not reached, trying the next one");
                    request = unsent;
                    failed = Some((address, error));
                }
                Err(Failure {
                    error: error @ (SendError::Closed(_) | SendError::Failed(_)),
                    unsent: None,
                }) if replay.is_some() => {
                    // The instance went away with the request (killed, crashed: closed or
                    // reset before any answer): a body-less idempotent request is sent to the
                    // next one, as a proxy may (RFC 9110 §9.2.2). A timeout is never retried.
                    tracing::debug!(%address, instance = instance.name(), %error, "proxy: instance closed the connection before answering, trying the next one");
                    request = replay.expect("checked");
                    failed = Some((address, error));
                }
                Err(Failure {
                    error,
                    unsent: None,
                }) => {
                    failed = Some((address, error));
                    break;
                }
            }
        }
        if let Some(metrics) = metrics {
            metrics.upstream_error();
        }
        match failed {
            Some((address, error)) => bad_gateway(address, &error),
            None => VisitorPage::AppRestarting.response(),
        }
    }

    /// The pool of this thread: a connection is registered with the runtime that made it, so
    /// a thread that called [`pools_per_thread`] (each router thread, `server::threads`) keeps
    /// connections of its own, made and used on its runtime; any other thread uses the shared
    /// pool.
    fn pool(&self) -> Arc<Pool> {
        if !OWN_POOLS.get() {
            return self.pool.clone();
        }
        POOLS.with_borrow_mut(|pools| {
            if let Some((_, pool)) = pools.iter().find(|(id, _)| *id == self.id) {
                return pool.clone();
            }
            let pool = new_pool(&self.settings);
            pools.push((self.id, pool.clone()));
            pool
        })
    }

    /// Sends `request` on a pooled connection to `upstream`, or on a new one when none is idle
    /// or the pooled one turns out closed (a request it never wrote, or a `replayable` one).
    /// A request no connection wrote comes back in the failure (`unsent`).
    async fn send(
        &self,
        mut request: Request<Body>,
        upstream: SocketAddr,
        replayable: bool,
        metrics: Option<&Arc<ProjectMetrics>>,
    ) -> Result<Response<UpstreamBody>, Failure> {
        let timeout = self.settings.response_timeout;
        let pool = self.pool();
        if let Some(conn) = pool.checkout(upstream).await {
            let replay = replayable.then(|| clone_head(&request));
            let sent = pool
                .exchange(conn, upstream, request, timeout, metrics.cloned())
                .await;
            request = match (sent, replay) {
                (Ok(response), _) => return Ok(response),
                (
                    Err(Failure {
                        unsent: Some(unsent),
                        error,
                    }),
                    _,
                ) => {
                    tracing::debug!(%upstream, %error, "proxy: pooled connection was closed, sending on a new one");
                    unsent
                }
                (
                    Err(Failure {
                        error: SendError::Closed(error),
                        ..
                    }),
                    Some(again),
                ) => {
                    tracing::debug!(%upstream, %error, "proxy: pooled connection was closed, retrying once");
                    again
                }
                (Err(failure), _) => return Err(failure),
            };
        }
        let conn = match pool.connect(upstream).await {
            Ok(conn) => conn,
            Err(error) => {
                return Err(Failure {
                    error,
                    unsent: Some(request),
                })
            }
        };
        pool.exchange(conn, upstream, request, timeout, metrics.cloned())
            .await
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
}

/// The request target as the app gets it: origin form (`/path?query`).
fn origin_form(uri: Uri) -> Uri {
    let path_and_query = uri
        .into_parts()
        .path_and_query
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    Uri::from(path_and_query)
}

/// A pool of connections to apps, with its sweeper on the current runtime.
fn new_pool(settings: &ProxySettings) -> Arc<Pool> {
    Pool::new(
        settings.max_idle_per_app,
        settings.pool_idle_timeout,
        settings.connect_timeout,
    )
}

fn clone_head(head: &Request<Body>) -> Request<Body> {
    let mut copy = Request::new(empty());
    *copy.method_mut() = head.method().clone();
    *copy.uri_mut() = head.uri().clone();
    *copy.version_mut() = head.version();
    *copy.headers_mut() = head.headers().clone();
    copy
}

fn from_upstream(response: Response<Body>) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    headers::from_upstream(&mut parts.headers, false);
    // The visitor's connection has its own version; an HTTP/1.0 app must not downgrade it.
    parts.version = Version::HTTP_11;
    Response::from_parts(parts, body)
}

fn bad_gateway(upstream: SocketAddr, error: &SendError) -> Response<Body> {
    tracing::warn!(%upstream, %error, "proxy: app did not answer");
    match error {
        SendError::TimedOut(_) => VisitorPage::AppTooSlow.response(),
        SendError::Connect(_)
        | SendError::ConnectTimedOut(_)
        | SendError::Closed(_)
        | SendError::Failed(_) => VisitorPage::AppNotAnswering.response(),
    }
}

/// The visitor's request body, its bytes counted into the project's metrics as they pass.
fn counted(body: Incoming, metrics: Arc<ProjectMetrics>) -> Body {
    body.map_frame(move |frame| {
        if let Some(data) = frame.data_ref() {
            metrics.add_request_bytes(data.len() as u64);
        }
        frame
    })
    .map_err(|error| Box::new(error) as crate::http_util::BodyError)
    .boxed()
}
