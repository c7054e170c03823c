//! A build's network: it cannot reach the daemon's listeners, the host or another app's
//! sandbox, while the router still reaches the app; and a real `npm ci` from the public
//! registry works through the sandbox's NAT egress.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{app_address, node_missing, Sandboxed};

/// Probes `host:port` targets from inside a build with bash's /dev/tcp, in parallel, after a
/// control probe that must reach a listener on the sandbox's own loopback (so a broken probe
/// cannot pass for a refused one). Also probes the default gateway (the host end of the veth)
/// on the ports given first.
const PROBE_SCRIPT: &str = r#"#!/bin/bash
probe() {
  if timeout 4 bash -c "exec 3<>/dev/tcp/${1%:*}/${1##*:}" 2>/dev/null; then
    echo "LEAK: $1"
  else
    echo "denied: $1"
  fi
}
node -e "require('net').createServer(s => s.end()).listen(7777, '127.0.0.1')" &
control=$!
for _ in $(seq 50); do
  if timeout 1 bash -c 'exec 3<>/dev/tcp/127.0.0.1/7777' 2>/dev/null; then
    echo "control: reached the sandbox's own loopback"
    break
  fi
  sleep 0.1
done
kill $control
hex=$(awk '$2 == "00000000" { print $3 }' /proc/net/route)
gateway=$(printf '%d.%d.%d.%d' 0x${hex:6:2} 0x${hex:4:2} 0x${hex:2:2} 0x${hex:0:2})
echo "gateway $gateway"
gateway_ports=$1
shift
targets=("$@")
for port in $gateway_ports; do targets+=("$gateway:$port"); done
for target in "${targets[@]}"; do probe "$target" & done
wait
mkdir -p dist && echo probed > dist/index.html
"#;

#[tokio::test]
async fn a_build_reaches_neither_the_daemon_nor_the_host_nor_another_app() {
    if node_missing("network") {
        return;
    }
    let Some(sandboxed) = Sandboxed::start("network", "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    let (status, logs) = sandboxed
        .run(
            "target",
            &[("server.js", crate::pipeline::NODE_APP, 0o644)],
            json!({"startCommand": "node server.js"}),
            Duration::from_secs(120),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    let app = app_address(&logs).unwrap_or_else(|| panic!("no app address in:\n{logs}"));

    // A listener of the test's own on every host address: any connection to it is a leak.
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let listener_port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let acceptor = tokio::spawn(async move {
        while let Ok((_stream, peer)) = listener.accept().await {
            eprintln!("the test listener accepted {peer}");
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let daemon_port = daemon.http.port();
    let mut targets = vec![format!("127.0.0.1:{daemon_port}"), app.clone()];
    for address in host_addresses() {
        targets.push(format!("{address}:{daemon_port}"));
        targets.push(format!("{address}:{listener_port}"));
    }
    let gateway_ports = format!("{daemon_port} {listener_port}");
    let command = format!(
        "bash probe.sh '{gateway_ports}' {} ; \
         test -e {} && echo 'LEAK: admin socket' || echo 'denied: admin socket'; \
         curl -s -m 4 -o /dev/null http://{app}/ && echo 'LEAK: curl app' || echo 'denied: curl app'",
        targets.join(" "),
        daemon.data_dir().join("admin.sock").display(),
    );
    let (status, logs) = sandboxed
        .run(
            "prober",
            &[("probe.sh", PROBE_SCRIPT, 0o755)],
            json!({"buildCommand": command, "installCommand": ""}),
            Duration::from_secs(60),
        )
        .await;
    acceptor.abort();
    eprintln!("{logs}");
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    assert!(
        logs.contains("[build] control: reached the sandbox's own loopback"),
        "the probe works:\n{logs}"
    );
    assert!(
        !logs.contains("[build] LEAK"),
        "a connection succeeded:\n{logs}"
    );
    let expected = targets.len() + 2 + 2;
    assert_eq!(
        logs.matches("[build] denied: ").count(),
        expected,
        "every probe reported:\n{logs}"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
    // The router still reaches the app.
    let response = daemon.app_get("target", "/", &[]).await;
    assert_eq!(response.status, 200, "{}", response.text());
}

/// The host's own IPv4 addresses, loopback and sandbox links left out.
fn host_addresses() -> Vec<String> {
    let output = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .expect("ip addr");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let interface = fields.nth(1)?;
            let address = fields.nth(1)?.split('/').next()?;
            (interface != "lo" && !interface.starts_with("sw")).then(|| address.to_owned())
        })
        .collect()
}

#[tokio::test]
async fn npm_ci_installs_a_dependency_inside_the_sandbox() {
    // Egress needs the daemon's host table: not while another test flushes the ruleset.
    let _egress = crate::sandbox::support::HOST_RULESET.lock().await;
    if node_missing("npm ci") {
        return;
    }
    // The lock file is made on the host; without the registry there is nothing to test.
    let project = tempfile::tempdir().unwrap();
    let package = r#"{"name": "sandboxed-npm", "version": "1.0.0", "private": true,
  "dependencies": {"is-number": "7.0.0"}}
"#;
    std::fs::write(project.path().join("package.json"), package).unwrap();
    let locked = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new("npm")
            .args(["install", "--package-lock-only", "--no-audit", "--no-fund"])
            .current_dir(project.path())
            .kill_on_drop(true)
            .output(),
    )
    .await;
    let lock = match locked {
        Ok(Ok(output)) if output.status.success() => {
            std::fs::read_to_string(project.path().join("package-lock.json")).unwrap()
        }
        other => {
            eprintln!("SKIP npm ci: the npm registry is unreachable from the host: {other:?}");
            return;
        }
    };
    let Some(sandboxed) = Sandboxed::start("npm ci", "") else {
        return;
    };
    let build = "mkdir -p dist && node -e \"process.stdout.write(String(require('is-number')(42)))\" > dist/index.html";
    let (status, logs) = sandboxed
        .run(
            "npmapp",
            &[
                ("package.json", package, 0o644),
                ("package-lock.json", &lock, 0o644),
            ],
            json!({"installCommand": "npm ci --no-audit --no-fund", "buildCommand": build}),
            Duration::from_secs(180),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    assert!(logs.contains("added 1 package"), "{logs}");
    let page = sandboxed.daemon.app_get("npmapp", "/", &[]).await;
    assert_eq!((page.status, page.text()), (200, "true".to_owned()));
}
