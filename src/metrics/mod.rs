//! The daemon's counters: per-project request counters and latency histograms that the
//! router's hot path bumps ([`ProjectMetrics`], reached through the route snapshot), the
//! provisioning counters the pipeline bumps ([`DaemonMetrics`]), the Prometheus text writer
//! ([`exposition`]), the process figures read from `/proc/self` ([`process`]) and the
//! add-ons' disk use the disk watch measures ([`addons`]).
//!
//! Architecture invariant: recording is a handful of relaxed atomic adds on memory allocated
//! when the project entered the route table; no lock, no allocation, no syscall per request.
//! This module depends on no other module of the crate.

pub mod addons;
pub mod exposition;
pub mod process;
pub mod wakes;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Upper bounds (seconds) of the request duration histogram.
pub const REQUEST_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Upper bounds (seconds) of the provisioning duration histogram.
pub const RUN_BUCKETS: &[f64] = &[1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0];

/// A fixed-bucket histogram: one counter per bucket (not cumulative) plus `+Inf`, and the sum
/// in microseconds. Observing is two atomic adds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// `bounds.len() + 1` counters; the last one counts what is above every bound.
    counts: Box<[AtomicU64]>,
    sum_micros: AtomicU64,
}

/// A histogram read at one moment, with cumulative bucket counts as Prometheus wants them.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound, observations ≤ bound)`, ascending; `+Inf` is `count`.
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let index = self
            .bounds
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(self.bounds.len());
        self.counts[index].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(
            u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(self.bounds.len());
        for (bound, count) in self.bounds.iter().zip(self.counts.iter()) {
            cumulative += count.load(Ordering::Relaxed);
            buckets.push((*bound, cumulative));
        }
        let count = cumulative + self.counts[self.bounds.len()].load(Ordering::Relaxed);
        HistogramSnapshot {
            buckets,
            count,
            sum_seconds: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

/// The status classes requests are counted by: `1xx` … `5xx`.
pub const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// One project's traffic counters, shared by the route table entry of the project and every
/// request in flight for it. Counters start at zero when the daemon starts.
#[derive(Debug)]
pub struct ProjectMetrics {
    requests: [AtomicU64; 5],
    duration: Histogram,
    request_bytes: AtomicU64,
    response_bytes: AtomicU64,
    upstream_errors: AtomicU64,
    app_restarts: AtomicU64,
}

/// A project's counters read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct ProjectCounts {
    /// Requests by status class, in [`STATUS_CLASSES`] order.
    pub requests: [u64; 5],
    pub duration: HistogramSnapshot,
    pub request_bytes: u64,
    pub response_bytes: u64,
    pub upstream_errors: u64,
    pub app_restarts: u64,
}

impl Default for ProjectMetrics {
    fn default() -> Self {
        ProjectMetrics::new()
    }
}

impl ProjectMetrics {
    pub fn new() -> ProjectMetrics {
        ProjectMetrics {
            requests: Default::default(),
            duration: Histogram::new(REQUEST_BUCKETS),
            request_bytes: AtomicU64::new(0),
            response_bytes: AtomicU64::new(0),
            upstream_errors: AtomicU64::new(0),
            app_restarts: AtomicU64::new(0),
        }
    }

    /// One answered request: its status and the time to its response head.
    pub fn record_response(&self, status: u16, elapsed: Duration) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.requests[class].fetch_add(1, Ordering::Relaxed);
        self.duration.observe(elapsed);
    }

    /// Body bytes a visitor sent to the app.
    pub fn add_request_bytes(&self, bytes: u64) {
        self.request_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Body bytes sent to a visitor.
    pub fn add_response_bytes(&self, bytes: u64) {
        self.response_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The app could not be reached or did not answer in time (a 502/504 page was served).
    pub fn upstream_error(&self) {
        self.upstream_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// The supervisor restarted the project's app after it exited.
    pub fn app_restarted(&self) {
        self.app_restarts.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ProjectCounts {
        ProjectCounts {
            requests: std::array::from_fn(|i| self.requests[i].load(Ordering::Relaxed)),
            duration: self.duration.snapshot(),
            request_bytes: self.request_bytes.load(Ordering::Relaxed),
            response_bytes: self.response_bytes.load(Ordering::Relaxed),
            upstream_errors: self.upstream_errors.load(Ordering::Relaxed),
            app_restarts: self.app_restarts.load(Ordering::Relaxed),
        }
    }
}

/// How a provisioning run ended, as the `result` label spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunResult {
    Succeeded,
    Failed,
    Canceled,
}

impl RunResult {
    pub const ALL: [RunResult; 3] = [RunResult::Succeeded, RunResult::Failed, RunResult::Canceled];

    pub fn as_str(self) -> &'static str {
        match self {
            RunResult::Succeeded => "succeeded",
            RunResult::Failed => "failed",
            RunResult::Canceled => "canceled",
        }
    }
}

/// Daemon-wide counters: provisioning runs by result and their durations.
#[derive(Debug)]
pub struct DaemonMetrics {
    runs: [AtomicU64; 3],
    run_duration: Histogram,
    /// Unix seconds when the daemon started (the counters' reset time).
    pub started_unix: u64,
    pub router_load: Arc<RouterLoad>,
    /// The add-ons' disk use, as last measured.
    pub addon_disks: addons::AddonDisks,
    /// Sleeping apps' wakes.
    pub wakes: wakes::WakeMetrics,
}

impl DaemonMetrics {
    pub fn new(started_unix: u64, router_threads: usize) -> DaemonMetrics {
        DaemonMetrics {
            runs: Default::default(),
            run_duration: Histogram::new(RUN_BUCKETS),
            started_unix,
            router_load: Arc::new(RouterLoad::new(router_threads)),
            addon_disks: Default::default(),
            wakes: Default::default(),
        }
    }

    pub fn record_run(&self, result: RunResult, elapsed: Duration) {
        self.runs[result as usize].fetch_add(1, Ordering::Relaxed);
        self.run_duration.observe(elapsed);
    }

    /// Runs by result, in [`RunResult::ALL`] order.
    pub fn runs(&self) -> [u64; 3] {
        std::array::from_fn(|i| self.runs[i].load(Ordering::Relaxed))
    }

    pub fn run_duration(&self) -> HistogramSnapshot {
        self.run_duration.snapshot()
    }
}

/// Open visitor connections per router thread: the router places each new connection on the
/// thread with the fewest (`server::threads`), the metrics page shows them.
#[derive(Debug)]
pub struct RouterLoad(Box<[AtomicUsize]>);

impl RouterLoad {
    pub fn new(threads: usize) -> RouterLoad {
        RouterLoad((0..threads.max(1)).map(|_| AtomicUsize::new(0)).collect())
    }

    pub fn threads(&self) -> usize {
        self.0.len()
    }

    pub fn open(&self, thread: usize) -> usize {
        self.0[thread].load(Ordering::Relaxed)
    }

    pub fn opened(&self, thread: usize) {
        self.0[thread].fetch_add(1, Ordering::Relaxed);
    }

    pub fn closed(&self, thread: usize) {
        self.0[thread].fetch_sub(1, Ordering::Relaxed);
    }

    /// `here` unless another thread has fewer open connections (then the first such with the
    /// fewest).
    pub fn least_loaded(&self, here: usize) -> usize {
        let at_here = self.open(here);
        let (fewest, thread) = (0..self.threads())
            .map(|thread| (self.open(thread), thread))
            .min()
            .expect("at least one router thread");
        if fewest < at_here {
            thread
        } else {
            here
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let histogram = Histogram::new(&[0.1, 1.0]);
        histogram.observe(Duration::from_millis(50));
        histogram.observe(Duration::from_millis(100));
        histogram.observe(Duration::from_millis(500));
        histogram.observe(Duration::from_secs(3));
        let snapshot = histogram.snapshot();
        assert_eq!(snapshot.buckets, vec![(0.1, 2), (1.0, 3)]);
        assert_eq!(snapshot.count, 4);
        assert!((snapshot.sum_seconds - 3.65).abs() < 1e-9);
    }

    #[test]
    fn statuses_count_by_class() {
        let metrics = ProjectMetrics::new();
        for status in [101, 200, 204, 304, 404, 502, 599] {
            metrics.record_response(status, Duration::from_millis(1));
        }
        let counts = metrics.snapshot();
        assert_eq!(counts.requests, [1, 2, 1, 1, 2]);
        assert_eq!(counts.duration.count, 7);
    }

    #[test]
    fn a_connection_goes_to_the_least_loaded_thread_and_stays_on_a_tie() {
        let load = RouterLoad::new(3);
        assert_eq!(load.least_loaded(1), 1, "all idle: stays");
        load.opened(1);
        assert_eq!(load.least_loaded(1), 0, "the first of the idle ones");
        load.opened(0);
        assert_eq!(load.least_loaded(0), 2);
        load.opened(2);
        load.opened(2);
        assert_eq!(load.least_loaded(2), 0);
        load.closed(2);
        assert_eq!(load.least_loaded(2), 2, "a tie keeps it here");
        assert_eq!(load.open(2), 1);
    }
}
