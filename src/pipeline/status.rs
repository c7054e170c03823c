//! The provisioning status object the API, the SSE stream and the CLI show, built from a run
//! record. The pipeline owns the shape; `api::types` re-exports it for handlers and clients.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::progress;
use crate::error_code::ErrorCode;
use crate::ids::rfc3339;
use crate::store::records::{RunRecord, RunStatus, StepRecord, StepState};

/// A run's status, tagged by `status`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "status",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum ProvisionStatus {
    ProvisioningInProgress {
        current_step: String,
        progress_percentage: u32,
        estimated_time_remaining: u64,
        provisioning_id: String,
        deployment_id: String,
        steps: Vec<StepStatus>,
    },
    ProvisioningComplete {
        url: String,
        deployment_id: String,
        total_duration_ms: u64,
        provisioning_id: String,
        steps: Vec<StepStatus>,
    },
    ProvisioningFailed(RunEnded),
    ProvisioningCanceled(RunEnded),
}

/// What a failed or canceled run reports.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunEnded {
    pub failed_step: Option<String>,
    pub error: Option<RunErrorBody>,
    pub deployment_id: String,
    pub total_duration_ms: u64,
    pub provisioning_id: String,
    pub steps: Vec<StepStatus>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepStatus {
    pub name: String,
    pub state: StepState,
    pub started_at: Option<String>,
    pub duration_ms: Option<u64>,
}

impl ProvisionStatus {
    pub fn provisioning_id(&self) -> &str {
        match self {
            ProvisionStatus::ProvisioningInProgress {
                provisioning_id, ..
            }
            | ProvisionStatus::ProvisioningComplete {
                provisioning_id, ..
            } => provisioning_id,
            ProvisionStatus::ProvisioningFailed(ended)
            | ProvisionStatus::ProvisioningCanceled(ended) => &ended.provisioning_id,
        }
    }

    /// Whether the run is over (complete, failed or canceled).
    pub fn is_final(&self) -> bool {
        !matches!(self, ProvisionStatus::ProvisioningInProgress { .. })
    }
}

fn steps_of(steps: &[StepRecord]) -> Vec<StepStatus> {
    steps
        .iter()
        .map(|s| StepStatus {
            name: s.name.clone(),
            state: s.state,
            started_at: s.started_ms.map(rfc3339),
            duration_ms: s.duration_ms,
        })
        .collect()
}

/// `floor` is the highest progress already shown for this run, so it never goes down.
pub fn run_status(run: &RunRecord, now_ms: u64, floor: u32, url: &str) -> (ProvisionStatus, u32) {
    let total = run.finished_ms.map(|f| f.saturating_sub(run.created_ms));
    match run.status {
        RunStatus::ProvisioningInProgress => {
            let computed = progress::progress(&run.steps, run.estimate_ms, now_ms);
            let shown = computed.max(floor).min(99);
            let elapsed = now_ms.saturating_sub(run.created_ms);
            let current = run
                .steps
                .iter()
                .find(|s| s.state == StepState::Running)
                .or_else(|| run.steps.iter().find(|s| s.state == StepState::Pending))
                .map(|s| s.name.as_str())
                .unwrap_or("ssl_verification");
            let status = ProvisionStatus::ProvisioningInProgress {
                current_step: current.to_owned(),
                progress_percentage: shown,
                estimated_time_remaining: progress::remaining_ms(run.estimate_ms, elapsed, shown),
                provisioning_id: run.id.clone(),
                deployment_id: run.deployment_id.clone(),
                steps: steps_of(&run.steps),
            };
            (status, shown)
        }
        RunStatus::ProvisioningComplete => (
            ProvisionStatus::ProvisioningComplete {
                url: url.to_owned(),
                deployment_id: run.deployment_id.clone(),
                total_duration_ms: total.unwrap_or(0),
                provisioning_id: run.id.clone(),
                steps: steps_of(&run.steps),
            },
            100,
        ),
        RunStatus::ProvisioningFailed | RunStatus::ProvisioningCanceled => {
            let ended = RunEnded {
                failed_step: run.failed_step.clone(),
                error: run.error.as_ref().map(|e| RunErrorBody {
                    code: e.code,
                    message: e.message.clone(),
                }),
                deployment_id: run.deployment_id.clone(),
                total_duration_ms: total.unwrap_or(0),
                provisioning_id: run.id.clone(),
                steps: steps_of(&run.steps),
            };
            let status = if run.status == RunStatus::ProvisioningFailed {
                ProvisionStatus::ProvisioningFailed(ended)
            } else {
                ProvisionStatus::ProvisioningCanceled(ended)
            };
            (status, floor)
        }
    }
}
