//! The delivery worker: takes the next due delivery off the store's queue, posts it (json
//! signed with `X-Slipway-Signature`), records the attempt, and on failure puts it back with
//! a later due time (1 s growing to 1 h over 10 attempts by default), until a 2xx or the last
//! attempt. One delivery at a time; each attempt has a 10 s deadline. Started by `app.rs`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio_util::sync::CancellationToken;

use super::{secret_context, signature, Format, Notifier};
use crate::secrets::SecretBox;
use crate::store::notifications::{DeliveryAttempt, QueuedDelivery};

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

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Runs until `shutdown`: delivers what is due, sleeps until the next due time or a new
/// event. A delivery in flight when the daemon stops stays queued and is sent again.
pub async fn run(
    notifier: Notifier,
    secrets: Arc<SecretBox>,
    policy: RetryPolicy,
    shutdown: CancellationToken,
) {
    let client = match https_client() {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "notifications: cannot set up the HTTPS client; webhooks are not delivered");
            return;
        }
    };
    loop {
        let next = notifier.store().call(|store| store.next_delivery()).await;
        let wait = match next {
            Ok(Some(delivery)) => {
                let now = crate::ids::now_ms();
                if delivery.next_ms <= now {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = attempt(&notifier, &client, &secrets, &policy, delivery) => {}
                    }
                    continue;
                }
                Duration::from_millis(delivery.next_ms - now)
            }
            Ok(None) => Duration::from_secs(3600),
            Err(error) => {
                tracing::error!(%error, "notifications: cannot read the delivery queue");
                Duration::from_secs(5)
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = notifier.wake().notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

fn https_client() -> Result<HttpsClient, std::io::Error> {
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
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(ATTEMPT_TIMEOUT));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// One attempt of one delivery, recorded in the store with its outcome.
async fn attempt(
    notifier: &Notifier,
    client: &HttpsClient,
    secrets: &SecretBox,
    policy: &RetryPolicy,
    delivery: QueuedDelivery,
) {
    let id = delivery.notification_id.clone();
    let subscription = match notifier.store().call(move |s| s.notification(&id)).await {
        Ok(Some(subscription)) => subscription,
        Ok(None) => {
            let gone = delivery.clone();
            let _ = notifier.store().call(move |s| s.drop_delivery(&gone)).await;
            return;
        }
        Err(error) => {
            tracing::error!(%error, "notifications: cannot read a subscription");
            tokio::time::sleep(Duration::from_secs(5)).await;
            return;
        }
    };
    let secret = crate::ids::hex_decode(&subscription.secret_sealed)
        .and_then(|sealed| {
            secrets
                .open(&secret_context(&subscription.id), &sealed)
                .ok()
        })
        .and_then(|plain| String::from_utf8(plain).ok());
    let outcome = match secret {
        None => Err("the subscription's secret cannot be opened (was secret.key replaced?)".into()),
        Some(secret) => {
            let format = Format::parse(&subscription.format).unwrap_or(Format::Json);
            post(client, &subscription.url, &delivery, format, &secret).await
        }
    };
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
        (Some(error), None) => Some(format!("{error}; gave up after {attempt_number} attempts")),
        (error, _) => error.clone(),
    };
    match (&error, &retry) {
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
    let record = DeliveryAttempt {
        v: 1,
        delivery_id: delivery.id.clone(),
        event: delivery.event.clone(),
        at_ms: crate::ids::now_ms(),
        attempt: attempt_number,
        status,
        error,
    };
    let result = notifier
        .store()
        .call(move |s| s.finish_attempt(&delivery, retry.as_ref(), &record))
        .await;
    if let Err(error) = result {
        tracing::error!(%error, "notifications: cannot record a delivery attempt");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// POSTs the body; the receiver's status, or why there was none.
async fn post(
    client: &HttpsClient,
    url: &str,
    delivery: &QueuedDelivery,
    format: Format,
    secret: &str,
) -> Result<u16, String> {
    let mut request = Request::new(Full::new(Bytes::from(delivery.body.clone())));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = url.parse().map_err(|_| "the URL is not valid".to_owned())?;
    let headers = request.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::USER_AGENT,
        HeaderValue::from_static(concat!("slipway/", env!("CARGO_PKG_VERSION"))),
    );
    let text = |value: &str| HeaderValue::from_str(value).map_err(|e| e.to_string());
    headers.insert("x-slipway-event", text(&delivery.event)?);
    headers.insert("x-slipway-delivery", text(&delivery.id)?);
    if format == Format::Json {
        headers.insert(
            "x-slipway-signature",
            text(&signature(secret, delivery.body.as_bytes()))?,
        );
    }
    match tokio::time::timeout(ATTEMPT_TIMEOUT, client.request(request)).await {
        Ok(Ok(response)) => Ok(response.status().as_u16()),
        Ok(Err(error)) => Err(describe(&error)),
        Err(_) => Err(format!(
            "no response within {} s",
            ATTEMPT_TIMEOUT.as_secs()
        )),
    }
}

/// The innermost cause of a client error ("connection refused", …).
fn describe(error: &hyper_util::client::legacy::Error) -> String {
    let mut source: &dyn std::error::Error = error;
    while let Some(inner) = source.source() {
        source = inner;
    }
    format!("could not reach the receiver: {source}")
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
