//! TLS clients for tests: curl against `https://<name>:<port>/` resolved to loopback and
//! trusting one CA file, and a rustls probe that reports which leaf a server hands out for a
//! name. Used by the manager-level (`tls`) and daemon-level (`tls_daemon`) TLS tests.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Output;
use std::sync::Arc;

/// Asserts curl got `expected` in the body of `https://<name>:<port>/`, trusting `ca_file`.
pub async fn assert_curl_page(name: &str, addr: SocketAddr, ca_file: &Path, expected: &str) {
    let output = curl_https(name, addr, ca_file, &["--fail"]).await;
    assert!(
        output.status.success(),
        "curl https://{name}:{}/ failed: {}",
        addr.port(),
        String::from_utf8_lossy(&output.stderr)
    );
    let body = String::from_utf8_lossy(&output.stdout);
    assert!(body.contains(expected), "curl {name}: {body}");
}

/// curl `https://<name>:<port>/` resolved to loopback, trusting only `ca_file`.
pub async fn curl_https(name: &str, addr: SocketAddr, ca_file: &Path, extra: &[&str]) -> Output {
    curl_https_path(name, "/", addr, ca_file, extra).await
}

/// curl `https://<name>:<port><path>` resolved to loopback, trusting only `ca_file`, with
/// `extra` arguments, bounded by a 10 s `--max-time`.
pub async fn curl_https_path(
    name: &str,
    path: &str,
    addr: SocketAddr,
    ca_file: &Path,
    extra: &[&str],
) -> Output {
    let url = format!("https://{name}:{}{path}", addr.port());
    let resolve = format!("{name}:{}:127.0.0.1", addr.port());
    tokio::process::Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "10", "--cacert"])
        .arg(ca_file)
        .args(["--resolve", &resolve])
        .args(extra)
        .arg(&url)
        .kill_on_drop(true)
        .output()
        .await
        .expect("run curl")
}

/// The SHA-256 of the leaf a handshake with SNI `name` gets (no chain validation).
pub async fn served_leaf(addr: SocketAddr, name: &str) -> Result<String, String> {
    let tls = tls_connect(addr, name, &[]).await?;
    let leaf = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first().cloned())
        .ok_or("no certificate")?;
    Ok(slipway::ids::sha256_hex(&leaf))
}

/// A TLS connection to `addr` with SNI `name` offering `alpn`, accepting any certificate.
pub async fn tls_connect(
    addr: SocketAddr,
    name: &str,
    alpn: &[&[u8]],
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .dangerous()
    .with_custom_certificate_verifier(Arc::new(AcceptAnything))
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|error| error.to_string())?;
    let server_name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(server_name, tcp)
        .await
        .map_err(|error| error.to_string())
}

/// A verifier that accepts any certificate: only for reading what a server serves.
#[derive(Debug)]
struct AcceptAnything;

impl rustls::client::danger::ServerCertVerifier for AcceptAnything {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}
