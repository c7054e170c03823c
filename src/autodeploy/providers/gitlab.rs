//! The events of GitLab's payloads that differ from GitHub's: merge requests. (A GitLab push
//! carries GitHub's fields and is read by `github::push`.) `parse` in `mod.rs` picks the
//! reader.

use serde_json::Value;

use super::{is_fork, text, GitEvent, PullAction};

/// A `Merge Request Hook` event. `None` when the number, source branch or last commit is
/// missing.
pub(super) fn merge_request(json: &Value) -> Option<GitEvent> {
    let action = match text(json, "/object_attributes/action").as_deref() {
        Some("open" | "reopen" | "update") => PullAction::Update,
        Some("close" | "merge") => PullAction::Close,
        _ => PullAction::Other,
    };
    let source = json.pointer("/object_attributes/source_project_id");
    let target = json.pointer("/object_attributes/target_project_id");
    Some(GitEvent::PullRequest {
        number: json.pointer("/object_attributes/iid")?.as_u64()?,
        action,
        branch: text(json, "/object_attributes/source_branch")?,
        commit: text(json, "/object_attributes/last_commit/id")?,
        fork: is_fork(source, target),
    })
}
