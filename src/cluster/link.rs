//! A task's connection to the daemon's fetch server (`boot.rs` fetches its build on one,
//! `report.rs` reports its usage on another): TLS to the certificate the boot document pins
//! and nothing else, HTTP/1.1.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;

/// A connection to the daemon's fetch server, trusting only the certificate the boot
/// document names.
pub struct Connection {
    pub sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    /// `host:port`, for the `Host` header.
    pub authority: String,
}

/// Connects over TLS to the fetch server `url` names, trusting only `cert_pem`.
pub async fn connect(url: &str, cert_pem: &str) -> Result<Connection, String> {
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
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    // With upgrades: a tunnel's request becomes its byte stream.
    tokio::spawn(connection.with_upgrades());
    Ok(Connection {
        sender,
        authority: format!("{host}:{port}"),
    })
}

/// A `GET` of `url` on a new connection to its fetch server (asking to upgrade to
/// `upgrade`, when given); the response, whatever its status.
pub async fn get(
    url: &str,
    cert_pem: &str,
    upgrade: Option<&str>,
) -> Result<http::Response<hyper::body::Incoming>, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("the URL: {e}"))?;
    let Connection {
        mut sender,
        authority,
    } = connect(url, cert_pem).await?;
    let mut request = http::Request::get(uri.path()).header(http::header::HOST, authority);
    if let Some(protocol) = upgrade {
        request = request
            .header(http::header::CONNECTION, "upgrade")
            .header(http::header::UPGRADE, protocol);
    }
    let request = request
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())
}
