//! Identifiers, secrets and timestamps: `prj_`/`pvn_`/`dpl_`/`src_`/`tok_` ids, `slw_` API
//! tokens, RFC 3339 times. Randomness comes from the OS (ring's `SystemRandom`).

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

/// A request id: a random per-process prefix and a counter, so the hot path makes no
/// `getrandom` call per request. Unique within a process, unlikely to repeat across restarts.
pub fn request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static PREFIX: OnceLock<String> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| base32(&random_bytes::<10>()));
    format!(
        "req_{prefix}{:010x}",
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
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
}
