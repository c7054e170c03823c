//! The HTTPS server `benches/tls.sh` measures: the real `tls` module (internal CA, SNI resolver,
//! rustls with ring) in front of hyper, answering a fixed 12-byte body, HTTP/1.1 or HTTP/2 by
//! ALPN. It writes the leaf chain and key it serves to `<dir>/chain.pem` and `<dir>/key.pem` so
//! nginx can serve the very same certificate, and its port to `<dir>/port`.
//!
//! Usage: `tls_server <dir>`; runs until killed.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use slipway::config::{TlsConfig, TlsMode};
use slipway::tls::store::{keys, CertRecord};
use slipway::tls::{MemoryTlsStore, SystemClock, TlsManager, TlsStore};

const NAME: &str = "localhost";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).ok_or("usage: tls_server <dir>")?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let config = TlsConfig {
            mode: TlsMode::Internal,
            acme_directory: String::new(),
            acme_email: String::new(),
            acme_ca_file: None,
            cert_file: None,
            key_file: None,
            internal_domain_suffixes: vec!["test".into()],
            acme_orders_per_hour: 100,
            acme_orders_per_project_per_hour: 100,
        };
        let store: Arc<dyn TlsStore> = Arc::new(MemoryTlsStore::new());
        // The control host is issued at start: "localhost" resolves without any DNS set-up.
        let manager = TlsManager::new(
            &config,
            NAME,
            NAME,
            Arc::clone(&store),
            Arc::new(SystemClock),
        )?;
        let record: CertRecord = slipway::tls::store::read_json(
            &*store,
            &format!("{}{NAME}", keys::INTERNAL_CERT_PREFIX),
        )?
        .ok_or("no leaf was issued")?;
        std::fs::write(dir.join("chain.pem"), &record.chain_pem)?;
        std::fs::write(dir.join("key.pem"), &record.key_pem)?;
        std::fs::write(dir.join("root.pem"), manager.root_pem().unwrap_or_default())?;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        std::fs::write(dir.join("port"), listener.local_addr()?.port().to_string())?;
        let acceptor = tokio_rustls::TlsAcceptor::from(manager.server_config());
        loop {
            let (tcp, _) = listener.accept().await?;
            let _ = tcp.set_nodelay(true);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
                let service = service_fn(|_request: hyper::Request<hyper::body::Incoming>| async {
                    Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::from_static(
                        b"hello world\n",
                    ))))
                });
                let io = TokioIo::new(tls);
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
    })
}
