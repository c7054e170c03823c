//! Git-driven deploys (issue 12) with a real `git daemon` on loopback and signed payloads
//! shaped like each provider's (`tests/fixtures/webhooks/`): a push to main deploys the pushed
//! commit; a push to a branch makes a preview at its host while production keeps serving; the
//! branch deletion and a closed pull request tear it down; a bad signature and a redelivery
//! start nothing; a deploy hook deploys its branch; a server app's preview runs beside
//! production with its own environment.

use std::time::Duration;

use serde_json::json;

use crate::support::{cli, missing_tool, TestDaemon};

mod caches;
mod fixtures;
mod forks;
mod replay;
mod scoped_vars;
mod sleeping_previews;
use fixtures::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_deploy_production_and_previews_and_teardowns_follow_the_branches() {
    let Some(git) = GitServer::start() else {
        return;
    };
    let daemon = TestDaemon::start_with(options());
    let web = set_up(
        &daemon,
        "web",
        json!({"gitUrl": git.url(), "previews": true}),
    )
    .await;
    let main_one = git.commit("main", &[("public/index.html", "<h1>main two</h1>")]);

    // A push to main deploys the pushed commit.
    let push = |reference: &str, before: &str, after: &str, deleted: bool| {
        payload(
            "github/push.json",
            &[
                ("REF", reference.to_owned()),
                ("BEFORE", before.to_owned()),
                ("AFTER", after.to_owned()),
                ("DELETED", deleted.to_string()),
            ],
        )
    };
    let answer = web
        .github(
            "push",
            "d-1",
            push("refs/heads/main", ZERO, &main_one, false),
        )
        .await;
    let deploy = web.completed(&answer, "deploy").await;
    assert!(web.page("web.localhost").await.text().contains("main two"));
    let record = daemon
        .api(
            "GET",
            &format!(
                "/api/deployments/{}",
                deploy["deploymentId"].as_str().unwrap()
            ),
            None,
        )
        .await
        .json();
    assert_eq!(record["environment"], "production");
    assert_eq!(record["branch"], "main");
    assert_eq!(record["commit"], main_one.as_str());
    assert_eq!(record["trigger"], "webhook");

    // A bad signature, a missing one, and a redelivery start nothing.
    let runs = web.deployment_count().await;
    let body = push("refs/heads/main", ZERO, &main_one, false);
    let forged = web
        .deliver(
            &[
                ("x-github-event", "push".into()),
                ("x-github-delivery", "d-2".into()),
                (
                    "x-hub-signature-256",
                    format!("sha256={}", hmac_hex("not-the-secret", &body)),
                ),
            ],
            body.clone(),
        )
        .await;
    assert_eq!(forged.status, 401, "{}", forged.text());
    let unsigned = web
        .deliver(
            &[
                ("x-github-event", "push".into()),
                ("x-github-delivery", "d-3".into()),
            ],
            body.clone(),
        )
        .await;
    assert_eq!(unsigned.status, 401);
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    let signature = format!("sha256={}", hmac_hex(&web.secret, &body));
    let changed = web
        .deliver(
            &[
                ("x-github-event", "push".into()),
                ("x-hub-signature-256", signature),
            ],
            tampered,
        )
        .await;
    assert_eq!(changed.status, 401, "a signature of another body");
    let again = web.github("push", "d-1", body).await;
    assert_eq!(again.status, 202);
    assert_eq!(again.json()["action"], "ignored");
    assert!(again.json()["reason"]
        .as_str()
        .unwrap()
        .contains("redelivery"));
    let ping = web
        .github("ping", "d-4", payload("github/ping.json", &[]))
        .await;
    assert_eq!(ping.json()["action"], "ignored");
    assert_eq!(web.deployment_count().await, runs, "nothing was started");

    // A push to a branch makes a preview at its own host; production keeps serving.
    let feature = git.commit(
        "feature/Login",
        &[("public/index.html", "<h1>login preview</h1>")],
    );
    let answer = web
        .github(
            "push",
            "d-5",
            push("refs/heads/feature/Login", ZERO, &feature, false),
        )
        .await;
    let preview = web.completed(&answer, "preview").await;
    let preview_host = "feature-login--web.localhost";
    assert!(web
        .page(preview_host)
        .await
        .text()
        .contains("login preview"));
    assert!(
        web.page("web.localhost").await.text().contains("main two"),
        "production untouched"
    );
    let project = daemon.api("GET", "/api/projects/web", None).await.json();
    assert_eq!(project["liveDeploymentId"], deploy["deploymentId"]);
    let previews = daemon
        .api("GET", "/api/projects/web/previews", None)
        .await
        .json();
    let listed = &previews["previews"][0];
    assert_eq!(listed["name"], "feature-login");
    assert_eq!(listed["branch"], "feature/Login");
    assert_eq!(listed["state"], "live");
    assert_eq!(listed["deploymentId"], preview["deploymentId"]);
    assert!(listed["url"].as_str().unwrap().contains(preview_host));
    let deployments = cli(&daemon, &["deployments", "web"]);
    assert!(
        deployments.contains("production") && deployments.contains("preview"),
        "{deployments}"
    );
    assert!(
        deployments.contains("feature/Login") && deployments.contains(&feature[..7]),
        "{deployments}"
    );
    assert!(deployments.contains("webhook"), "{deployments}");
    let previews = cli(&daemon, &["previews", "web"]);
    assert!(
        previews.contains("feature-login") && previews.contains(preview_host),
        "{previews}"
    );

    // The branch's deletion tears it down (GitHub sends both a push with deleted and a
    // delete event; the first tears down, the second finds nothing).
    let deleted = web
        .github(
            "push",
            "d-6",
            push("refs/heads/feature/Login", &feature, ZERO, true),
        )
        .await;
    assert_eq!(deleted.json()["action"], "teardown", "{}", deleted.text());
    assert_eq!(web.page(preview_host).await.status, 404);
    let delete_event = payload("github/delete.json", &[("BRANCH", "feature/Login".into())]);
    let second = web.github("delete", "d-7", delete_event).await;
    assert_eq!(second.json()["action"], "ignored");
    assert!(daemon
        .api("GET", "/api/projects/web/previews", None)
        .await
        .json()["previews"]
        .as_array()
        .unwrap()
        .is_empty());

    // Gitea: a pull request opened makes pr-<n>; its close tears it down.
    let pr_commit = git.commit("signup", &[("public/index.html", "<h1>signup pr</h1>")]);
    let pull = |action: &str, repo: &str| {
        let repo_id = match repo {
            "acme/site" => "17",
            _ => "18",
        };
        payload(
            "gitea/pull_request.json",
            &[
                ("ACTION", action.into()),
                ("NUMBER", "7".into()),
                ("HEAD_REF", "signup".into()),
                ("HEAD_SHA", pr_commit.clone()),
                ("HEAD_REPO", repo.into()),
                ("HEAD_REPO_ID", repo_id.into()),
                ("BASE_SHA", main_one.clone()),
            ],
        )
    };
    let gitea = |event: &'static str, delivery: &'static str, body: Vec<u8>| {
        let signature = hmac_hex(&web.secret, &body);
        let web = &web;
        async move {
            web.deliver(
                &[
                    ("x-gitea-event", event.into()),
                    ("x-gitea-delivery", delivery.into()),
                    ("x-gitea-signature", signature),
                ],
                body,
            )
            .await
        }
    };
    let fork = gitea("pull_request", "g-1", pull("opened", "mallory/site")).await;
    assert_eq!(
        fork.json()["action"],
        "ignored",
        "forks are not built: {}",
        fork.text()
    );
    let opened = gitea("pull_request", "g-2", pull("opened", "acme/site")).await;
    web.completed(&opened, "preview").await;
    assert!(web
        .page("pr-7--web.localhost")
        .await
        .text()
        .contains("signup pr"));
    let closed = gitea("pull_request", "g-3", pull("closed", "acme/site")).await;
    assert_eq!(closed.json()["action"], "teardown");
    assert_eq!(web.page("pr-7--web.localhost").await.status, 404);

    // GitLab: a push to main (X-Gitlab-Token) deploys the new commit.
    let main_three = git.commit("main", &[("public/index.html", "<h1>main three</h1>")]);
    let body = payload(
        "gitlab/push.json",
        &[
            ("REF", "refs/heads/main".into()),
            ("BEFORE", main_one.clone()),
            ("AFTER", main_three.clone()),
        ],
    );
    let wrong = web
        .deliver(
            &[
                ("x-gitlab-event", "Push Hook".into()),
                ("x-gitlab-token", "guess".into()),
            ],
            body.clone(),
        )
        .await;
    assert_eq!(wrong.status, 401);
    let gitlab = web
        .deliver(
            &[
                ("x-gitlab-event", "Push Hook".into()),
                ("x-gitlab-event-uuid", "gl-1".into()),
                ("x-gitlab-token", web.secret.clone()),
            ],
            body,
        )
        .await;
    web.completed(&gitlab, "deploy").await;
    assert!(web
        .page("web.localhost")
        .await
        .text()
        .contains("main three"));

    // Forgejo: a merge request-style pull request from GitLab's and Forgejo's push to a branch.
    let forgejo_commit = git.commit("docs", &[("public/index.html", "<h1>docs preview</h1>")]);
    let body = payload(
        "gitea/push.json",
        &[
            ("REF", "refs/heads/docs".into()),
            ("BEFORE", ZERO.into()),
            ("AFTER", forgejo_commit),
        ],
    );
    let signature = hmac_hex(&web.secret, &body);
    let forgejo = web
        .deliver(
            &[
                ("x-forgejo-event", "push".into()),
                ("x-gitea-event", "push".into()),
                ("x-forgejo-delivery", "f-1".into()),
                ("x-forgejo-signature", signature),
            ],
            body,
        )
        .await;
    web.completed(&forgejo, "preview").await;
    assert!(web
        .page("docs--web.localhost")
        .await
        .text()
        .contains("docs preview"));
    let mr = payload(
        "gitlab/merge_request.json",
        &[
            ("ACTION", "close".into()),
            ("NUMBER", "3".into()),
            ("HEAD_REF", "docs".into()),
            ("HEAD_SHA", main_three.clone()),
            ("SOURCE_PROJECT", "48214112".into()),
        ],
    );
    let closed = web
        .deliver(
            &[
                ("x-gitlab-event", "Merge Request Hook".into()),
                ("x-gitlab-token", web.secret.clone()),
            ],
            mr,
        )
        .await;
    assert_eq!(
        closed.json()["action"],
        "ignored",
        "pr-3 had no preview: {}",
        closed.text()
    );

    // Deleting the preview through the API; then the project takes its previews with it.
    let removed = daemon
        .api("DELETE", "/api/projects/web/previews/docs", None)
        .await;
    assert_eq!(removed.status, 200, "{}", removed.text());
    assert_eq!(web.page("docs--web.localhost").await.status, 404);
    assert_eq!(
        daemon
            .api("DELETE", "/api/projects/web/previews/docs", None)
            .await
            .status,
        404
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_hook_deploys_its_branch_and_a_server_apps_preview_runs_beside_production() {
    let Some(git) = GitServer::start() else {
        return;
    };
    if missing_tool("python3", "the server app is a small Python HTTP server") {
        return;
    }
    let app = python_app(
        "'env=%s branch=%s commit=%s' % (env.get('SLIPWAY_ENV'), env.get('SLIPWAY_BRANCH'), \
         env.get('SLIPWAY_COMMIT', '')[:7])",
    );
    git.commit("main", &[("app.py", &app)]);
    let mut daemon = TestDaemon::start_with(options());
    let api = set_up(
        &daemon,
        "api",
        json!({"gitUrl": git.url(), "startCommand": "python3 app.py", "previews": true}),
    )
    .await;

    // A deploy hook for main: no token, the secret URL; production.
    let hook = daemon
        .api(
            "POST",
            "/api/projects/api/deploy-hooks",
            Some(json!({"name": "cms", "branch": "main"})),
        )
        .await;
    assert_eq!(hook.status, 201, "{}", hook.text());
    let url = hook.json()["url"].as_str().unwrap().to_owned();
    let path = &url[url.find("/api/hooks/").unwrap()..];
    let secret = hook.json()["secret"].as_str().unwrap().to_owned();
    assert_eq!(
        path,
        format!("/api/hooks/{secret}"),
        "the secret is the URL's last part"
    );
    let listed = daemon
        .api("GET", "/api/projects/api/deploy-hooks", None)
        .await;
    assert!(
        !listed.text().contains(&path["/api/hooks/".len()..]),
        "the list never shows the secret"
    );
    let unknown = daemon
        .request(
            "POST",
            &daemon.control_host(),
            "/api/hooks/dh_nope",
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(unknown.status, 404);
    fire_hook(&daemon, path).await;
    assert_eq!(
        api.page("api.localhost").await.text(),
        "env=production branch=None commit="
    );
    let audit = daemon.api("GET", "/api/audit?limit=50", None).await.text();
    assert!(
        !audit.contains(&path["/api/hooks/".len()..]),
        "the audit log never shows the secret"
    );

    // A preview of the server app beside production, with its own environment.
    let commit = git.commit("beta", &[("README.md", "beta")]);
    let body = payload(
        "github/push.json",
        &[
            ("REF", "refs/heads/beta".into()),
            ("BEFORE", ZERO.into()),
            ("AFTER", commit.clone()),
            ("DELETED", "false".into()),
        ],
    );
    let answer = api.github("push", "p-1", body).await;
    api.completed(&answer, "preview").await;
    assert_eq!(
        api.page("beta--api.localhost").await.text(),
        format!("env=preview branch=beta commit={}", &commit[..7])
    );
    assert_eq!(
        api.page("api.localhost").await.text(),
        "env=production branch=None commit="
    );

    // A hook for another branch deploys a preview of it.
    let beta_hook = daemon
        .api(
            "POST",
            "/api/projects/api/deploy-hooks",
            Some(json!({"name": "beta", "branch": "beta"})),
        )
        .await
        .json();
    let hook_id = beta_hook["id"].as_str().unwrap().to_owned();
    let beta_url = beta_hook["url"].as_str().unwrap();
    let fired = daemon
        .request(
            "POST",
            &daemon.control_host(),
            &beta_url[beta_url.find("/api/hooks/").unwrap()..],
            &[],
            Vec::new(),
        )
        .await;
    assert_eq!(fired.status, 202, "{}", fired.text());
    daemon
        .wait_complete(&fired.json(), Duration::from_secs(60))
        .await;
    assert!(api
        .page("beta--api.localhost")
        .await
        .text()
        .starts_with("env=preview branch=beta"));
    let deleted = daemon
        .api(
            "DELETE",
            &format!("/api/projects/api/deploy-hooks/{hook_id}"),
            None,
        )
        .await;
    assert_eq!(deleted.status, 200);

    // A restart serves production and the preview again, each with its own environment.
    drop(api);
    daemon.restart();
    let get = |host: &'static str| {
        let daemon = &daemon;
        async move {
            daemon
                .request("GET", host, "/", &[], Vec::new())
                .await
                .text()
        }
    };
    assert_eq!(
        get("api.localhost").await,
        "env=production branch=None commit="
    );
    assert!(get("beta--api.localhost")
        .await
        .starts_with("env=preview branch=beta"));
}
