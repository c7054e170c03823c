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
