//! Issue 29 §3: zero-config never serves a server project's source as a static site. Python,
//! Node, Procfile-without-`web:` and Go projects whose start command cannot be found fail with
//! `START_COMMAND_MISSING` and a message that says what to set, and serve nothing; so does a
//! server tree deployed with no commands at all (the deploy step's check). A WSGI function in
//! `app.py` and a real `django-admin startproject` site (`tests/fixtures/projects/django-site`,
//! Django 5.2.19) deploy and answer under gunicorn, their source files unserved. Runs in
//! namespaces mode where the machine allows it, else in the default mode, saying so; the
//! deploys that install from PyPI skip without python3 or PyPI.

use std::time::Duration;

use serde_json::json;

use crate::sandboxed::Sandboxed;
use crate::support::{missing_tool, registry_reachable, step_state, DaemonOptions, TestDaemon};

/// A namespaced daemon where the machine allows one, else a daemon in the default mode.
enum Daemon {
    Sandboxed(Sandboxed),
    Plain(TestDaemon),
}

impl Daemon {
    fn start(test: &str) -> Daemon {
        let limits = "[limits]\nbuild_timeout_s = 600\nhealth_timeout_s = 120\n";
        match Sandboxed::start(test, limits) {
            Some(sandboxed) => Daemon::Sandboxed(sandboxed),
            None => {
                eprintln!("{test}: runs in the default sandbox mode instead");
                Daemon::Plain(TestDaemon::start_with(DaemonOptions::default().extra_toml(
                    &format!("{limits}[rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n"),
                )))
            }
        }
    }

    fn get(&self) -> &TestDaemon {
        match self {
            Daemon::Sandboxed(sandboxed) => &sandboxed.daemon,
            Daemon::Plain(daemon) => daemon,
        }
    }

    /// Uploads `archive` for `slug`, provisions `body`, waits; the final status and the logs.
    async fn deploy(
        &self,
        slug: &str,
        archive: Vec<u8>,
        body: serde_json::Value,
    ) -> (serde_json::Value, String) {
        self.get()
            .run_archive(slug, archive, body, Duration::from_secs(500))
            .await
    }

    /// Asserts that `path` on the project's host is not its source file.
    async fn assert_unserved(&self, slug: &str, path: &str, source: &str) {
        let page = self.get().app_get(slug, path, &[]).await;
        let text = page.text();
        assert!(
            page.status != 200 || !text.contains(source),
            "{slug}{path} served the source: {} {text}",
            page.status
        );
        assert!(!text.contains(source), "{slug}{path}: {text}");
    }
}

fn files(entries: &[(&str, &str)]) -> Vec<u8> {
    let with_mode: Vec<(&str, &str, u32)> = entries
        .iter()
        .map(|(path, text)| (*path, *text, 0o644))
        .collect();
    crate::support::targz(&with_mode)
}

const WSGI_APP: &str = "def app(environ, start_response):\n    start_response('200 OK', [('Content-Type', 'text/plain')])\n    return [b'wsgi function on ' + environ['PATH_INFO'].encode()]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_projects_without_a_start_command_fail_and_serve_nothing() {
    let daemon = Daemon::start("server projects without a start command");
    let no_callable = "import os\nprint('SECRET', os.environ.get('HOME'))\n";
    let express = r#"{"name":"api","dependencies":{"express":"^4.21.2"}}"#;
    let express_server = "require('express')().listen(process.env.PORT) // SERVER SOURCE\n";
    // (slug, tree, a file of it and its text, what the message must say).
    type Case = (
        &'static str,
        Vec<(&'static str, &'static str)>,
        (&'static str, &'static str),
        &'static str,
    );
    let cases: [Case; 4] = [
        (
            "py",
            vec![
                ("requirements.txt", "gunicorn==23.0.0\n"),
                ("app.py", no_callable),
            ],
            ("/app.py", "print('SECRET'"),
            "no WSGI or ASGI callable",
        ),
        (
            "nodeapi",
            vec![("package.json", express), ("src/server.js", express_server)],
            ("/src/server.js", "SERVER SOURCE"),
            "add a `start` script to package.json",
        ),
        (
            "worker",
            vec![
                ("Procfile", "worker: python work.py\n"),
                ("work.py", no_callable),
            ],
            ("/work.py", "print('SECRET'"),
            "add a `web:` line to the Procfile",
        ),
        (
            "gosvc",
            vec![
                ("go.mod", "module example.com/svc\n"),
                ("main.go", "package main // GO SOURCE\n"),
                ("index.html", "<h1>hi</h1>"),
            ],
            ("/main.go", "GO SOURCE"),
            "Slipway chooses no commands for go",
        ),
    ];
    for (slug, tree, (path, source), advice) in cases {
        let (status, logs) = daemon
            .deploy(slug, files(&tree), json!({"framework": "auto"}))
            .await;
        assert_eq!(
            status["status"], "provisioning_failed",
            "{slug}: {status}\n{logs}"
        );
        assert_eq!(
            status["error"]["code"], "START_COMMAND_MISSING",
            "{slug}: {status}"
        );
        assert_eq!(status["failedStep"], "source", "{slug}: {status}");
        let message = status["error"]["message"].as_str().unwrap();
        assert!(message.contains(advice), "{slug}: {message}");
        assert!(
            message.contains("set startCommand") && message.contains("Procfile"),
            "{slug}: {message}"
        );
        assert!(
            message.contains("never served as static files"),
            "{slug}: {message}"
        );
        // It failed before installing anything.
        assert_eq!(
            step_state(&status, "install"),
            "pending",
            "{slug}: {status}"
        );
        assert!(logs.contains(message), "the run's log says it too: {logs}");
        daemon.assert_unserved(slug, path, source).await;
    }

    // No `framework: auto`, no commands at all: the deploy step would serve the root; it
    // refuses a server's tree. A WSGI app with a callable still needs a start command.
    let (status, logs) = daemon
        .deploy(
            "bare",
            files(&[
                ("requirements.txt", "gunicorn==23.0.0\n"),
                ("app.py", WSGI_APP),
            ]),
            json!({}),
        )
        .await;
    assert_eq!(
        status["error"]["code"], "START_COMMAND_MISSING",
        "{status}\n{logs}"
    );
    assert_eq!(status["failedStep"], "deploy", "{status}");
    let message = status["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("a server's source directory is never served as static files"),
        "{message}"
    );
    assert!(!logs.contains("serving static files from"), "{logs}");
    daemon
        .assert_unserved("bare", "/app.py", "start_response")
        .await;
    daemon
        .assert_unserved("bare", "/requirements.txt", "gunicorn")
        .await;

    // A Node build that writes somewhere unknown: its root is not served either.
    let package =
        r#"{"name":"site","scripts":{"build":"mkdir -p site && echo built > site/index.html"}}"#;
    let (status, _) = daemon
        .deploy(
            "nodebuild",
            files(&[("package.json", package)]),
            json!({"buildCommand": "mkdir -p site && echo built > site/index.html"}),
        )
        .await;
    assert_eq!(status["error"]["code"], "START_FAILED", "{status}");
    let message = status["error"]["message"].as_str().unwrap();
    assert!(message.contains("set outputDirectory"), "{message}");
    daemon
        .assert_unserved("nodebuild", "/package.json", "mkdir")
        .await;

    // No manifest at all: a lone `app.py`, a `server.js` without `package.json` or an
    // `index.html` next to a `config.php` is still a server's source, never a site.
    for (slug, tree, (path, source)) in [
        (
            "lonepy",
            vec![("app.py", WSGI_APP)],
            ("/app.py", "start_response"),
        ),
        (
            "lonejs",
            vec![("server.js", "require('http') // LONE SERVER\n")],
            ("/server.js", "LONE SERVER"),
        ),
        (
            "php",
            vec![
                ("index.html", "<h1>php</h1>"),
                ("config.php", "<?php $db_password = 'hunter2';"),
            ],
            ("/config.php", "hunter2"),
        ),
    ] {
        let (status, logs) = daemon.deploy(slug, files(&tree), json!({})).await;
        assert_eq!(
            status["error"]["code"], "START_COMMAND_MISSING",
            "{slug}: {status}\n{logs}"
        );
        let message = status["error"]["message"].as_str().unwrap();
        assert!(message.contains("set startCommand"), "{slug}: {message}");
        daemon.assert_unserved(slug, path, source).await;
    }

    // A plain site is still served from its root.
    let (status, _) = daemon
        .deploy(
            "plain",
            files(&[("index.html", "<h1>plain</h1>")]),
            json!({"framework": "auto"}),
        )
        .await;
    assert_eq!(status["status"], "provisioning_complete", "{status}");
    assert_eq!(
        daemon.get().app_get("plain", "/", &[]).await.text(),
        "<h1>plain</h1>"
    );
}

/// The Django fixture as the `.tar.gz` a user would upload, with `settings_extra` appended to
/// its settings.
fn django_archive(settings_extra: &str) -> Vec<u8> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/projects/django-site");
    let read = |path: &str| std::fs::read_to_string(root.join(path)).unwrap();
    let settings = format!("{}{settings_extra}", read("mysite/settings.py"));
    let paths = [
        "manage.py",
        "requirements.txt",
        "mysite/__init__.py",
        "mysite/asgi.py",
        "mysite/urls.py",
        "mysite/wsgi.py",
    ];
    let mut entries: Vec<(&str, String)> = paths.iter().map(|path| (*path, read(path))).collect();
    entries.push(("mysite/settings.py", settings));
    let entries: Vec<(&str, &str)> = entries
        .iter()
        .map(|(path, text)| (*path, text.as_str()))
        .collect();
    files(&entries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wsgi_function_and_a_django_project_run_under_gunicorn() {
    if missing_tool("python3", "the apps run on Python") || !registry_reachable("pypi.org") {
        return;
    }
    let daemon = Daemon::start("a WSGI function and a Django project");
    // Egress of a namespaced build needs the daemon's host table: not while another test
    // flushes the ruleset.
    let _egress = crate::sandbox::support::HOST_RULESET.lock().await;

    let (status, logs) = daemon
        .deploy(
            "wsgifn",
            files(&[
                ("requirements.txt", "gunicorn==23.0.0\n"),
                ("app.py", WSGI_APP),
            ]),
            json!({"framework": "auto"}),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    assert!(logs.contains("detect: wsgi"), "{logs}");
    assert!(
        logs.contains("app.py defines `def app(environ, start_response)` (WSGI)"),
        "{logs}"
    );
    assert!(logs.contains("gunicorn --bind"), "{logs}");
    let page = daemon.get().app_get("wsgifn", "/", &[]).await;
    assert_eq!(
        (page.status, page.text()),
        (200, "wsgi function on /".to_owned())
    );
    let page = daemon.get().app_get("wsgifn", "/app.py", &[]).await;
    assert_eq!(
        page.text(),
        "wsgi function on /app.py",
        "the app answers, not a file"
    );

    // The stock `startproject` site: gunicorn on mysite.wsgi:application.
    let secret = "django-insecure-";
    let (status, logs) = daemon
        .deploy("djsite", django_archive(""), json!({"framework": "auto"}))
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    assert!(logs.contains("detect: django"), "{logs}");
    assert!(
        logs.contains("manage.py: Django, settings mysite.settings"),
        "{logs}"
    );
    assert!(
        logs.contains("gunicorn serves mysite.wsgi:application on PORT"),
        "{logs}"
    );
    assert!(!logs.contains("serving static files"), "{logs}");
    let home = daemon.get().app_get("djsite", "/", &[]).await;
    assert_eq!(home.status, 200, "{}", home.text());
    assert!(
        home.text().contains("The install worked successfully!"),
        "{}",
        home.text()
    );
    for path in ["/mysite/settings.py", "/manage.py", "/requirements.txt"] {
        let page = daemon.get().app_get("djsite", path, &[]).await;
        assert_eq!(page.status, 404, "{path}: Django's own 404");
        assert!(
            !page.text().contains(secret),
            "{path} leaked the SECRET_KEY"
        );
    }

    // With STATIC_ROOT set, the build collects the static files.
    let (status, logs) = daemon
        .deploy(
            "djsite",
            django_archive("\nSTATIC_ROOT = BASE_DIR / 'staticfiles'\n"),
            json!({"framework": "auto"}),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    assert!(
        logs.contains("detect: build command `.venv/bin/python manage.py collectstatic --noinput`"),
        "{logs}"
    );
    assert!(logs.contains("static files copied to"), "{logs}");
    let home = daemon.get().app_get("djsite", "/", &[]).await;
    assert!(home.text().contains("The install worked successfully!"));
}
