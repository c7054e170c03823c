//! Sandbox networking and cost: isolation from the host and from other sandboxes while the
//! router still reaches apps, a real `npm ci` through NAT, and the spawn-to-exit overhead.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use slipway::sandbox::{Exit, Runner, StepKind};

use super::support::{finish_step, run, Lines, TestRunner, HOST_RULESET};

const APP_PORT: u16 = 8080;

/// One HTTP GET from the host to an app's sandbox address, as the router does it.
fn fetch(address: IpAddr) -> std::io::Result<String> {
    let mut stream =
        TcpStream::connect_timeout(&SocketAddr::new(address, APP_PORT), Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.write_all(b"GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

#[tokio::test]
async fn a_build_reaches_neither_the_host_nor_another_app_but_the_router_reaches_the_app() {
    let Some(runner) = TestRunner::start("network") else {
        return;
    };
    if !std::path::Path::new("/usr/bin/node").exists() {
        eprintln!("SKIP network: /usr/bin/node is needed to serve the app");
        runner.finish();
        return;
    }
    // The app: a real HTTP server in its own sandbox.
    let output = runner.workspace();
    let data = tempfile::tempdir().unwrap();
    let server = format!(
        "node -e \"require('http').createServer((q, s) => s.end('hello from app')).listen({APP_PORT}, () => console.log('listening'))\""
    );
    let kind = StepKind::App {
        output: output.path().to_owned(),
        data_dir: data.path().join("data"),
    };
    let mut app = runner.runner.spawn(runner.spec(kind, &server)).unwrap();
    let mut app_stdout = Lines::new(app.stdout.take().unwrap());
    assert_eq!(
        app_stdout.next(Duration::from_secs(20)).await.as_deref(),
        Some("listening")
    );
    let response =
        tokio::task::spawn_blocking(move || fetch(app.address).map(|response| (response, app)))
            .await
            .unwrap();
    let (response, mut app) = response.expect("the router cannot reach the app");
    assert!(response.contains("hello from app"), "{response}");

    // A listener of the "daemon" on every host address.
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let host_port = listener.local_addr().unwrap().port();
    let command = format!(
        "probe() {{ if timeout 3 bash -c \"exec 3<>/dev/tcp/$1/$2\" 2>/dev/null; then echo \"$3 open\"; else echo \"$3 blocked\"; fi; }}\n\
         node -e \"require('net').createServer(s => s.end()).listen(9000, '127.0.0.1')\" &\n\
         sleep 1\n\
         gateway=$(ip route show default | awk '{{print $3}}')\n\
         echo gateway $gateway\n\
         probe 127.0.0.1 9000 own-loopback\n\
         probe $gateway {host_port} host-listener\n\
         probe {app_address} {APP_PORT} other-app\n",
        app_address = app.address,
    );
    let workspace = runner.workspace();
    let build = runner.spec(
        StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        &command,
    );
    let finished = run(&runner, build, Duration::from_secs(30)).await;
    eprintln!("stdout:\n{}\nstderr:\n{}", finished.stdout, finished.stderr);
    assert_eq!(finished.exit, Exit::Code(0));
    assert!(
        finished.stdout.contains("own-loopback open"),
        "the probe itself does not work"
    );
    assert!(finished.stdout.contains("host-listener blocked"));
    assert!(finished.stdout.contains("other-app blocked"));

    // The app still serves after the attempts.
    let address = app.address;
    let again = tokio::task::spawn_blocking(move || fetch(address))
        .await
        .unwrap()
        .unwrap();
    assert!(again.contains("hello from app"));
    app.stop(Duration::from_secs(2)).await.unwrap();
    drop(listener);
    runner.finish();
}

#[tokio::test]
async fn npm_ci_of_a_project_with_one_dependency_works_inside() {
    // Egress needs the runner's host table: not while another test flushes the ruleset.
    let _egress = HOST_RULESET.lock().await;
    let Some(runner) = TestRunner::start("npm ci") else {
        return;
    };
    if !std::path::Path::new("/usr/bin/npm").exists() {
        eprintln!("SKIP npm ci: /usr/bin/npm is not installed");
        runner.finish();
        return;
    }
    let workspace = runner.workspace();
    std::fs::write(
        workspace.path().join("package.json"),
        r#"{"name": "sandbox-npm-test", "version": "1.0.0", "private": true, "dependencies": {"is-number": "7.0.0"}}"#,
    )
    .unwrap();
    // The lock file comes from the host's npm; if the registry is unreachable from the host,
    // there is nothing to test.
    let lock = tokio::process::Command::new("npm")
        .args([
            "install",
            "--package-lock-only",
            "--ignore-scripts",
            "--no-audit",
            "--no-fund",
        ])
        .current_dir(workspace.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(90), lock).await {
        Ok(Ok(output)) if output.status.success() => {}
        other => {
            let reason = match other {
                Ok(Ok(output)) => String::from_utf8_lossy(&output.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
                    .to_owned(),
                Ok(Err(error)) => error.to_string(),
                Err(_) => "timed out".into(),
            };
            eprintln!("SKIP npm ci: the npm registry is unreachable from this host ({reason})");
            runner.finish();
            return;
        }
    }
    slipway::sandbox::hand_over(workspace.path(), runner.project_uid).unwrap();

    let mut spec = runner.spec(
        StepKind::Build { workspace: workspace.path().to_owned(), cache: None },
        "npm ci --no-audit --no-fund && node -e \"console.log('is-number:', require('is-number')(5))\"",
    );
    spec.memory_mb = 1024;
    spec.pids = 256;
    // What the pipeline passes through from `sandbox.pass_env`.
    for name in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "NODE_EXTRA_CA_CERTS",
    ] {
        if let Ok(value) = std::env::var(name) {
            spec.env.push((name.to_owned(), value));
        }
    }
    let started = Instant::now();
    let running = runner.runner.spawn(spec).unwrap();
    let finished = finish_step(running, Duration::from_secs(180)).await;
    eprintln!(
        "npm ci took {:?}\nstdout:\n{}\nstderr:\n{}",
        started.elapsed(),
        finished.stdout,
        finished.stderr
    );
    assert_eq!(finished.exit, Exit::Code(0));
    assert!(finished.stdout.contains("is-number: true"));
    let installed = workspace.path().join("node_modules/is-number/package.json");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(installed).unwrap().uid(),
        runner.project_uid
    );
    runner.finish();
}

#[tokio::test]
async fn the_cost_of_a_sandbox_is_measured() {
    let Some(runner) = TestRunner::start("cost") else {
        return;
    };
    let workspace = runner.workspace();
    const ROUNDS: usize = 20;
    let mut sandboxed = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let spec = runner.spec(
            StepKind::Build {
                workspace: workspace.path().to_owned(),
                cache: None,
            },
            "true",
        );
        let finished = run(&runner, spec, Duration::from_secs(20)).await;
        assert_eq!(finished.exit, Exit::Code(0), "{}", finished.stderr);
        sandboxed.push(started.elapsed());
    }
    let mut plain = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let status = tokio::process::Command::new("/bin/sh")
            .args(["-c", "true"])
            .status()
            .await
            .unwrap();
        assert!(status.success());
        plain.push(started.elapsed());
    }
    sandboxed.sort();
    plain.sort();
    let median = |samples: &[Duration]| samples[samples.len() / 2];
    eprintln!(
        "MEASURED sandbox cost: spawn-to-exit of `true`, median of {ROUNDS}: sandboxed {:?} (min {:?}, max {:?}), \
         plain sh {:?} (min {:?}); overhead {:?}",
        median(&sandboxed),
        sandboxed[0],
        sandboxed[ROUNDS - 1],
        median(&plain),
        plain[0],
        median(&sandboxed).saturating_sub(median(&plain)),
    );
    runner.finish();
}
