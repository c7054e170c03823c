//! The git deploy tests' fixtures: a `git daemon` on loopback, provider-shaped signed
//! payloads, and a project set up for webhooks.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::{missing_tool, DaemonOptions, TestDaemon, TestResponse};

/// A repository served by `git daemon` on 127.0.0.1.
pub(super) struct GitServer {
    _dir: tempfile::TempDir,
    pub(super) repo: PathBuf,
    pub(super) port: u16,
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

pub(super) fn git(repo: &Path, args: &[&str]) -> String {
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
    pub(super) fn start() -> Option<GitServer> {
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

    pub(super) fn url(&self) -> String {
        format!("git://127.0.0.1:{}/site", self.port)
    }

    /// Commits `files` on `branch` (made from main when new); returns the commit id.
    pub(super) fn commit(&self, branch: &str, files: &[(&str, &str)]) -> String {
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
pub(super) fn payload(name: &str, values: &[(&str, String)]) -> Vec<u8> {
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

pub(super) fn hmac_hex(secret: &str, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    slipway::ids::hex(ring::hmac::sign(&key, body).as_ref())
}

pub(super) const ZERO: &str = "0000000000000000000000000000000000000000";

pub(super) struct Project<'a> {
    pub(super) daemon: &'a TestDaemon,
    pub(super) slug: &'static str,
    pub(super) secret: String,
}

impl Project<'_> {
    pub(super) async fn deliver(&self, headers: &[(&str, String)], body: Vec<u8>) -> TestResponse {
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

    pub(super) async fn github(&self, event: &str, delivery: &str, body: Vec<u8>) -> TestResponse {
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
    pub(super) async fn completed(&self, answer: &TestResponse, action: &str) -> serde_json::Value {
        assert_eq!(answer.status, 202, "{}", answer.text());
        let json = answer.json();
        assert_eq!(json["action"], action, "{json}");
        self.daemon
            .wait_complete(&json, Duration::from_secs(60))
            .await;
        json
    }

    pub(super) async fn page(&self, host: &str) -> TestResponse {
        self.daemon.request("GET", host, "/", &[], Vec::new()).await
    }

    pub(super) async fn deployment_count(&self) -> usize {
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

pub(super) async fn set_up<'a>(
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

pub(super) fn options() -> DaemonOptions {
    DaemonOptions::default().extra_toml(
        "[rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n",
    )
}

/// A small Python HTTP server for the apps under test: answers every GET with `body`, a
/// Python expression (of `os` and `env`, the environment) giving a `str`.
pub(super) fn python_app(body: &str) -> String {
    format!(
        r#"import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        env = os.environ
        body = ({body}).encode()
        self.send_response(200)
        self.send_header('content-length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(('127.0.0.1', int(os.environ['PORT'])), H).serve_forever()
"#
    )
}

/// Fires the deploy hook at `path` (no token: the secret URL is enough) and waits for its run.
pub(super) async fn fire_hook(daemon: &TestDaemon, path: &str) {
    let fired = daemon
        .request("POST", &daemon.control_host(), path, &[], Vec::new())
        .await;
    assert_eq!(fired.status, 202, "{}", fired.text());
    daemon
        .wait_complete(&fired.json(), Duration::from_secs(60))
        .await;
}
