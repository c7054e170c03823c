//! Usage history (issue 37): what `usage` gathers, kept over time in the store. Every minute
//! the sampler (`sampler.rs`, a task of the main runtime) turns each project's counters into
//! the minute's deltas (requests by status class, latency buckets, bytes out, upstream
//! errors), reads its app's memory and CPU (total and per process type, against their
//! limits) and the builds that finished, and the machine's own figures (`machine.rs`: CPU,
//! memory, the data dir's disk, router connections). Each hour its minutes are rolled up into
//! one hour sample; minutes are kept a day, hours 30 days (`sample.rs`: how samples combine).
//! The clock is injectable ([`Clock`]): tests run a simulated month in seconds.

mod machine;
mod readings;
pub mod sample;
mod sampler;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use machine::MachineReading;
pub use sample::{Combine, Gauge, MachineSample, ProjectSample, TypeSample};
pub use sampler::{run, AppReading, InstanceReading, ProjectReading, Sampler};

use crate::store::{Store, StoreError};

/// The machine's own samples are kept under this subject (projects under their ids).
pub const MACHINE: &str = "machine";

/// The resolution of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Minute,
    Hour,
}

impl Step {
    pub fn seconds(self) -> u64 {
        match self {
            Step::Minute => 60,
            Step::Hour => 3600,
        }
    }

    /// How long samples of this step are kept.
    pub fn kept_seconds(self) -> u64 {
        match self {
            Step::Minute => 24 * 3600,
            Step::Hour => 30 * 24 * 3600,
        }
    }

    fn key(self) -> u8 {
        match self {
            Step::Minute => 0,
            Step::Hour => 1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Step::Minute => "minute",
            Step::Hour => "hour",
        }
    }

    pub fn parse(text: &str) -> Option<Step> {
        match text {
            "minute" => Some(Step::Minute),
            "hour" => Some(Step::Hour),
            _ => None,
        }
    }
}

/// Where the sampler's "now" comes from: the system's clock, or one a test moves.
#[derive(Debug, Clone)]
pub enum Clock {
    System,
    Manual(Arc<AtomicU64>),
}

impl Clock {
    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::System => crate::ids::now_ms(),
            Clock::Manual(ms) => ms.load(Ordering::SeqCst),
        }
    }
}

/// The samples of `subject` at `step` that start in `from..to` (Unix seconds), oldest first.
pub fn read<T: Combine>(
    store: &Store,
    subject: &str,
    step: Step,
    from: u64,
    to: u64,
) -> Result<Vec<(u64, T)>, StoreError> {
    store
        .history_range(subject, step.key(), from, to)?
        .into_iter()
        .map(|(at, bytes)| Ok((at, crate::store::decode("usage_history", &bytes)?)))
        .collect()
}

#[cfg(test)]
mod tests;
