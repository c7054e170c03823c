//! The `ssl_verification` step: a real TLS handshake to our own HTTPS listener.
//!
//! [`verify_served`] connects to the listener with the app's SNI, verifies the chain and the name
//! against the trust anchors the manager chooses (the internal root, the ACME CA's roots or the
//! webpki roots), checks that the served leaf is the one stored for the name (SHA-256), and
//! sends one HTTP/1.1 request over that connection: any HTTP response proves the listener
//! serves requests with that certificate.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use rustls::crypto::ring as ring_provider;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::TlsError;
use crate::ids::sha256_hex;

/// The whole check (connect, handshake, request, response head) must finish within this.
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(15);

pub async fn verify_served(
    name: &str,
    https_addr: SocketAddr,
    roots: rustls::RootCertStore,
    expected_sha256: &str,
) -> Result<(), TlsError> {
    let failure = |message: String| TlsError::Verification {
        name: name.to_owned(),
        message,
    };
    match tokio::time::timeout(
        VERIFY_TIMEOUT,
        handshake_and_request(name, https_addr, roots, expected_sha256),
    )
    .await
    {
        Ok(result) => result.map_err(failure),
        Err(_) => Err(failure(format!(
            "no answer from {https_addr} within {}s",
            VERIFY_TIMEOUT.as_secs()
        ))),
    }
}

async fn handshake_and_request(
    name: &str,
    https_addr: SocketAddr,
    roots: rustls::RootCertStore,
    expected_sha256: &str,
) -> Result<(), String> {
    let mut config =
        rustls::ClientConfig::builder_with_provider(Arc::new(ring_provider::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|error| error.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let server_name = ServerName::try_from(name.to_owned())
        .map_err(|error| format!("{name:?} is not a DNS name: {error}"))?;
    let tcp = TcpStream::connect(https_addr)
        .await
        .map_err(|error| format!("cannot connect to {https_addr}: {error}"))?;
    let tls = TlsConnector::from(Arc::new(config))
        .connect(server_name, tcp)
        .await
        .map_err(|error| format!("TLS handshake failed: {error}"))?;

    let (_, connection) = tls.get_ref();
    let served_leaf = connection
        .peer_certificates()
        .and_then(|chain| chain.first())
        .ok_or("the server sent no certificate")?;
    let served_sha256 = sha256_hex(served_leaf);
    if served_sha256 != expected_sha256 {
        return Err(format!("the listener serves certificate {served_sha256}, but the stored one is {expected_sha256}"));
    }

    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(tls))
            .await
            .map_err(|error| format!("HTTP handshake failed: {error}"))?;
    let connection_task = tokio::spawn(connection);
    let request = http::Request::get("/")
        .header(http::header::HOST, name)
        .header(http::header::USER_AGENT, "slipway-ssl-verification")
        .body(Empty::new())
        .map_err(|error| error.to_string())?;
    let result = sender
        .send_request(request)
        .await
        .map(|_| ())
        .map_err(|error| format!("no HTTP response over TLS: {error}"));
    connection_task.abort();
    result
}
