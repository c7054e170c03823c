//! The `metrics_listen` listener: plain HTTP/1.1, no auth, one route, `GET /metrics`
//! (anything else 404). Meant for a Prometheus on the same host or a private network; at
//! most 64 connections at once, each with a header timeout. Started by `app.rs`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Observatory;
use crate::http_util::{full, Body};
use crate::metrics::exposition::CONTENT_TYPE;

const MAX_CONNECTIONS: usize = 64;

pub async fn serve(
    listener: TcpListener,
    observatory: Arc<Observatory>,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            continue;
        };
        let observatory = observatory.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |request| {
                let observatory = observatory.clone();
                async move { Ok::<_, Infallible>(answer(&observatory, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = connection => {}
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

async fn answer(observatory: &Arc<Observatory>, request: Request<Incoming>) -> Response<Body> {
    if request.uri().path() != "/metrics" {
        return plain(
            StatusCode::NOT_FOUND,
            "only GET /metrics is served here\n".into(),
        );
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into());
        response
            .headers_mut()
            .insert(http::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match observatory
        .prometheus_text(&super::Audience::Operator)
        .await
    {
        Ok(text) => {
            let mut response = Response::new(full(text));
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(CONTENT_TYPE),
            );
            response
        }
        Err(error) => {
            tracing::error!(%error, "metrics: cannot gather the figures");
            plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot gather the figures; see the daemon log\n".into(),
            )
        }
    }
}

fn plain(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(full(text));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
