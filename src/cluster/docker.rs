//! A small client of the Docker Engine API over its Unix socket (hyper 1, one connection per
//! call): JSON in, JSON out, a typed error with the engine's own message. Only the calls the
//! Swarm backend makes; no docker crate (the field's crates either pull a second HTTP stack
//! or lag the API, and Slipway needs a dozen endpoints).

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;

/// The API version asked for: Docker 20.10 (Debian 12's `docker.io`) speaks 1.41.
const API: &str = "/v1.41";

/// How long one call may take (connect, send, the whole answer).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("cannot reach dockerd at {path}: {message}")]
    Unreachable { path: PathBuf, message: String },
    #[error("dockerd answered {status} to {call}: {message}")]
    Api {
        status: StatusCode,
        call: String,
        message: String,
    },
    #[error("dockerd's answer did not parse: {0}")]
    Parse(String),
}

impl DockerError {
    /// Whether the engine said the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, DockerError::Api { status, .. } if *status == StatusCode::NOT_FOUND)
    }
}

/// A Docker Engine reached through its Unix socket.
#[derive(Debug, Clone)]
pub struct Docker {
    socket: PathBuf,
}

impl Docker {
    pub fn new(socket: &Path) -> Docker {
        Docker {
            socket: socket.to_owned(),
        }
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, DockerError> {
        let body = self.call(Method::GET, path, None).await?;
        serde_json::from_slice(&body).map_err(|e| DockerError::Parse(e.to_string()))
    }

    /// A call whose answer is JSON (`{}` when the engine answers nothing).
    pub async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<T, DockerError> {
        let body = serde_json::to_vec(body).expect("JSON serializes");
        let answer = self.call(method, path, Some(body)).await?;
        let answer: &[u8] = if answer.is_empty() { b"{}" } else { &answer };
        serde_json::from_slice(answer).map_err(|e| DockerError::Parse(e.to_string()))
    }

    pub async fn delete(&self, path: &str) -> Result<(), DockerError> {
        self.call(Method::DELETE, path, None).await.map(|_| ())
    }

    /// The raw answer of one call, or the engine's error message.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Bytes, DockerError> {
        tokio::time::timeout(CALL_TIMEOUT, self.call_once(method, path, body))
            .await
            .unwrap_or_else(|_| Err(self.unreachable("no answer within 30 s")))
    }

    async fn call_once(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Bytes, DockerError> {
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|e| self.unreachable(&e.to_string()))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.unreachable(&e.to_string()))?;
        tokio::spawn(connection);
        let call = format!("{method} {path}");
        let request = Request::builder()
            .method(method)
            .uri(format!("{API}{path}"))
            .header(http::header::HOST, "docker")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .expect("a valid request");
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| self.unreachable(&e.to_string()))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| self.unreachable(&e.to_string()))?
            .to_bytes();
        if status.is_success() {
            return Ok(bytes);
        }
        #[derive(serde::Deserialize)]
        struct Message {
            message: String,
        }
        let message = serde_json::from_slice::<Message>(&bytes)
            .map(|m| m.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned());
        Err(DockerError::Api {
            status,
            call,
            message,
        })
    }

    /// A streaming call (`follow=1` logs): the answer's body as it comes, once the engine has
    /// answered with a success status within the call timeout.
    pub async fn stream(&self, path: &str) -> Result<hyper::body::Incoming, DockerError> {
        let opened = async {
            let stream = tokio::net::UnixStream::connect(&self.socket)
                .await
                .map_err(|e| self.unreachable(&e.to_string()))?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(|e| self.unreachable(&e.to_string()))?;
            tokio::spawn(connection);
            let request = Request::get(format!("{API}{path}"))
                .header(http::header::HOST, "docker")
                .body(Full::new(Bytes::new()))
                .expect("a valid request");
            sender
                .send_request(request)
                .await
                .map_err(|e| self.unreachable(&e.to_string()))
        };
        let response = tokio::time::timeout(CALL_TIMEOUT, opened)
            .await
            .unwrap_or_else(|_| Err(self.unreachable("no answer within 30 s")))?;
        match response.status().is_success() {
            true => Ok(response.into_body()),
            false => Err(DockerError::Api {
                status: response.status(),
                call: format!("GET {path}"),
                message: "the stream was refused".to_owned(),
            }),
        }
    }

    fn unreachable(&self, message: &str) -> DockerError {
        DockerError::Unreachable {
            path: self.socket.clone(),
            message: message.to_owned(),
        }
    }
}
