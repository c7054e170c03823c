//! Pure progress and ETA arithmetic for a provisioning run: no clock, no I/O.

use crate::store::records::{StepRecord, StepState};

/// The eight steps, in order, with the share of a typical run each takes (sums to 100).
pub const STEPS: [(&str, u32); 9] = [
    ("project_creation", 1),
    ("domain_binding", 2),
    ("environment_setup", 1),
    ("source", 6),
    ("install", 33),
    ("build", 33),
    ("release", 4),
    ("deploy", 14),
    ("ssl_verification", 6),
];

/// Default estimate when a project has no successful run yet (the spec's documented value).
pub const DEFAULT_ESTIMATE_MS: u64 = 180_000;

/// Median of the most recent successful durations (up to 5), or the default.
pub fn estimate_from_history(mut recent_successes_ms: Vec<u64>) -> u64 {
    recent_successes_ms.truncate(5);
    if recent_successes_ms.is_empty() {
        return DEFAULT_ESTIMATE_MS;
    }
    recent_successes_ms.sort_unstable();
    let n = recent_successes_ms.len();
    let median = if n % 2 == 1 {
        recent_successes_ms[n / 2]
    } else {
        (recent_successes_ms[n / 2 - 1] + recent_successes_ms[n / 2]) / 2
    };
    median.max(1)
}

/// Progress in 0..=99 for a running run: finished steps count fully, the running step by how
/// far it is into its expected share of the estimate (at most 90 % of it).
pub fn progress(steps: &[StepRecord], estimate_ms: u64, now_ms: u64) -> u32 {
    let mut done = 0f64;
    for step in steps {
        let weight = STEPS
            .iter()
            .find(|(name, _)| *name == step.name)
            .map(|(_, w)| *w)
            .unwrap_or(0) as f64;
        match step.state {
            StepState::Succeeded | StepState::Skipped | StepState::Failed => done += weight,
            StepState::Running => {
                let expected = (estimate_ms as f64 * weight / 100.0).max(1.0);
                let elapsed = now_ms.saturating_sub(step.started_ms.unwrap_or(now_ms)) as f64;
                done += weight * (elapsed / expected).min(0.9);
            }
            StepState::Pending => {}
        }
    }
    (done.floor() as u32).min(99)
}

/// Milliseconds left: the estimate minus elapsed while within it; past it, extrapolated from
/// progress so the number stays meaningful.
pub fn remaining_ms(estimate_ms: u64, elapsed_ms: u64, progress: u32) -> u64 {
    if elapsed_ms < estimate_ms {
        let by_estimate = estimate_ms - elapsed_ms;
        let by_progress = (100u64.saturating_sub(u64::from(progress))) * estimate_ms / 100;
        return by_estimate.min(by_progress.max(1_000));
    }
    let progress = u64::from(progress.max(1));
    (elapsed_ms * (100 - progress.min(99)) / progress).max(1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &str, state: StepState, started: Option<u64>) -> StepRecord {
        StepRecord {
            name: name.into(),
            state,
            started_ms: started,
            duration_ms: None,
        }
    }

    #[test]
    fn weights_sum_to_100() {
        assert_eq!(STEPS.iter().map(|(_, w)| w).sum::<u32>(), 100);
    }

    #[test]
    fn median_of_history() {
        assert_eq!(estimate_from_history(vec![]), 180_000);
        assert_eq!(estimate_from_history(vec![10, 30, 20]), 20);
        assert_eq!(estimate_from_history(vec![10, 20, 30, 40]), 25);
        assert_eq!(estimate_from_history(vec![1, 2, 3, 4, 5, 1000, 1000]), 3);
    }

    #[test]
    fn progress_grows_and_caps() {
        let mut steps: Vec<StepRecord> = STEPS
            .iter()
            .map(|(n, _)| step(n, StepState::Pending, None))
            .collect();
        assert_eq!(progress(&steps, 100_000, 0), 0);
        for s in steps.iter_mut().take(4) {
            s.state = StepState::Succeeded;
        }
        steps[4] = step("install", StepState::Running, Some(0));
        let early = progress(&steps, 100_000, 1_000);
        let later = progress(&steps, 100_000, 30_000);
        let stuck = progress(&steps, 100_000, 10_000_000);
        assert!(
            10 <= early && early < later && later <= stuck,
            "{early} {later} {stuck}"
        );
        assert_eq!(
            stuck,
            10 + 29,
            "a stuck step stops at 90 % of its weight (install: 33)"
        );
        for s in steps.iter_mut() {
            s.state = StepState::Succeeded;
        }
        assert_eq!(progress(&steps, 100_000, 0), 99);
    }

    #[test]
    fn remaining_is_never_negative() {
        assert_eq!(remaining_ms(10_000, 2_000, 20), 8_000);
        assert!(remaining_ms(10_000, 50_000, 50) >= 1_000);
        assert!(remaining_ms(10_000, 50_000, 0) >= 1_000);
    }
}
