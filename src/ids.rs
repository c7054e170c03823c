//! Identifiers, secrets, timestamps and their encodings: `prj_`/`pvn_`/`dpl_`/`src_`/`tok_`
//! ids, `slw_` API tokens, RFC 3339 times, base32, hex and SHA-256 digests in hex. Randomness
//! comes from the OS (ring's `SystemRandom`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::rand::{SecureRandom, SystemRandom};

const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// Lowercase RFC 4648 base32 without padding.
pub fn base32(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 8 / 5 + 1);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for &byte in bytes {
        buffer = (buffer << 8) | u32::from(byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(BASE32[((buffer >> bits) & 31) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(BASE32[((buffer << (5 - bits)) & 31) as usize] as char);
    }
    out
}

pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    SystemRandom::new()
        .fill(&mut bytes)
        .expect("the OS random number generator failed");
    bytes
}

/// `prefix` + 24 random base32 characters (120 bits).
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", base32(&random_bytes::<15>()))
}

/// A new API token secret: `slw_` + 32 random bytes in base32.
pub fn new_token_secret() -> String {
    format!("slw_{}", base32(&random_bytes::<32>()))
}

/// A request id: `req_`, a random per-process prefix (16 base32 characters) and a counter (at
/// least 10 hex digits), so the hot path makes no `getrandom` call per request. Unique within
/// a process, unlikely to repeat across restarts. Built on the stack: no allocation until it
/// becomes a header value.
pub fn request_id() -> RequestId {
    use std::io::Write as _;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static PREFIX: OnceLock<String> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| base32(&random_bytes::<10>()));
    let mut id = RequestId {
        bytes: [0; REQUEST_ID_MAX],
        len: 0,
    };
    let mut out = &mut id.bytes[..];
    let counter = COUNTER.fetch_add(1, Ordering::Relaxed);
    write!(out, "req_{prefix}{counter:010x}").expect("a request id fits its buffer");
    id.len = REQUEST_ID_MAX - out.len();
    id
}

/// `req_` + 16 + up to 16 hex digits.
const REQUEST_ID_MAX: usize = 36;

/// A request's id ([`request_id`]).
pub struct RequestId {
    bytes: [u8; REQUEST_ID_MAX],
    len: usize,
}

impl RequestId {
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).expect("a request id is ASCII")
    }

    pub fn header_value(&self) -> http::HeaderValue {
        http::HeaderValue::from_bytes(&self.bytes[..self.len])
            .expect("a request id is visible ASCII")
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// RFC 3339 UTC with milliseconds, e.g. `2026-11-21T19:40:00.123Z`.
pub fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// Standard base64 with padding (RFC 4648 §4), e.g. for HTTP Basic credentials.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16)
            | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
            | u32::from(*chunk.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 15)] as char);
    }
    out
}

/// The value of one hex digit (either case).
pub fn hex_digit(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Hex (either case, even length) back to bytes.
pub fn hex_decode(text: &str) -> Option<Vec<u8>> {
    let digits = text.as_bytes();
    if digits.len() % 2 != 0 {
        return None;
    }
    digits
        .chunks(2)
        .map(|pair| Some(hex_digit(pair[0])? << 4 | hex_digit(pair[1])?))
        .collect()
}

/// Lowercase hex SHA-256 of `bytes` (archive names, certificate fingerprints).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base32_matches_rfc4648() {
        assert_eq!(base32(b""), "");
        assert_eq!(base32(b"f"), "my");
        assert_eq!(base32(b"foobar"), "mzxw6ytboi");
        assert_eq!(new_id("prj_").len(), 28);
        assert_eq!(new_token_secret().len(), 4 + 52);
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn request_ids_are_distinct_header_values() {
        let (first, second) = (request_id(), request_id());
        assert_eq!(first.as_str().len(), 4 + 16 + 10);
        assert!(first.as_str().starts_with("req_"));
        assert_ne!(first.as_str(), second.as_str());
        assert_eq!(first.header_value(), first.as_str());
        assert_eq!(first.to_string(), first.as_str());
    }

    #[test]
    fn base64_matches_rfc4648() {
        for (input, output) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), output);
        }
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(hex_decode("00abFF"), Some(vec![0x00, 0xab, 0xff]));
        assert_eq!(hex_decode("abc"), None);
        assert_eq!(hex_decode("zz"), None);
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
