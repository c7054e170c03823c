//! Issue 31 item 4: env vars scoped to production, to previews, or to one branch's previews
//! (the contract's Part three, "Environments"). Runs started by signed webhooks through the
//! real daemon; each build writes the variables it got into the page it serves. A preview
//! sees only what is scoped to it, a fork's preview nothing, production no preview-only
//! variable; a variable set in Part one's flat form (as every variable stored before scopes)
//! still reaches everything. The old code passed every variable to every run.

use serde_json::json;

use super::fixtures::*;
use crate::support::{cli, TestDaemon};

/// GitHub's id of the base repository in `github/pull_request.json`.
const BASE_REPO_ID: &str = "715034112";

const BUILD: &str = "mkdir -p out && echo \"SHARED=${SHARED-} PROD_ONLY=${PROD_ONLY-} \
    PREVIEW_ONLY=${PREVIEW_ONLY-} X_ONLY=${X_ONLY-} CLI_PROD=${CLI_PROD-}\" > out/index.html";

fn push(branch: &str, commit: &str) -> Vec<u8> {
    payload(
        "github/push.json",
        &[
            ("REF", format!("refs/heads/{branch}")),
            ("BEFORE", ZERO.to_owned()),
            ("AFTER", commit.to_owned()),
            ("DELETED", "false".into()),
        ],
    )
}

fn pull_request(number: u64, head_ref: &str, commit: &str, head_repo_id: &str) -> Vec<u8> {
    payload(
        "github/pull_request.json",
        &[
            ("ACTION", "opened".into()),
            ("NUMBER", number.to_string()),
            ("HEAD_REF", head_ref.into()),
            ("HEAD_SHA", commit.into()),
            ("HEAD_OWNER", "someone".into()),
            ("HEAD_REPO", "someone/site".into()),
            ("HEAD_REPO_ID", head_repo_id.into()),
            ("BASE_SHA", commit.into()),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_environment_gets_only_the_variables_scoped_to_it_and_a_fork_none() {
    let Some(git) = GitServer::start() else {
        return;
    };
    let daemon = TestDaemon::start_with(options());
    let web = set_up(
        &daemon,
        "scoped",
        json!({"gitUrl": git.url(), "previews": true, "previewForks": true,
               "buildCommand": BUILD, "outputDirectory": "out"}),
    )
    .await;
    let set = |body: serde_json::Value| {
        let daemon = &daemon;
        async move {
            let answer = daemon
                .api("POST", "/api/projects/scoped/env-vars", Some(body))
                .await;
            assert_eq!(answer.status, 200, "{}", answer.text());
        }
    };
    set(json!({"SHARED": "everywhere"})).await;
    set(json!({"vars": {"PROD_ONLY": "p"}, "environments": ["production"]})).await;
    set(json!({"vars": {"PREVIEW_ONLY": "v"}, "environments": ["preview"]})).await;
    set(json!({"vars": {"X_ONLY": "x"}, "environments": ["preview"], "branch": "feature-x"})).await;
    // The CLI's scoped form.
    cli(
        &daemon,
        &[
            "env",
            "set",
            "CLI_PROD=c",
            "--environment",
            "production",
            "--project",
            "scoped",
        ],
    );
    let listed = daemon
        .api("GET", "/api/projects/scoped/env-vars", None)
        .await
        .json();
    assert_eq!(
        listed["scopes"],
        json!({
            "SHARED": {"environments": ["production", "preview"]},
            "PROD_ONLY": {"environments": ["production"]},
            "PREVIEW_ONLY": {"environments": ["preview"]},
            "X_ONLY": {"environments": ["preview"], "branch": "feature-x"},
            "CLI_PROD": {"environments": ["production"]},
        }),
        "{listed}"
    );
    assert_eq!(listed["envVars"]["X_ONLY"], "x");
    let shown = cli(&daemon, &["env", "ls", "--project", "scoped"]);
    assert!(
        shown.contains("X_ONLY=x") && shown.contains("previews of feature-x"),
        "{shown}"
    );

    let main = git.commit("main", &[("README.md", "main")]);
    let answer = web.github("push", "s-1", push("main", &main)).await;
    web.completed(&answer, "deploy").await;
    assert_eq!(
        web.page("scoped.localhost").await.text().trim(),
        "SHARED=everywhere PROD_ONLY=p PREVIEW_ONLY= X_ONLY= CLI_PROD=c",
        "production sees no preview-only variable"
    );

    let feature = git.commit("feature-x", &[("README.md", "x")]);
    let answer = web.github("push", "s-2", push("feature-x", &feature)).await;
    web.completed(&answer, "preview").await;
    assert_eq!(
        web.page("feature-x--scoped.localhost").await.text().trim(),
        "SHARED=everywhere PROD_ONLY= PREVIEW_ONLY=v X_ONLY=x CLI_PROD=",
        "the branch's preview gets the previews' and its own branch's variables"
    );

    let other = git.commit("other", &[("README.md", "other")]);
    let answer = web.github("push", "s-3", push("other", &other)).await;
    web.completed(&answer, "preview").await;
    assert_eq!(
        web.page("other--scoped.localhost").await.text().trim(),
        "SHARED=everywhere PROD_ONLY= PREVIEW_ONLY=v X_ONLY= CLI_PROD=",
        "another branch's preview does not get feature-x's variable"
    );

    // A pull request of feature-x from the repository itself is feature-x's preview.
    let own = pull_request(4, "feature-x", &feature, BASE_REPO_ID);
    let answer = web.github("pull_request", "s-4", own).await;
    web.completed(&answer, "preview").await;
    assert_eq!(
        web.page("pr-4--scoped.localhost").await.text().trim(),
        "SHARED=everywhere PROD_ONLY= PREVIEW_ONLY=v X_ONLY=x CLI_PROD="
    );

    // A fork's pull request (built because previewForks is on), even from a branch named
    // feature-x, gets no variable at all.
    let forked = git.commit("forked", &[("README.md", "fork")]);
    let fork = pull_request(5, "feature-x", &forked, "18");
    let answer = web.github("pull_request", "s-5", fork).await;
    web.completed(&answer, "preview").await;
    assert_eq!(
        web.page("pr-5--scoped.localhost").await.text().trim(),
        "SHARED= PROD_ONLY= PREVIEW_ONLY= X_ONLY= CLI_PROD=",
        "a fork's preview got the project's variables"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scoped_bodies_are_checked_and_a_flat_set_makes_a_variable_apply_everywhere() {
    let daemon = TestDaemon::start();
    let path = "/api/projects/checked/env-vars";
    let created = daemon.api("POST", path, Some(json!({"A": "1"}))).await;
    assert_eq!(created.status, 200, "{}", created.text());
    for (body, code) in [
        (
            json!({"vars": {"B": "1"}, "environments": []}),
            "INVALID_BODY",
        ),
        (
            json!({"vars": {"B": "1"}, "environments": ["staging"]}),
            "INVALID_BODY",
        ),
        (
            json!({"vars": {"B": "1"}, "environments": ["production"], "branch": "x"}),
            "INVALID_BODY",
        ),
        (
            json!({"vars": {"B": "1"}, "branch": "a..b"}),
            "INVALID_BODY",
        ),
        (
            json!({"vars": {"B": "1"}, "scope": "preview"}),
            "INVALID_BODY",
        ),
        (json!({"vars": {"PORT": "1"}}), "INVALID_ENV_KEY"),
    ] {
        let answer = daemon.api("POST", path, Some(body.clone())).await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.text());
        assert_eq!(answer.json()["error"]["code"], code, "{body}");
    }
    let scoped = json!({"vars": {"A": "2"}, "environments": ["preview"]});
    assert_eq!(daemon.api("POST", path, Some(scoped)).await.status, 200);
    let listed = daemon.api("GET", path, None).await.json();
    assert_eq!(listed["scopes"]["A"], json!({"environments": ["preview"]}));
    assert!(
        listed["scopes"].get("B").is_none(),
        "nothing of a refused body"
    );
    // Part one's body keeps meaning both environments: it drops the scope.
    assert_eq!(
        daemon
            .api("POST", path, Some(json!({"A": "3"})))
            .await
            .status,
        200
    );
    let listed = daemon.api("GET", path, None).await.json();
    assert_eq!(
        listed["scopes"]["A"],
        json!({"environments": ["production", "preview"]})
    );
    assert_eq!(listed["envVars"]["A"], "3");
}
