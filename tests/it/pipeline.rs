//! Provisioning end to end: real uploads, real builds (sh, node), the router, logs and SSE.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{targz, TestDaemon};

const STATIC_BUILD: &str =
    "mkdir -p dist && printf '<h1>%s</h1>' \"$GREETING\" > dist/index.html && echo built";

#[tokio::test]
async fn static_site_deploys_and_answers_with_etags() {
    let daemon = TestDaemon::start();
    assert_eq!(
        daemon
            .api(
                "POST",
                "/api/projects/site/env-vars",
                Some(json!({"GREETING": "hello"}))
            )
            .await
            .status,
        200
    );
    let upload = daemon
        .upload("site", targz(&[("README.md", "# site\n", 0o644)]))
        .await;
    assert_eq!(upload.status, 201, "{}", upload.text());
    let upload = upload.json();
    assert!(upload["sourceId"].as_str().unwrap().starts_with("src_"));
    assert_eq!(upload["fileCount"], 1);
    assert_eq!(upload["sha256"].as_str().unwrap().len(), 64);

    let started = daemon
        .provision(
            "site",
            json!({"buildCommand": STATIC_BUILD, "installCommand": ""}),
        )
        .await;
    assert_eq!(started["status"], "provisioning_in_progress");
    assert_eq!(started["estimatedCompletionTime"], 180000);
    let pvn = started["provisioningId"].as_str().unwrap();
    assert!(pvn.starts_with("pvn_"));
    assert_eq!(
        started["statusCheckUrl"],
        format!("/api/provisioning/{pvn}/status")
    );
    assert!(started["deploymentId"]
        .as_str()
        .unwrap()
        .starts_with("dpl_"));

    let status = daemon.wait_run(pvn, Duration::from_secs(60)).await;
    assert_eq!(status["status"], "provisioning_complete", "{status}");
    assert_eq!(
        status["url"],
        format!("http://site.localhost:{}", daemon.http.port())
    );
    assert_eq!(status["deploymentId"], started["deploymentId"]);
    assert!(status["totalDurationMs"].as_u64().is_some());
    let states: Vec<_> = status["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                s["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(states[4], ("install".into(), "skipped".into()));
    assert_eq!(states[5], ("build".into(), "succeeded".into()));
    assert_eq!(
        states[6],
        ("release".into(), "skipped".into()),
        "no release command"
    );
    assert_eq!(
        states[8],
        ("ssl_verification".into(), "skipped".into()),
        "tls is off in this test"
    );

    let page = daemon.app_get("site", "/", &[]).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.text(), "<h1>hello</h1>");
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    let etag = page.header("etag").unwrap().to_owned();
    let again = daemon
        .app_get("site", "/", &[("if-none-match", etag)])
        .await;
    assert_eq!(again.status, 304);
    // The second estimate comes from history (median of successful runs).
    let second = daemon
        .provision("site", json!({"buildCommand": STATIC_BUILD}))
        .await;
    assert!(second["estimatedCompletionTime"].as_u64().unwrap() < 180000);
    daemon
        .wait_run(
            second["provisioningId"].as_str().unwrap(),
            Duration::from_secs(60),
        )
        .await;
    let project = daemon.api("GET", "/api/projects/site", None).await.json();
    assert_eq!(project["state"], "live");
    assert_eq!(project["liveDeploymentId"], second["deploymentId"]);
    let deployments = daemon
        .api("GET", "/api/projects/site/deployments", None)
        .await
        .json();
    let list = deployments["deployments"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0]["live"], true);
    assert_eq!(list[1]["state"], "inactive");
}

/// A Node server with no dependencies: answers with an env var and echoes WebSocket frames.
pub const NODE_APP: &str = r#"
const http = require('http');
const crypto = require('crypto');
const server = http.createServer((req, res) => {
  if (req.url === '/crash') { res.end('bye'); setTimeout(() => process.exit(1), 10); return; }
  res.setHeader('content-type', 'text/plain');
  res.end(`secret=${process.env.APP_SECRET} port=${process.env.PORT} xff=${req.headers['x-forwarded-for']}`);
});
server.on('upgrade', (req, socket) => {
  const accept = crypto.createHash('sha1').update(req.headers['sec-websocket-key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + accept + '\r\n\r\n');
  let buffer = Buffer.alloc(0);
  socket.on('data', (chunk) => {
    buffer = Buffer.concat([buffer, chunk]);
    while (buffer.length >= 6) {
      const opcode = buffer[0] & 0x0f;
      let length = buffer[1] & 0x7f, offset = 2;
      if (length === 126) { length = buffer.readUInt16BE(2); offset = 4; }
      if (buffer.length < offset + 4 + length) return;
      const mask = buffer.slice(offset, offset + 4);
      const payload = Buffer.from(buffer.slice(offset + 4, offset + 4 + length).map((b, i) => b ^ mask[i % 4]));
      buffer = buffer.slice(offset + 4 + length);
      if (opcode === 8) { socket.end(); return; }
      const out = Buffer.concat([Buffer.from('echo:'), payload]);
      const header = out.length < 126 ? Buffer.from([0x81, out.length]) : Buffer.from([0x81, 126, out.length >> 8, out.length & 255]);
      socket.write(Buffer.concat([header, out]));
    }
  });
});
server.listen(process.env.PORT, () => console.log('listening on ' + process.env.PORT));
"#;

fn node_missing() -> bool {
    crate::support::missing_tool("node", "the app is a node server")
}

#[tokio::test]
async fn node_app_reads_env_and_echoes_websockets() {
    if node_missing() {
        return;
    }
    let daemon = TestDaemon::start();
    assert_eq!(
        daemon
            .api(
                "POST",
                "/api/projects/web/env-vars",
                Some(json!({"APP_SECRET": "swordfish"}))
            )
            .await
            .status,
        200
    );
    let status = daemon
        .deploy(
            "web",
            &[("server.js", NODE_APP, 0o644)],
            json!({"startCommand": "node server.js"}),
        )
        .await;
    let response = daemon
        .app_get("web", "/", &[("x-forwarded-for", "6.6.6.6".into())])
        .await;
    assert_eq!(response.status, 200, "{}", response.text());
    let text = response.text();
    assert!(text.starts_with("secret=swordfish port="), "{text}");
    assert!(
        text.ends_with("xff=127.0.0.1"),
        "client-supplied X-Forwarded-For is overwritten: {text}"
    );
    let logs = daemon
        .logs_text(status["deploymentId"].as_str().unwrap())
        .await;
    assert!(logs.contains("[stdout] listening on"), "{logs}");

    // WebSocket through the router.
    use futures_util::{SinkExt, StreamExt};
    let stream = tokio::net::TcpStream::connect(daemon.http).await.unwrap();
    let (mut socket, response) =
        tokio_tungstenite::client_async("ws://web.localhost/socket", stream)
            .await
            .expect("websocket handshake");
    assert_eq!(response.status(), 101);
    socket
        .send(tokio_tungstenite::tungstenite::Message::text("ping"))
        .await
        .unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), socket.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(reply.into_text().unwrap().as_str(), "echo:ping");
}

#[tokio::test]
async fn failed_build_keeps_the_live_deployment() {
    let daemon = TestDaemon::start();
    daemon
        .deploy(
            "keep",
            &[("a.txt", "a", 0o644)],
            json!({"buildCommand": "mkdir -p dist && echo v1 > dist/index.html"}),
        )
        .await;
    let started = daemon
        .provision(
            "keep",
            json!({"buildCommand": "echo compiling; echo 'error: boom' >&2; exit 3"}),
        )
        .await;
    let status = daemon
        .wait_run(
            started["provisioningId"].as_str().unwrap(),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(status["status"], "provisioning_failed", "{status}");
    assert_eq!(status["failedStep"], "build");
    assert_eq!(status["error"]["code"], "BUILD_FAILED");
    assert!(
        status["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exited with code 3"),
        "{status}"
    );
    let build_step = status["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "build")
        .unwrap()
        .clone();
    assert_eq!(build_step["state"], "failed");
    let logs = daemon
        .logs_text(started["deploymentId"].as_str().unwrap())
        .await;
    assert!(
        logs.contains("[build] compiling") && logs.contains("[build] error: boom"),
        "{logs}"
    );
    let page = daemon.app_get("keep", "/", &[]).await;
    assert_eq!((page.status, page.text().trim()), (200, "v1"));
    assert_eq!(
        daemon.api("GET", "/api/projects/keep", None).await.json()["state"],
        "live"
    );
}

#[tokio::test]
async fn start_failures_are_reported_and_apps_restart_after_a_crash() {
    if node_missing() {
        return;
    }
    let daemon = TestDaemon::start_with(
        crate::support::DaemonOptions::default().extra_toml("[limits]\nhealth_timeout_s = 3\n"),
    );
    let files = [("server.js", NODE_APP, 0o644)];
    let upload = daemon.upload("crashy", targz(&files)).await;
    assert_eq!(upload.status, 201);
    // A start command that exits at once.
    let started = daemon
        .provision("crashy", json!({"startCommand": "echo nope; exit 7"}))
        .await;
    let status = daemon
        .wait_run(
            started["provisioningId"].as_str().unwrap(),
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(
        (
            status["failedStep"].as_str(),
            status["error"]["code"].as_str()
        ),
        (Some("deploy"), Some("START_FAILED")),
        "{status}"
    );
    // One that never listens.
    let started = daemon
        .provision("crashy", json!({"startCommand": "sleep 30"}))
        .await;
    let status = daemon
        .wait_run(
            started["provisioningId"].as_str().unwrap(),
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(status["error"]["code"], "HEALTHCHECK_FAILED", "{status}");
    // A healthy one, then crash it: it comes back after the 1 s backoff.
    let started = daemon
        .provision(
            "crashy",
            json!({"startCommand": "node server.js", "healthCheckPath": "/"}),
        )
        .await;
    let status = daemon
        .wait_run(
            started["provisioningId"].as_str().unwrap(),
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(status["status"], "provisioning_complete", "{status}");
    assert_eq!(daemon.app_get("crashy", "/crash", &[]).await.status, 200);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut saw_down = false;
    loop {
        let response = daemon.app_get("crashy", "/", &[]).await;
        if response.status == 200 && saw_down {
            break;
        }
        // 502 while the exit is noticed, then 503 "restarting" until it is healthy again.
        if response.status == 502 || response.status == 503 {
            saw_down = true;
        }
        assert!(Instant::now() < deadline, "app did not come back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs = daemon
        .logs_text(started["deploymentId"].as_str().unwrap())
        .await;
    assert!(logs.contains("restarting the app in 1 s"), "{logs}");
}

#[tokio::test]
async fn ten_redeploys_under_load_fail_no_request() {
    if node_missing() {
        return;
    }
    let daemon = TestDaemon::start_with(crate::support::DaemonOptions::default().extra_toml(
        "[rate_limits]\nrequests_per_minute = 1000\nposts_per_minute_per_endpoint = 1000\n",
    ));
    let files = [("server.js", NODE_APP, 0o644)];
    daemon
        .deploy("busy", &files, json!({"startCommand": "node server.js"}))
        .await;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let addr = daemon.http;
    let mut workers = Vec::new();
    for _ in 0..4 {
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http::<http_body_util::Empty<bytes::Bytes>>();
            let (mut ok, mut failed) = (0u32, Vec::new());
            let started = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && started.elapsed() < Duration::from_secs(120)
                && ok + (failed.len() as u32) < 20_000
            {
                let request = http::Request::get(format!("http://{addr}/"))
                    .header("host", "busy.localhost")
                    .body(http_body_util::Empty::new())
                    .unwrap();
                match client.request(request).await {
                    Ok(response) if response.status() == 200 => {
                        use http_body_util::BodyExt;
                        match response.into_body().collect().await {
                            Ok(_) => ok += 1,
                            Err(error) => failed.push(format!("body: {error}")),
                        }
                    }
                    Ok(response) => failed.push(format!("status {}", response.status())),
                    Err(error) => failed.push(format!("error: {error:?}")),
                }
            }
            (ok, failed)
        }));
    }
    for round in 0..10 {
        let started = daemon
            .provision("busy", json!({"startCommand": "node server.js"}))
            .await;
        let status = daemon
            .wait_run(
                started["provisioningId"].as_str().unwrap(),
                Duration::from_secs(60),
            )
            .await;
        assert_eq!(
            status["status"], "provisioning_complete",
            "round {round}: {status}"
        );
    }
    // Keep the load on until at least 2,000 requests were made and the last drain passed.
    let deadline = Instant::now() + Duration::from_secs(30);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (mut total_ok, mut all_failed) = (0, Vec::new());
    for worker in workers {
        let (ok, failed) = worker.await.unwrap();
        total_ok += ok;
        all_failed.extend(failed);
    }
    assert!(Instant::now() < deadline);
    assert!(
        all_failed.is_empty(),
        "{} failed requests, e.g. {:?}",
        all_failed.len(),
        &all_failed[..all_failed.len().min(5)]
    );
    assert!(total_ok >= 2000, "only {total_ok} requests were made");
    eprintln!("ten redeploys under load: {total_ok} requests, 0 failed");
}

#[tokio::test]
async fn archives_that_escape_are_refused_and_write_nothing() {
    let daemon = TestDaemon::start();
    let marker = format!("slipway-escape-{}", std::process::id());
    let outside = std::env::temp_dir().join(&marker);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "dot-dot",
            raw_tar_entry(
                &format!("../../../../../../../../tmp/{marker}"),
                b'0',
                "",
                b"pwned",
            ),
        ),
        (
            "absolute",
            raw_tar_entry(&outside.display().to_string(), b'0', "", b"pwned"),
        ),
        ("symlink out", {
            let mut archive = raw_tar_entry("link", b'2', "../../../../../../../../tmp", b"");
            archive.truncate(archive.len() - 1024);
            archive.extend(raw_tar_entry(&format!("link/{marker}"), b'0', "", b"pwned"));
            archive
        }),
    ];
    for (name, tar_bytes) in cases {
        let response = daemon.upload("attack", gzip(&tar_bytes)).await;
        response.assert_error(400, "INVALID_SOURCE_ARCHIVE");
        assert!(!outside.exists(), "{name}: a file was written outside");
    }
    // Nothing was kept: the project has no source to provision from.
    let response = daemon
        .api(
            "POST",
            "/api/projects/attack/provision",
            Some(json!({"projectSlug": "attack", "buildCommand": "true"})),
        )
        .await;
    response.assert_error(400, "INVALID_SOURCE_MISSING");
    let sources = std::fs::read_dir(daemon.data_dir().join("sources"))
        .unwrap()
        .count();
    assert_eq!(sources, 0, "no archive kept");
}

/// One hand-made ustar entry (the tar crate refuses to write `..` and absolute names) plus the
/// end-of-archive blocks.
fn raw_tar_entry(name: &str, kind: u8, link: &str, data: &[u8]) -> Vec<u8> {
    let mut header = [0u8; 512];
    header[..name.len()].copy_from_slice(name.as_bytes());
    header[100..108].copy_from_slice(b"0000644\0");
    header[108..116].copy_from_slice(b"0000000\0");
    header[116..124].copy_from_slice(b"0000000\0");
    header[124..136].copy_from_slice(format!("{:011o}\0", data.len()).as_bytes());
    header[136..148].copy_from_slice(b"00000000000\0");
    header[156] = kind;
    header[157..157 + link.len()].copy_from_slice(link.as_bytes());
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    header[148..156].copy_from_slice(b"        ");
    let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
    header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let mut out = header.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&[0u8; 1024]);
    out
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

#[tokio::test]
async fn live_apps_survive_a_restart_and_interrupted_runs_say_so() {
    if node_missing() {
        return;
    }
    let mut daemon = TestDaemon::start();
    daemon
        .deploy(
            "lasting",
            &[("server.js", NODE_APP, 0o644)],
            json!({"startCommand": "node server.js"}),
        )
        .await;
    daemon
        .deploy(
            "still",
            &[("x", "x", 0o644)],
            json!({"buildCommand": "mkdir -p out && echo static > out/index.html"}),
        )
        .await;
    let slow = daemon
        .provision(
            "lasting",
            json!({"buildCommand": "echo working; sleep 60", "startCommand": "node server.js"}),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(daemon.stop(), Some(0));
    daemon.restart();
    // Ready means the live apps are back.
    let response = daemon.app_get("lasting", "/", &[]).await;
    assert_eq!(response.status, 200, "{}", response.text());
    let response = daemon.app_get("still", "/", &[]).await;
    assert_eq!((response.status, response.text().trim()), (200, "static"));
    let status = daemon
        .api(
            "GET",
            &format!(
                "/api/provisioning/{}/status",
                slow["provisioningId"].as_str().unwrap()
            ),
            None,
        )
        .await
        .json();
    assert_eq!(status["status"], "provisioning_failed", "{status}");
    assert_eq!(status["error"]["code"], "INTERRUPTED");
    assert_eq!(status["failedStep"], "build");
    let logs = daemon
        .logs_text(slow["deploymentId"].as_str().unwrap())
        .await;
    assert!(
        logs.contains("[build] working"),
        "logs survive the restart: {logs}"
    );
}

#[tokio::test]
async fn a_newer_run_supersedes_an_older_one() {
    let daemon = TestDaemon::start();
    let upload = daemon.upload("twice", targz(&[("x", "x", 0o644)])).await;
    assert_eq!(upload.status, 201);
    let older = daemon
        .provision("twice", json!({"buildCommand": "sleep 30"}))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let newer = daemon
        .provision(
            "twice",
            json!({"buildCommand": "mkdir -p dist && echo new > dist/index.html"}),
        )
        .await;
    assert_superseded(&daemon, &older, &newer).await;
    assert_eq!(daemon.app_get("twice", "/", &[]).await.text().trim(), "new");
}

#[tokio::test]
async fn a_superseded_deploy_leaves_no_app_behind() {
    if node_missing() {
        return;
    }
    let daemon = TestDaemon::start();
    let upload = daemon
        .upload("swap", targz(&[("server.js", NODE_APP, 0o644)]))
        .await;
    assert_eq!(upload.status, 201);
    let marker = format!("superseded-{}", std::process::id());
    // The older run's app starts slowly, so the newer run arrives during its deploy step.
    // (Its code is inline, so it does not depend on the workspace that a failed run removes.)
    let slow_app = format!(
        "sleep 1; exec node -e \"require('http').createServer((q, r) => r.end('old')).listen(process.env.PORT)\" {marker}"
    );
    let older = daemon
        .provision("swap", json!({ "startCommand": slow_app }))
        .await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let newer = daemon
        .provision("swap", json!({"startCommand": "node server.js"}))
        .await;
    assert_superseded(&daemon, &older, &newer).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let leftovers = std::process::Command::new("pgrep")
        .args(["-f", &marker])
        .output()
        .unwrap();
    assert!(
        leftovers.stdout.is_empty(),
        "the superseded run's app is still running: {}",
        String::from_utf8_lossy(&leftovers.stdout)
    );
    assert_eq!(daemon.app_get("swap", "/", &[]).await.status, 200);
}

/// Waits for both runs of a project: the older must end canceled, the newer complete.
async fn assert_superseded(
    daemon: &TestDaemon,
    older: &serde_json::Value,
    newer: &serde_json::Value,
) {
    let older_status = daemon
        .wait_run(
            older["provisioningId"].as_str().unwrap(),
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(
        older_status["status"], "provisioning_canceled",
        "{older_status}"
    );
    let newer_status = daemon
        .wait_run(
            newer["provisioningId"].as_str().unwrap(),
            Duration::from_secs(30),
        )
        .await;
    assert_eq!(
        newer_status["status"], "provisioning_complete",
        "{newer_status}"
    );
}

#[tokio::test]
async fn provisions_from_a_git_url() {
    use std::os::unix::process::CommandExt;
    if std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIP: git is not installed");
        return;
    }
    // A repository with one commit, served by `git daemon` on loopback.
    let repos = tempfile::tempdir().unwrap();
    let work = repos.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("index.html"), "from git\n").unwrap();
    let git = |dir: &std::path::Path, args: &[&str]| {
        let output = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    git(&work, &["init", "-q"]);
    git(&work, &["add", "."]);
    git(&work, &["commit", "-qm", "first"]);
    git(repos.path(), &["clone", "-q", "--bare", "work", "site.git"]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = std::process::Command::new("git")
        .args([
            "daemon",
            "--reuseaddr",
            "--export-all",
            "--listen=127.0.0.1",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--base-path={}", repos.path().display()))
        .arg(repos.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "git daemon did not start");
        std::thread::sleep(Duration::from_millis(50));
    }

    let daemon = TestDaemon::start();
    let started = daemon
        .provision(
            "from-git",
            json!({"gitUrl": format!("git://127.0.0.1:{port}/site.git"), "gitRef": "main",
                   "buildCommand": "mkdir -p dist && cp index.html dist/"}),
        )
        .await;
    daemon
        .wait_complete(&started, Duration::from_secs(60))
        .await;
    let dpl = started["deploymentId"].as_str().unwrap();
    assert_eq!(
        daemon.app_get("from-git", "/", &[]).await.text(),
        "from git\n"
    );
    assert!(daemon
        .logs_text(dpl)
        .await
        .contains("source: cloning git://127.0.0.1"));
    // A URL that git would treat as a command is refused before anything runs.
    daemon
        .api(
            "POST",
            "/api/projects/from-git/provision",
            Some(json!({"projectSlug": "from-git", "gitUrl": "ext::sh -c touch% /tmp/pwned"})),
        )
        .await
        .assert_error(400, "INVALID_GIT_URL");
    // `git daemon` runs its server as a child: end the whole group.
    let group = nix::unistd::Pid::from_raw(server.id() as i32);
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGTERM);
    let _ = server.wait();
}
