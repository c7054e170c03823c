//! Git-driven deploys (issue 12) with a real `git daemon` on loopback and signed payloads
//! shaped like each provider's (`tests/fixtures/webhooks/`): a push to main deploys the pushed
//! commit; a push to a branch makes a preview at its host while production keeps serving; the
//! branch deletion and a closed pull request tear it down; a bad signature and a redelivery
//! start nothing; a deploy hook deploys its branch; a server app's preview runs beside
//! production with its own environment.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::{missing_tool, DaemonOptions, TestDaemon, TestResponse};

/// A repository served by `git daemon` on 127.0.0.1.
struct GitServer {
    _dir: tempfile::TempDir,
    repo: PathBuf,
    port: u16,
    child: std::process::Child,
}

impl Drop for GitServer {
    fn drop(&mut self) {
        // `git daemon` runs `git-daemon` as a child of its own: stop the whole group, or the
        // server outlives the test.
        let group = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

fn git(repo: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args(args)
        .output()
        .expect("run git");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

impl GitServer {
    /// `None` (after printing why) when git or its daemon cannot run here.
    fn start() -> Option<GitServer> {
        if missing_tool("git", "the tests push to a real git daemon") {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("site");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "--quiet", "--initial-branch=main"]);
        // Runs fetch the pushed commit by its id.
        git(&repo, &["config", "uploadpack.allowAnySHA1InWant", "true"]);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("git")
            .args([
                "daemon",
                "--export-all",
                "--reuseaddr",
                "--listen=127.0.0.1",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--base-path={}", dir.path().display()))
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn();
        let Ok(child) = child else {
            eprintln!("SKIP: `git daemon` does not start here");
            return None;
        };
        let server = GitServer {
            _dir: dir,
            repo,
            port,
            child,
        };
        server.commit("main", &[("public/index.html", "<h1>main one</h1>")]);
        for _ in 0..100 {
            let listed = Command::new("git")
                .args(["ls-remote", &server.url()])
                .output()
                .is_ok_and(|o| o.status.success());
            if listed {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("git daemon did not answer on port {port}");
    }

    fn url(&self) -> String {
        format!("git://127.0.0.1:{}/site", self.port)
    }

    /// Commits `files` on `branch` (made from main when new); returns the commit id.
    fn commit(&self, branch: &str, files: &[(&str, &str)]) -> String {
        let has_main = !git(&self.repo, &["branch", "--list", "main"]).is_empty();
        let exists = !git(&self.repo, &["branch", "--list", branch]).is_empty();
        match (has_main, exists) {
            (false, _) => {}
            (true, true) => {
                git(&self.repo, &["checkout", "--quiet", branch]);
            }
            (true, false) => {
                git(&self.repo, &["checkout", "--quiet", "-b", branch, "main"]);
            }
        }
        for (path, content) in files {
            let path = self.repo.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        git(&self.repo, &["add", "--all"]);
        git(
            &self.repo,
            &["commit", "--quiet", "-m", &format!("change {branch}")],
        );
        git(&self.repo, &["rev-parse", "HEAD"])
    }
}

/// A fixture payload with its placeholders filled.
fn payload(name: &str, values: &[(&str, String)]) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/webhooks")
        .join(name);
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (key, value) in values {
        text = text.replace(&format!("{{{{{key}}}}}"), value);
    }
    assert!(
        !text.contains("{{"),
        "{name}: a placeholder is left: {text}"
    );
    serde_json::from_str::<serde_json::Value>(&text).expect("valid JSON");
    text.into_bytes()
}

fn hmac_hex(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    slipway::ids::hex(ring::hmac::sign(&key, body).as_ref())
}

const ZERO: &str = "0000000000000000000000000000000000000000";

struct Project<'a> {
    daemon: &'a TestDaemon,
    slug: &'static str,
    secret: String,
}

impl Project<'_> {
    async fn deliver(&self, headers: &[(&str, String)], body: Vec<u8>) -> TestResponse {
        let mut all = vec![("content-type", "application/json".to_owned())];
        all.extend(headers.iter().map(|(k, v)| (*k, v.clone())));
        self.daemon
            .request(
                "POST",
                &self.daemon.control_host(),
                &format!("/api/webhooks/{}", self.slug),
                &all,
                body,
            )
            .await
    }

    async fn github(&self, event: &str, delivery: &str, body: Vec<u8>) -> TestResponse {
        let signature = format!("sha256={}", hmac_hex(&self.secret, &body));
        self.deliver(
            &[
                ("x-github-event", event.into()),
                ("x-github-delivery", delivery.into()),
                ("x-hub-signature-256", signature),
                ("user-agent", "GitHub-Hookshot/8f2f1e4".into()),
            ],
            body,
        )
        .await
    }

    /// Waits for the run a 202 started and returns the answer's JSON.
    async fn completed(&self, answer: &TestResponse, action: &str) -> serde_json::Value {
        assert_eq!(answer.status, 202, "{}", answer.text());
        let json = answer.json();
        assert_eq!(json["action"], action, "{json}");
        self.daemon
            .wait_complete(&json, Duration::from_secs(60))
            .await;
        json
    }

    async fn page(&self, host: &str) -> TestResponse {
        self.daemon.request("GET", host, "/", &[], Vec::new()).await
    }

    async fn deployment_count(&self) -> usize {
        let list = self
            .daemon
            .api(
                "GET",
                &format!("/api/projects/{}/deployments", self.slug),
                None,
            )
            .await
            .json();
        list["deployments"].as_array().unwrap().len()
    }
}

async fn set_up<'a>(
    daemon: &'a TestDaemon,
    slug: &'static str,
    settings: serde_json::Value,
) -> Project<'a> {
    let created = daemon
        .api("POST", "/api/projects", Some(json!({ "slug": slug })))
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let patched = daemon
        .api("PATCH", &format!("/api/projects/{slug}"), Some(settings))
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text());
    let secret = daemon
        .api(
            "POST",
            &format!("/api/projects/{slug}/webhook-secret"),
            None,
        )
        .await;
    assert_eq!(secret.status, 201, "{}", secret.text());
    let secret = secret.json();
    assert!(secret["webhookUrl"].as_str().unwrap().ends_with(&format!(
        "/api/webhooks/{}",
        patched.json()["id"].as_str().unwrap()
    )));
    Project {
        daemon,
        slug,
        secret: secret["secret"].as_str().unwrap().to_owned(),
    }
}

/// `slipway ARGS` against the daemon (credentials in the environment); its stdout.
pub fn cli(daemon: &TestDaemon, args: &[&str]) -> String {
    let home = tempfile::tempdir().unwrap();
    let output = Command::new(crate::support::BIN)
        .args(args)
        .env(
            "SLIPWAY_URL",
            format!("http://slipway.localhost:{}", daemon.http.port()),
        )
        .env("SLIPWAY_TOKEN", &daemon.token)
        .env("HOME", home.path())
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .expect("run slipway");
    assert!(
        output.status.success(),
        "slipway {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn options() -> DaemonOptions {
    DaemonOptions::default().extra_toml(
        "[rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n",
    )
}

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
        payload(
            "gitea/pull_request.json",
            &[
                ("ACTION", action.into()),
                ("NUMBER", "7".into()),
                ("HEAD_REF", "signup".into()),
                ("HEAD_SHA", pr_commit.clone()),
                ("HEAD_REPO", repo.into()),
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
    let app = r#"import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        env = os.environ
        body = ('env=%s branch=%s commit=%s' % (env.get('SLIPWAY_ENV'), env.get('SLIPWAY_BRANCH'), env.get('SLIPWAY_COMMIT', '')[:7])).encode()
        self.send_response(200)
        self.send_header('content-length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(('127.0.0.1', int(os.environ['PORT'])), H).serve_forever()
"#;
    git.commit("main", &[("app.py", app)]);
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
    let fired = daemon
        .request("POST", &daemon.control_host(), path, &[], Vec::new())
        .await;
    assert_eq!(fired.status, 202, "{}", fired.text());
    daemon
        .wait_complete(&fired.json(), Duration::from_secs(60))
        .await;
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
