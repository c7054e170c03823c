//! How a task gets its build without a registry: the daemon serves each deployment's build
//! tarball at `https://<fetch_listen>/builds/<capability>` over TLS with a certificate made
//! at start-up (its PEM travels in the task's boot secret, so the task trusts exactly this
//! server), and the task checks the tarball's SHA-256 before it unpacks it.
//!
//! A capability is 32 random bytes, valid while its deployment runs on the cluster (a task
//! rescheduled an hour later must fetch it again); stopping the deployment revokes it. It
//! is only ever in the engine's secret store and this table, never in a log or the API.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio_util::sync::CancellationToken;

/// A build a capability lets a task fetch.
#[derive(Debug, Clone)]
pub struct Build {
    pub deployment_id: String,
    pub tarball: PathBuf,
    pub sha256: String,
}

/// The build server: its address, its certificate and the capabilities it honours.
pub struct FetchServer {
    address: SocketAddr,
    cert_pem: String,
    builds: Mutex<HashMap<String, Build>>,
}

impl FetchServer {
    /// Binds `listen` (port 0: any) with a fresh certificate for its IP.
    pub async fn bind(
        listen: SocketAddr,
        shutdown: CancellationToken,
    ) -> std::io::Result<Arc<FetchServer>> {
        let other = |e: String| std::io::Error::other(e);
        let key = rcgen::KeyPair::generate().map_err(|e| other(e.to_string()))?;
        let params = rcgen::CertificateParams::new(vec![listen.ip().to_string()])
            .map_err(|e| other(e.to_string()))?;
        let cert = params.self_signed(&key).map_err(|e| other(e.to_string()))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| other(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .map_err(|e| other(e.to_string()))?;
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let server = Arc::new(FetchServer {
            address: listener.local_addr()?,
            cert_pem: cert.pem(),
            builds: Mutex::new(HashMap::new()),
        });
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        tokio::spawn(server.clone().serve(listener, acceptor, shutdown));
        Ok(server)
    }

    /// The certificate tasks pin.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A new capability URL for `build`.
    pub fn grant(&self, build: Build) -> String {
        let token = crate::ids::base32(&crate::ids::random_bytes::<32>());
        let url = format!("https://{}/builds/{token}", self.address);
        self.lock().insert(token, build);
        url
    }

    /// Revokes every capability of the deployment.
    pub fn revoke(&self, deployment_id: &str) {
        self.lock().retain(|_, b| b.deployment_id != deployment_id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Build>> {
        self.builds.lock().expect("builds poisoned")
    }

    async fn serve(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        acceptor: tokio_rustls::TlsAcceptor,
        shutdown: CancellationToken,
    ) {
        loop {
            let stream = tokio::select! {
                _ = shutdown.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(_) => continue,
                },
            };
            let (server, acceptor) = (self.clone(), acceptor.clone());
            tokio::spawn(async move {
                let Ok(Ok(tls)) = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    acceptor.accept(stream),
                )
                .await
                else {
                    return;
                };
                let service = hyper::service::service_fn(move |request| {
                    let server = server.clone();
                    async move { Ok::<_, std::convert::Infallible>(server.answer(request).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    }

    async fn answer(&self, request: http::Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        let build = request
            .uri()
            .path()
            .strip_prefix("/builds/")
            .and_then(|token| self.lock().get(token).cloned());
        let answer = |status: StatusCode, body: Bytes| {
            let mut response = Response::new(Full::new(body));
            *response.status_mut() = status;
            response
        };
        let Some(build) = build else {
            return answer(StatusCode::NOT_FOUND, Bytes::new());
        };
        match tokio::fs::read(&build.tarball).await {
            Ok(bytes) => answer(StatusCode::OK, Bytes::from(bytes)),
            Err(_) => answer(StatusCode::NOT_FOUND, Bytes::new()),
        }
    }
}
