//! Test listeners around a `TlsManager`: an HTTPS server (rustls with the manager's config,
//! HTTP/1.1 or HTTP/2 by ALPN, a fixed answer naming the SNI and protocol) and a plain HTTP
//! server that answers ACME HTTP-01 challenges and redirects everything else (308). The manager
//! behind them can be swapped, which is how tests "restart the daemon" on the same ports.

use std::convert::Infallible;
use std::net::SocketAddr;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use slipway::config::{TlsConfig, TlsMode};
use slipway::tls::{TlsManager, ACME_TLS_ALPN};
use tokio::net::TcpListener;

pub type SharedManager = Arc<ArcSwap<TlsManager>>;

pub fn tls_config(mode: TlsMode) -> TlsConfig {
    TlsConfig {
        mode,
        acme_directory: String::new(),
        acme_email: String::new(),
        acme_ca_file: None,
        cert_file: None,
        key_file: None,
        internal_domain_suffixes: vec!["test".into()],
        acme_orders_per_hour: 100,
        acme_orders_per_project_per_hour: 100,
    }
}

/// Serves HTTPS on `listener` with whatever manager `shared` holds at each handshake.
pub fn serve_https(listener: TcpListener, shared: SharedManager) {
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = tokio_rustls::TlsAcceptor::from(shared.load().server_config());
            tokio::spawn(async move {
                let Ok(Ok(tls)) =
                    tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
                else {
                    return;
                };
                let (_, connection) = tls.get_ref();
                let alpn = connection.alpn_protocol().map(<[u8]>::to_vec);
                let sni = connection.server_name().unwrap_or("").to_owned();
                if alpn.as_deref() == Some(ACME_TLS_ALPN) {
                    return;
                }
                let io = TokioIo::new(tls);
                let h2 = alpn.as_deref() == Some(b"h2");
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let body = format!("hello {sni} over {:?}\n", request.version());
                    async move {
                        Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from(body))))
                    }
                });
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                        .serve_connection(io, service)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
            });
        }
    });
}

/// Serves plain HTTP: ACME HTTP-01 answers, else a 308 to HTTPS. Requests whose Host is in
/// `refuse_challenges_for` get 404 on challenges (to drive the TLS-ALPN-01 fallback).
pub fn serve_http(
    listener: TcpListener,
    shared: SharedManager,
    https_port: u16,
    refuse_challenges_for: Arc<Mutex<Vec<String>>>,
) {
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let shared = Arc::clone(&shared);
            let refused = Arc::clone(&refuse_challenges_for);
            tokio::spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let host = request
                        .headers()
                        .get(http::header::HOST)
                        .and_then(|value| value.to_str().ok())
                        .unwrap_or("");
                    let host = host.split(':').next().unwrap_or("").to_owned();
                    let path = request.uri().path().to_owned();
                    let response = match path.strip_prefix("/.well-known/acme-challenge/") {
                        Some(token) => {
                            let refused = refused.lock().unwrap().contains(&host);
                            match shared.load().http01_response(token).filter(|_| !refused) {
                                Some(answer) => {
                                    hyper::Response::new(Full::new(Bytes::from(answer)))
                                }
                                None => status_response(404, None),
                            }
                        }
                        None => {
                            status_response(308, Some(format!("https://{host}:{https_port}{path}")))
                        }
                    };
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
}

fn status_response(status: u16, location: Option<String>) -> hyper::Response<Full<Bytes>> {
    let mut response = hyper::Response::new(Full::new(Bytes::new()));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
    if let Some(location) = location {
        response
            .headers_mut()
            .insert(http::header::LOCATION, location.parse().unwrap());
    }
    response
}

pub async fn bind() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}
