//! Opening a connection to the daemon for `client::http`: name resolution (`*.localhost` is
//! loopback, as in curl and browsers, whatever the system resolver says), TCP with a connect
//! timeout, and TLS with rustls (ring) for `https` URLs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::ClientError;

/// The system's CA bundle on Debian and its relatives; read when present.
pub const SYSTEM_CA_FILE: &str = "/etc/ssl/certs/ca-certificates.crt";

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A byte stream to the daemon: plain TCP or TLS over TCP.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Where the API lives, parsed from `SLIPWAY_URL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub https: bool,
    pub host: String,
    pub port: u16,
    /// A path prefix without its trailing slash ("" for the usual root).
    pub prefix: String,
}

impl Endpoint {
    /// Parses `http(s)://host[:port][/prefix]`.
    pub fn parse(url: &str) -> Result<Endpoint, ClientError> {
        let invalid = |why: &str| {
            ClientError::Config(format!(
                "SLIPWAY_URL {url:?} {why}; expected e.g. https://slipway.example.com"
            ))
        };
        let uri: http::Uri = url.trim().parse().map_err(|_| invalid("is not a URL"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(invalid("must start with http:// or https://")),
        };
        let host = uri.host().ok_or_else(|| invalid("has no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if uri.query().is_some() {
            return Err(invalid("must not have a query"));
        }
        Ok(Endpoint {
            https,
            port: uri.port_u16().unwrap_or(if https { 443 } else { 80 }),
            prefix: uri.path().trim_end_matches('/').to_owned(),
            host,
        })
    }

    /// The `Host` header value: the name, plus the port when it is not the scheme's default.
    pub fn authority(&self) -> String {
        let default_port = if self.https { 443 } else { 80 };
        let host = match self.host.parse::<Ipv6Addr>() {
            Ok(_) => format!("[{}]", self.host),
            Err(_) => self.host.clone(),
        };
        if self.port == default_port {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Whether a name is `localhost` or under `.localhost` (RFC 6761: always loopback).
pub fn is_loopback_name(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost" || host.ends_with(".localhost")
}

/// The addresses to try for `host:port`, in order.
async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, ClientError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    if is_loopback_name(host) {
        return Ok(vec![
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port),
        ]);
    }
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|error| ClientError::Connect {
            target: format!("{host}:{port}"),
            detail: format!("cannot resolve the name: {error}"),
        })?
        .collect();
    if addresses.is_empty() {
        return Err(ClientError::Connect {
            target: format!("{host}:{port}"),
            detail: "the name has no addresses".into(),
        });
    }
    Ok(addresses)
}

/// Connects to the endpoint, trying each address in turn, and wraps the stream in TLS for
/// `https` endpoints (`tls` is then required).
pub async fn connect(
    endpoint: &Endpoint,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Result<Box<dyn Io>, ClientError> {
    let target = format!("{}:{}", endpoint.host, endpoint.port);
    let mut last_error = String::from("no address to try");
    let mut stream = None;
    let addresses = resolve(&endpoint.host, endpoint.port).await?;
    for address in &addresses {
        let failure = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await
        {
            Ok(Ok(connected)) => {
                stream = Some(connected);
                break;
            }
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        };
        // Name the address only when the target's own name does not already say it.
        last_error = match endpoint.host.parse::<IpAddr>() {
            Ok(_) => failure,
            Err(_) => format!("{address}: {failure}"),
        };
    }
    let stream = stream.ok_or_else(|| ClientError::Connect {
        target: target.clone(),
        detail: last_error,
    })?;
    let _ = stream.set_nodelay(true);
    if !endpoint.https {
        return Ok(Box::new(stream));
    }
    let config = tls.ok_or_else(|| ClientError::Tls("no TLS configuration".into()))?;
    let name = ServerName::try_from(endpoint.host.clone())
        .map_err(|_| ClientError::Tls(format!("{:?} is not a valid TLS name", endpoint.host)))?;
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    let handshake = connector.connect(name, stream);
    match tokio::time::timeout(CONNECT_TIMEOUT, handshake).await {
        Ok(Ok(tls_stream)) => Ok(Box::new(tls_stream)),
        Ok(Err(error)) => Err(ClientError::Connect {
            target,
            detail: format!(
                "TLS handshake failed: {error} (for a daemon with its internal CA, set \
                 SLIPWAY_CA_FILE to the output of `slipway ca export`)"
            ),
        }),
        Err(_) => Err(ClientError::Connect {
            target,
            detail: "no TLS handshake within 10 s".into(),
        }),
    }
}

/// The TLS client configuration: webpki roots, the system bundle when `system_file` exists,
/// and every certificate of `extra_file` (PEM; an unreadable or empty one is an error).
pub fn tls_config(
    system_file: &Path,
    extra_file: Option<&Path>,
) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Ok(pem) = std::fs::read(system_file) {
        // A damaged system bundle should not stop the client: skip what does not parse.
        let certificates: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &pem[..])
            .filter_map(Result::ok)
            .collect();
        roots.add_parsable_certificates(certificates);
    }
    if let Some(extra_file) = extra_file {
        let unusable = |why: String| {
            ClientError::Tls(format!("SLIPWAY_CA_FILE {}: {why}", extra_file.display()))
        };
        let pem = std::fs::read(extra_file).map_err(|error| unusable(error.to_string()))?;
        let certificates = rustls_pemfile::certs(&mut &pem[..])
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| unusable(format!("not PEM: {error}")))?;
        if certificates.is_empty() {
            return Err(unusable("holds no PEM certificate".into()));
        }
        for certificate in certificates {
            roots
                .add(certificate)
                .map_err(|error| unusable(format!("unusable certificate: {error}")))?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|error| ClientError::Tls(error.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_with_default_ports_and_prefixes() {
        let endpoint = Endpoint::parse("https://slipway.example.com").unwrap();
        assert_eq!(
            endpoint,
            Endpoint {
                https: true,
                host: "slipway.example.com".into(),
                port: 443,
                prefix: String::new()
            }
        );
        assert_eq!(endpoint.authority(), "slipway.example.com");
        let endpoint = Endpoint::parse("http://slipway.localhost:8080/base/").unwrap();
        assert_eq!((endpoint.port, endpoint.prefix.as_str()), (8080, "/base"));
        assert_eq!(endpoint.authority(), "slipway.localhost:8080");
        assert_eq!(
            Endpoint::parse("http://[::1]:9000").unwrap().authority(),
            "[::1]:9000"
        );
        for bad in ["slipway.example.com", "ftp://x", "http://x/?a=b", ""] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn localhost_names_are_loopback() {
        assert!(is_loopback_name("slipway.localhost"));
        assert!(is_loopback_name("LOCALHOST."));
        assert!(!is_loopback_name("localhost.example.com"));
        assert!(!is_loopback_name("notlocalhost"));
    }

    #[tokio::test]
    async fn localhost_names_resolve_without_the_system_resolver() {
        let addresses = resolve("a.b.localhost", 8080).await.unwrap();
        assert_eq!(addresses[0], "127.0.0.1:8080".parse().unwrap());
        assert!(addresses.iter().all(|a| a.ip().is_loopback()));
    }

    #[test]
    fn a_missing_or_empty_extra_ca_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        assert!(tls_config(Path::new(SYSTEM_CA_FILE), Some(&missing)).is_err());
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        assert!(tls_config(Path::new(SYSTEM_CA_FILE), Some(&empty)).is_err());
        assert!(tls_config(&missing, None).is_ok());
    }
}
