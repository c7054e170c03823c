//! A real Vite project from the npm `create-vite` template, built by the daemon with
//! `npm ci && npm run build` and served from `dist/`. Skips when the npm registry is
//! unreachable (or npm is missing).

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::TestDaemon;

fn npm(args: &[&str], dir: &std::path::Path) -> Option<std::process::Output> {
    let mut command = Command::new("timeout");
    command
        .arg("180")
        .arg("npm")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null());
    command.output().ok()
}

#[tokio::test]
async fn vite_project_builds_and_serves_from_dist() {
    let work = tempfile::tempdir().unwrap();
    match npm(&["view", "create-vite", "version"], work.path()) {
        Some(output) if output.status.success() => {}
        Some(output) => {
            eprintln!(
                "SKIP: the npm registry is unreachable: {}",
                String::from_utf8_lossy(&output.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            return;
        }
        None => {
            eprintln!("SKIP: npm is not installed");
            return;
        }
    }
    let created = npm(
        &[
            "create",
            "--yes",
            "vite@latest",
            "vite-app",
            "--",
            "--template",
            "vanilla",
            "--no-interactive",
        ],
        work.path(),
    )
    .unwrap();
    assert!(
        created.status.success(),
        "create-vite failed: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let app = work.path().join("vite-app");
    let locked = npm(
        &["install", "--package-lock-only", "--no-audit", "--no-fund"],
        &app,
    )
    .unwrap();
    assert!(
        locked.status.success(),
        "npm install --package-lock-only failed: {}",
        String::from_utf8_lossy(&locked.stderr)
    );
    assert!(app.join("package-lock.json").is_file());

    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut builder = tar::Builder::new(encoder);
    builder.append_dir_all(".", &app).unwrap();
    let archive = builder.into_inner().unwrap().finish().unwrap();

    let daemon = TestDaemon::start();
    let upload = daemon.upload("vite-app", archive).await;
    assert_eq!(upload.status, 201, "{}", upload.text());
    let started = daemon
        .provision("vite-app", json!({"installCommand": "npm ci --no-audit --no-fund", "buildCommand": "npm run build"}))
        .await;
    daemon
        .wait_complete(&started, Duration::from_secs(300))
        .await;
    let dpl = started["deploymentId"].as_str().unwrap();
    let logs = daemon.logs_text(dpl).await;
    assert!(
        logs.contains("[install]") && logs.contains("[build]"),
        "{logs}"
    );
    assert!(
        logs.contains("deploy: serving static files from dist"),
        "{logs}"
    );

    let page = daemon.app_get("vite-app", "/", &[]).await;
    assert_eq!(page.status, 200);
    let html = page.text();
    assert!(html.contains("<div id=\"app\">"), "{html}");
    let script = html
        .split("src=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a script tag");
    assert!(script.starts_with("/assets/"), "{script}");
    let asset = daemon.app_get("vite-app", script, &[]).await;
    assert_eq!(asset.status, 200);
    assert!(
        asset.header("content-type").unwrap().contains("javascript"),
        "{:?}",
        asset.header("content-type")
    );
}
