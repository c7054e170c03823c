//! Jobs: one-off runs and cron jobs (issue 33).

pub mod schedule;
