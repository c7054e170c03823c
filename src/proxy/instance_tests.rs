//! The proxy in front of several instances over real sockets: requests spread over them, go
//! to the less loaded, survive an instance that refuses connections, and stick to the
//! instance an affinity cookie names.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

use super::tests::{backend, forwarded_by_visitor_host};
use super::Proxy;
use crate::http_util::{full, Body, BodyError};
use crate::proxy::test_harness::{client, fetch, front_server, send};
use crate::upstreams::{Affinity, AffinityKey, Upstreams};

/// An app instance on 127.0.0.1:0 that answers its `name`; `/hang` is held until the test
/// ends (and counted in `hanging`), `/stream` sends one chunk, then another 300 ms later.
struct Named {
    address: SocketAddr,
    hanging: Arc<AtomicUsize>,
}

async fn named(name: &'static str) -> Named {
    let hanging = Arc::new(AtomicUsize::new(0));
    let counter = hanging.clone();
    let address = front_server(move |request, _peer| {
        let counter = counter.clone();
        async move {
            match request.uri().path() {
                "/hang" => {
                    counter.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    Response::new(full(name))
                }
                "/stream" => {
                    let chunks =
                        futures_util::stream::iter([0u64, 300]).then(move |delay| async move {
                            tokio::time::sleep(Duration::from_millis(delay)).await;
                            Ok::<_, BodyError>(Frame::data(Bytes::from(name)))
                        });
                    Response::new(BodyExt::boxed(StreamBody::new(chunks)))
                }
                _ => Response::new(full(name)),
            }
        }
    })
    .await;
    Named { address, hanging }
}

/// An instance that dies with every request: it reads a little of it, then closes without
/// answering. Also how many connections it got.
async fn dying_instance() -> (SocketAddr, Arc<Mutex<usize>>) {
    let hits = Arc::new(Mutex::new(0usize));
    let counter = hits.clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            *counter.lock().unwrap() += 1;
            let mut buffer = [0u8; 16];
            let _ = stream.readable().await;
            let _ = stream.try_read(&mut buffer);
            drop(stream);
        }
    });
    (address, hits)
}

/// An address nothing listens on: connecting is refused.
async fn refusing() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    address
}

/// A front server proxying everything to `upstreams`, as if over HTTPS.
async fn front(upstreams: &Upstreams) -> SocketAddr {
    let proxy = Arc::new(Proxy::new());
    let upstreams = upstreams.clone();
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

fn instances(addresses: &[SocketAddr]) -> Upstreams {
    let named = addresses
        .iter()
        .enumerate()
        .map(|(index, address)| (format!("web.{}", index + 1), Some(*address)));
    Upstreams::new(named, Affinity::None)
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// One instance refuses connections (killed, not yet taken out of the route): every
/// request, with or without a body, is answered by the other, and nothing stays counted.
#[tokio::test]
async fn an_instance_that_refuses_connections_fails_no_request() {
    let up = named("up").await;
    for order in [
        [refusing().await, up.address],
        [up.address, refusing().await],
    ] {
        let upstreams = instances(&order);
        let address = front(&upstreams).await;
        for round in 0..30 {
            let fetched = fetch(address, "GET", "/", &[]).await;
            assert_eq!(
                (fetched.status.as_u16(), fetched.text()),
                (200, "up".into())
            );
            let request = Request::post(format!("http://{address}/"))
                .body(full(format!("payload {round}")))
                .unwrap();
            let posted = send(request).await;
            assert_eq!((posted.status.as_u16(), posted.text()), (200, "up".into()));
        }
        let loads: Vec<usize> = upstreams.instances().iter().map(|i| i.load()).collect();
        assert_eq!(loads, [0, 0]);
    }
    // With every instance refusing, the visitor gets the 502 page.
    let upstreams = instances(&[refusing().await, refusing().await]);
    let address = front(&upstreams).await;
    assert_eq!(fetch(address, "GET", "/", &[]).await.status, 502);
}

/// The handshake of a WebSocket goes to the instance that accepts the connection.
#[tokio::test]
async fn a_websocket_reaches_the_instance_that_is_up() {
    let up = backend().await;
    for order in [
        [refusing().await, up.address],
        [up.address, refusing().await],
    ] {
        let upstreams = instances(&order);
        let address = front(&upstreams).await;
        for _ in 0..4 {
            let stream = TcpStream::connect(address).await.unwrap();
            let (mut socket, _) =
                tokio_tungstenite::client_async(format!("ws://{address}/ws"), stream)
                    .await
                    .expect("WebSocket handshake");
            let serving = order.iter().position(|a| *a == up.address).unwrap();
            assert_eq!(
                upstreams.instances()[serving].load(),
                1,
                "an open tunnel counts"
            );
            socket.send(Message::text("hi")).await.unwrap();
            let reply = tokio::time::timeout(Duration::from_secs(5), socket.next()).await;
            assert_eq!(reply.unwrap().unwrap().unwrap(), Message::text("hi"));
            socket.close(None).await.unwrap();
            drop(socket);
            wait_for("the tunnel to end", || {
                upstreams.instances()[serving].load() == 0
            })
            .await;
        }
    }
}

/// Without load, requests spread over both instances.
#[tokio::test]
async fn both_instances_receive_traffic() {
    let (one, two) = (named("one").await, named("two").await);
    let address = front(&instances(&[one.address, two.address])).await;
    let mut answered: HashMap<String, usize> = HashMap::new();
    for _ in 0..200 {
        *answered
            .entry(fetch(address, "GET", "/", &[]).await.text())
            .or_default() += 1;
    }
    assert_eq!(answered.len(), 2, "{answered:?}");
    assert!(answered.values().all(|count| *count >= 40), "{answered:?}");
}

/// A request in flight makes its instance the more loaded: the next requests go to the
/// other, until the visitor gives up on it; a streamed body counts until its end.
#[tokio::test]
async fn requests_go_to_the_instance_with_fewer_in_flight() {
    let (one, two) = (named("one").await, named("two").await);
    let upstreams = instances(&[one.address, two.address]);
    let address = front(&upstreams).await;
    let mut hang = TcpStream::connect(address).await.unwrap();
    hang.write_all(b"GET /hang HTTP/1.1\r\nhost: shop.test\r\n\r\n")
        .await
        .unwrap();
    let hanging = [one.hanging.clone(), two.hanging.clone()];
    wait_for("the hanging request", || {
        hanging
            .iter()
            .any(|count| count.load(Ordering::SeqCst) == 1)
    })
    .await;
    let (busy, idle) = match one.hanging.load(Ordering::SeqCst) {
        1 => (0, "two"),
        _ => (1, "one"),
    };
    assert_eq!(upstreams.instances()[busy].load(), 1);
    for _ in 0..20 {
        assert_eq!(fetch(address, "GET", "/", &[]).await.text(), idle);
    }
    drop(hang);
    wait_for("the dropped request to be taken off", || {
        upstreams.instances()[busy].load() == 0
    })
    .await;

    let request = Request::get(format!("http://{address}/stream"))
        .body(crate::http_util::empty())
        .unwrap();
    let response = client().request(request).await.unwrap();
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    let streaming = usize::from(&first[..] == b"two");
    assert_eq!(
        upstreams.instances()[streaming].load(),
        1,
        "a body streaming counts"
    );
    while body.frame().await.is_some() {}
    wait_for("the ended body to be taken off", || {
        upstreams.instances()[streaming].load() == 0
    })
    .await;
}

/// Affinity on: the first response sets the cookie of the instance that answered, and the
/// visitor's next requests all go there without a new cookie; a forged one is replaced.
#[tokio::test]
async fn an_affinity_cookie_sends_the_visitor_back_to_its_instance() {
    let (one, two) = (named("one").await, named("two").await);
    let upstreams = Upstreams::new(
        [("web.1", Some(one.address)), ("web.2", Some(two.address))],
        Affinity::Cookie,
    )
    .with_cookies(&AffinityKey::new([9; 32]), "shop");
    let address = front(&upstreams).await;
    let first = fetch(address, "GET", "/", &[]).await;
    let set = first.header("set-cookie").expect("a cookie").to_owned();
    assert!(
        set.ends_with("; Path=/; HttpOnly; SameSite=Lax; Secure"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    let expected = match first.text().as_str() {
        "one" => "slipway_instance=web.1.",
        _ => "slipway_instance=web.2.",
    };
    assert!(
        cookie.starts_with(expected),
        "{cookie} from {}",
        first.text()
    );
    for _ in 0..30 {
        let again = fetch(address, "GET", "/", &[("cookie", &cookie)]).await;
        assert_eq!(again.text(), first.text());
        assert_eq!(again.header("set-cookie"), None);
    }
    let forged = format!("{}0", &cookie[..cookie.len() - 1]);
    let forged = match forged == cookie {
        true => format!("{}1", &cookie[..cookie.len() - 1]),
        false => forged,
    };
    let answered = fetch(address, "GET", "/", &[("cookie", &forged)]).await;
    assert!(
        answered.header("set-cookie").is_some(),
        "a forged cookie is replaced"
    );
}

/// A request goes out once: the instance that got (part of) it is not asked again, nor is
/// another, when it fails; the visitor gets the 502 page. Bodies still stream.
#[tokio::test]
async fn a_request_that_was_sent_is_not_sent_again_elsewhere() {
    let (dropping, hits) = dying_instance().await;
    let up = named("up").await;
    let upstreams = Upstreams::new(
        [("web.1", Some(dropping)), ("web.2", Some(up.address))],
        Affinity::None,
    );
    let address = front(&upstreams).await;
    let mut failed = 0;
    for _ in 0..20 {
        let request: Request<Body> = Request::post(format!("http://{address}/"))
            .body(full("payload"))
            .unwrap();
        let fetched = send(request).await;
        match fetched.status.as_u16() {
            200 => assert_eq!(fetched.text(), "up"),
            status => {
                assert_eq!(status, 502);
                failed += 1;
            }
        }
    }
    assert_eq!(
        failed,
        *hits.lock().unwrap(),
        "each request the closing app got failed"
    );
    assert!(failed > 0, "the closing instance got no request in 20");
}

/// An instance killed while it holds a GET (it read the request, then its connection ended
/// without an answer): the GET goes to the other instance and no visitor sees a 502.
#[tokio::test]
async fn a_get_whose_instance_dies_with_it_goes_to_the_next_one() {
    let (dropping, hits) = dying_instance().await;
    let up = named("up").await;
    let upstreams = Upstreams::new(
        [("web.1", Some(dropping)), ("web.2", Some(up.address))],
        Affinity::None,
    );
    let address = front(&upstreams).await;
    for _ in 0..20 {
        let fetched = fetch(address, "GET", "/", &[]).await;
        assert_eq!(fetched.status.as_u16(), 200, "{}", fetched.text());
        assert_eq!(fetched.text(), "up");
    }
    assert!(
        *hits.lock().unwrap() > 0,
        "the dying instance got no GET in 20"
    );
}
