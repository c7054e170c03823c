//! `ApiClient`: authenticated HTTP/1.1 requests to the daemon's `/api/`, one connection per
//! request (a CLI makes a handful), JSON in and out, the error envelope turned into
//! `ClientError::Api`, and `429` answered by waiting `Retry-After` (a refused request did
//! nothing, so retrying it is safe). Used by every client command.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::WebSocketStream;

use super::connect::{self, Endpoint};
use super::credentials::Credentials;
use super::ClientError;
use crate::api::types::ErrorEnvelope;

/// How long a plain request may take to answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an upload may take (100 MiB at a slow uplink).
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);
/// How many times a rate-limited request is retried.
const RATE_LIMIT_RETRIES: usize = 3;
/// The longest `Retry-After` the client waits for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// The largest JSON answer read into memory.
const MAX_JSON_BYTES: usize = 64 << 20;

pub struct ApiClient {
    endpoint: Endpoint,
    token: String,
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl ApiClient {
    /// A client for `credentials.url`; `tls` is required for `https` URLs.
    pub fn new(
        credentials: &Credentials,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<ApiClient, ClientError> {
        let endpoint = Endpoint::parse(&credentials.url)?;
        if endpoint.https && tls.is_none() {
            return Err(ClientError::Tls(
                "an https URL needs a TLS configuration".into(),
            ));
        }
        Ok(ApiClient {
            endpoint,
            token: credentials.token.clone(),
            tls,
        })
    }

    /// The API's base URL, for messages.
    pub fn base_url(&self) -> String {
        let scheme = if self.endpoint.https { "https" } else { "http" };
        format!(
            "{scheme}://{}{}",
            self.endpoint.authority(),
            self.endpoint.prefix
        )
    }

    /// `ws(s)://host[:port][/prefix]` + `path`: where a WebSocket of the API is opened.
    pub fn websocket_url(&self, path: &str) -> String {
        let scheme = if self.endpoint.https { "wss" } else { "ws" };
        format!(
            "{scheme}://{}{}{path}",
            self.endpoint.authority(),
            self.endpoint.prefix
        )
    }

    /// The bearer token (for a WebSocket's own handshake).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A new connection to the API (TLS for `https`).
    pub async fn connect(&self) -> Result<Box<dyn connect::Io>, ClientError> {
        connect::connect(&self.endpoint, self.tls.as_ref()).await
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.json(Method::GET, path, None, Bytes::new(), REQUEST_TIMEOUT)
            .await
    }

    /// `--json`: prints the API's answer to a GET as it is (pretty-printed).
    pub async fn print_json(&self, path: &str) -> Result<std::process::ExitCode, ClientError> {
        let value: serde_json::Value = self.get(path).await?;
        println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
        Ok(std::process::ExitCode::SUCCESS)
    }

    /// `POST` without a body (e.g. `…/sleep`).
    pub async fn post<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.json(Method::POST, path, None, Bytes::new(), REQUEST_TIMEOUT)
            .await
    }

    /// `PUT` without a body (e.g. linking an add-on).
    pub async fn put<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.json(Method::PUT, path, None, Bytes::new(), REQUEST_TIMEOUT)
            .await
    }

    /// Opens the WebSocket at `path` (`/api/runs/{id}/tty`, `/api/addons/{id}/tunnel`) on a
    /// connection of its own, with the token; an API error answer becomes its `ClientError`.
    pub async fn websocket(
        &self,
        path: &str,
        config: Option<WebSocketConfig>,
    ) -> Result<WebSocketStream<Box<dyn connect::Io>>, ClientError> {
        let url = self.websocket_url(path);
        let mut request = url
            .as_str()
            .into_client_request()
            .map_err(|error| ClientError::Protocol(format!("the WebSocket URL {url}: {error}")))?;
        let authorization = format!("Bearer {}", self.token)
            .parse()
            .map_err(|_| ClientError::Config("the token is not a valid header value".into()))?;
        request
            .headers_mut()
            .insert(http::header::AUTHORIZATION, authorization);
        let stream = self.connect().await?;
        let opened = tokio::time::timeout(
            REQUEST_TIMEOUT,
            tokio_tungstenite::client_async_with_config(request, stream, config),
        )
        .await
        .map_err(|_| ClientError::Timeout(format!("GET {path}: no answer within 60 s")))?;
        match opened {
            Ok((socket, _)) => Ok(socket),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let body = response.body().clone().unwrap_or_default();
                Err(parse_error(response.status().as_u16(), &body))
            }
            Err(other) => Err(ClientError::Protocol(format!("opening {path}: {other}"))),
        }
    }

    pub async fn delete<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.json(Method::DELETE, path, None, Bytes::new(), REQUEST_TIMEOUT)
            .await
    }

    pub async fn post_json<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        self.send_json(Method::POST, path, body).await
    }

    pub async fn patch_json<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        self.send_json(Method::PATCH, path, body).await
    }

    async fn send_json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let bytes = Bytes::from(serde_json::to_vec(body).expect("request shapes serialize"));
        self.json(
            method,
            path,
            Some("application/json"),
            bytes,
            REQUEST_TIMEOUT,
        )
        .await
    }

    /// Uploads a gzip'd tar (`POST …/source`).
    pub async fn post_archive<T: DeserializeOwned>(
        &self,
        path: &str,
        archive: Bytes,
    ) -> Result<T, ClientError> {
        self.json(
            Method::POST,
            path,
            Some("application/gzip"),
            archive,
            UPLOAD_TIMEOUT,
        )
        .await
    }

    /// Opens a server-sent-events stream; `last_event_id` resumes after that sequence number.
    pub async fn open_stream(
        &self,
        path: &str,
        last_event_id: Option<u64>,
    ) -> Result<Incoming, ClientError> {
        let mut headers = vec![("accept", "text/event-stream".to_owned())];
        if let Some(seq) = last_event_id {
            headers.push(("last-event-id", seq.to_string()));
        }
        let response = self
            .send(Method::GET, path, &headers, Bytes::new(), REQUEST_TIMEOUT)
            .await?;
        if !response.status().is_success() {
            return Err(error_from(response).await);
        }
        Ok(response.into_body())
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
        timeout: Duration,
    ) -> Result<T, ClientError> {
        let mut headers = vec![("accept", "application/json".to_owned())];
        if let Some(content_type) = content_type {
            headers.push(("content-type", content_type.to_owned()));
        }
        let response = self.send(method, path, &headers, body, timeout).await?;
        if !response.status().is_success() {
            return Err(error_from(response).await);
        }
        let status = response.status();
        let bytes = read_body(response.into_body(), timeout).await?;
        serde_json::from_slice(&bytes).map_err(|error| {
            ClientError::Protocol(format!(
                "HTTP {status} with a body that is not the expected JSON: {error}"
            ))
        })
    }

    /// Sends one request, retrying while it is rate limited; returns any other response.
    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Bytes,
        timeout: Duration,
    ) -> Result<Response<Incoming>, ClientError> {
        let mut attempt = 0;
        loop {
            let response = tokio::time::timeout(
                timeout,
                self.send_once(method.clone(), path, headers, body.clone()),
            )
            .await
            .map_err(|_| {
                ClientError::Timeout(format!(
                    "{method} {path}: no answer within {} s",
                    timeout.as_secs()
                ))
            })??;
            if response.status() != StatusCode::TOO_MANY_REQUESTS || attempt == RATE_LIMIT_RETRIES {
                return Ok(response);
            }
            attempt += 1;
            let wait = response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs)
                .unwrap_or(Duration::from_secs(5))
                .clamp(Duration::from_secs(1), MAX_RETRY_AFTER);
            eprintln!(
                "slipway: rate limited by the API; retrying in {} s",
                wait.as_secs()
            );
            tokio::time::sleep(wait).await;
        }
    }

    async fn send_once(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<Response<Incoming>, ClientError> {
        let stream = connect::connect(&self.endpoint, self.tls.as_ref()).await?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|error| self.transport(error))?;
        // The connection task ends when the response body is done or dropped.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.endpoint.prefix))
            .header(http::header::HOST, self.endpoint.authority())
            .header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", self.token),
            )
            .header(
                http::header::USER_AGENT,
                concat!("slipway-cli/", env!("CARGO_PKG_VERSION")),
            );
        for (name, value) in headers {
            builder = builder.header(*name, value);
        }
        let request = builder
            .body(Full::new(body))
            .map_err(|error| ClientError::Protocol(format!("cannot build the request: {error}")))?;
        sender
            .send_request(request)
            .await
            .map_err(|error| self.transport(error))
    }

    fn transport(&self, error: hyper::Error) -> ClientError {
        ClientError::Connect {
            target: self.base_url(),
            detail: error.to_string(),
        }
    }
}

/// Reads a whole (bounded) body.
async fn read_body(body: Incoming, timeout: Duration) -> Result<Bytes, ClientError> {
    let limited = http_body_util::Limited::new(body, MAX_JSON_BYTES);
    match tokio::time::timeout(timeout, limited.collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(error)) => Err(ClientError::Protocol(format!(
            "reading the response failed: {error}"
        ))),
        Err(_) => Err(ClientError::Timeout("reading the response".into())),
    }
}

/// Turns a non-2xx answer into `ClientError::Api` (from the envelope when there is one).
async fn error_from(response: Response<Incoming>) -> ClientError {
    let status = response.status();
    // The daemon redirects plain HTTP to HTTPS for clients off the machine.
    if status.is_redirection() {
        let location = response
            .headers()
            .get(http::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("another address");
        return ClientError::Config(format!(
            "the API answered {status} to {location}; set SLIPWAY_URL to that scheme and host"
        ));
    }
    let bytes = read_body(response.into_body(), REQUEST_TIMEOUT)
        .await
        .unwrap_or_default();
    parse_error(status.as_u16(), &bytes)
}

/// The API's `{"error":{"code","message","status"}}` (a code this client does not know yet is
/// kept as text), or a description of what came instead (e.g. a proxy's page).
pub fn parse_error(status: u16, body: &[u8]) -> ClientError {
    match serde_json::from_slice::<ErrorEnvelope>(body) {
        Ok(envelope) => ClientError::Api {
            status,
            code: envelope.error.code,
            message: envelope.error.message,
        },
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            let snippet: String = text.chars().take(200).collect();
            ClientError::Http {
                status,
                message: format!("HTTP {status}: {}", snippet.trim()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_becomes_a_typed_error() {
        let body =
            br#"{"error":{"code":"INVALID_ENV_KEY","message":"PORT is reserved","status":400}}"#;
        match parse_error(400, body) {
            ClientError::Api {
                status,
                code,
                message,
            } => {
                assert_eq!(status, 400);
                assert_eq!(code, crate::error_code::ErrorCode::InvalidEnvKey);
                assert_eq!(message, "PORT is reserved");
            }
            other => panic!("{other:?}"),
        }
        let newer =
            br#"{"error":{"code":"QUOTA_EXCEEDED","message":"too many apps","status":403}}"#;
        let error = parse_error(403, newer);
        assert!(
            matches!(error, ClientError::Api { status: 403, .. }),
            "{error:?}"
        );
        assert_eq!(error.to_string(), "too many apps (QUOTA_EXCEEDED)");
        match parse_error(502, b"<html>bad gateway</html>") {
            ClientError::Http { status, message } => {
                assert_eq!(status, 502);
                assert!(message.contains("bad gateway"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
}
