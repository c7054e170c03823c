//! What GitHub, GitLab, Gitea and Forgejo send: the signature check (on the raw body, before
//! anything is parsed, in constant time) and the events that matter, read into one
//! provider-neutral [`GitEvent`]. Pure functions over headers and bytes; `autodeploy` acts on
//! the result. This file tells the providers apart, checks signatures and picks the reader of
//! each event; the payloads are read in `github.rs` (GitHub's, which Gitea and Forgejo follow)
//! and `gitlab.rs`.

mod github;
mod gitlab;
#[cfg(test)]
mod tests;

use http::HeaderMap;
use serde_json::Value;

use super::heads::PushFacts;

/// The provider a delivery came from, told by its event header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    GitHub,
    GitLab,
    Gitea,
    Forgejo,
}

impl Provider {
    pub fn name(self) -> &'static str {
        match self {
            Provider::GitHub => "GitHub",
            Provider::GitLab => "GitLab",
            Provider::Gitea => "Gitea",
            Provider::Forgejo => "Forgejo",
        }
    }

    /// The header that names the event of a delivery.
    fn event_header(self) -> &'static str {
        match self {
            Provider::GitHub => "x-github-event",
            Provider::GitLab => "x-gitlab-event",
            Provider::Gitea => "x-gitea-event",
            Provider::Forgejo => "x-forgejo-event",
        }
    }
}

/// A pull (merge) request event's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullAction {
    /// Opened, reopened, new commits pushed to it, or its base changed.
    Update,
    /// Closed or merged.
    Close,
    Other,
}

/// The events Slipway acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitEvent {
    Push {
        branch: String,
        /// The pushed commit (`after`), the head before it and the commit's time.
        facts: PushFacts,
    },
    BranchDeleted {
        branch: String,
    },
    PullRequest {
        number: u64,
        action: PullAction,
        branch: String,
        commit: String,
        /// The head is in another repository, or the payload does not show it is not (a
        /// deleted fork): see [`is_fork`].
        fork: bool,
    },
    Ping,
    /// Anything else (tags, issues, comments, …): ignored, with its name.
    Other(String),
}

/// Why a delivery was refused (401, nothing happens).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("no X-GitHub-Event, X-Gitlab-Event, X-Gitea-Event or X-Forgejo-Event header: not a webhook this endpoint knows")]
    UnknownProvider,
    #[error("the {0} signature header is missing")]
    Missing(&'static str),
    #[error("the signature does not match the project's webhook secret")]
    Mismatch,
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The provider of a delivery, from its event header.
pub fn provider(headers: &HeaderMap) -> Option<Provider> {
    // Forgejo also sends the X-Gitea-* headers; its own come first.
    if headers.contains_key("x-forgejo-event") {
        Some(Provider::Forgejo)
    } else if headers.contains_key("x-gitea-event") {
        Some(Provider::Gitea)
    } else if headers.contains_key("x-github-event") {
        Some(Provider::GitHub)
    } else if headers.contains_key("x-gitlab-event") {
        Some(Provider::GitLab)
    } else {
        None
    }
}

/// Checks the delivery's signature against `secret`: GitHub `X-Hub-Signature-256:
/// sha256=<hex HMAC-SHA256 of the raw body>`, Gitea and Forgejo the hex HMAC in
/// `X-Gitea-Signature` / `X-Forgejo-Signature`, GitLab `X-Gitlab-Token` (the secret itself).
pub fn verify(
    provider: Provider,
    headers: &HeaderMap,
    body: &[u8],
    secret: &str,
) -> Result<(), SignatureError> {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let hmac_hex = |name: &'static str, prefix: &str| -> Result<(), SignatureError> {
        let given = header(headers, name).ok_or(SignatureError::Missing(name))?;
        let hex = given.strip_prefix(prefix).ok_or(SignatureError::Mismatch)?;
        let tag = crate::ids::hex_decode(hex).ok_or(SignatureError::Mismatch)?;
        ring::hmac::verify(&key, body, &tag).map_err(|_| SignatureError::Mismatch)
    };
    match provider {
        Provider::GitHub => hmac_hex("x-hub-signature-256", "sha256="),
        Provider::Gitea => hmac_hex("x-gitea-signature", ""),
        Provider::Forgejo => match headers.contains_key("x-forgejo-signature") {
            true => hmac_hex("x-forgejo-signature", ""),
            false => hmac_hex("x-gitea-signature", ""),
        },
        Provider::GitLab => {
            let given = header(headers, "x-gitlab-token")
                .ok_or(SignatureError::Missing("x-gitlab-token"))?;
            // Compared as HMACs of both, so the time taken says nothing about the secret.
            let expected = ring::hmac::sign(&key, secret.as_bytes());
            ring::hmac::verify(&key, given.as_bytes(), expected.as_ref())
                .map_err(|_| SignatureError::Mismatch)
        }
    }
}

/// The provider's id of this delivery (the same on a redelivery).
pub fn delivery_id(provider: Provider, headers: &HeaderMap) -> Option<String> {
    let names: &[&str] = match provider {
        Provider::GitHub => &["x-github-delivery"],
        Provider::GitLab => &["x-gitlab-event-uuid", "x-gitlab-webhook-uuid"],
        Provider::Gitea => &["x-gitea-delivery"],
        Provider::Forgejo => &["x-forgejo-delivery", "x-gitea-delivery"],
    };
    names
        .iter()
        .find_map(|name| header(headers, name))
        .filter(|id| !id.is_empty() && id.len() <= 200)
        .map(str::to_owned)
}

/// Reads the event of a verified delivery. `None`: the body is not the JSON the event names.
pub fn parse(provider: Provider, headers: &HeaderMap, body: &[u8]) -> Option<GitEvent> {
    let event = header(headers, provider.event_header())?.to_owned();
    let json: Value = serde_json::from_slice(body).ok()?;
    Some(match (provider, event.as_str()) {
        (_, "ping") | (Provider::GitHub, "meta") => GitEvent::Ping,
        // GitLab's push payload has GitHub's `ref`, `before` and `after`.
        (Provider::GitLab, "Push Hook") | (_, "push") => github::push(&json),
        (Provider::GitHub | Provider::Gitea | Provider::Forgejo, "delete") => {
            github::deletion(&json)?
        }
        (Provider::GitLab, "Merge Request Hook") => gitlab::merge_request(&json)?,
        (_, "pull_request") => github::pull_request(&json)?,
        (_, other) => GitEvent::Other(other.to_owned()),
    })
}

/// The string at `path` (a JSON pointer) of a payload.
fn text(json: &Value, path: &str) -> Option<String> {
    json.pointer(path)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Whether a pull request's head lives in another repository than its base. Fails closed: it
/// is the same repository only when both ids are there and equal. A fork that was deleted
/// comes as `head.repo: null` (GitHub, Gitea) or without `source_project_id` (GitLab), and is
/// still a fork: its last commit is not the base repository's code.
fn is_fork(head_id: Option<&Value>, base_id: Option<&Value>) -> bool {
    match (
        head_id.and_then(Value::as_u64),
        base_id.and_then(Value::as_u64),
    ) {
        (Some(head), Some(base)) => head != base,
        _ => true,
    }
}
