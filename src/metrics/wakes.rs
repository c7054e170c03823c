//! Sleeping apps' wakes (issue 35): how many woke or failed to, and how long each wake took
//! from the wake call to the app serving. Bumped by `sleep/`, read at scrape time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{Histogram, HistogramSnapshot};

/// Upper bounds (seconds) of the wake duration histogram.
pub const WAKE_BUCKETS: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

#[derive(Debug)]
pub struct WakeMetrics {
    woke: AtomicU64,
    failed: AtomicU64,
    duration: Histogram,
}

impl Default for WakeMetrics {
    fn default() -> Self {
        WakeMetrics {
            woke: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            duration: Histogram::new(WAKE_BUCKETS),
        }
    }
}

impl WakeMetrics {
    /// A wake that brought its app up after `elapsed`.
    pub fn woke(&self, elapsed: Duration) {
        self.woke.fetch_add(1, Ordering::Relaxed);
        self.duration.observe(elapsed);
    }

    /// A wake whose app did not come up.
    pub fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// `(woke, failed)` so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.woke.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    pub fn duration(&self) -> HistogramSnapshot {
        self.duration.snapshot()
    }
}
