//! Scale to zero (issue 35): a project's sleep setting, `{"idleTimeoutS", "strategy"}` in
//! `PATCH /api/projects/{id} {"sleep": …}`, stored with its settings. Pure: the type, its
//! bounds and its one check; `sleep/` acts on it and the router serves a sleeping app.

use serde::{Deserialize, Serialize};

/// The idle timeouts a project may set, in seconds (2 s to 7 days). The OpenAPI schema's
/// `minimum`/`maximum` are these.
pub const IDLE_TIMEOUT_S: std::ops::RangeInclusive<u64> = 2..=604_800;

/// What visitors of a sleeping app get while it starts.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SleepStrategy {
    // Every request waits until the app answers (APIs, webhooks, browsers alike).
    #[default]
    Hold,
    // Browsers (`Accept: text/html`) get a "starting" page that reloads itself; other
    // requests wait as with `hold`.
    Page,
}

/// A project's sleep setting: its app sleeps after `idleTimeoutS` without visitors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SleepSettings {
    /// Seconds without a request, stream or tunnel open before the app sleeps (2 to 604800).
    #[schemars(range(min = 2, max = 604_800))]
    #[serde(deserialize_with = "crate::whole_number::u64")]
    pub idle_timeout_s: u64,
    /// `hold` or `page`.
    pub strategy: SleepStrategy,
}

impl SleepSettings {
    /// The one check of a setting (the schema's range says the same).
    pub fn check(&self) -> Result<(), String> {
        if !IDLE_TIMEOUT_S.contains(&self.idle_timeout_s) {
            return Err(format!(
                "field `sleep.idleTimeoutS` must be between {} and {} seconds",
                IDLE_TIMEOUT_S.start(),
                IDLE_TIMEOUT_S.end()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_checked_and_both_fields_are_needed() {
        let parsed: SleepSettings =
            serde_json::from_str(r#"{"idleTimeoutS": 900, "strategy": "hold"}"#).unwrap();
        assert_eq!(parsed.strategy, SleepStrategy::Hold);
        assert!(serde_json::from_str::<SleepSettings>(r#"{"idleTimeoutS": 900}"#).is_err());
        assert!(parsed.check().is_ok());
        for (seconds, ok) in [(1, false), (2, true), (604_800, true), (604_801, false)] {
            let setting = SleepSettings {
                idle_timeout_s: seconds,
                strategy: SleepStrategy::Page,
            };
            assert_eq!(setting.check().is_ok(), ok, "{seconds}");
        }
        assert!(serde_json::from_str::<SleepSettings>(r#"{"idleTimeoutS": 9, "x": 1}"#).is_err());
    }
}
