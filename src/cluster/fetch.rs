//! How a task gets its build without a registry: the daemon serves each deployment's build
//! tarball at `https://<fetch_listen>/builds/<deployment>/<capability>` over TLS with a
//! certificate of its own (its PEM travels in the task's boot secret, so the task trusts
//! exactly this server), and the task checks the tarball's SHA-256 before it unpacks it.
//!
//! A capability is the HMAC-SHA256 of the deployment id under a key kept in the data dir
//! (`cluster/fetch.key`, 0600), so the URLs in the engine's secrets stay valid across daemon
//! restarts (a task rescheduled a day later fetches again), and it is honoured while the
//! deployment is granted (runs on the cluster); stopping it revokes it. The certificate and
//! its key are kept next to it, made once per `fetch_listen` address. A capability is only
//! ever in the engine's secret store, never in a log or the API.
//!
//! The same capability lets the deployment's tasks report their usage:
//! `POST /usage/<deployment>/<capability>` with a [`TaskReport`] (at most
//! [`MAX_REPORT_BYTES`]) → 204, kept in [`TaskReadings`]; 404 for a wrong or revoked
//! capability, 400 for a body that is not a report. And it carries the tasks' tunnels to
//! their linked add-ons (`tunnel.rs`), each under a capability of its own (the HMAC of
//! `<deployment>/<add-on address>`), honoured while the deployment is granted with that
//! add-on in its reach. Nothing else is served.

use std::collections::HashMap;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use ring::hmac;
use tokio_util::sync::CancellationToken;

use super::readings::{TaskReadings, TaskReport};

/// Where builds are served and where usage is reported (then the deployment id and the
/// capability).
const BUILDS: &str = "/builds/";
const USAGE: &str = "/usage/";

/// The largest usage report taken.
pub const MAX_REPORT_BYTES: usize = 1024;

/// The path a task reports its usage at, from its build URL's path.
pub fn usage_path(build_path: &str) -> Option<String> {
    Some(format!("{USAGE}{}", build_path.strip_prefix(BUILDS)?))
}

/// A build a capability lets a task fetch.
#[derive(Debug, Clone)]
pub struct Build {
    pub deployment_id: String,
    pub tarball: PathBuf,
    pub sha256: String,
    /// The add-ons its tasks may tunnel to (the deployment's links).
    pub reach: Vec<SocketAddrV4>,
}

/// The build server: its address, its certificate and the builds it serves.
pub struct FetchServer {
    address: SocketAddr,
    cert_pem: String,
    key: hmac::Key,
    builds: Mutex<HashMap<String, Build>>,
    readings: Arc<TaskReadings>,
}

/// Writes a new file only its owner reads, synced.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Reads `path`, or writes what `make` gives there (0600) first.
fn kept(path: &Path, make: impl FnOnce() -> std::io::Result<Vec<u8>>) -> std::io::Result<Vec<u8>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(bytes),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let bytes = make()?;
            write_private(path, &bytes)?;
            Ok(bytes)
        }
        Err(error) => Err(error),
    }
}

/// The certificate (PEM) and its key (PKCS#8 DER) for `ip`, made once and kept in `dir`.
fn certificate(dir: &Path, ip: std::net::IpAddr) -> std::io::Result<(String, Vec<u8>)> {
    let other = |e: rcgen::Error| std::io::Error::other(e.to_string());
    let key_path = dir.join(format!("fetch-{ip}.key"));
    let cert_path = dir.join(format!("fetch-{ip}.pem"));
    if let (Ok(key), Ok(cert)) = (
        std::fs::read(&key_path),
        std::fs::read_to_string(&cert_path),
    ) {
        return Ok((cert, key));
    }
    let key = rcgen::KeyPair::generate().map_err(other)?;
    let params = rcgen::CertificateParams::new(vec![ip.to_string()]).map_err(other)?;
    let cert = params.self_signed(&key).map_err(other)?;
    write_private(&key_path, &key.serialize_der())?;
    write_private(&cert_path, cert.pem().as_bytes())?;
    Ok((cert.pem(), key.serialize_der()))
}

impl FetchServer {
    /// Binds `listen` (port 0: any) with the certificate and key kept in `dir`; the usage
    /// tasks report goes into `readings`.
    pub async fn bind(
        listen: SocketAddr,
        dir: &Path,
        readings: Arc<TaskReadings>,
        shutdown: CancellationToken,
    ) -> std::io::Result<Arc<FetchServer>> {
        let other = |e: String| std::io::Error::other(e);
        std::fs::create_dir_all(dir)?;
        let secret = kept(&dir.join("fetch.key"), || {
            Ok(crate::ids::random_bytes::<32>().to_vec())
        })?;
        let (cert_pem, key_der) = certificate(dir, listen.ip())?;
        let chain = crate::tls::certs::parse_chain(&cert_pem).map_err(|e| other(e.to_string()))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| other(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(
            chain,
            rustls::pki_types::PrivateKeyDer::Pkcs8(key_der.into()),
        )
        .map_err(|e| other(e.to_string()))?;
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let server = Arc::new(FetchServer {
            address: listener.local_addr()?,
            cert_pem,
            key: hmac::Key::new(hmac::HMAC_SHA256, &secret),
            builds: Mutex::new(HashMap::new()),
            readings,
        });
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        tokio::spawn(server.clone().serve(listener, acceptor, shutdown));
        Ok(server)
    }

    /// The certificate tasks pin.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// What the tasks reported.
    pub fn readings(&self) -> &TaskReadings {
        &self.readings
    }

    fn capability(&self, deployment_id: &str) -> String {
        crate::ids::hex(hmac::sign(&self.key, deployment_id.as_bytes()).as_ref())
    }

    /// The capability URL of `build`, honoured from now on (the same URL every time for a
    /// deployment, across restarts).
    pub fn grant(&self, build: Build) -> String {
        let url = format!(
            "https://{}{BUILDS}{}/{}",
            self.address,
            build.deployment_id,
            self.capability(&build.deployment_id)
        );
        self.lock().insert(build.deployment_id.clone(), build);
        url
    }

    /// The tunnel URL of `target`, an add-on the deployment's build reaches (honoured while
    /// a grant of the deployment names it).
    pub fn tunnel_url(&self, deployment_id: &str, target: SocketAddrV4) -> String {
        let tag = hmac::sign(&self.key, format!("{deployment_id}/{target}").as_bytes());
        format!(
            "https://{}/tunnels/{deployment_id}/{target}/{}",
            self.address,
            crate::ids::hex(tag.as_ref())
        )
    }

    /// The add-on a tunnel request's path names, when its capability is right and the
    /// deployment is granted with it in its reach.
    fn tunnel_for(&self, path: &str) -> Option<SocketAddrV4> {
        let mut parts = path.strip_prefix("/tunnels/")?.splitn(3, '/');
        let (deployment_id, target, capability) = (parts.next()?, parts.next()?, parts.next()?);
        let tag = crate::ids::hex_decode(capability)?;
        hmac::verify(
            &self.key,
            format!("{deployment_id}/{target}").as_bytes(),
            &tag,
        )
        .ok()?;
        let target: SocketAddrV4 = target.parse().ok()?;
        let granted = self.lock().get(deployment_id)?.reach.contains(&target);
        granted.then_some(target)
    }

    /// Revokes the deployment's capability (and forgets what its tasks reported).
    pub fn revoke(&self, deployment_id: &str) {
        self.lock().remove(deployment_id);
        self.readings.forget(deployment_id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Build>> {
        self.builds.lock().expect("builds poisoned")
    }

    /// The build a request's path names under `prefix`, when its capability is right and it
    /// is granted.
    fn build_for(&self, path: &str, prefix: &str) -> Option<Build> {
        let (deployment_id, capability) = path.strip_prefix(prefix)?.split_once('/')?;
        // In constant time: the check does not say how much of a guess was right.
        let tag = crate::ids::hex_decode(capability)?;
        hmac::verify(&self.key, deployment_id.as_bytes(), &tag).ok()?;
        self.lock().get(deployment_id).cloned()
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
                    .serve_connection_with_upgrades(TokioIo::new(tls), service)
                    .await;
            });
        }
    }

    async fn answer(&self, request: http::Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        let answer = |status: StatusCode, body: Bytes| {
            let mut response = Response::new(Full::new(body));
            *response.status_mut() = status;
            response
        };
        if request.uri().path().starts_with("/tunnels/") {
            return match self.tunnel_for(request.uri().path()) {
                Some(target) => super::tunnel::open(request, target),
                None => answer(StatusCode::NOT_FOUND, Bytes::new()),
            };
        }
        let path = request.uri().path().to_owned();
        if request.method() == http::Method::POST {
            let Some(build) = self.build_for(&path, USAGE) else {
                return answer(StatusCode::NOT_FOUND, Bytes::new());
            };
            let status = self.take_report(&build.deployment_id, request).await;
            return answer(status, Bytes::new());
        }
        let Some(build) = self.build_for(&path, BUILDS) else {
            return answer(StatusCode::NOT_FOUND, Bytes::new());
        };
        match tokio::fs::read(&build.tarball).await {
            Ok(bytes) => answer(StatusCode::OK, Bytes::from(bytes)),
            Err(_) => answer(StatusCode::NOT_FOUND, Bytes::new()),
        }
    }

    /// Keeps a task's usage report (a bounded JSON body).
    async fn take_report(
        &self,
        deployment_id: &str,
        request: http::Request<hyper::body::Incoming>,
    ) -> StatusCode {
        use http_body_util::BodyExt;
        let body = http_body_util::Limited::new(request.into_body(), MAX_REPORT_BYTES);
        let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
            return StatusCode::BAD_REQUEST;
        };
        let Ok(report) = serde_json::from_slice::<TaskReport>(&body) else {
            return StatusCode::BAD_REQUEST;
        };
        match self
            .readings
            .record(deployment_id, report, std::time::Instant::now())
        {
            Ok(()) => StatusCode::NO_CONTENT,
            Err(super::readings::Refused::Invalid) => StatusCode::BAD_REQUEST,
            Err(super::readings::Refused::Full) => StatusCode::TOO_MANY_REQUESTS,
        }
    }
}
