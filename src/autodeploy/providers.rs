//! What GitHub, GitLab, Gitea and Forgejo send: the signature check (on the raw body, before
//! anything is parsed, in constant time) and the events that matter, read into one
//! provider-neutral [`GitEvent`]. Pure functions over headers and bytes; `autodeploy` acts on
//! the result.

use http::HeaderMap;
use serde_json::Value;

use super::heads::{commit_time, PushFacts};

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
    let event = match provider {
        Provider::GitHub => header(headers, "x-github-event"),
        Provider::GitLab => header(headers, "x-gitlab-event"),
        Provider::Gitea => header(headers, "x-gitea-event"),
        Provider::Forgejo => header(headers, "x-forgejo-event"),
    }?
    .to_owned();
    let json: Value = serde_json::from_slice(body).ok()?;
    let text = |path: &str| {
        json.pointer(path)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let zero = |commit: &str| commit.bytes().all(|b| b == b'0');
    let branch_of = |reference: String| reference.strip_prefix("refs/heads/").map(str::to_owned);
    Some(match (provider, event.as_str()) {
        (_, "ping") | (Provider::GitHub, "meta") => GitEvent::Ping,
        (Provider::GitLab, "Push Hook") | (_, "push") => {
            let Some(branch) = text("/ref").and_then(branch_of) else {
                return Some(GitEvent::Other("tag push".into()));
            };
            let after = text("/after").unwrap_or_default();
            let deleted = json.pointer("/deleted").and_then(Value::as_bool) == Some(true);
            if deleted || zero(&after) {
                GitEvent::BranchDeleted { branch }
            } else {
                GitEvent::Push {
                    branch,
                    facts: PushFacts {
                        before: text("/before"),
                        committed_ms: commit_time(&json, &after),
                        after,
                    },
                }
            }
        }
        (Provider::GitHub | Provider::Gitea | Provider::Forgejo, "delete") => {
            match text("/ref_type").as_deref() {
                Some("branch") => GitEvent::BranchDeleted {
                    branch: text("/ref")?,
                },
                _ => GitEvent::Other("tag deletion".into()),
            }
        }
        (Provider::GitLab, "Merge Request Hook") => {
            let action = match text("/object_attributes/action").as_deref() {
                Some("open" | "reopen" | "update") => PullAction::Update,
                Some("close" | "merge") => PullAction::Close,
                _ => PullAction::Other,
            };
            let source = json.pointer("/object_attributes/source_project_id");
            let target = json.pointer("/object_attributes/target_project_id");
            GitEvent::PullRequest {
                number: json.pointer("/object_attributes/iid")?.as_u64()?,
                action,
                branch: text("/object_attributes/source_branch")?,
                commit: text("/object_attributes/last_commit/id")?,
                fork: is_fork(source, target),
            }
        }
        (_, "pull_request") => {
            // `edited` is a title, body or base change: only the base (GitHub's
            // `changes.base`, Gitea's `changes.ref`) is a reason to build again.
            let base_changed =
                json.pointer("/changes/base").is_some() || json.pointer("/changes/ref").is_some();
            let action = match text("/action").as_deref() {
                Some("opened" | "reopened" | "synchronize" | "synchronized") => PullAction::Update,
                Some("edited") if base_changed => PullAction::Update,
                Some("closed") => PullAction::Close,
                _ => PullAction::Other,
            };
            let head = json.pointer("/pull_request/head/repo/id");
            let base = json.pointer("/pull_request/base/repo/id");
            GitEvent::PullRequest {
                number: json
                    .pointer("/number")
                    .or_else(|| json.pointer("/pull_request/number"))?
                    .as_u64()?,
                action,
                branch: text("/pull_request/head/ref")?,
                commit: text("/pull_request/head/sha")?,
                fork: is_fork(head, base),
            }
        }
        (_, other) => GitEvent::Other(other.to_owned()),
    })
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

/// The preview name of a branch: lowercased, every run of other characters than `a-z0-9`
/// turned into one `-`, trimmed, and cut (with a 6-character hash of the branch) so that
/// `<name>--<slug>` stays a DNS label (≤ 63). `None` when the slug leaves no room.
pub fn preview_name(branch: &str, slug: &str) -> Option<String> {
    let mut name = String::with_capacity(branch.len());
    for c in branch.chars().map(|c| c.to_ascii_lowercase()) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
        } else if !name.ends_with('-') {
            name.push('-');
        }
    }
    let name = name.trim_matches('-');
    let room = 63usize.checked_sub(slug.len() + 2)?;
    let hash = &crate::ids::sha256_hex(branch.as_bytes())[..6];
    if !name.is_empty() && name.len() <= room {
        return Some(name.to_owned());
    }
    if room < 7 {
        return (room >= 6).then(|| hash.to_owned());
    }
    let cut = name[..name.len().min(room - 7)].trim_end_matches('-');
    Some(match cut.is_empty() {
        true => hash.to_owned(),
        false => format!("{cut}-{hash}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn hmac(secret: &str, body: &[u8]) -> String {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
        crate::ids::hex(ring::hmac::sign(&key, body).as_ref())
    }

    #[test]
    fn signatures_are_checked_per_provider() {
        let body = br#"{"zen":"hi"}"#;
        let good = hmac("s3cret", body);
        let github = headers(&[
            ("x-github-event", "ping"),
            ("x-hub-signature-256", &format!("sha256={good}")),
        ]);
        assert_eq!(provider(&github), Some(Provider::GitHub));
        assert_eq!(verify(Provider::GitHub, &github, body, "s3cret"), Ok(()));
        assert_eq!(
            verify(Provider::GitHub, &github, b"{\"zen\":\"hI\"}", "s3cret"),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(Provider::GitHub, &github, body, "other"),
            Err(SignatureError::Mismatch)
        );
        let gitea = headers(&[("x-gitea-event", "push"), ("x-gitea-signature", &good)]);
        assert_eq!(verify(Provider::Gitea, &gitea, body, "s3cret"), Ok(()));
        let forgejo = headers(&[
            ("x-forgejo-event", "push"),
            ("x-gitea-event", "push"),
            ("x-forgejo-signature", &good),
        ]);
        assert_eq!(provider(&forgejo), Some(Provider::Forgejo));
        assert_eq!(verify(Provider::Forgejo, &forgejo, body, "s3cret"), Ok(()));
        let gitlab = headers(&[
            ("x-gitlab-event", "Push Hook"),
            ("x-gitlab-token", "s3cret"),
        ]);
        assert_eq!(verify(Provider::GitLab, &gitlab, body, "s3cret"), Ok(()));
        assert_eq!(
            verify(Provider::GitLab, &gitlab, body, "s3cret2"),
            Err(SignatureError::Mismatch)
        );
        let unsigned = headers(&[("x-github-event", "push")]);
        assert!(matches!(
            verify(Provider::GitHub, &unsigned, body, "s3cret"),
            Err(SignatureError::Missing(_))
        ));
        assert_eq!(provider(&headers(&[("x-other", "1")])), None);
    }

    /// A fixture of `tests/fixtures/webhooks/` with its placeholders filled, as JSON.
    fn fixture(name: &str, values: &[(&str, &str)]) -> Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/webhooks")
            .join(name);
        let mut text = std::fs::read_to_string(path).unwrap();
        for (key, value) in values {
            text = text.replace(&format!("{{{{{key}}}}}"), value);
        }
        serde_json::from_str(&text).unwrap()
    }

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    /// A pull request from the base repository itself (the fixtures' base ids).
    fn pull(name: &str, action: &str) -> Value {
        let base_id = match name.starts_with("github/") {
            true => "715034112",
            false => "17",
        };
        fixture(
            name,
            &[
                ("ACTION", action),
                ("NUMBER", "7"),
                ("HEAD_REF", "signup"),
                ("HEAD_SHA", SHA),
                ("HEAD_OWNER", "acme"),
                ("HEAD_REPO", "acme/site"),
                ("HEAD_REPO_ID", base_id),
                ("BASE_SHA", SHA),
                ("SOURCE_PROJECT", "48214112"),
            ],
        )
    }

    fn event(provider: Provider, name: &'static str, json: &Value) -> GitEvent {
        let header = match provider {
            Provider::GitHub => "x-github-event",
            Provider::GitLab => "x-gitlab-event",
            Provider::Gitea => "x-gitea-event",
            Provider::Forgejo => "x-forgejo-event",
        };
        let body = serde_json::to_vec(json).unwrap();
        parse(provider, &headers(&[(header, name)]), &body).unwrap()
    }

    fn fork_and_action(event: GitEvent) -> (bool, PullAction) {
        match event {
            GitEvent::PullRequest { fork, action, .. } => (fork, action),
            other => panic!("not a pull request: {other:?}"),
        }
    }

    #[test]
    fn a_pull_request_is_a_fork_unless_both_repository_ids_are_there_and_equal() {
        for (provider, name, fixture) in [
            (Provider::GitHub, "pull_request", "github/pull_request.json"),
            (Provider::Gitea, "pull_request", "gitea/pull_request.json"),
            (Provider::Forgejo, "pull_request", "gitea/pull_request.json"),
        ] {
            let same = pull(fixture, "synchronize");
            let parsed = fork_and_action(event(provider, name, &same));
            assert_eq!(parsed, (false, PullAction::Update), "{fixture}");
            let mut other = same.clone();
            other["pull_request"]["head"]["repo"]["id"] = 999.into();
            assert!(
                fork_and_action(event(provider, name, &other)).0,
                "{fixture}"
            );
            // The fork was deleted: `head.repo` is null (and the head's name says nothing).
            let mut deleted = same.clone();
            deleted["pull_request"]["head"]["repo"] = Value::Null;
            assert!(
                fork_and_action(event(provider, name, &deleted)).0,
                "{fixture}"
            );
            let mut no_base = same.clone();
            no_base["pull_request"]["base"]["repo"] = Value::Null;
            assert!(
                fork_and_action(event(provider, name, &no_base)).0,
                "{fixture}"
            );
        }
        let gitlab = |mutate: &dyn Fn(&mut Value)| {
            let mut json = pull("gitlab/merge_request.json", "update");
            mutate(&mut json["object_attributes"]);
            fork_and_action(event(Provider::GitLab, "Merge Request Hook", &json)).0
        };
        assert!(!gitlab(&|_| {}));
        assert!(gitlab(&|a| a["source_project_id"] = 999.into()));
        assert!(gitlab(&|a| {
            a.as_object_mut().unwrap().remove("source_project_id");
        }));
        assert!(gitlab(&|a| a["source_project_id"] = Value::Null));
        assert!(gitlab(&|a| {
            a.as_object_mut().unwrap().remove("target_project_id");
        }));
    }

    #[test]
    fn an_edited_pull_request_builds_only_when_its_base_changed() {
        for (provider, fixture, change) in [
            (Provider::GitHub, "github/pull_request.json", "base"),
            (Provider::Gitea, "gitea/pull_request.json", "ref"),
        ] {
            let mut title = pull(fixture, "edited");
            title["changes"] = serde_json::json!({"title": {"from": "WIP"}});
            let parsed = fork_and_action(event(provider, "pull_request", &title));
            assert_eq!(parsed, (false, PullAction::Other), "{fixture}");
            let mut base = pull(fixture, "edited");
            base["changes"] = serde_json::json!({ change: {"from": "develop"} });
            let parsed = fork_and_action(event(provider, "pull_request", &base));
            assert_eq!(parsed, (false, PullAction::Update), "{fixture}");
        }
    }

    #[test]
    fn pushes_carry_before_after_and_the_commit_time() {
        let other = "fedcba9876543210fedcba9876543210fedcba98";
        for (provider, name, file) in [
            (Provider::GitHub, "push", "github/push.json"),
            (Provider::Gitea, "push", "gitea/push.json"),
            (Provider::GitLab, "Push Hook", "gitlab/push.json"),
        ] {
            let json = fixture(
                file,
                &[
                    ("REF", "refs/heads/main"),
                    ("BEFORE", other),
                    ("AFTER", SHA),
                    ("DELETED", "false"),
                ],
            );
            let expected = GitEvent::Push {
                branch: "main".into(),
                facts: PushFacts {
                    before: Some(other.into()),
                    after: SHA.into(),
                    committed_ms: crate::autodeploy::heads::parse_time("2026-11-24T20:00:00Z"),
                },
            };
            assert_eq!(event(provider, name, &json), expected, "{file}");
        }
    }

    #[test]
    fn preview_names_are_dns_labels() {
        assert_eq!(
            preview_name("feature/Login_Page", "web").as_deref(),
            Some("feature-login-page")
        );
        assert_eq!(preview_name("--x--", "web").as_deref(), Some("x"));
        let long = "a".repeat(80);
        let name = preview_name(&long, "my-web-app").unwrap();
        assert!(name.len() + 2 + "my-web-app".len() <= 63, "{name}");
        assert!(name.starts_with("aaaa") && name.len() > 7);
        assert_ne!(
            preview_name(&format!("{long}1"), "web"),
            preview_name(&format!("{long}2"), "web"),
            "the hash keeps long names apart"
        );
        assert_eq!(preview_name("ü", "web").unwrap().len(), 6);
        assert_eq!(preview_name("x", &"s".repeat(60)).as_deref(), Some("x"));
        assert_eq!(preview_name("xy", &"s".repeat(60)), None);
    }
}
