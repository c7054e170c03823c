//! The affinity cookie: `slipway_instance=<instance>.<mac>`, where `mac` is the first 16
//! bytes (hex) of HMAC-SHA256 over `<host key>|<instance>` under the router's key, so a
//! visitor can name an instance of the host it got the cookie from, and no other. Made once
//! per instance when the router builds a snapshot; a request's cookie is checked by a
//! constant-time compare with the instance's, without hashing on the request path.
//!
//! The cookie stays in the request the app gets: apps ignore cookies they do not know, and
//! taking it out would mean rewriting the `Cookie` header (an allocation per request, and a
//! header the app may compare byte for byte). It says only which instance answered.

use http::{HeaderMap, HeaderValue};
use ring::hmac;
use subtle::ConstantTimeEq;

use super::Instance;

/// The cookie's name.
pub const COOKIE_NAME: &str = "slipway_instance";

/// Bytes of the HMAC kept (hex: twice as many characters).
const MAC_BYTES: usize = 16;

/// The key the router signs instance cookies with.
pub struct AffinityKey(hmac::Key);

impl AffinityKey {
    pub fn new(bytes: [u8; 32]) -> AffinityKey {
        AffinityKey(hmac::Key::new(hmac::HMAC_SHA256, &bytes))
    }

    /// A key of random bytes: cookies stay valid while the daemon runs.
    pub fn random() -> AffinityKey {
        AffinityKey::new(crate::ids::random_bytes())
    }

    /// The cookie of `instance` for the host key `host`; `None` for an instance name that
    /// cannot be a cookie value (anything but ASCII letters, digits, `.`, `-` and `_`).
    pub(super) fn cookie(&self, host: &str, instance: &str) -> Option<Cookie> {
        let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_');
        if instance.is_empty() || !instance.bytes().all(allowed) {
            return None;
        }
        let tag = hmac::sign(&self.0, format!("{host}|{instance}").as_bytes());
        let mac = crate::ids::hex(&tag.as_ref()[..MAC_BYTES]);
        let value = format!("{COOKIE_NAME}={instance}.{mac}; Path=/; HttpOnly; SameSite=Lax");
        Some(Cookie {
            set: HeaderValue::from_str(&value).ok()?,
            set_secure: HeaderValue::from_str(&format!("{value}; Secure")).ok()?,
            mac: mac.into_bytes().into_boxed_slice(),
        })
    }
}

/// An instance's cookie: its MAC and the `Set-Cookie` values that give it.
pub(super) struct Cookie {
    mac: Box<[u8]>,
    set: HeaderValue,
    set_secure: HeaderValue,
}

impl Cookie {
    /// The `Set-Cookie` value (`secure`: with `Secure`, for visitors over HTTPS).
    pub(super) fn header(&self, secure: bool) -> &HeaderValue {
        match secure {
            true => &self.set_secure,
            false => &self.set,
        }
    }
}

/// The index of the instance the request's affinity cookie names, when the cookie is valid
/// and the instance has an address.
pub(super) fn find(instances: &[Instance], request_headers: &HeaderMap) -> Option<usize> {
    let pairs = request_headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'));
    for pair in pairs {
        let Some(value) = pair
            .trim()
            .strip_prefix(COOKIE_NAME)
            .and_then(|rest| rest.strip_prefix('='))
        else {
            continue;
        };
        let Some((name, mac)) = value.rsplit_once('.') else {
            continue;
        };
        let found = instances.iter().position(|instance| {
            &*instance.name == name
                && instance.address.is_some()
                && instance
                    .cookie
                    .as_ref()
                    .is_some_and(|cookie| bool::from(cookie.mac.ct_eq(mac.as_bytes())))
        });
        if found.is_some() {
            return found;
        }
    }
    None
}
