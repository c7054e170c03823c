//! A release-mode server around the router's serving code, for `benches/router.sh`: it serves
//! HTTP/1.1 on a loopback port and either proxies every request to one upstream with
//! [`slipway::proxy::Proxy`] or serves a directory with [`slipway::static_files::StaticSite`].
//!
//! ```text
//! edge_server proxy  <listen address> <upstream address>
//! edge_server static <listen address> <directory>
//! ```
//! Run by `cargo bench` without arguments, it prints its usage and exits successfully.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use slipway::proxy::Proxy;
use slipway::static_files::StaticSite;
use slipway::upstreams::Upstreams;
use tokio::net::TcpListener;

enum Mode {
    Proxy { upstreams: Upstreams },
    Static { site: StaticSite },
}

fn main() -> anyhow::Result<()> {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let (mode, listen) = match arguments.as_slice() {
        [mode, listen, upstream] if mode == "proxy" => (
            Mode::Proxy {
                upstreams: Upstreams::one(upstream.parse()?),
            },
            listen.parse()?,
        ),
        [mode, listen, directory] if mode == "static" => (
            Mode::Static {
                site: StaticSite::load(&PathBuf::from(directory))?,
            },
            listen.parse()?,
        ),
        _ => {
            eprintln!("usage: edge_server proxy <listen> <upstream> | static <listen> <directory> (see benches/router.sh)");
            return Ok(());
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(serve(Arc::new(mode), listen))
}

async fn serve(mode: Arc<Mode>, listen: SocketAddr) -> anyhow::Result<()> {
    let proxy = Arc::new(Proxy::new());
    let listener = TcpListener::bind(listen).await?;
    println!("listening on {}", listener.local_addr()?);
    loop {
        let (stream, peer) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let mode = mode.clone();
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let mode = mode.clone();
                let proxy = proxy.clone();
                async move {
                    let response = match &*mode {
                        Mode::Proxy { upstreams } => {
                            let host =
                                slipway::dispatch::request_host(&request).unwrap_or_default();
                            let forwarded = slipway::proxy::Forwarded {
                                client: peer.ip(),
                                proto: "http",
                                host: http::HeaderValue::from_str(&host)
                                    .unwrap_or(http::HeaderValue::from_static("localhost")),
                            };
                            proxy.forward(request, upstreams, &forwarded).await
                        }
                        Mode::Static { site } => site.serve(&request),
                    };
                    Ok::<_, Infallible>(response)
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            let _ = connection.await;
        });
    }
}
