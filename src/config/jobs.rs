//! `[jobs]`: how long one-off and cron runs are kept, the longest timeout a run may ask for,
//! and the scheduler's clock (issue 33).

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;

/// `[jobs]`, validated.
#[derive(Debug, Clone)]
pub struct JobsConfig {
    /// `history_days` (default 30): runs older than this go, with their output.
    pub history_days: u64,
    /// `history_runs` (default 100): the runs kept per cron job, and of a project's one-off
    /// runs; the oldest go first.
    pub history_runs: usize,
    /// `max_timeout_s` (default 86400): the longest `timeoutS` a run or cron job may ask for.
    pub max_timeout_s: u64,
    /// `clock_file`: a file holding an RFC 3339 time the scheduler takes as "now" instead of
    /// the system clock (read every 200 ms). For tests and dry runs of schedules; never set
    /// on a server.
    pub clock_file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJobs {
    history_days: Option<u64>,
    history_runs: Option<usize>,
    max_timeout_s: Option<u64>,
    clock_file: Option<PathBuf>,
}

impl RawJobs {
    pub(super) fn validate(self) -> Result<JobsConfig, ConfigError> {
        let positive = |key: &str, value: u64| {
            if value == 0 {
                return Err(ConfigError::Invalid {
                    key: key.into(),
                    message: "must be greater than 0".into(),
                });
            }
            Ok(value)
        };
        Ok(JobsConfig {
            history_days: positive("jobs.history_days", self.history_days.unwrap_or(30))?,
            history_runs: positive("jobs.history_runs", self.history_runs.unwrap_or(100) as u64)?
                as usize,
            max_timeout_s: positive("jobs.max_timeout_s", self.max_timeout_s.unwrap_or(86_400))?,
            clock_file: self.clock_file,
        })
    }
}
