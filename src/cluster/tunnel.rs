//! Add-on links from cluster tasks: add-ons run in the control plane's sandboxes, on
//! addresses only this machine reaches, so a task reaches each linked add-on through a
//! tunnel. Inside the task, `task-boot` (next to the app for the task's life) listens on a loopback address per add-on (`127.0.1.<n>:<the add-on's port>`; the app's
//! `DATABASE_URL` / `REDIS_URL` name it instead of the add-on's address) and carries each
//! connection over TLS to the daemon's build server (the same pinned certificate), which
//! upgrades a request to `/tunnels/<deployment>/<add-on address>/<capability>` into a plain
//! byte stream to the add-on. The capability is the HMAC of the deployment and the address;
//! it is honoured while the deployment runs on the cluster and is linked to that add-on.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};

/// The protocol a tunnel request upgrades to.
pub const UPGRADE: &str = "slipway-tunnel";

/// One linked add-on as a task reaches it: where the app connects inside the task, and the
/// tunnel's URL on the build server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tunnel {
    pub listen: SocketAddrV4,
    pub url: String,
}

/// The loopback address inside a task that stands for the `index`th linked add-on.
pub fn local_address(index: usize, target: SocketAddrV4) -> SocketAddrV4 {
    let n = u8::try_from(index + 1).unwrap_or(u8::MAX);
    SocketAddrV4::new(Ipv4Addr::new(127, 0, 1, n), target.port())
}

/// The environment with each add-on address (`10.213.0.9:5432`) replaced by the loopback
/// address its tunnel listens on inside the task.
pub fn rewrite(env: &mut [(String, String)], tunnels: &[(SocketAddrV4, SocketAddrV4)]) {
    for (_, value) in env.iter_mut() {
        for (target, listen) in tunnels {
            *value = replace_address(value, &target.to_string(), &listen.to_string());
        }
    }
}

/// `text` with each whole `address` in it (not the tail of a longer one) replaced.
fn replace_address(text: &str, address: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(address) {
        let whole = !rest[..at].ends_with(|c: char| c.is_ascii_digit() || c == '.')
            && !rest[at + address.len()..].starts_with(|c: char| c.is_ascii_digit());
        out.push_str(&rest[..at]);
        out.push_str(if whole { with } else { address });
        rest = &rest[at + address.len()..];
    }
    out.push_str(rest);
    out
}

type Answer = http::Response<Full<Bytes>>;

fn status(code: http::StatusCode) -> Answer {
    let mut response = http::Response::new(Full::new(Bytes::new()));
    *response.status_mut() = code;
    response
}

/// The build server's side: a request to upgrade to [`UPGRADE`] is answered `101` and its
/// connection is spliced to `target` (the add-on) once upgraded; anything else is `400`.
pub(super) fn open(request: http::Request<hyper::body::Incoming>, target: SocketAddrV4) -> Answer {
    let asks = request
        .headers()
        .get(http::header::UPGRADE)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(UPGRADE.as_bytes()));
    if !asks {
        return status(http::StatusCode::BAD_REQUEST);
    }
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(request).await {
            Ok(upgraded) => upgraded,
            Err(error) => {
                tracing::debug!(%error, "a tunnel's upgrade failed");
                return;
            }
        };
        let mut task = TokioIo::new(upgraded);
        match tokio::net::TcpStream::connect(target).await {
            Ok(mut addon) => {
                let _ = tokio::io::copy_bidirectional(&mut task, &mut addon).await;
            }
            Err(error) => {
                tracing::warn!(%error, %target, "a cluster task's tunnel cannot reach its add-on")
            }
        }
    });
    let mut response = status(http::StatusCode::SWITCHING_PROTOCOLS);
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("upgrade"),
    );
    headers.insert(
        http::header::UPGRADE,
        http::HeaderValue::from_static(UPGRADE),
    );
    response
}

/// Listens for each tunnel (before the app starts, so its first connection finds them)
/// and carries every connection to the build server from then on.
pub(super) async fn listen(tunnels: &[Tunnel], cert_pem: &str) -> Result<(), String> {
    let cert_pem: Arc<str> = Arc::from(cert_pem);
    for tunnel in tunnels {
        let listener = tokio::net::TcpListener::bind(tunnel.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", tunnel.listen))?;
        tokio::spawn(accept(listener, tunnel.clone(), cert_pem.clone()));
    }
    Ok(())
}

async fn accept(listener: tokio::net::TcpListener, tunnel: Tunnel, cert_pem: Arc<str>) {
    let tunnel = Arc::new(tunnel);
    loop {
        let Ok((mut app, _)) = listener.accept().await else {
            continue;
        };
        let (tunnel, cert_pem) = (tunnel.clone(), cert_pem.clone());
        tokio::spawn(async move {
            match carry(&tunnel.url, &cert_pem).await {
                Ok(upgraded) => {
                    let mut upgraded = TokioIo::new(upgraded);
                    let _ = tokio::io::copy_bidirectional(&mut app, &mut upgraded).await;
                }
                Err(error) => eprintln!(
                    "slipway task-boot: the tunnel at {}: {error}",
                    tunnel.listen
                ),
            }
        });
    }
}

/// A tunnel to the add-on behind `url`, upgraded.
async fn carry(url: &str, cert_pem: &str) -> Result<hyper::upgrade::Upgraded, String> {
    let response = super::link::get(url, cert_pem, Some(UPGRADE)).await?;
    if response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        return Err(format!("the control plane answered {}", response.status()));
    }
    hyper::upgrade::on(response)
        .await
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_addon_address_in_the_environment_becomes_its_tunnels() {
        let target: SocketAddrV4 = "10.213.0.9:5432".parse().unwrap();
        let other: SocketAddrV4 = "10.213.0.12:6379".parse().unwrap();
        let pairs = [
            (target, local_address(0, target)),
            (other, local_address(1, other)),
        ];
        let mut env = vec![
            (
                "DATABASE_URL".to_owned(),
                "postgres://app:pw@10.213.0.9:5432/app".to_owned(),
            ),
            (
                "REDIS_URL".to_owned(),
                "redis://:pw@10.213.0.12:6379".to_owned(),
            ),
            (
                "OTHER".to_owned(),
                "10.213.0.90:5432 110.213.0.9:5432 10.213.0.9:54321".to_owned(),
            ),
        ];
        rewrite(&mut env, &pairs);
        assert_eq!(env[0].1, "postgres://app:pw@127.0.1.1:5432/app");
        assert_eq!(env[1].1, "redis://:pw@127.0.1.2:6379");
        assert_eq!(
            env[2].1,
            "10.213.0.90:5432 110.213.0.9:5432 10.213.0.9:54321"
        );
    }
}
