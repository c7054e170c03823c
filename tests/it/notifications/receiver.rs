//! A webhook receiver on loopback for the notification tests: a real HTTP/1.1 server that
//! answers 200 to everything and keeps each request's path, Slipway headers and body.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// One request a receiver got.
#[derive(Clone, Debug)]
pub struct Received {
    pub path: String,
    pub signature: Option<String>,
    pub event_header: Option<String>,
    pub delivery: Option<String>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// A webhook receiver on loopback that answers 200 to everything and keeps what it got.
pub struct Receiver {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start(bind: SocketAddr) -> Receiver {
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .expect("bind receiver");
        let addr = listener.local_addr().unwrap();
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let store = received.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let store = store.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: http::Request<hyper::body::Incoming>| {
                            let store = store.clone();
                            async move {
                                let header = |name: &str| {
                                    request
                                        .headers()
                                        .get(name)
                                        .and_then(|v| v.to_str().ok())
                                        .map(str::to_owned)
                                };
                                let mut got = Received {
                                    path: request.uri().path().to_owned(),
                                    signature: header("x-slipway-signature"),
                                    event_header: header("x-slipway-event"),
                                    delivery: header("x-slipway-delivery"),
                                    body: Vec::new(),
                                };
                                got.body = request.into_body().collect().await?.to_bytes().to_vec();
                                store.lock().unwrap().push(got);
                                Ok::<_, hyper::Error>(http::Response::new(
                                    http_body_util::Full::new(bytes::Bytes::from_static(b"ok")),
                                ))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver {
            addr,
            received,
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn got(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The JSON bodies received at `path` for `event`.
    pub fn events(&self, path: &str, event: &str) -> Vec<Received> {
        self.got()
            .into_iter()
            .filter(|r| r.path == path && r.event_header.as_deref() == Some(event))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
