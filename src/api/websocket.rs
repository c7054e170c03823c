//! The API's WebSocket upgrades (`GET /api/runs/{runId}/tty`, `GET /api/addons/{addonId}/tunnel`):
//! the request's checks and the `101 Switching Protocols` answer. The handler takes the
//! upgrade (`hyper::upgrade::on`) before it answers and serves the socket in a task of its own.

use super::reply::Reply;
use super::{ApiError, ApiRequest, ErrorCode};

/// The client's `Sec-WebSocket-Key` of a valid upgrade request (HTTP/1.1 `Upgrade:
/// websocket`, version 13); 400 `INVALID_QUERY` otherwise.
pub fn key(request: &ApiRequest) -> Result<String, ApiError> {
    let header = |name: http::header::HeaderName| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase()
    };
    let upgrade = header(http::header::UPGRADE) == "websocket"
        && header(http::header::CONNECTION)
            .split(',')
            .any(|token| token.trim() == "upgrade")
        && header(http::header::SEC_WEBSOCKET_VERSION) == "13";
    let key = request
        .headers()
        .get(http::header::SEC_WEBSOCKET_KEY)
        .and_then(|v| v.to_str().ok());
    // RFC 6455: the base64 of 16 bytes (what the document's pattern says).
    let well_formed = |key: &str| {
        key.len() == 24
            && key.ends_with("==")
            && key[..22]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
    };
    match (upgrade, key) {
        (true, Some(key)) if well_formed(key) => Ok(key.to_owned()),
        _ => Err(ApiError::new(
            ErrorCode::InvalidQuery,
            "this endpoint is a WebSocket: send an HTTP/1.1 upgrade (Connection: Upgrade, \
             Upgrade: websocket, Sec-WebSocket-Version: 13, Sec-WebSocket-Key)",
        )),
    }
}

/// `101 Switching Protocols` accepting the client's `key`.
pub fn switching_protocols(key: &str) -> Reply {
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let response = http::Response::builder()
        .status(http::StatusCode::SWITCHING_PROTOCOLS)
        .header(http::header::CONNECTION, "upgrade")
        .header(http::header::UPGRADE, "websocket")
        .header(http::header::SEC_WEBSOCKET_ACCEPT, accept)
        .body(crate::http_util::empty())
        .expect("a valid response");
    Reply::Whole(response)
}
