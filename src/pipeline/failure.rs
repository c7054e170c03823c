//! Why a step, and so a run, did not complete: the step, a code of the contract and a message
//! that says what to do. Made by every step (`run.rs`, `commands.rs`, `golive.rs`).

use crate::error_code::ErrorCode;

#[derive(Debug)]
pub(crate) struct Failure {
    pub step: &'static str,
    pub code: ErrorCode,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(step: &'static str, code: ErrorCode, message: impl Into<String>) -> Failure {
        Failure {
            step,
            code,
            message: message.into(),
        }
    }
}

/// Runs `work` on the blocking pool; its error fails the deploy step (`START_FAILED`) with
/// "`what`: error".
pub(super) async fn deploy_blocking<T, E>(
    what: &'static str,
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, Failure>
where
    T: Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .expect("blocking task")
        .map_err(|e| Failure::new("deploy", ErrorCode::StartFailed, format!("{what}: {e}")))
}
