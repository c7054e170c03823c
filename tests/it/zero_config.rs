//! Zero-config deploys (issue 16): `"framework": "auto"` with no commands deploys a plain
//! `index.html`, an Express app (npm from the registry) and a Flask app with a Procfile (pip
//! from PyPI), and the run's log says what was detected and why. Registry-dependent cases
//! skip, saying so, when the registry cannot be reached.

use std::time::Duration;

use serde_json::json;

use crate::support::{missing_tool, registry_reachable, targz, TestDaemon};

async fn deploy_auto(
    daemon: &TestDaemon,
    slug: &str,
    files: &[(&str, &str, u32)],
) -> (serde_json::Value, String) {
    daemon
        .run_archive(
            slug,
            targz(files),
            json!({"framework": "auto"}),
            Duration::from_secs(240),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_detects_a_plain_site_an_express_app_and_a_flask_app_with_a_procfile() {
    let daemon = TestDaemon::start_with(crate::support::DaemonOptions::default().extra_toml(
        "[rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n",
    ));
    let (status, logs) = deploy_auto(
        &daemon,
        "plain",
        &[
            ("index.html", "<h1>plain site</h1>", 0o644),
            ("about.html", "<h1>about</h1>", 0o644),
        ],
    )
    .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    assert!(
        logs.contains("detect: static") && logs.contains("index.html at the root"),
        "{logs}"
    );
    let about = daemon
        .request("GET", "plain.localhost", "/about", &[], Vec::new())
        .await;
    assert!(about.text().contains("about"), "clean URLs");

    // `slipway deploy --dry-run` prints the plan the daemon would choose, uploading nothing.
    let dir = tempfile::tempdir().unwrap();
    let vite =
        r#"{"name":"vite-react","scripts":{"build":"vite build"},"devDependencies":{"vite":"^6"}}"#;
    std::fs::write(dir.path().join("package.json"), vite).unwrap();
    std::fs::write(dir.path().join("package-lock.json"), "{}").unwrap();
    let printed = crate::support::cli(
        &daemon,
        &[
            "deploy",
            "--dry-run",
            "--project",
            "viteapp",
            dir.path().to_str().unwrap(),
        ],
    );
    assert!(printed.contains("detected: vite"), "{printed}");
    assert!(
        printed.contains("install: npm ci") && printed.contains("build:   npm run build"),
        "{printed}"
    );
    assert!(printed.contains("static files from dist"), "{printed}");
    assert_eq!(
        daemon
            .api("GET", "/api/projects/viteapp", None)
            .await
            .status,
        404,
        "nothing uploaded"
    );

    let bad = daemon
        .api(
            "POST",
            "/api/projects/plain/provision",
            Some(json!({"projectSlug": "plain", "framework": "rails"})),
        )
        .await;
    assert_eq!(bad.status, 400);

    if !missing_tool("npm", "the Express app installs with npm")
        && registry_reachable("registry.npmjs.org")
    {
        let package = r#"{"name":"api","version":"1.0.0","main":"server.js","scripts":{"start":"node server.js"},"dependencies":{"express":"^4.21.2"}}"#;
        let server = "const app = require('express')();\napp.get('/', (q, r) => r.send('express ' + process.env.SLIPWAY_ENV));\napp.listen(process.env.PORT);\n";
        let (status, logs) = deploy_auto(
            &daemon,
            "express",
            &[
                ("package.json", package, 0o644),
                ("server.js", server, 0o644),
            ],
        )
        .await;
        assert_eq!(
            status["status"], "provisioning_complete",
            "{status}\n{logs}"
        );
        assert!(
            logs.contains("detect: install command `npm install`"),
            "{logs}"
        );
        assert!(logs.contains("detect: start command `npm start`"), "{logs}");
        let page = daemon
            .request("GET", "express.localhost", "/", &[], Vec::new())
            .await;
        assert_eq!(page.text(), "express production");
    }

    if !missing_tool("python3", "the Flask app runs on Python") && registry_reachable("pypi.org") {
        let requirements = "flask==3.1.0\ngunicorn==23.0.0\n";
        let app = "from flask import Flask\napp = Flask(__name__)\n\n@app.get('/')\ndef home():\n    return 'flask via procfile'\n";
        let procfile = "web: gunicorn --bind 0.0.0.0:$PORT app:app\n";
        let (status, logs) = deploy_auto(
            &daemon,
            "flask",
            &[
                ("requirements.txt", requirements, 0o644),
                ("app.py", app, 0o644),
                ("Procfile", procfile, 0o644),
            ],
        )
        .await;
        assert_eq!(
            status["status"], "provisioning_complete",
            "{status}\n{logs}"
        );
        assert!(logs.contains("detect: Procfile"), "{logs}");
        let page = daemon
            .request("GET", "flask.localhost", "/", &[], Vec::new())
            .await;
        assert_eq!(page.text(), "flask via procfile");
    }
}
