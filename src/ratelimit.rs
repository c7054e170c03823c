//! Rate limiting with token buckets. The bucket arithmetic is pure (the time is an argument);
//! [`RateLimiter`] keeps the buckets per key behind one mutex held only for the arithmetic.
//!
//! Limits (contract): per token (or, without a valid token, per client IPv4 address or IPv6
//! /64) N requests per minute over all `/api/` endpoints, and for POST additionally M per
//! minute per route template.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use crate::budget::ClientKey;

/// The subject of a request without a valid token: its client's address, or its /64 for IPv6
/// (the same key as the connection budget's), so one /64 gets one bucket, not 2^64.
pub fn client_subject(ip: IpAddr) -> String {
    format!("ip:{}", ClientKey::of(ip))
}

/// A bucket refilling `capacity` tokens per 60 s, starting full.
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    tokens: f64,
    updated: f64,
}

/// The outcome of one check against one limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    /// Unix seconds when the bucket is full again.
    pub reset_at: u64,
    /// Seconds until one request is allowed again (0 when allowed).
    pub retry_after: u64,
}

impl Bucket {
    pub fn new(capacity: u32, now: f64) -> Bucket {
        Bucket {
            tokens: f64::from(capacity),
            updated: now,
        }
    }

    fn refill(&mut self, capacity: u32, now: f64) {
        let rate = f64::from(capacity) / 60.0;
        let elapsed = (now - self.updated).max(0.0);
        self.tokens = (self.tokens + elapsed * rate).min(f64::from(capacity));
        self.updated = now;
    }

    /// Takes one token if there is one. `now` is Unix time in seconds.
    pub fn take(&mut self, capacity: u32, now: f64) -> Decision {
        self.refill(capacity, now);
        let rate = f64::from(capacity) / 60.0;
        let allowed = self.tokens >= 1.0;
        if allowed {
            self.tokens -= 1.0;
        }
        let missing = f64::from(capacity) - self.tokens;
        Decision {
            allowed,
            limit: capacity,
            remaining: self.tokens.floor().max(0.0) as u32,
            reset_at: (now + missing / rate).ceil() as u64,
            retry_after: if allowed {
                0
            } else {
                ((1.0 - self.tokens) / rate).ceil().max(1.0) as u64
            },
        }
    }

    /// Whether the bucket would be full at `now` (it can then be forgotten).
    pub fn is_full(&self, capacity: u32, now: f64) -> bool {
        self.tokens + (now - self.updated).max(0.0) * f64::from(capacity) / 60.0
            >= f64::from(capacity)
    }
}

/// Picks what to report: a refusal wins; otherwise the limit with the fewest requests left.
pub fn tightest(decisions: &[Decision]) -> Decision {
    let mut chosen = decisions[0];
    for decision in &decisions[1..] {
        let better = match (decision.allowed, chosen.allowed) {
            (false, true) => true,
            (true, false) => false,
            _ => decision.remaining < chosen.remaining,
        };
        if better {
            chosen = *decision;
        }
    }
    chosen
}

pub struct RateLimiter {
    requests_per_minute: u32,
    posts_per_minute: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    pub fn new(requests_per_minute: u32, posts_per_minute: u32) -> RateLimiter {
        RateLimiter {
            requests_per_minute,
            posts_per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Checks one request by `subject` (a token id or `ip:<addr>`); `post_route` is the route
    /// template for POST requests. A refused request consumes nothing from the other bucket.
    pub fn check(&self, subject: &str, post_route: Option<&str>, now: f64) -> Decision {
        let mut buckets = self.buckets.lock().expect("rate limiter poisoned");
        if buckets.len() > 100_000 {
            let (all, posts) = (self.requests_per_minute, self.posts_per_minute);
            buckets.retain(|key, bucket| {
                !bucket.is_full(if key.contains(" POST ") { posts } else { all }, now)
            });
        }
        let all_key = format!("{subject} ALL");
        let global = *buckets
            .entry(all_key.clone())
            .or_insert_with(|| Bucket::new(self.requests_per_minute, now));
        let Some(route) = post_route else {
            let decision = buckets
                .get_mut(&all_key)
                .expect("inserted above")
                .take(self.requests_per_minute, now);
            return decision;
        };
        let post_key = format!("{subject} POST {route}");
        let post = *buckets
            .entry(post_key.clone())
            .or_insert_with(|| Bucket::new(self.posts_per_minute, now));
        // Decide on copies first so a refusal by one limit does not spend the other.
        let (mut global_try, mut post_try) = (global, post);
        let global_decision = global_try.take(self.requests_per_minute, now);
        let post_decision = post_try.take(self.posts_per_minute, now);
        if global_decision.allowed && post_decision.allowed {
            buckets.insert(all_key, global_try);
            buckets.insert(post_key, post_try);
        }
        tightest(&[global_decision, post_decision])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixty_per_minute_then_refused_then_refills() {
        let mut bucket = Bucket::new(60, 1000.0);
        for i in 0..60 {
            let d = bucket.take(60, 1000.0);
            assert!(d.allowed, "request {i}");
            assert_eq!(d.remaining, 59 - i);
        }
        let refused = bucket.take(60, 1000.0);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after, 1);
        assert_eq!(refused.reset_at, 1060);
        assert!(bucket.take(60, 1001.0).allowed);
        assert!(bucket.is_full(60, 1061.0));
    }

    #[test]
    fn an_ipv6_slash_64_shares_one_bucket() {
        let limiter = RateLimiter::new(3, 3);
        let subject = |ip: &str| client_subject(ip.parse().unwrap());
        assert_eq!(subject("2001:db8:1:2:aaaa::1"), "ip:2001:db8:1:2::/64");
        assert_eq!(subject("::ffff:192.0.2.7"), "ip:192.0.2.7");
        // Three addresses of one /64 spend one bucket of three; the fourth is refused.
        for ip in [
            "2001:db8:1:2::1",
            "2001:db8:1:2::ffff:2",
            "2001:db8:1:2:1::3",
        ] {
            assert!(limiter.check(&subject(ip), None, 0.0).allowed, "{ip}");
        }
        assert!(
            !limiter
                .check(&subject("2001:db8:1:2:dead::4"), None, 0.0)
                .allowed
        );
        // The next /64 and IPv4 clients have buckets of their own.
        assert!(
            limiter
                .check(&subject("2001:db8:1:3::1"), None, 0.0)
                .allowed
        );
        assert!(limiter.check(&subject("192.0.2.7"), None, 0.0).allowed);
    }

    #[test]
    fn posts_limited_per_route_and_refusals_do_not_spend() {
        let limiter = RateLimiter::new(60, 30);
        for _ in 0..30 {
            assert!(limiter.check("tok_a", Some("POST /a"), 0.0).allowed);
        }
        let refused = limiter.check("tok_a", Some("POST /a"), 0.0);
        assert!(!refused.allowed);
        assert_eq!(refused.limit, 30);
        let other = limiter.check("tok_a", Some("POST /b"), 0.0);
        assert!(other.allowed);
        // 31 allowed overall → 29 left globally; 29 left on POST /b as well.
        assert_eq!(other.remaining, 29);
    }
}
