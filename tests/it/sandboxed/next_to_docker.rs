//! Running Docker next to the local sandbox (issue 36): on a machine where dockerd runs with
//! its firewall (FORWARD policy DROP, DOCKER-USER first), a sandboxed app keeps its egress,
//! its isolation and its add-on link. The machine is a network namespace of the test's own
//! ([`Machine`]) with the daemon and a dockerd inside, so dockerd's firewall never touches
//! the host's, where other sandboxed tests run at the same time; the "internet" is an
//! [`Outside`] namespace behind it.

use std::time::{Duration, Instant};

use serde_json::json;

use super::addons::{create_addon, deploy_shop, run};
use super::machine::{Machine, MachineDockerd};
use super::{app_address, Sandboxed};
use crate::sandbox::outside::{probe_command, verdict, Outside};
use crate::support::{missing_tool, DaemonOptions};

const PUBLIC_PORT: u16 = 8443;
const SERVER: &str = "exec python3 -m http.server $PORT";

/// Why this test cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    if let Some(reason) = super::namespaces_unavailable() {
        return Some(reason);
    }
    if !std::path::Path::new("/usr/sbin/dockerd").exists() {
        return Some("dockerd is not installed (apt-get install docker.io)".into());
    }
    for (tool, why) in [
        ("iptables", "dockerd's firewall"),
        ("nsenter", "the test's machine is a network namespace"),
        ("python3", "the probes and the app"),
        ("redis-cli", "the add-on link"),
    ] {
        if missing_tool(tool, why) {
            return Some(format!("{tool} is not installed"));
        }
    }
    if !std::path::Path::new("/usr/bin/redis-server").exists() {
        return Some("redis-server is not installed (the add-on)".into());
    }
    None
}

/// dockerd started first (as at boot), then the daemon: the runner's rules are in
/// DOCKER-USER at once; egress to a public address works while the machine, another
/// sandbox, private and metadata ranges stay refused; the add-on link works. Rules lost
/// later (a firewall reload) come back within the runner's check; `stop-apps` removes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_keep_egress_and_isolation_next_to_dockerds_firewall() {
    let test = "sandboxes_keep_egress_and_isolation_next_to_dockerds_firewall";
    if let Some(reason) = unavailable() {
        eprintln!("SKIP {test}: {reason}");
        return;
    }
    let machine = Machine::create();
    let _dockerd = match MachineDockerd::start(&machine) {
        Ok(dockerd) => dockerd,
        Err(reason) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("SKIP {test}: dockerd did not start in a network namespace: {reason}");
            return;
        }
        Err(reason) => panic!("{test}: dockerd is installed but did not start: {reason}"),
    };
    let outside = Outside::create_behind(Some(&machine.name));
    outside.listen(PUBLIC_PORT);
    let options = DaemonOptions::default().in_netns(&machine.name, machine.address);
    let Some(mut sandboxed) = Sandboxed::start_with(test, options, "") else {
        return;
    };
    let prefix = sandboxed.interface_prefix();
    let ours = [
        format!("-A DOCKER-USER -i {prefix}+ -j ACCEPT"),
        format!("-A DOCKER-USER -o {prefix}+ -j ACCEPT"),
    ];
    let log = sandboxed
        .daemon
        .log_with("dockerd's firewall found: accepting sandbox interfaces in DOCKER-USER");
    assert!(log.contains("dockerd's firewall found"), "{log}");
    let chain = machine.iptables_chain("DOCKER-USER");
    for rule in &ours {
        assert!(chain.contains(rule.as_str()), "{rule} missing:\n{chain}");
    }
    let forward = machine.iptables_chain("FORWARD");
    assert!(forward.contains("-P FORWARD DROP"), "{forward}");

    let daemon = &sandboxed.daemon;
    let (status, logs) = sandboxed
        .run(
            "target",
            &[("index.html", "target", 0o644)],
            json!({"startCommand": SERVER}),
            Duration::from_secs(120),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    let other = app_address(&logs).unwrap_or_else(|| panic!("no app address in:\n{logs}"));
    deploy_shop(daemon).await;
    let probes = probes(&outside, &machine, daemon.http.port(), &other);
    let (state, out) = run(daemon, "shop", &probe_command(&probes)).await;
    eprintln!("{out}");
    assert_eq!(state, "succeeded", "{out}");
    assert_eq!(verdict(&out, "own-loopback"), Some("open"), "{out}");
    assert_eq!(verdict(&out, "public"), Some("open"), "egress:\n{out}");
    for refused in [
        "machine",
        "machine-outer",
        "other-sandbox",
        "private",
        "docker0",
        "metadata",
    ] {
        assert_eq!(verdict(&out, refused), Some("blocked"), "{refused}:\n{out}");
    }
    assert!(outside.accepted() >= 1);

    // The add-on link: sandbox to sandbox through the machine's FORWARD.
    let redis = create_addon(daemon, json!({"kind": "redis"})).await;
    assert_eq!(redis["state"], "running", "{redis}");
    let incr = "redis-cli -u \"$REDIS_URL\" --no-auth-warning INCR visits";
    assert_eq!(run(daemon, "shop", incr).await.1.trim(), "1");
    let page = daemon.app_get("target", "/", &[]).await;
    assert_eq!((page.status, page.text()), (200, "target".to_owned()));

    // The rules lost (a firewall reload): the runner's check puts them back.
    delete_and_wait_back(&machine, &ours).await;
    assert_eq!(run(daemon, "shop", incr).await.1.trim(), "2");

    // Stopped with its apps (`stop-apps`: the runner's shutdown), only its rules go.
    assert_eq!(sandboxed.daemon.stop(), Some(0));
    let stopped = sandboxed.daemon.stop_apps();
    assert!(stopped.status.success(), "{stopped:?}");
    let chain = machine.iptables_chain("DOCKER-USER");
    assert!(!chain.contains(prefix.as_str()), "{chain}");
    assert!(chain.contains("-A DOCKER-USER -j RETURN"), "{chain}");
}

/// Deletes `ours` from the machine's DOCKER-USER and waits (at most 15 s) until the
/// runner's check has put them back.
async fn delete_and_wait_back(machine: &Machine, ours: &[String]) {
    for rule in ours {
        let delete = rule.replacen("-A", "-D", 1);
        let args: Vec<&str> = ["-w"].into_iter().chain(delete.split(' ')).collect();
        machine.run("iptables", &args).unwrap();
    }
    let lost = Instant::now();
    while !ours.iter().all(|rule| {
        machine
            .iptables_chain("DOCKER-USER")
            .contains(rule.as_str())
    }) {
        assert!(
            lost.elapsed() < Duration::from_secs(15),
            "the rules did not come back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("the DOCKER-USER rules were back after {:?}", lost.elapsed());
}

/// Egress to the public address, then what must stay refused: the machine (on both its
/// links and its docker0), another sandbox (`other`, an app's address), a private range and
/// the metadata address.
fn probes(outside: &Outside, machine: &Machine, daemon_port: u16, other: &str) -> Vec<String> {
    let (other_ip, other_port) = other.split_once(':').unwrap();
    vec![
        format!("probe public {} {PUBLIC_PORT}", outside.address),
        format!("probe machine {} {daemon_port}", machine.address),
        format!("probe machine-outer {} {PUBLIC_PORT}", outside.host_address),
        format!("probe other-sandbox {other_ip} {other_port}"),
        "probe private 10.0.0.1 80".to_owned(),
        "probe docker0 172.17.0.1 80".to_owned(),
        "probe metadata 169.254.169.254 80".to_owned(),
    ]
}
