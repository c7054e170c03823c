//! The events of GitHub's payloads, which Gitea and Forgejo follow (with the few differences
//! noted where they are read): pushes (GitLab's too, which carry the same fields), branch
//! deletions and pull requests. `parse` in `mod.rs` picks the reader.

use serde_json::Value;

use super::{is_fork, text, GitEvent, PullAction};
use crate::autodeploy::heads::{commit_time, PushFacts};

/// A push: to a branch (or its deletion, when `after` is all zeros or `deleted` is true), or
/// of a tag.
pub(super) fn push(json: &Value) -> GitEvent {
    let branch_of = |reference: String| reference.strip_prefix("refs/heads/").map(str::to_owned);
    let Some(branch) = text(json, "/ref").and_then(branch_of) else {
        return GitEvent::Other("tag push".into());
    };
    let after = text(json, "/after").unwrap_or_default();
    let deleted = json.pointer("/deleted").and_then(Value::as_bool) == Some(true);
    let zero = after.bytes().all(|b| b == b'0');
    if deleted || zero {
        return GitEvent::BranchDeleted { branch };
    }
    GitEvent::Push {
        branch,
        facts: PushFacts {
            before: text(json, "/before"),
            committed_ms: commit_time(json, &after),
            after,
        },
    }
}

/// A `delete` event: of a branch or of a tag.
pub(super) fn deletion(json: &Value) -> Option<GitEvent> {
    Some(match text(json, "/ref_type").as_deref() {
        Some("branch") => GitEvent::BranchDeleted {
            branch: text(json, "/ref")?,
        },
        _ => GitEvent::Other("tag deletion".into()),
    })
}

/// A `pull_request` event. `None` when the number, head branch or head commit is missing.
pub(super) fn pull_request(json: &Value) -> Option<GitEvent> {
    let head = json.pointer("/pull_request/head/repo/id");
    let base = json.pointer("/pull_request/base/repo/id");
    Some(GitEvent::PullRequest {
        // Gitea puts the number in the pull request only.
        number: json
            .pointer("/number")
            .or_else(|| json.pointer("/pull_request/number"))?
            .as_u64()?,
        action: pull_action(json),
        branch: text(json, "/pull_request/head/ref")?,
        commit: text(json, "/pull_request/head/sha")?,
        fork: is_fork(head, base),
    })
}

/// What a pull request event does to its code (Gitea says `synchronized`).
fn pull_action(json: &Value) -> PullAction {
    // `edited` is a title, body or base change: only the base (GitHub's `changes.base`,
    // Gitea's `changes.ref`) is a reason to build again.
    let base_changed =
        json.pointer("/changes/base").is_some() || json.pointer("/changes/ref").is_some();
    match text(json, "/action").as_deref() {
        Some("opened" | "reopened" | "synchronize" | "synchronized") => PullAction::Update,
        Some("edited") if base_changed => PullAction::Update,
        Some("closed") => PullAction::Close,
        _ => PullAction::Other,
    }
}
