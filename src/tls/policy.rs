//! Pure decisions of the TLS manager: which names may get a certificate, when a certificate is
//! due for renewal, and how long a name backs off after a failed issuance.
//!
//! Every function takes `now` as an argument so the rules are tested without a clock.

use std::time::{Duration, SystemTime};

use super::clock::{from_unix_seconds, unix_seconds};
use super::store::BackoffRecord;

/// The first wait after a failed issuance.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(60);
/// The longest wait between two attempts for one name.
pub const BACKOFF_MAX: Duration = Duration::from_secs(6 * 60 * 60);

/// True for the control host and for `<label>.<apps_domain>`; certificates are never made for
/// anything else, so a request naming another domain cannot make us ask a CA for it.
pub fn name_allowed(name: &str, apps_domain: &str, control_host: &str) -> bool {
    if name == control_host {
        return true;
    }
    let Some(label) = name
        .strip_suffix(apps_domain)
        .and_then(|rest| rest.strip_suffix('.'))
    else {
        return false;
    };
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// A certificate is renewed once a third of its lifetime is left (two thirds have passed).
pub fn renewal_due(not_before: u64, not_after: u64, now: SystemTime) -> bool {
    let lifetime = not_after.saturating_sub(not_before);
    let renew_at = not_after.saturating_sub(lifetime / 3);
    unix_seconds(now) >= renew_at
}

/// The backoff after one more failure: 1 min, doubling per failure, capped at 6 h.
pub fn next_backoff(
    previous: Option<&BackoffRecord>,
    error: &str,
    now: SystemTime,
) -> BackoffRecord {
    let failures = previous
        .map_or(0, |record| record.failures)
        .saturating_add(1);
    let doublings = failures.saturating_sub(1).min(20);
    let delay = BACKOFF_FIRST
        .saturating_mul(1 << doublings)
        .min(BACKOFF_MAX);
    BackoffRecord {
        failures,
        next_attempt_at: unix_seconds(now + delay),
        last_error: error.to_owned(),
    }
}

/// When the next attempt may start, if that is still in the future.
pub fn backing_off_until(record: &BackoffRecord, now: SystemTime) -> Option<SystemTime> {
    let until = from_unix_seconds(record.next_attempt_at);
    (until > now).then_some(until)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_single_labels_under_apps_domain_and_the_control_host() {
        let allowed = |name| name_allowed(name, "apps.example.com", "slipway.example.com");
        assert!(allowed("myapp.apps.example.com"));
        assert!(allowed("my-app-2.apps.example.com"));
        assert!(allowed("slipway.example.com"));
        assert!(!allowed("apps.example.com"));
        assert!(!allowed("a.b.apps.example.com"));
        assert!(!allowed("evil.com"));
        assert!(!allowed("xapps.example.com"));
        assert!(!allowed("-x.apps.example.com"));
        assert!(!allowed("UPPER.apps.example.com"));
        assert!(!allowed("*.apps.example.com"));
    }

    #[test]
    fn renewal_at_two_thirds_of_the_lifetime() {
        let not_before = 1_000_000;
        let not_after = not_before + 90 * 86_400;
        let at = |day: u64| from_unix_seconds(not_before + day * 86_400);
        assert!(!renewal_due(not_before, not_after, at(0)));
        assert!(!renewal_due(not_before, not_after, at(59)));
        assert!(renewal_due(not_before, not_after, at(60)));
        assert!(renewal_due(not_before, not_after, at(200)));
    }

    #[test]
    fn backoff_doubles_from_one_minute_to_six_hours() {
        let now = from_unix_seconds(10_000_000);
        let mut record = None;
        let mut delays = Vec::new();
        for _ in 0..12 {
            let next = next_backoff(record.as_ref(), "boom", now);
            delays.push(next.next_attempt_at - unix_seconds(now));
            record = Some(next);
        }
        assert_eq!(&delays[..6], &[60, 120, 240, 480, 960, 1920]);
        assert_eq!(delays[9], 6 * 3600);
        assert_eq!(delays[11], 6 * 3600);
        let record = record.unwrap();
        assert_eq!(record.failures, 12);
        assert_eq!(
            backing_off_until(&record, now),
            Some(from_unix_seconds(record.next_attempt_at))
        );
        assert_eq!(
            backing_off_until(&record, from_unix_seconds(record.next_attempt_at)),
            None
        );
    }
}
