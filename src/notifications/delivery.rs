//! The delivery worker: takes the next due delivery off the store's queue, posts it (json
//! signed with `X-Slipway-Signature`), records the attempt, and on failure puts it back with
//! a later due time (1 s growing to 1 h over 10 attempts by default), until a 2xx or the last
//! attempt. One delivery at a time per subscription, subscriptions side by side; each attempt
//! (resolving, connecting, TLS, the response head) has a 10 s deadline and connects only to
//! addresses `destination.rs` checked. Started by `app.rs`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use tokio::task::JoinSet;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

use super::{secret_context, signature, DestinationError, Destinations, Format, Notifier};
use crate::secrets::SecretBox;
use crate::store::notifications::{DeliveryAttempt, NotificationRecord, QueuedDelivery};

/// How long one attempt may take, connect to response head.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// When failed deliveries are tried again (`[notifications]` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub first: Duration,
    pub max: Duration,
    /// Attempts in all, the first included.
    pub max_attempts: u32,
}

impl RetryPolicy {
    pub fn from_config(config: &crate::config::NotificationsConfig) -> RetryPolicy {
        RetryPolicy {
            first: Duration::from_millis(config.retry_first_ms),
            max: Duration::from_millis(config.retry_max_ms),
            max_attempts: config.max_attempts,
        }
    }

    /// The wait after the `failed`-th failed attempt, or `None` when that was the last one.
    /// The waits grow geometrically from `first` (after the first failure) to `max` (before
    /// the last attempt): with the defaults 1 s, 2.8 s, 7.7 s, 22 s, 60 s, 2.8 min, 7.7 min,
    /// 21 min, 1 h.
    pub fn wait_after(&self, failed: u32) -> Option<Duration> {
        if failed >= self.max_attempts || failed == 0 {
            return None;
        }
        let steps = self.max_attempts.saturating_sub(2);
        if steps == 0 {
            return Some(self.first);
        }
        let ratio = self.max.as_secs_f64() / self.first.as_secs_f64().max(1e-3);
        let exponent = f64::from(failed - 1) / f64::from(steps);
        let wait = self.first.as_secs_f64() * ratio.powf(exponent);
        Some(Duration::from_secs_f64(wait.min(self.max.as_secs_f64())))
    }
}

/// Deliveries in flight at once, across subscriptions (one per subscription at a time).
pub const MAX_IN_FLIGHT: usize = 32;

/// Runs until `shutdown`: starts every due delivery whose subscription has none in flight,
/// each on its own task (a receiver that hangs holds only its own subscription's queue, for
/// at most [`ATTEMPT_TIMEOUT`]), and sleeps until the next due time, a new event or a finished
/// attempt. A delivery in flight when the daemon stops stays queued and is sent again.
pub async fn run(
    notifier: Notifier,
    secrets: Arc<SecretBox>,
    policy: RetryPolicy,
    shutdown: CancellationToken,
) {
    let tls = match tls_connector() {
        Ok(tls) => tls,
        Err(error) => {
            tracing::error!(%error, "notifications: cannot set up TLS; webhooks are not delivered");
            return;
        }
    };
    let mut in_flight: JoinSet<()> = JoinSet::new();
    let mut busy: HashMap<tokio::task::Id, String> = HashMap::new();
    loop {
        let now = crate::ids::now_ms();
        let skip: HashSet<String> = busy.values().cloned().collect();
        let room = MAX_IN_FLIGHT.saturating_sub(in_flight.len());
        let due = notifier
            .store()
            .call(move |store| store.due_deliveries(now, &skip, room))
            .await;
        let wait = match due {
            Ok((deliveries, next)) => {
                for delivery in deliveries {
                    let subscription = delivery.notification_id.clone();
                    let (notifier, tls, secrets) = (notifier.clone(), tls.clone(), secrets.clone());
                    let task = in_flight.spawn(async move {
                        attempt(&notifier, &tls, &secrets, &policy, delivery).await;
                    });
                    busy.insert(task.id(), subscription);
                }
                next.map_or(Duration::from_secs(3600), |due| {
                    Duration::from_millis(due.saturating_sub(now))
                })
            }
            Err(error) => {
                tracing::error!(%error, "notifications: cannot read the delivery queue");
                Duration::from_secs(5)
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => {
                in_flight.abort_all();
                return;
            }
            _ = notifier.wake().notified() => {}
            _ = tokio::time::sleep(wait) => {}
            Some(done) = in_flight.join_next_with_id() => {
                let id = match done {
                    Ok((id, ())) => id,
                    Err(error) => error.id(),
                };
                busy.remove(&id);
            }
        }
    }
}

fn tls_connector() -> Result<TlsConnector, std::io::Error> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(std::io::Error::other)?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(tls)))
}

/// One attempt of one delivery, recorded in the store with its outcome.
async fn attempt(
    notifier: &Notifier,
    tls: &TlsConnector,
    secrets: &SecretBox,
    policy: &RetryPolicy,
    delivery: QueuedDelivery,
) {
    let Some(subscription) = subscription_of(notifier, &delivery).await else {
        return;
    };
    let outcome = send(notifier, tls, secrets, &subscription, &delivery).await;
    let settled = Settled::new(policy, &delivery, outcome);
    settled.log(&subscription, &delivery);
    settled.record(notifier, delivery).await;
}

/// The subscription `delivery` is for. `None` when there is nothing to send: the
/// subscription is gone (its delivery is dropped from the queue) or the store cannot be read
/// (after a pause, so a failing store is not hammered; the delivery stays queued).
async fn subscription_of(
    notifier: &Notifier,
    delivery: &QueuedDelivery,
) -> Option<NotificationRecord> {
    let id = delivery.notification_id.clone();
    match notifier.store().call(move |s| s.notification(&id)).await {
        Ok(Some(subscription)) => Some(subscription),
        Ok(None) => {
            let gone = delivery.clone();
            let _ = notifier.store().call(move |s| s.drop_delivery(&gone)).await;
            None
        }
        Err(error) => {
            tracing::error!(%error, "notifications: cannot read a subscription");
            tokio::time::sleep(Duration::from_secs(5)).await;
            None
        }
    }
}

/// Opens the subscription's secret and posts the delivery in its format: the receiver's
/// status, or why there was none.
async fn send(
    notifier: &Notifier,
    tls: &TlsConnector,
    secrets: &SecretBox,
    subscription: &NotificationRecord,
    delivery: &QueuedDelivery,
) -> Result<u16, String> {
    let secret = crate::ids::hex_decode(&subscription.secret_sealed)
        .and_then(|sealed| {
            secrets
                .open(&secret_context(&subscription.id), &sealed)
                .ok()
        })
        .and_then(|plain| String::from_utf8(plain).ok());
    match secret {
        None => Err("the subscription's secret cannot be opened (was secret.key replaced?)".into()),
        Some(secret) => {
            let format = Format::parse(&subscription.format).unwrap_or(Format::Json);
            let destinations = notifier.destinations();
            let target = Target { destinations, tls };
            post(target, &subscription.url, delivery, format, &secret).await
        }
    }
}

/// What one attempt came to.
struct Settled {
    /// 1 for the first try.
    attempt_number: u32,
    /// The receiver's HTTP status, if it answered.
    status: Option<u16>,
    /// Why the attempt failed (`None` on a 2xx), saying so when it was the last one.
    error: Option<String>,
    /// The delivery queued again for a later try; `None` when delivered or given up.
    retry: Option<QueuedDelivery>,
}

impl Settled {
    /// A 2xx is delivered; anything else is tried again after the policy's wait, unless
    /// that was the last attempt.
    fn new(policy: &RetryPolicy, delivery: &QueuedDelivery, outcome: Result<u16, String>) -> Self {
        let attempt_number = delivery.attempts + 1;
        let (status, error) = match &outcome {
            Ok(status) if (200..300).contains(status) => (Some(*status), None),
            Ok(status) => (
                Some(*status),
                Some(format!("the receiver answered HTTP {status}")),
            ),
            Err(error) => (None, Some(error.clone())),
        };
        let retry = match &error {
            None => None,
            Some(_) => policy
                .wait_after(attempt_number)
                .map(|wait| QueuedDelivery {
                    attempts: attempt_number,
                    next_ms: crate::ids::now_ms() + wait.as_millis() as u64,
                    ..delivery.clone()
                }),
        };
        let error = match (&error, &retry) {
            (Some(error), None) => {
                Some(format!("{error}; gave up after {attempt_number} attempts"))
            }
            (error, _) => error.clone(),
        };
        Settled {
            attempt_number,
            status,
            error,
            retry,
        }
    }

    fn log(&self, subscription: &NotificationRecord, delivery: &QueuedDelivery) {
        let attempt_number = self.attempt_number;
        match (&self.error, &self.retry) {
            (None, _) => {
                tracing::info!(notification = %subscription.id, event = %delivery.event, delivery = %delivery.id, "webhook delivered")
            }
            (Some(error), Some(retry)) => {
                tracing::warn!(notification = %subscription.id, event = %delivery.event, delivery = %delivery.id, %error, attempt = attempt_number, retry_in_ms = retry.next_ms.saturating_sub(crate::ids::now_ms()), "webhook delivery failed; will retry")
            }
            (Some(error), None) => {
                tracing::warn!(notification = %subscription.id, event = %delivery.event, delivery = %delivery.id, %error, "webhook delivery failed for good")
            }
        }
    }

    /// Writes the attempt to the deliveries list and takes `delivery` off the queue or puts
    /// it back for its retry, in one store call.
    async fn record(self, notifier: &Notifier, delivery: QueuedDelivery) {
        let record = DeliveryAttempt {
            v: 1,
            delivery_id: delivery.id.clone(),
            event: delivery.event.clone(),
            at_ms: crate::ids::now_ms(),
            attempt: self.attempt_number,
            status: self.status,
            error: self.error,
        };
        let retry = self.retry;
        let result = notifier
            .store()
            .call(move |s| s.finish_attempt(&delivery, retry.as_ref(), &record))
            .await;
        if let Err(error) = result {
            tracing::error!(%error, "notifications: cannot record a delivery attempt");
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }
}

/// What an attempt may reach and how.
#[derive(Clone, Copy)]
struct Target<'a> {
    destinations: &'a Destinations,
    tls: &'a TlsConnector,
}

/// What the deliveries list says when no HTTP answer came. One message for a closed port, a
/// filtered one, a reset, a TLS failure and a timeout alike, so the list does not map a
/// network; the daemon's log has the cause.
pub const NO_ANSWER: &str = "no HTTP answer from the receiver (the daemon's log has the cause)";

/// POSTs the body; the receiver's status, or why there was none.
async fn post(
    target: Target<'_>,
    url: &str,
    delivery: &QueuedDelivery,
    format: Format,
    secret: &str,
) -> Result<u16, String> {
    let uri: http::Uri = url.parse().map_err(|_| "the URL is not valid".to_owned())?;
    let host = uri.host().unwrap_or_default().to_owned();
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let mut request = Request::new(Full::new(Bytes::from(delivery.body.clone())));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = path
        .parse()
        .map_err(|_| "the URL is not valid".to_owned())?;
    let headers = request.headers_mut();
    let text = |value: &str| HeaderValue::from_str(value).map_err(|e| e.to_string());
    let authority = uri.authority().map_or(host.as_str(), |a| a.as_str());
    headers.insert(http::header::HOST, text(authority)?);
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::USER_AGENT,
        HeaderValue::from_static(concat!("slipway/", env!("CARGO_PKG_VERSION"))),
    );
    headers.insert("x-slipway-event", text(&delivery.event)?);
    headers.insert("x-slipway-delivery", text(&delivery.id)?);
    if format == Format::Json {
        headers.insert(
            "x-slipway-signature",
            text(&signature(secret, delivery.body.as_bytes()))?,
        );
    }
    let https = uri.scheme_str() == Some("https");
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let exchange = async {
        let addrs = target.destinations.resolve(&host, port).await?;
        let stream = connect(&addrs).await?;
        if !https {
            return exchange(stream, request).await;
        }
        let name = rustls::pki_types::ServerName::try_from(
            host.trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
        )
        .map_err(|e| AttemptError::Transport(e.to_string()))?;
        let stream = target.tls.connect(name, stream).await?;
        exchange(stream, request).await
    };
    let outcome = tokio::time::timeout(ATTEMPT_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(AttemptError::Transport(format!(
                "no response within {} s",
                ATTEMPT_TIMEOUT.as_secs()
            )))
        });
    match outcome {
        Ok(status) => Ok(status),
        Err(AttemptError::Destination(refused)) => Err(format!("not sent: {refused}")),
        Err(AttemptError::Transport(cause)) => {
            tracing::info!(delivery = %delivery.id, %host, %cause, "webhook: no HTTP answer");
            Err(NO_ANSWER.to_owned())
        }
    }
}

/// Why an attempt got no HTTP answer.
enum AttemptError {
    /// Refused before any connection was made.
    Destination(DestinationError),
    /// Connect, TLS, HTTP or timeout: said to the user as [`NO_ANSWER`].
    Transport(String),
}

impl From<DestinationError> for AttemptError {
    fn from(error: DestinationError) -> Self {
        AttemptError::Destination(error)
    }
}

impl From<std::io::Error> for AttemptError {
    fn from(error: std::io::Error) -> Self {
        AttemptError::Transport(error.to_string())
    }
}

impl From<hyper::Error> for AttemptError {
    fn from(error: hyper::Error) -> Self {
        AttemptError::Transport(error.to_string())
    }
}

/// A connection to the first of the checked addresses that takes one.
async fn connect(addrs: &[std::net::SocketAddr]) -> Result<tokio::net::TcpStream, AttemptError> {
    let mut last = None;
    for addr in addrs {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last = Some(error),
        }
    }
    Err(last.map_or_else(
        || AttemptError::Transport("no address".into()),
        AttemptError::from,
    ))
}

/// One HTTP/1.1 request on `io`; the response's status.
async fn exchange<IO>(io: IO, request: Request<Full<Bytes>>) -> Result<u16, AttemptError>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    let driver = tokio::spawn(connection);
    let response = sender.send_request(request).await;
    driver.abort();
    Ok(response?.status().as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_waits_go_from_one_second_to_one_hour_in_ten_attempts() {
        let policy = RetryPolicy {
            first: Duration::from_secs(1),
            max: Duration::from_secs(3600),
            max_attempts: 10,
        };
        let waits: Vec<f64> = (1..10)
            .map(|n| policy.wait_after(n).unwrap().as_secs_f64())
            .collect();
        assert!((waits[0] - 1.0).abs() < 1e-6);
        assert!((waits[8] - 3600.0).abs() < 1e-3);
        assert!(waits.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(policy.wait_after(10), None);
    }
}
