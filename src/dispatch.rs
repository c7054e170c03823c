//! Host dispatch: every request from every listener comes here. The control host goes to its
//! `ControlHandler` (the API, `/healthz`, the dashboard: `control.rs`); `<slug>.<apps_domain>`
//! goes to the live deployment through the route snapshot; anything else gets the 404 page.
//! Adds `X-Request-Id` to every response. `Dispatch` holds only what the app-host path needs
//! (routes, proxy, ACME answers), so the types keep that path away from the store.

use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use tracing::Instrument;

use crate::http_util::{full, Body};
use crate::metrics::ProjectMetrics;
use crate::pages::VisitorPage;
use crate::proxy::{Forwarded, Proxy};
use crate::router::{Asleep, Destination, Routes, SleepStrategy, Target, WakeOutcome};

const X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

/// Answers requests for the control host; implemented by `control::ControlHost`.
pub trait ControlHandler: Send + Sync {
    fn handle(
        &self,
        request: Request<Incoming>,
        client: SocketAddr,
    ) -> BoxFuture<'_, Response<Body>>;
}

pub struct Dispatch {
    pub routes: Arc<Routes>,
    pub proxy: Arc<Proxy>,
    pub control: Arc<dyn ControlHandler>,
    /// True when plain HTTP should redirect to HTTPS (any TLS mode but `off`).
    pub redirect_plain: bool,
    /// `:8443`-style suffix for redirects (empty for 443).
    pub https_port_suffix: String,
    /// Answers ACME HTTP-01 challenges on plain HTTP (acme mode).
    pub acme: Option<Arc<crate::tls::TlsManager>>,
    /// How requests to a sleeping app wait for it (`[sleep]`).
    pub waking: Waking,
}

/// How long and how many requests wait for a sleeping app to wake.
#[derive(Debug, Clone, Copy)]
pub struct Waking {
    pub hold_timeout: std::time::Duration,
    pub max_held: usize,
}

impl Waking {
    /// As `[sleep]` says.
    pub fn of(config: &crate::config::SleepConfig) -> Waking {
        Waking {
            hold_timeout: config.hold_timeout,
            max_held: config.max_held,
        }
    }
}

/// Who asked, how and for which host: what forwarding a request needs besides it.
#[derive(Clone, Copy)]
struct Visitor<'a> {
    client: SocketAddr,
    scheme: Scheme,
    host: &'a str,
    metrics: Option<&'a Arc<ProjectMetrics>>,
}

impl Dispatch {
    pub async fn handle(
        &self,
        request: Request<Incoming>,
        client: SocketAddr,
        scheme: Scheme,
    ) -> Response<Body> {
        let request_id = crate::ids::request_id();
        let span = tracing::debug_span!("request", id = %request_id, method = %request.method(), path = %request.uri().path());
        let mut response = self.route(request, client, scheme).instrument(span).await;
        response
            .headers_mut()
            .insert(X_REQUEST_ID, request_id.header_value());
        response
    }

    async fn route(
        &self,
        request: Request<Incoming>,
        client: SocketAddr,
        scheme: Scheme,
    ) -> Response<Body> {
        if scheme == Scheme::Http {
            let challenge = request
                .uri()
                .path()
                .strip_prefix("/.well-known/acme-challenge/");
            if let (Some(tls), Some(token)) = (&self.acme, challenge) {
                return match tls.http01_response(token) {
                    Some(key_authorization) => {
                        let mut response = Response::new(full(key_authorization));
                        response.headers_mut().insert(
                            http::header::CONTENT_TYPE,
                            HeaderValue::from_static("text/plain"),
                        );
                        response
                    }
                    None => VisitorPage::NoSuchChallenge.response(),
                };
            }
        }
        let mut host = request_host(&request).unwrap_or_default();
        host.make_ascii_lowercase();
        let destination = self.routes.resolve(&host);
        if scheme == Scheme::Http && self.redirect_plain {
            let loopback_control =
                matches!(destination, Destination::Control) && client.ip().is_loopback();
            let redirect_domain = matches!(destination, Destination::Redirect { .. });
            if !loopback_control && !redirect_domain {
                return self.redirect_to_https(&host, &request);
            }
        }
        match destination {
            Destination::Control => self.control.handle(request, client).await,
            Destination::App {
                slug,
                target,
                metrics,
            } => {
                let started = metrics.as_ref().map(|_| std::time::Instant::now());
                let proxied = match &target {
                    Some(Target::Proxy { upstreams, .. }) => upstreams.serving(),
                    Some(Target::Asleep(_)) => true,
                    _ => false,
                };
                let visitor = Visitor {
                    client,
                    scheme,
                    host: &host,
                    metrics: metrics.as_ref(),
                };
                let response = self.app(&slug, target, request, visitor).await;
                if let (Some(metrics), Some(started)) = (metrics, started) {
                    metrics.record_response(response.status().as_u16(), started.elapsed());
                    // The proxy counts the bytes of the app's streamed bodies itself.
                    if !proxied {
                        if let Some(bytes) = hyper::body::Body::size_hint(response.body()).exact() {
                            metrics.add_response_bytes(bytes);
                        }
                    }
                }
                response
            }
            Destination::Redirect { to } => self.redirect_to_host(&to, &host, scheme, &request),
            Destination::Unknown => VisitorPage::UnknownHost.response(),
        }
    }

    /// Serves a request for a project's host from its live target.
    async fn app(
        &self,
        slug: &str,
        target: Option<Target>,
        request: Request<Incoming>,
        visitor: Visitor<'_>,
    ) -> Response<Body> {
        match target {
            None => VisitorPage::NotDeployedYet { slug }.response(),
            Some(Target::Static { site, .. }) => site.serve(&request),
            Some(Target::Proxy { upstreams, .. }) => {
                self.forward(&upstreams, request, visitor).await
            }
            Some(Target::Asleep(asleep)) => {
                Box::pin(self.wake_then_forward(asleep, request, visitor)).await
            }
        }
    }

    async fn forward(
        &self,
        upstreams: &crate::upstreams::Upstreams,
        request: Request<Incoming>,
        visitor: Visitor<'_>,
    ) -> Response<Body> {
        if !upstreams.serving() {
            return VisitorPage::AppRestarting.response();
        }
        let proto = if visitor.scheme == Scheme::Https {
            "https"
        } else {
            "http"
        };
        let Ok(host) = HeaderValue::from_str(visitor.host) else {
            return VisitorPage::BadRequest.response();
        };
        let forwarded = Forwarded {
            client: visitor.client.ip(),
            proto,
            host,
        };
        // Boxed: the proxy's future is kilobytes, and every layer above it would
        // otherwise carry (and copy, at each call) that much for every request.
        Box::pin(
            self.proxy
                .forward_metered(request, upstreams, &forwarded, visitor.metrics),
        )
        .await
    }

    /// A request to a sleeping app: it wakes the app (the first one sends the one wake
    /// call) and waits, with at most `max_held` others and for at most `hold_timeout`, to be
    /// forwarded once the app serves. With the `page` strategy a browser's page load gets the
    /// self-reloading "starting" page at once instead.
    async fn wake_then_forward(
        &self,
        asleep: Arc<Asleep>,
        request: Request<Incoming>,
        visitor: Visitor<'_>,
    ) -> Response<Body> {
        if asleep.strategy() == SleepStrategy::Page && wants_page(&request) {
            asleep.wake();
            return VisitorPage::AppStarting.response();
        }
        let Some(held) = asleep.hold(self.waking.max_held) else {
            asleep.wake();
            return VisitorPage::Busy.response();
        };
        asleep.wake();
        let outcome = asleep.outcome(self.waking.hold_timeout).await;
        drop(held);
        match outcome {
            Some(WakeOutcome::Woke) => {}
            Some(WakeOutcome::Failed(reason)) => return crate::pages::wake_failed(&reason),
            None => return VisitorPage::AppStarting.response(),
        }
        match self.routes.resolve(visitor.host) {
            Destination::App {
                target: Some(Target::Proxy { upstreams, .. }),
                ..
            } => self.forward(&upstreams, request, visitor).await,
            _ => VisitorPage::AppRestarting.response(),
        }
    }

    /// Whether `name` (a TLS server name) is the control host.
    pub fn is_control_host(&self, name: &str) -> bool {
        matches!(self.routes.resolve(name), Destination::Control)
    }

    /// Whether a request is for the control host.
    pub fn is_control_request<B>(&self, request: &Request<B>) -> bool {
        request_host(request).is_some_and(|mut host| {
            host.make_ascii_lowercase();
            self.is_control_host(&host)
        })
    }

    /// The answer on a connection admitted from the control host's reserve to a request for
    /// another host: the daemon is at its connection limit.
    pub fn busy_response(&self) -> Response<Body> {
        let mut response = VisitorPage::Busy.response();
        response
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        response
    }

    fn redirect_to_https(&self, host: &str, request: &Request<Incoming>) -> Response<Body> {
        let name = crate::router::host_without_port(host);
        permanent_redirect(&format!(
            "https://{name}{}{}",
            self.https_port_suffix,
            path_and_query(request)
        ))
    }

    /// A custom domain's `redirectTo`: a 308 to the same path and query on `to`, over HTTPS
    /// (plain HTTP when TLS is off), on the port the visitor used when the scheme stays.
    fn redirect_to_host(
        &self,
        to: &str,
        host: &str,
        scheme: Scheme,
        request: &Request<Incoming>,
    ) -> Response<Body> {
        let same_port = || match host.rsplit_once(':') {
            Some((_, port)) if port.bytes().all(|b| b.is_ascii_digit()) => format!(":{port}"),
            _ => String::new(),
        };
        let (target_scheme, port) = match (self.redirect_plain, scheme) {
            (false, _) => ("http", same_port()),
            (true, Scheme::Https) => ("https", same_port()),
            (true, Scheme::Http) => ("https", self.https_port_suffix.clone()),
        };
        permanent_redirect(&format!(
            "{target_scheme}://{to}{port}{}",
            path_and_query(request)
        ))
    }
}

/// A browser loading a page: GET or HEAD that accepts HTML.
fn wants_page<B>(request: &Request<B>) -> bool {
    let method = request.method();
    (method == http::Method::GET || method == http::Method::HEAD)
        && request
            .headers()
            .get_all(http::header::ACCEPT)
            .iter()
            .any(|accept| accept.to_str().is_ok_and(|a| a.contains("text/html")))
}

fn path_and_query<B>(request: &Request<B>) -> &str {
    request
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
}

/// A 308 to `location` (method and body kept).
fn permanent_redirect(location: &str) -> Response<Body> {
    let mut response = Response::new(crate::http_util::empty());
    *response.status_mut() = StatusCode::PERMANENT_REDIRECT;
    if let Ok(value) = HeaderValue::from_str(location) {
        response.headers_mut().insert(http::header::LOCATION, value);
    }
    response
}

/// `:authority` (HTTP/2) or the `Host` header.
pub fn request_host<B>(request: &Request<B>) -> Option<String> {
    if let Some(host) = request.uri().host() {
        return Some(match request.uri().port_u16() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        });
    }
    request
        .headers()
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}
