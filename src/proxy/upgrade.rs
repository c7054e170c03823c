//! WebSocket pass-through: forwards the upgrade handshake to the app and, when the app
//! switches protocols, splices the visitor's upgraded connection to the app's with
//! `copy_bidirectional` in a tracked task. Called by [`Proxy::forward`](super::Proxy::forward).

use std::net::SocketAddr;

use http::{Request, Response, StatusCode};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::{bad_gateway, headers, Proxy};
use crate::http_util::{empty, Body};
use crate::pages::VisitorPage;

/// Sends the upgrade request `head` (body-less) and sets up the tunnel on a 101.
pub(super) async fn forward(
    proxy: &Proxy,
    head: Request<Body>,
    visitor: Option<OnUpgrade>,
    upstream: SocketAddr,
) -> Response<Body> {
    let Some(visitor) = visitor else {
        tracing::warn!("proxy: WebSocket request on a connection served without upgrades");
        return VisitorPage::UpgradeUnavailable.response();
    };
    if proxy.close_tunnels.is_cancelled() {
        return VisitorPage::ShuttingDown.response();
    }
    let mut response = match proxy.send(head).await {
        Ok(response) => response,
        Err(error) => return bad_gateway(upstream, &error),
    };
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return super::from_upstream(response);
    }

    let app = hyper::upgrade::on(&mut response);
    let cancelled = proxy.close_tunnels.clone();
    proxy.tunnels.spawn(async move {
        let tunnel = async {
            let (visitor, app) = tokio::try_join!(visitor, app)?;
            let (mut visitor, mut app) = (TokioIo::new(visitor), TokioIo::new(app));
            let (sent, received) = tokio::io::copy_bidirectional(&mut visitor, &mut app).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((sent, received))
        };
        tokio::select! {
            result = tunnel => match result {
                Ok((sent, received)) => tracing::debug!(%upstream, sent, received, "proxy: WebSocket closed"),
                Err(error) => tracing::debug!(%upstream, %error, "proxy: WebSocket ended with an error"),
            },
            () = cancelled.cancelled() => tracing::debug!(%upstream, "proxy: WebSocket closed for shutdown"),
        }
    });

    let (mut parts, _body) = response.into_parts();
    headers::from_upstream(&mut parts.headers, true);
    Response::from_parts(parts, empty())
}
