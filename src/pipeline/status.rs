//! The provisioning status object the API and the SSE stream show, built from a run record.

use serde_json::{json, Value};

use super::progress;
use crate::ids::rfc3339;
use crate::store::records::{RunRecord, RunStatus, StepRecord};

fn steps_json(steps: &[StepRecord]) -> Value {
    Value::Array(
        steps
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "state": s.state,
                    "startedAt": s.started_ms.map(rfc3339),
                    "durationMs": s.duration_ms,
                })
            })
            .collect(),
    )
}

/// `floor` is the highest progress already shown for this run, so it never goes down.
pub fn status_json(run: &RunRecord, now_ms: u64, floor: u32, url: &str) -> (Value, u32) {
    let total = run.finished_ms.map(|f| f.saturating_sub(run.created_ms));
    match run.status {
        RunStatus::ProvisioningInProgress => {
            let computed = progress::progress(&run.steps, run.estimate_ms, now_ms);
            let shown = computed.max(floor).min(99);
            let elapsed = now_ms.saturating_sub(run.created_ms);
            let current = run
                .steps
                .iter()
                .find(|s| s.state == crate::store::records::StepState::Running)
                .or_else(|| {
                    run.steps
                        .iter()
                        .find(|s| s.state == crate::store::records::StepState::Pending)
                })
                .map(|s| s.name.as_str())
                .unwrap_or("ssl_verification");
            let value = json!({
                "status": "provisioning_in_progress",
                "currentStep": current,
                "progressPercentage": shown,
                "estimatedTimeRemaining": progress::remaining_ms(run.estimate_ms, elapsed, shown),
                "provisioningId": run.id,
                "deploymentId": run.deployment_id,
                "steps": steps_json(&run.steps),
            });
            (value, shown)
        }
        RunStatus::ProvisioningComplete => (
            json!({
                "status": "provisioning_complete",
                "url": url,
                "deploymentId": run.deployment_id,
                "totalDurationMs": total.unwrap_or(0),
                "provisioningId": run.id,
                "steps": steps_json(&run.steps),
            }),
            100,
        ),
        RunStatus::ProvisioningFailed | RunStatus::ProvisioningCanceled => {
            let status = if run.status == RunStatus::ProvisioningFailed {
                "provisioning_failed"
            } else {
                "provisioning_canceled"
            };
            let error = run
                .error
                .as_ref()
                .map(|e| json!({"code": e.code, "message": e.message}));
            (
                json!({
                    "status": status,
                    "failedStep": run.failed_step,
                    "error": error,
                    "deploymentId": run.deployment_id,
                    "totalDurationMs": total.unwrap_or(0),
                    "provisioningId": run.id,
                    "steps": steps_json(&run.steps),
                }),
                floor,
            )
        }
    }
}
