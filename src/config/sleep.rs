//! `[sleep]`: how sleeping apps (issue 35) are watched and woken: how often the idle tick
//! looks at every sleep-enabled app, how long a request waits for its app to wake, and how
//! many requests may wait at once per app; and the operator's default for previews.

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;
use crate::formation::sleep::{SleepSettings, SleepStrategy};

/// `[sleep]`, validated.
#[derive(Debug, Clone)]
pub struct SleepConfig {
    /// `tick_ms` (default 1000): the idle tick's period; an app sleeps at most this long
    /// after its `idleTimeoutS`.
    pub tick: Duration,
    /// `hold_timeout_s` (default 60): how long a request to a waking app waits before it is
    /// answered 503 (with `Retry-After`).
    pub hold_timeout: Duration,
    /// `max_held` (default 1000): requests waiting per waking app; more get 503 at once.
    pub max_held: usize,
    /// `previews_idle_timeout_s` (default: none, previews never sleep unless their project
    /// sets `sleep`) with `previews_strategy` (default `hold`): how the previews of a
    /// project without its own `sleep` setting sleep.
    pub previews: Option<SleepSettings>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSleep {
    tick_ms: Option<u64>,
    hold_timeout_s: Option<u64>,
    max_held: Option<usize>,
    previews_idle_timeout_s: Option<u64>,
    previews_strategy: Option<SleepStrategy>,
}

impl RawSleep {
    pub(super) fn validate(self) -> Result<SleepConfig, ConfigError> {
        let within = |key: &str, value: u64, range: std::ops::RangeInclusive<u64>| {
            if !range.contains(&value) {
                return Err(ConfigError::Invalid {
                    key: key.into(),
                    message: format!("must be between {} and {}", range.start(), range.end()),
                });
            }
            Ok(value)
        };
        Ok(SleepConfig {
            tick: Duration::from_millis(within(
                "sleep.tick_ms",
                self.tick_ms.unwrap_or(1000),
                10..=60_000,
            )?),
            hold_timeout: Duration::from_secs(within(
                "sleep.hold_timeout_s",
                self.hold_timeout_s.unwrap_or(60),
                1..=3600,
            )?),
            max_held: within(
                "sleep.max_held",
                self.max_held.unwrap_or(1000) as u64,
                1..=100_000,
            )? as usize,
            previews: match self.previews_idle_timeout_s {
                None => None,
                Some(seconds) => Some(SleepSettings {
                    idle_timeout_s: within(
                        "sleep.previews_idle_timeout_s",
                        seconds,
                        crate::formation::sleep::IDLE_TIMEOUT_S,
                    )?,
                    strategy: self.previews_strategy.unwrap_or_default(),
                }),
            },
        })
    }
}
