//! Test-only servers and a client for the proxy and static-serving tests: a hyper front
//! server on 127.0.0.1:0 that hands each request to a closure, and a small HTTP/1.1 client.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use crate::http_util::{empty, Body};

/// Serves HTTP/1.1 (with upgrades) on 127.0.0.1:0, answering with `handler(request, peer)`.
/// The accept loop lives as long as the test's runtime.
pub(crate) async fn front_server<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(Request<Incoming>, SocketAddr) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind front server");
    let address = listener.local_addr().expect("front server address");
    let handler = Arc::new(handler);
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                return;
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let response = handler(request, peer);
                    async move { Ok::<_, std::convert::Infallible>(response.await) }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades();
                let _ = connection.await;
            });
        }
    });
    address
}

/// A plain pooled client for talking to test servers.
pub(crate) fn client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A response read in full.
pub(crate) struct Fetched {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Fetched {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|value| value.to_str().expect("ASCII header"))
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.body.to_vec()).expect("UTF-8 body")
    }
}

/// Sends `method path` to `address` with extra headers and reads the whole response.
pub(crate) async fn fetch(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Fetched {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{address}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(request.body(empty()).expect("valid test request")).await
}

pub(crate) async fn send(request: Request<Body>) -> Fetched {
    let response = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client().request(request),
    )
    .await
    .expect("response within 10 s")
    .expect("test request succeeds");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.expect("whole body").to_bytes();
    Fetched {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}
