//! Speaking HTTP to a test daemon: [`TestResponse`], one request on a fresh connection
//! ([`http_request`], what `TestDaemon::request` and `api` use) and raw bytes on a socket
//! ([`raw_exchange`], for what a well-behaved client would not send).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

pub struct TestResponse {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Bytes,
}

impl TestResponse {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// Asserts the contract's error envelope with `status` and `code`.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "status; body: {}", self.text());
        let body = self.json();
        assert_eq!(body["error"]["code"], code, "code; body: {body}");
        assert_eq!(
            body["error"]["status"], status,
            "envelope status; body: {body}"
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "message; body: {body}"
        );
        assert_eq!(
            body.as_object().unwrap().len(),
            1,
            "only `error` at the top: {body}"
        );
        assert!(
            self.header("x-request-id").is_some(),
            "X-Request-Id on every response"
        );
    }
}

/// One HTTP/1.1 request on a fresh connection.
pub async fn http_request(
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> TestResponse {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", host);
    for (name, value) in headers {
        builder = builder.header(*name, value);
    }
    let request = builder.body(Full::new(Bytes::from(body))).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(60), sender.send_request(request))
        .await
        .expect("response within 60 s")
        .expect("response");
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    TestResponse {
        status,
        headers,
        body,
    }
}

/// Writes `request` as raw bytes (ignoring a peer that stops reading) and returns everything
/// the server sent back until it closed or went quiet.
pub async fn raw_exchange(addr: SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut read, mut write) = stream.into_split();
    let bytes = request.as_bytes().to_vec();
    let writer = tokio::spawn(async move {
        let _ = write.write_all(&bytes).await;
        write
    });
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), read.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
        if out.windows(4).any(|w| w == b"\r\n\r\n") && String::from_utf8_lossy(&out).contains("}}")
        {
            break;
        }
    }
    writer.abort();
    String::from_utf8_lossy(&out).into_owned()
}
