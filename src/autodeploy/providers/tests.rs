//! The providers' signatures, and their payloads (the fixtures of `tests/fixtures/webhooks/`)
//! read into [`GitEvent`]s.

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
