//! Header rewriting between the visitor and the app: hop-by-hop headers dropped both ways,
//! `X-Forwarded-*` set (never trusted from the client), HTTP/2 requests made HTTP/1.1-shaped.
//! Called by [`Proxy::forward`](super::Proxy::forward) only.

use std::net::IpAddr;

use http::header::{
    HeaderName, CONNECTION, COOKIE, EXPECT, FORWARDED, HOST, PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use http::{HeaderMap, HeaderValue};

pub(super) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(super) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub(super) const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
pub(super) const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
const PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// The headers that only concern one connection (RFC 9110 §7.6.1), plus the `Proxy-*` ones.
const HOP_BY_HOP: [HeaderName; 9] = [
    CONNECTION,
    KEEP_ALIVE,
    PROXY_CONNECTION,
    PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION,
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
];

/// Who asked, as the app should see it.
pub struct Forwarded {
    /// The peer address of the visitor's connection.
    pub client: IpAddr,
    /// `http` or `https`: the scheme of the visitor's connection.
    pub proto: &'static str,
    /// The host the router resolved this request by (`:authority` or `Host`, lowercased):
    /// the app gets it as `Host` and `X-Forwarded-Host`, whatever else the visitor sent, so a
    /// request routed by one name can never present another to the app.
    pub host: HeaderValue,
}

/// Headers through which a client could claim to be someone or somewhere else. Only the edge
/// knows; every `X-Forwarded-*` is dropped as well.
const CLIENT_CLAIMS: [HeaderName; 9] = [
    FORWARDED,
    X_REAL_IP,
    HeaderName::from_static("x-client-ip"),
    HeaderName::from_static("true-client-ip"),
    HeaderName::from_static("x-cluster-client-ip"),
    HeaderName::from_static("cf-connecting-ip"),
    HeaderName::from_static("fastly-client-ip"),
    HeaderName::from_static("x-original-host"),
    HeaderName::from_static("x-host"),
];

/// Whether an HTTP/1.1 request asks for a WebSocket upgrade.
pub(super) fn is_websocket_upgrade(headers: &HeaderMap) -> bool {
    let upgrade = headers.get(UPGRADE).is_some_and(|value| {
        value
            .as_bytes()
            .split(|&byte| byte == b',')
            .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"websocket"))
    });
    upgrade && connection_tokens(headers).any(|token| token.eq_ignore_ascii_case(b"upgrade"))
}

/// Rewrites a visitor's request headers into the app's. `websocket` keeps the upgrade
/// handshake (`Connection: upgrade`, `Upgrade`) that would otherwise be dropped.
///
/// One pass that keeps what may go through, instead of a removal per unwanted name: this runs
/// for every proxied request.
pub(super) fn to_upstream(headers: HeaderMap, forwarded: &Forwarded, websocket: bool) -> HeaderMap {
    let upgrade = if websocket {
        headers.get(UPGRADE).cloned()
    } else {
        None
    };
    let named = connection_named(&headers);
    let mut kept = HeaderMap::with_capacity(headers.len() + 5);
    let mut current: Option<HeaderName> = None;
    for (name, value) in headers {
        if let Some(name) = name {
            current = Some(name);
        }
        let Some(name) = &current else { continue };
        if forwards(name) && !named.contains(name) {
            kept.append(name.clone(), value);
        }
    }
    let client = ip_header_value(forwarded.client);
    kept.insert(X_FORWARDED_FOR, client.clone());
    kept.insert(X_REAL_IP, client);
    kept.insert(X_FORWARDED_PROTO, HeaderValue::from_static(forwarded.proto));
    kept.insert(X_FORWARDED_HOST, forwarded.host.clone());
    kept.insert(HOST, forwarded.host.clone());
    merge_cookies(&mut kept);
    if let Some(upgrade) = upgrade {
        kept.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        kept.insert(UPGRADE, upgrade);
    }
    kept
}

/// Whether a visitor's header may reach the app: not hop-by-hop, not `Expect` (the front
/// server answers `100-continue` itself when the body is first read), and nothing through
/// which the client claims to be someone or somewhere else (only the edge knows; `Host` and
/// every `X-Forwarded-*` are set by the proxy).
fn forwards(name: &HeaderName) -> bool {
    !(HOP_BY_HOP.contains(name)
        || CLIENT_CLAIMS.contains(name)
        || name == EXPECT
        || name == HOST
        || name.as_str().starts_with("x-forwarded-"))
}

/// The header names listed in `Connection` (hop-by-hop by the sender's say).
fn connection_named(headers: &HeaderMap) -> Vec<HeaderName> {
    if !headers.contains_key(CONNECTION) {
        return Vec::new();
    }
    connection_tokens(headers)
        .filter_map(|token| HeaderName::from_bytes(token).ok())
        .collect()
}

/// Drops hop-by-hop headers from an app's response. A `101 Switching Protocols` keeps its
/// `Upgrade`, with `Connection: upgrade` restored.
pub(super) fn from_upstream(headers: &mut HeaderMap, switching_protocols: bool) {
    let upgrade = if switching_protocols {
        headers.get(UPGRADE).cloned()
    } else {
        None
    };
    remove_hop_by_hop(headers);
    if let Some(upgrade) = upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, upgrade);
    }
}

fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let mut present = connection_named(headers);
    present.extend(
        headers
            .keys()
            .filter(|name| HOP_BY_HOP.contains(name))
            .cloned(),
    );
    for name in present {
        headers.remove(name);
    }
}

/// The comma-separated tokens of every `Connection` header.
fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &[u8]> {
    headers
        .get_all(CONNECTION)
        .iter()
        .flat_map(|value| value.as_bytes().split(|&byte| byte == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|token| !token.is_empty())
}

/// HTTP/2 may split `Cookie` into several fields; HTTP/1.1 wants one (RFC 9113 §8.2.3).
fn merge_cookies(headers: &mut HeaderMap) {
    let mut cookies = headers.get_all(COOKIE).iter();
    let (Some(first), Some(_)) = (cookies.next(), cookies.next()) else {
        return;
    };
    let mut merged = first.as_bytes().to_vec();
    for value in headers.get_all(COOKIE).iter().skip(1) {
        merged.extend_from_slice(b"; ");
        merged.extend_from_slice(value.as_bytes());
    }
    match HeaderValue::from_bytes(&merged) {
        Ok(value) => {
            headers.insert(COOKIE, value);
        }
        Err(_) => tracing::debug!("proxy: cookies could not be merged, forwarded as they are"),
    }
}

fn ip_header_value(ip: IpAddr) -> HeaderValue {
    HeaderValue::from_str(&ip.to_string()).expect("an IP address is a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        headers
    }

    #[test]
    fn request_headers_are_rewritten() {
        let host = HeaderValue::from_static("web.example.test");
        let forwarded = Forwarded {
            client: "192.0.2.7".parse().unwrap(),
            proto: "https",
            host,
        };
        let headers = to_upstream(
            map(&[
                ("connection", "keep-alive, x-secret"),
                ("x-secret", "1"),
                ("keep-alive", "timeout=5"),
                ("te", "trailers"),
                ("proxy-authorization", "Basic eA=="),
                ("x-forwarded-for", "10.0.0.1"),
                ("x-forwarded-host", "evil.example"),
                ("x-forwarded-port", "1"),
                ("x-real-ip", "10.0.0.2"),
                ("true-client-ip", "10.0.0.3"),
                ("host", "evil.example"),
                ("forwarded", "for=10.0.0.1"),
                ("cookie", "a=1"),
                ("cookie", "b=2"),
                ("upgrade", "h2c"),
                ("accept", "*/*"),
            ]),
            &forwarded,
            false,
        );
        for dropped in [
            "connection",
            "x-secret",
            "keep-alive",
            "te",
            "proxy-authorization",
            "forwarded",
            "upgrade",
            "x-forwarded-port",
            "true-client-ip",
        ] {
            assert!(
                !headers.contains_key(dropped),
                "{dropped} should be dropped"
            );
        }
        assert_eq!(headers.get_all(X_FORWARDED_FOR).iter().count(), 1);
        assert_eq!(headers[X_FORWARDED_FOR], "192.0.2.7");
        assert_eq!(headers[X_REAL_IP], "192.0.2.7");
        assert_eq!(headers[X_FORWARDED_PROTO], "https");
        assert_eq!(headers[X_FORWARDED_HOST], "web.example.test");
        assert_eq!(headers[HOST], "web.example.test");
        assert_eq!(headers[COOKIE], "a=1; b=2");
        assert_eq!(headers["accept"], "*/*");
    }

    #[test]
    fn websocket_upgrades_are_recognised_and_kept() {
        let request = map(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket"),
        ]);
        assert!(is_websocket_upgrade(&request));
        assert!(!is_websocket_upgrade(&map(&[("upgrade", "websocket")])));
        assert!(!is_websocket_upgrade(&map(&[
            ("connection", "upgrade"),
            ("upgrade", "h2c")
        ])));
        let forwarded = Forwarded {
            client: "::1".parse().unwrap(),
            proto: "http",
            host: HeaderValue::from_static("chat.example.test"),
        };
        let headers = to_upstream(request, &forwarded, true);
        assert_eq!(headers[CONNECTION], "upgrade");
        assert_eq!(headers[UPGRADE], "websocket");
        assert_eq!(headers[X_FORWARDED_FOR], "::1");
    }
}
