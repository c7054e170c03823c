//! A task's first process (`slipway task-boot <secret>`, inside the runtime image): reads
//! its boot document from the engine's secret, fetches the build over TLS from the daemon
//! (trusting only the certificate the document names), refuses it unless its SHA-256 is the
//! one the document names, unpacks it into `/app`, and becomes the app's command
//! (`/bin/sh -c`), with the document's environment and nothing else.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};

/// What a task is told, in its secret.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootDocument {
    pub url: String,
    pub sha256: String,
    pub cert_pem: String,
    pub command: String,
    pub env: Vec<(String, String)>,
    /// The linked add-ons, reached through tunnels (`slipway task-relay`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tunnels: Vec<super::tunnel::Tunnel>,
}

/// Where the build is unpacked (a tmpfs in the service's spec).
const APP_DIR: &str = "/app";

/// Runs the boot; returns only on failure (the message says why).
pub fn run(secret: &Path) -> Result<std::convert::Infallible, String> {
    let document = read_document(secret)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let tarball = runtime.block_on(fetch(&document))?;
    let digest = crate::ids::sha256_hex(&tarball);
    if digest != document.sha256 {
        return Err(format!(
            "the build's SHA-256 is {digest}, not {}: refused",
            document.sha256
        ));
    }
    unpack(&tarball)?;
    if !document.tunnels.is_empty() {
        start_relay(secret)?;
    }
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(&document.command)
        .current_dir(APP_DIR)
        .env_clear()
        .envs(document.env.iter().map(|(k, v)| (k, v)));
    // This task's own instance name (`web.3`), which the engine set from its slot.
    if let Ok(instance) = std::env::var("SLIPWAY_INSTANCE") {
        command.env("SLIPWAY_INSTANCE", instance);
    }
    let error = command.exec();
    Err(format!("cannot run the command: {error}"))
}

/// Starts `slipway task-relay` next to the app for its life (it ends with the task: the
/// engine's init is PID 1) and waits until its tunnels listen, so the app's first
/// connection to an add-on finds them.
fn start_relay(secret: &Path) -> Result<(), String> {
    use std::io::BufRead;
    let relay = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(relay)
        .arg("task-relay")
        .arg(secret)
        .env_clear()
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the add-on tunnels: {e}"))?;
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped");
    let _ = std::io::BufReader::new(stdout).read_line(&mut line);
    match line.trim() {
        super::tunnel::READY => Ok(()),
        _ => Err("the add-on tunnels did not start (their error is above)".to_owned()),
    }
}

/// Unpacks the build into [`APP_DIR`]; the error names the file and the system's reason.
fn unpack(tarball: &[u8]) -> Result<(), String> {
    let why = |e: std::io::Error| {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            text = format!("{text}: {cause}");
            source = cause.source();
        }
        text
    };
    let mut archive = tar::Archive::new(tarball);
    for entry in archive.entries().map_err(why)? {
        let mut entry = entry.map_err(why)?;
        let path = entry.path().map_err(why)?.into_owned();
        entry
            .unpack_in(APP_DIR)
            .map_err(|e| format!("cannot unpack {}: {}", path.display(), why(e)))?;
    }
    Ok(())
}

/// The boot document in the engine's secret at `secret`.
pub(super) fn read_document(secret: &Path) -> Result<BootDocument, String> {
    let text = std::fs::read(secret).map_err(|e| format!("cannot read {secret:?}: {e}"))?;
    serde_json::from_slice(&text).map_err(|e| format!("the boot document: {e}"))
}

type Tls = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// A TLS connection to the build server of `url`, trusting only `cert_pem`; the URL and
/// the `Host` to send.
pub(super) async fn connect(url: &str, cert_pem: &str) -> Result<(http::Uri, String, Tls), String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("the URL: {e}"))?;
    let host = uri.host().ok_or("the URL has no host")?.to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let mut roots = rustls::RootCertStore::empty();
    for cert in crate::tls::certs::parse_chain(cert_pem).map_err(|e| e.to_string())? {
        roots.add(cert).map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("cannot reach the control plane at {host}:{port}: {e}"))?;
    let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| e.to_string())?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS with the control plane: {e}"))?;
    Ok((uri, format!("{host}:{port}"), tls))
}

async fn fetch(document: &BootDocument) -> Result<Bytes, String> {
    let (uri, host, tls) = connect(&document.url, &document.cert_pem).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let request = http::Request::get(uri.path())
        .header(http::header::HOST, host)
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("the control plane answered {}", response.status()));
    }
    Ok(response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes())
}
