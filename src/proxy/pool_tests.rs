//! The upstream pool on its own: which connections go back to it, and when idle ones close.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::upstream::Pool;
use crate::http_util::{empty, Body};

/// An app on 127.0.0.1:0: `/` answers "ok"; `/stream` sends 64 chunks of 64 KiB; `/hang`
/// never answers. Counts the
/// connections still open.
async fn app() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let open = Arc::new(AtomicUsize::new(0));
    let counter = open.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counter = counter.clone();
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let service = service_fn(|request: Request<hyper::body::Incoming>| async move {
                    if request.uri().path() == "/hang" {
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    }
                    let body: Body = if request.uri().path() == "/stream" {
                        let chunks = (0..64).map(|_| {
                            Ok::<_, crate::http_util::BodyError>(Frame::data(Bytes::from(
                                vec![b'x'; 64 * 1024],
                            )))
                        });
                        StreamBody::new(futures_util::stream::iter(chunks)).boxed()
                    } else {
                        crate::http_util::full("ok")
                    };
                    Ok::<_, Infallible>(Response::new(body))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                counter.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (address, open)
}

fn get(path: &str) -> Request<Body> {
    let mut request = Request::new(empty());
    *request.uri_mut() = path.parse().unwrap();
    request
        .headers_mut()
        .insert(http::header::HOST, "app.test".parse().unwrap());
    request
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..300 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn only_connections_whose_body_was_read_to_the_end_go_back_to_the_pool() {
    let (address, open) = app().await;
    let pool = Pool::new(8, Duration::from_secs(30), Duration::from_secs(3));
    let timeout = Duration::from_secs(5);

    let conn = pool.connect(address).await.unwrap();
    let response = pool.exchange(conn, address, get("/"), timeout, None).await;
    let body = response.ok().unwrap().into_body().collect().await.unwrap();
    assert_eq!(body.to_bytes(), "ok");
    assert_eq!(pool.idle_count(), 1);

    // Checked out again: the same connection answers.
    let conn = pool.checkout(address).await.expect("the idle connection");
    assert_eq!(pool.idle_count(), 0);
    let response = pool
        .exchange(conn, address, get("/stream"), timeout, None)
        .await;
    let mut body = response.ok().unwrap().into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert!(first.data_ref().is_some_and(|data| !data.is_empty()));
    // The visitor went away mid-body: the connection is closed, never pooled.
    drop(body);
    assert_eq!(pool.idle_count(), 0);
    wait_for("the app to see the connection close", || {
        open.load(Ordering::SeqCst) == 0
    })
    .await;
    assert!(pool.checkout(address).await.is_none());
}

#[tokio::test]
async fn idle_connections_close_once_expired() {
    let (address, open) = app().await;
    let pool = Pool::new(8, Duration::from_millis(200), Duration::from_secs(3));
    for _ in 0..2 {
        let conn = pool.connect(address).await.unwrap();
        let response = pool
            .exchange(conn, address, get("/"), Duration::from_secs(5), None)
            .await;
        response.ok().unwrap().into_body().collect().await.unwrap();
    }
    assert_eq!(pool.idle_count(), 2);
    assert_eq!(open.load(Ordering::SeqCst), 2);
    // The sweeper runs every second.
    wait_for("the sweeper", || pool.idle_count() == 0).await;
    wait_for("the app to see both close", || {
        open.load(Ordering::SeqCst) == 0
    })
    .await;
}

#[tokio::test]
async fn a_connection_the_app_closed_is_not_checked_out() {
    let (address, _open) = app().await;
    let pool = Pool::new(8, Duration::from_secs(30), Duration::from_secs(3));
    let conn = pool.connect(address).await.unwrap();
    let mut request = get("/");
    request
        .headers_mut()
        .insert(http::header::CONNECTION, "close".parse().unwrap());
    let response = pool
        .exchange(conn, address, request, Duration::from_secs(5), None)
        .await;
    response.ok().unwrap().into_body().collect().await.unwrap();
    // Pooled or not, it must never be handed out again.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(pool.checkout(address).await.is_none());
}

/// Each connection keeps one response timer, re-armed lazily: a reused connection still times
/// out each request at its own deadline, whether the timer was armed for an earlier one (a
/// previous request's) or a later one.
#[tokio::test]
async fn a_reused_connection_times_out_each_request_at_its_own_deadline() {
    let (address, _open) = app().await;
    let pool = Pool::new(8, Duration::from_secs(30), Duration::from_secs(3));
    for (first, second) in [(300, 300), (5000, 300)] {
        let conn = pool.connect(address).await.unwrap();
        let response = pool
            .exchange(conn, address, get("/"), Duration::from_millis(first), None)
            .await
            .unwrap_or_else(|_| panic!("the first request failed"));
        response.into_body().collect().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let conn = pool.checkout(address).await.expect("the idle connection");
        let started = tokio::time::Instant::now();
        let result = pool
            .exchange(
                conn,
                address,
                get("/hang"),
                Duration::from_millis(second),
                None,
            )
            .await;
        let elapsed = started.elapsed();
        assert!(
            matches!(result, Err(ref failure) if matches!(failure.error, super::upstream::SendError::TimedOut(_))),
            "the hanging request did not time out"
        );
        assert!(
            elapsed >= Duration::from_millis(second - 20) && elapsed < Duration::from_secs(2),
            "timed out after {elapsed:?}, its timeout was {second} ms (the first request's {first} ms)"
        );
    }
}
