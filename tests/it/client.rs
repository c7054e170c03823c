//! The client side (`slipway deploy`, `logs`, `env`, `projects`, `rollback`, `login`; `scale`
//! and `ps` in `client/formation.rs`): the real binary against a real daemon on port 0,
//! reached as `http://slipway.localhost:<port>` (the client resolves `*.localhost` to loopback
//! itself) or over HTTPS with the exported root.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::support::{DaemonOptions, TestDaemon, TlsSetup, BIN};

mod formation;

/// A daemon whose rate limits do not get in the way of several commands per test.
fn daemon() -> TestDaemon {
    TestDaemon::start_with(DaemonOptions::default().extra_toml(
        "[rate_limits]\nrequests_per_minute = 1000\nposts_per_minute_per_endpoint = 1000\n",
    ))
}

struct Client {
    url: String,
    token: String,
    /// An empty home, so no credentials file of the machine is read.
    home: tempfile::TempDir,
}

impl Client {
    fn for_daemon(daemon: &TestDaemon) -> Client {
        Client {
            url: format!("http://slipway.localhost:{}", daemon.http.port()),
            token: daemon.token.clone(),
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// Runs `slipway ARGS` in `cwd` with the credentials in the environment.
    async fn run(&self, cwd: &Path, args: &[&str]) -> Run {
        self.run_with(
            cwd,
            args,
            &[("SLIPWAY_URL", &self.url), ("SLIPWAY_TOKEN", &self.token)],
        )
        .await
    }

    async fn run_with(&self, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut command = tokio::process::Command::new(BIN);
        command
            .args(args)
            .current_dir(cwd)
            .env_remove("SLIPWAY_URL")
            .env_remove("SLIPWAY_TOKEN")
            .env_remove("SLIPWAY_CA_FILE")
            .env_remove("XDG_CONFIG_HOME")
            .env("HOME", self.home.path())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for (name, value) in env {
            command.env(name, value);
        }
        let output = tokio::time::timeout(Duration::from_secs(120), command.output())
            .await
            .unwrap_or_else(|_| panic!("slipway {args:?} did not finish within 120 s"))
            .expect("run slipway");
        Run::from(output)
    }
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl From<Output> for Run {
    fn from(output: Output) -> Run {
        Run {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

impl Run {
    #[track_caller]
    fn assert_code(&self, code: i32) -> &Run {
        assert_eq!(
            self.code,
            Some(code),
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    fn last_stdout_line(&self) -> &str {
        self.stdout.lines().last().unwrap_or("")
    }

    /// The deployment id the deploy announced on stderr.
    fn deployment_id(&self) -> String {
        let start = self
            .stderr
            .find("deployment dpl_")
            .expect("deployment announced")
            + 11;
        self.stderr[start..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    }
}

fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// A project directory named `name` inside a fresh temp dir.
fn project_dir(name: &str, files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join(name);
    std::fs::create_dir(&dir).unwrap();
    write_files(&dir, files);
    (parent, dir)
}

#[tokio::test]
async fn deploy_packs_respecting_gitignore_and_prints_the_url() {
    let daemon = daemon();
    let client = Client::for_daemon(&daemon);
    // The build fails if an ignored file was uploaded; the project comes from the dir name.
    let (_parent, dir) = project_dir(
        "My_Site",
        &[
            (".gitignore", "secret.txt\n*.log\n/private/\n!keep.log\n"),
            ("slipway.toml", "build = \"test ! -e secret.txt && test ! -e debug.log && test ! -e private && test -e keep.log && echo packed-right && mkdir -p dist && cp index.html dist/\"\n"),
            ("index.html", "<h1>from the laptop</h1>"),
            ("secret.txt", "hunter2"),
            ("debug.log", "noise"),
            ("keep.log", "kept"),
            ("private/key.pem", "KEY"),
            ("node_modules/dep/index.js", "module.exports = 1"),
        ],
    );
    let run = client
        .run(dir.parent().unwrap(), &["deploy", "My_Site"])
        .await;
    run.assert_code(0);
    assert!(
        run.stdout.contains(" build | packed-right"),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("==> build"), "progress: {}", run.stderr);
    assert!(run.stderr.contains("Packed 4 files"), "{}", run.stderr);

    let project = daemon
        .api("GET", "/api/projects/my-site", None)
        .await
        .json();
    assert_eq!(project["state"], "live");
    assert_eq!(run.last_stdout_line(), project["url"].as_str().unwrap());
    let page = daemon.app_get("my-site", "/", &[]).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.text(), "<h1>from the laptop</h1>");
    assert_eq!(
        daemon.app_get("my-site", "/secret.txt", &[]).await.status,
        404
    );
}

#[tokio::test]
async fn flags_override_slipway_toml_and_unknown_keys_stop_the_deploy() {
    let daemon = daemon();
    let client = Client::for_daemon(&daemon);
    let (_parent, dir) = project_dir(
        "site",
        &[
            (
                "slipway.toml",
                "project = \"flagged\"\nbuild = \"exit 9\"\noutput = \"out\"\n",
            ),
            ("index.html", "flags win"),
        ],
    );
    let run = client
        .run(
            &dir,
            &["deploy", "--build", "mkdir -p out && cp index.html out/"],
        )
        .await;
    run.assert_code(0);
    assert_eq!(
        daemon.app_get("flagged", "/", &[]).await.text(),
        "flags win"
    );

    std::fs::write(
        dir.join("slipway.toml"),
        "project = \"x\"\nbuidl = \"make\"\n",
    )
    .unwrap();
    let run = client.run(&dir, &["deploy"]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("unknown key `buidl`"), "{}", run.stderr);
    let projects = daemon.api("GET", "/api/projects", None).await.json();
    assert_eq!(
        projects["projects"].as_array().unwrap().len(),
        1,
        "nothing uploaded"
    );
}

#[tokio::test]
async fn a_failing_build_exits_1_with_the_step_code_and_message() {
    let daemon = daemon();
    let client = Client::for_daemon(&daemon);
    let (_parent, dir) = project_dir("broken", &[("index.html", "x")]);
    let run = client
        .run(
            &dir,
            &["deploy", "--build", "echo about-to-fail >&2; exit 3"],
        )
        .await;
    run.assert_code(1);
    assert!(
        run.stdout.contains(" build | about-to-fail"),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("deploy failed at step build")
            && run.stderr.contains("BUILD_FAILED")
            && run.stderr.contains("exited with code 3"),
        "{}",
        run.stderr
    );
    // An API error prints the envelope's message and exits 1 too.
    let run = client
        .run(&dir, &["deploy", "--project", "Not A Slug"])
        .await;
    run.assert_code(1);
    assert!(run.stderr.contains("INVALID_SLUG_FORMAT"), "{}", run.stderr);
}

#[tokio::test]
async fn server_apps_end_the_deploy_when_live_and_get_their_env_vars() {
    if std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIP: node is not installed");
        return;
    }
    let daemon = daemon();
    let client = Client::for_daemon(&daemon);
    let server =
        "require('http').createServer((q, r) => r.end('greeting=' + process.env.GREETING))\
                  .listen(process.env.PORT, () => console.log('listening'));";
    let (_parent, dir) = project_dir(
        "node-app",
        &[
            ("server.js", server),
            (
                "slipway.toml",
                "start = \"node server.js\"\nhealth = \"/\"\n",
            ),
        ],
    );
    client
        .run(
            &dir,
            &[
                "env",
                "set",
                "GREETING=hello=world",
                "--project",
                "node-app",
            ],
        )
        .await
        .assert_code(0);
    // The stream of a live server app never ends: the final status must end the command.
    let run = client.run(&dir, &["deploy"]).await;
    run.assert_code(0);
    // A live app's lines are tagged with the instance that wrote them.
    assert!(
        run.stdout.contains("stdout | [web.1] listening"),
        "{}",
        run.stdout
    );
    let page = daemon.app_get("node-app", "/", &[]).await;
    assert_eq!(page.text(), "greeting=hello=world");
}

#[tokio::test]
async fn env_set_ls_rm_round_trip() {
    let daemon = daemon();
    let client = Client::for_daemon(&daemon);
    // Without --project, the current directory's slipway.toml names the project.
    let (_parent, dir) = project_dir("anything", &[("slipway.toml", "project = \"envs\"\n")]);
    let run = client.run(&dir, &["env", "set", "B=2", "A=x=y"]).await;
    run.assert_code(0);
    assert!(run.stdout.contains("envs: set A, B"), "{}", run.stdout);
    let run = client.run(&dir, &["env", "ls"]).await;
    run.assert_code(0);
    assert_eq!(run.stdout, "A=x=y\nB=2\n");
    client.run(&dir, &["env", "rm", "A"]).await.assert_code(0);
    let run = client.run(&dir, &["env", "ls", "--project", "envs"]).await;
    assert_eq!(run.stdout, "B=2\n");

    let run = client.run(&dir, &["env", "set", "PORT=1"]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("INVALID_ENV_KEY"), "{}", run.stderr);
    let run = client.run(&dir, &["env", "rm", "MISSING"]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("NOT_FOUND"), "{}", run.stderr);
    let elsewhere = tempfile::tempdir().unwrap();
    let run = client.run(elsewhere.path(), &["env", "ls"]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("--project"), "{}", run.stderr);
}

#[tokio::test]
async fn logs_projects_and_rollback() {
    let daemon = daemon();
    let client = Client::for_daemon(&daemon);
    let (_parent, dir) = project_dir("rolling", &[("index.html", "v1")]);
    let build = "echo built-$(cat index.html) && mkdir -p dist && cp index.html dist/";
    let first = client.run(&dir, &["deploy", "--build", build]).await;
    first.assert_code(0);
    std::fs::write(dir.join("index.html"), "v2").unwrap();
    let second = client.run(&dir, &["deploy", "--build", build]).await;
    second.assert_code(0);
    assert_eq!(daemon.app_get("rolling", "/", &[]).await.text(), "v2");
    let (first_id, second_id) = (first.deployment_id(), second.deployment_id());

    let run = client.run(&dir, &["logs", &first_id]).await;
    run.assert_code(0);
    assert!(run.stdout.contains(" build | built-v1"), "{}", run.stdout);
    assert!(run.stdout.contains("system | "), "{}", run.stdout);
    // -f on a finished deployment replays everything and stops at the stream's end.
    let run = client.run(&dir, &["logs", "-f", &first_id]).await;
    run.assert_code(0);
    assert!(run.stdout.contains(" build | built-v1"), "{}", run.stdout);

    let run = client.run(&dir, &["projects"]).await;
    run.assert_code(0);
    let header = run.stdout.lines().next().unwrap();
    assert!(
        header.starts_with("SLUG") && header.contains("LIVE DEPLOYMENT"),
        "{header}"
    );
    let row = run
        .stdout
        .lines()
        .find(|line| line.starts_with("rolling "))
        .unwrap_or_else(|| panic!("{}", run.stdout));
    assert!(row.contains(" live ") && row.ends_with(&second_id), "{row}");

    let run = client.run(&dir, &["rollback", "rolling", &first_id]).await;
    run.assert_code(0);
    assert!(
        run.last_stdout_line()
            .starts_with("http://rolling.localhost"),
        "{}",
        run.stdout
    );
    assert_eq!(daemon.app_get("rolling", "/", &[]).await.text(), "v1");
    let run = client.run(&dir, &["rollback", "rolling", "dpl_nope"]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("NOT_FOUND"), "{}", run.stderr);
    let run = client.run(&dir, &["logs", "dpl_nope"]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("NOT_FOUND"), "{}", run.stderr);
}

#[tokio::test]
async fn login_saves_private_credentials_that_the_environment_overrides() {
    let daemon = daemon();
    let client = Client::for_daemon(&daemon);
    let cwd = tempfile::tempdir().unwrap();
    let file = client.home.path().join(".config/slipway/credentials.toml");

    let run = client.run_with(cwd.path(), &["projects"], &[]).await;
    run.assert_code(1);
    assert!(run.stderr.contains("slipway login"), "{}", run.stderr);

    let run = client
        .run_with(
            cwd.path(),
            &["login", "--url", &client.url, "--token", "slw_wrong"],
            &[],
        )
        .await;
    run.assert_code(1);
    assert!(run.stderr.contains("UNAUTHORIZED"), "{}", run.stderr);
    assert!(!file.exists(), "a refused token is not saved");

    client
        .run_with(
            cwd.path(),
            &["login", "--url", &client.url, "--token", &client.token],
            &[],
        )
        .await
        .assert_code(0);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    client
        .run_with(cwd.path(), &["projects"], &[])
        .await
        .assert_code(0);
    // The environment wins over the file.
    let run = client
        .run_with(cwd.path(), &["projects"], &[("SLIPWAY_TOKEN", "slw_wrong")])
        .await;
    run.assert_code(1);
    assert!(run.stderr.contains("UNAUTHORIZED"), "{}", run.stderr);
}

#[tokio::test]
async fn https_with_the_exported_root_in_slipway_ca_file() {
    let daemon = TestDaemon::start_with(DaemonOptions::default().tls(TlsSetup::Internal));
    let https = daemon.https_addr();
    let export = std::process::Command::new(BIN)
        .args(["ca", "export", "--data-dir"])
        .arg(daemon.data_dir())
        .output()
        .unwrap();
    assert!(
        export.status.success(),
        "{}",
        String::from_utf8_lossy(&export.stderr)
    );
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("root.pem");
    std::fs::write(&root, &export.stdout).unwrap();
    let client = Client {
        url: format!("https://slipway.localhost:{}", https.port()),
        token: daemon.token.clone(),
        home,
    };
    let cwd = tempfile::tempdir().unwrap();
    let env = [
        ("SLIPWAY_URL", client.url.as_str()),
        ("SLIPWAY_TOKEN", client.token.as_str()),
    ];
    let run = client.run_with(cwd.path(), &["projects"], &env).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("TLS handshake failed"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("SLIPWAY_CA_FILE"), "{}", run.stderr);

    let root = root.to_str().unwrap();
    let env = [env[0], env[1], ("SLIPWAY_CA_FILE", root)];
    client
        .run_with(
            cwd.path(),
            &["env", "set", "K=v", "--project", "secure"],
            &env,
        )
        .await
        .assert_code(0);
    let run = client.run_with(cwd.path(), &["projects"], &env).await;
    run.assert_code(0);
    assert!(run.stdout.contains("secure"), "{}", run.stdout);
}
