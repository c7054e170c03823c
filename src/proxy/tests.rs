//! The proxy over real sockets: a hyper backend on 127.0.0.1:0 that counts its connections,
//! a front server on 127.0.0.1:0 calling [`Proxy::forward`], and a client in front of both.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::{Proxy, ProxySettings};
use crate::http_util::{empty, from_incoming, full, Body, BodyError};
use crate::proxy::test_harness::{fetch, front_server, send};
use crate::upstreams::Upstreams;

/// A hyper app on 127.0.0.1:0 with `/headers`, `/echo`, `/ws` and a default `ok`.
pub(super) struct Backend {
    pub address: SocketAddr,
    pub connections: Arc<AtomicUsize>,
}

pub(super) async fn backend() -> Backend {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    tokio::spawn(async move {
        while let Ok((stream, _peer)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let service =
                    service_fn(
                        |request| async move { Ok::<_, std::convert::Infallible>(app(request)) },
                    );
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades();
                let _ = connection.await;
            });
        }
    });
    Backend {
        address,
        connections,
    }
}

fn app(mut request: Request<Incoming>) -> Response<Body> {
    match request.uri().path() {
        "/headers" => {
            let mut listing = format!("version: {:?}\nuri: {}\n", request.version(), request.uri());
            for (name, value) in request.headers() {
                listing.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("?")));
            }
            Response::builder()
                .header("keep-alive", "timeout=5")
                .header("proxy-authenticate", "Basic")
                .header("x-app", "yes")
                .body(full(listing))
                .unwrap()
        }
        "/echo" => Response::new(from_incoming(request.into_body())),
        "/ws" => {
            let key = request
                .headers()
                .get("sec-websocket-key")
                .expect("a WebSocket key")
                .as_bytes();
            let accept = derive_accept_key(key);
            let upgrade = hyper::upgrade::on(&mut request);
            tokio::spawn(async move {
                let upgraded = upgrade.await.expect("backend upgrade");
                let mut socket =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                while let Some(Ok(message)) = socket.next().await {
                    if message.is_text() || message.is_binary() {
                        socket.send(message).await.expect("echo");
                    }
                }
            });
            Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header("connection", "Upgrade")
                .header("upgrade", "websocket")
                .header("sec-websocket-accept", accept)
                .body(empty())
                .unwrap()
        }
        _ => Response::new(full("ok")),
    }
}

/// What the router would pass: routed by the visitor's `:authority` or `Host`, over HTTPS.
pub(super) fn forwarded_by_visitor_host(
    request: &Request<Incoming>,
    peer: SocketAddr,
) -> super::Forwarded {
    let host = crate::dispatch::request_host(request).unwrap_or_default();
    super::Forwarded {
        client: peer.ip(),
        proto: "https",
        host: http::HeaderValue::from_str(&host).unwrap(),
    }
}

/// A front server proxying everything to `upstream` as if it were served over HTTPS.
async fn front(proxy: Proxy, upstream: SocketAddr) -> SocketAddr {
    let proxy = Arc::new(proxy);
    let upstreams = Upstreams::one(upstream);
    front_server(move |request, peer| {
        let proxy = proxy.clone();
        let upstreams = upstreams.clone();
        async move {
            let forwarded = forwarded_by_visitor_host(&request, peer);
            proxy.forward(request, &upstreams, &forwarded).await
        }
    })
    .await
}

/// The backend's `/headers` listing as `(name, value)` lines.
fn listed(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

#[tokio::test]
async fn forwarded_headers_are_set_and_hop_by_hop_dropped() {
    let backend = backend().await;
    let address = front(Proxy::new(), backend.address).await;
    let fetched = fetch(
        address,
        "GET",
        "/headers?q=1",
        &[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-proto", "http"),
            ("x-forwarded-host", "evil.test"),
            ("forwarded", "for=6.6.6.6"),
            ("connection", "keep-alive, x-secret"),
            ("x-secret", "hop"),
            ("keep-alive", "timeout=1"),
            ("te", "trailers"),
            ("proxy-authorization", "Basic eA=="),
            ("x-custom", "kept"),
        ],
    )
    .await;
    assert_eq!(fetched.status, 200);
    let headers = listed(&fetched.text());
    let values = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .collect()
    };
    let host = address.to_string();
    assert_eq!(values("version"), ["HTTP/1.1"]);
    assert_eq!(values("uri"), ["/headers?q=1"]);
    assert_eq!(values("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(values("x-real-ip"), ["127.0.0.1"]);
    assert_eq!(values("x-forwarded-proto"), ["https"]);
    assert_eq!(values("x-forwarded-host"), [host.as_str()]);
    assert_eq!(values("host"), [host.as_str()]);
    assert_eq!(values("x-custom"), ["kept"]);
    for dropped in [
        "forwarded",
        "x-secret",
        "keep-alive",
        "te",
        "proxy-authorization",
        "connection",
    ] {
        assert!(
            values(dropped).is_empty(),
            "{dropped} reached the app: {headers:?}"
        );
    }
    assert_eq!(fetched.header("x-app"), Some("yes"));
    assert_eq!(fetched.header("keep-alive"), None);
    assert_eq!(fetched.header("proxy-authenticate"), None);
}

#[tokio::test]
async fn bodies_stream_both_ways() {
    let backend = backend().await;
    let address = front(Proxy::new(), backend.address).await;

    // A large upload comes back intact.
    let upload: Vec<u8> = (0..16 * 1024 * 1024)
        .map(|index: u32| (index % 253) as u8)
        .collect();
    let request = Request::post(format!("http://{address}/echo"))
        .body(full(upload.clone()))
        .unwrap();
    let echoed = send(request).await;
    assert_eq!(echoed.status, 200);
    assert!(
        echoed.body == upload,
        "echoed body differs ({} bytes)",
        echoed.body.len()
    );

    // Each chunk comes back before the next one is sent: nothing is buffered whole.
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(1);
    let chunks = futures_util::stream::unfold(receiver, |mut receiver| async move {
        let chunk = receiver.recv().await?;
        Some((
            Ok::<_, BodyError>(hyper::body::Frame::data(chunk)),
            receiver,
        ))
    });
    let request = Request::post(format!("http://{address}/echo"))
        .body(BodyExt::boxed(StreamBody::new(chunks)))
        .unwrap();
    let response = crate::proxy::test_harness::client().request(request);
    sender.send(Bytes::from_static(b"chunk-0")).await.unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), response)
        .await
        .expect("head in time")
        .unwrap();
    let mut body = response.into_body();
    for round in 0..20 {
        let mut received = Vec::new();
        let expected = format!("chunk-{round}");
        while received.len() < expected.len() {
            let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
                .await
                .expect("the echo of a chunk arrives while the upload is still open")
                .expect("a frame")
                .expect("no body error");
            received.extend_from_slice(&frame.into_data().expect("data frame"));
        }
        assert_eq!(received, expected.as_bytes());
        sender
            .send(Bytes::from(format!("chunk-{}", round + 1)))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn websocket_echoes_through_the_proxy() {
    let backend = backend().await;
    let address = front(Proxy::new(), backend.address).await;
    let stream = TcpStream::connect(address).await.unwrap();
    let (mut socket, response) =
        tokio_tungstenite::client_async(format!("ws://{address}/ws"), stream)
            .await
            .expect("WebSocket handshake");
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    for round in 0..10 {
        socket
            .send(Message::text(format!("hello {round}")))
            .await
            .unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(5), socket.next())
            .await
            .expect("echo in time");
        assert_eq!(
            reply.unwrap().unwrap(),
            Message::text(format!("hello {round}"))
        );
    }
    socket.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(5), socket.next())
        .await
        .expect("echo in time");
    assert_eq!(reply.unwrap().unwrap(), Message::binary(vec![1u8, 2, 3]));
    socket.close(None).await.unwrap();
}

#[tokio::test]
async fn app_down_or_silent_gives_502() {
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_address = closed.local_addr().unwrap();
    drop(closed);
    let address = front(Proxy::new(), closed_address).await;
    let fetched = fetch(address, "GET", "/", &[]).await;
    assert_eq!(fetched.status, 502);
    assert_eq!(
        fetched.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(fetched.text().contains("502"));

    // An app that accepts but never answers runs into the response timeout.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_address = silent.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _peer)) = silent.accept().await {
            held.push(stream);
        }
    });
    let settings = ProxySettings {
        response_timeout: Duration::from_millis(300),
        ..ProxySettings::STANDARD
    };
    let address = front(Proxy::with_settings(settings), silent_address).await;
    let started = std::time::Instant::now();
    assert_eq!(fetch(address, "GET", "/", &[]).await.status, 502);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn upstream_connections_are_reused() {
    let backend = backend().await;
    let address = front(Proxy::new(), backend.address).await;
    for _ in 0..100 {
        let fetched = fetch(address, "GET", "/", &[]).await;
        assert_eq!(fetched.text(), "ok");
    }
    let connections = backend.connections.load(Ordering::SeqCst);
    assert!(
        (1..=2).contains(&connections),
        "100 sequential requests used {connections} app connections"
    );
}

/// An app that answers the first request on each connection with keep-alive, then closes the
/// connection as soon as a second request arrives on it (a keep-alive race, made certain).
async fn closing_backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _peer)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 64 * 1024];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|window| window == b"\r\n\r\n") {
                    let read = stream.read(&mut buffer).await.unwrap_or(0);
                    if read == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buffer[..read]);
                }
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst";
                stream.write_all(answer).await.unwrap();
                let _ = stream.read(&mut buffer).await;
                // Dropping the stream closes it without an answer.
            });
        }
    });
    (address, connections)
}

#[tokio::test]
async fn idempotent_requests_are_retried_once_on_a_closed_pooled_connection() {
    let (upstream, connections) = closing_backend().await;
    let address = front(Proxy::new(), upstream).await;
    assert_eq!(fetch(address, "GET", "/", &[]).await.text(), "first");
    // Goes out on the pooled connection, which closes; the retry gets a fresh one.
    let retried = fetch(address, "GET", "/", &[]).await;
    assert_eq!(
        (retried.status.as_u16(), retried.text().as_str()),
        (200, "first")
    );
    assert_eq!(connections.load(Ordering::SeqCst), 2);

    // A request with a body is never replayed.
    let request = Request::post(format!("http://{address}/"))
        .body(full("payload"))
        .unwrap();
    assert_eq!(send(request).await.status, 502);
}

#[tokio::test]
async fn http2_requests_go_upstream_as_http1() {
    let backend = backend().await;
    let proxy = Arc::new(Proxy::new());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let upstream = Upstreams::one(backend.address);
    tokio::spawn(async move {
        let (stream, peer) = listener.accept().await.unwrap();
        let service = service_fn(move |request: Request<Incoming>| {
            let proxy = proxy.clone();
            let upstream = upstream.clone();
            async move {
                let forwarded = forwarded_by_visitor_host(&request, peer);
                Ok::<_, std::convert::Infallible>(
                    proxy.forward(request, &upstream, &forwarded).await,
                )
            }
        });
        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .serve_connection(TokioIo::new(stream), service)
            .await;
    });

    let stream = TcpStream::connect(address).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = Request::get("http://web.example.test/headers?h2=1")
        .header("cookie", "a=1")
        .header("cookie", "b=2")
        .body(empty())
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(5), sender.send_request(request))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = String::from_utf8(
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    let headers = listed(&text);
    let value = |name: &str| {
        headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    };
    assert_eq!(value("version"), Some("HTTP/1.1"));
    assert_eq!(value("uri"), Some("/headers?h2=1"));
    assert_eq!(value("host"), Some("web.example.test"));
    assert_eq!(value("x-forwarded-host"), Some("web.example.test"));
    assert_eq!(value("cookie"), Some("a=1; b=2"));
}
