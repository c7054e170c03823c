//! A project's activity as the router sees it (issue 35, scale to zero): the requests and
//! tunnels open to its app and the time of the last one that started or ended. The idle
//! tick (`sleep/`) reads it to decide whether an app may sleep; the request path only adds
//! and subtracts.
//!
//! Architecture invariant: kept without locks: one relaxed counter and one relaxed time
//! (milliseconds since the daemon's first use of this clock, from the monotonic clock), both
//! written by [`InFlight`](super::InFlight) guards as they are made and dropped. Health probes
//! and metrics never reach the proxy, so they never count.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// One project's (or preview's) open requests and last activity.
#[derive(Debug)]
pub struct Activity {
    /// Requests in flight, streamed responses not yet ended, WebSocket tunnels open.
    open: AtomicUsize,
    /// When something last started or ended, in [`clock_ms`].
    last_ms: AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Activity::new()
    }
}

impl Activity {
    /// Active now: a new project counts as just used.
    pub fn new() -> Activity {
        Activity {
            open: AtomicUsize::new(0),
            last_ms: AtomicU64::new(clock_ms()),
        }
    }

    /// Something started: one more open until [`Activity::end`].
    pub(super) fn begin(&self) {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.touch();
    }

    /// Something [`Activity::begin`] counted ended.
    pub(super) fn end(&self) {
        self.open.fetch_sub(1, Ordering::Relaxed);
        self.touch();
    }

    /// Counts as used now (a deploy or a wake made it live).
    pub fn touch(&self) {
        self.last_ms.fetch_max(clock_ms(), Ordering::Relaxed);
    }

    /// Requests and tunnels open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// How long nothing has been open and nothing started or ended, at `now_ms` (a
    /// [`clock_ms`] reading); zero while something is open.
    pub fn idle_for(&self, now_ms: u64) -> Duration {
        if self.open() > 0 {
            return Duration::ZERO;
        }
        let last = self.last_ms.load(Ordering::Relaxed);
        Duration::from_millis(now_ms.saturating_sub(last))
    }

    /// The last activity, in [`clock_ms`].
    pub fn last_ms(&self) -> u64 {
        self.last_ms.load(Ordering::Relaxed)
    }
}

/// Milliseconds on the monotonic clock since this process first read it.
pub fn clock_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_only_while_nothing_is_open() {
        let activity = Activity::new();
        let now = clock_ms();
        activity.begin();
        assert_eq!(activity.idle_for(now + 60_000), Duration::ZERO);
        activity.end();
        assert_eq!(activity.open(), 0);
        let last = activity.last_ms();
        assert_eq!(
            activity.idle_for(last + 5_000),
            Duration::from_millis(5_000)
        );
        // A reading from before the last activity is not negative.
        assert_eq!(activity.idle_for(0), Duration::ZERO);
    }
}
