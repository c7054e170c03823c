//! Sandboxes reaching each other (issue 34's add-ons): a step reaches another sandbox only
//! at an address and port its own `reach` names and that sandbox serves (`serve_port`, the
//! host table's `served` set); a server keeps its address across restarts and across an
//! adoption through a pinned link (`StepSpec::link`).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use slipway::sandbox::direct::DirectRunner;
use slipway::sandbox::{Exit, Runner, Running, StepKind, StepSpec};

use super::outside::verdict;
use super::support::{run, TestRunner};

/// The port the server serves to other sandboxes.
const SERVED: u16 = 7001;
/// A port the server listens on too, but does not serve.
const UNSERVED: u16 = 7002;

/// A Python client for a step: `NAME HOST PORT` entries (`;`-separated) become one line
/// each, "NAME answer <status line>" or "NAME blocked <error>".
const CLIENT: &str = r#"
import socket, sys
for entry in sys.argv[1].split(";"):
    name, host, port = entry.split()
    try:
        s = socket.create_connection((host, int(port)), timeout=2)
        s.settimeout(5)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        print(name, "answer", s.recv(200).decode().splitlines()[0], flush=True)
        s.close()
    except OSError as e:
        print(name, "blocked", type(e).__name__, e.errno, flush=True)
"#;

fn client_command(probes: &[(&str, Ipv4Addr, u16)]) -> String {
    let probes: Vec<String> = probes
        .iter()
        .map(|(name, host, port)| format!("{name} {host} {port}"))
        .collect();
    format!(
        "python3 -c '{}' '{}'",
        CLIENT.replace('\'', "\""),
        probes.join(";")
    )
}

/// An app that listens on [`SERVED`] and [`UNSERVED`] and serves the first, on link `link`.
fn server_spec(
    runner: &TestRunner,
    dirs: &(tempfile::TempDir, tempfile::TempDir),
    link: u32,
) -> StepSpec {
    let command = format!(
        "python3 -m http.server {SERVED} --bind 0.0.0.0 -d /app >/dev/null 2>&1 &\n\
         python3 -m http.server {UNSERVED} --bind 0.0.0.0 -d /app >/dev/null 2>&1 &\n\
         wait"
    );
    let kind = StepKind::App {
        output: dirs.0.path().to_owned(),
        data_dir: dirs.1.path().join("data"),
    };
    let mut spec = runner.spec(kind, &command);
    spec.name = format!("{}-server", runner.instance());
    spec.serve_port = Some(SERVED);
    spec.link = Some(link);
    spec
}

/// Waits until both of the server's ports answer the host (its link's host end may always
/// connect in).
async fn until_listening(server: &mut Running) {
    let reachable = std::mem::take(&mut server.reachable);
    tokio::time::timeout(Duration::from_secs(20), reachable.wait())
        .await
        .expect("the server never became reachable")
        .expect("the server's helper exited early");
    for port in [SERVED, UNSERVED] {
        let address = SocketAddr::new(server.address, port);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(address).await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the server does not listen on {address}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The host table's served set, as `nft` lists it.
fn served_set(runner: &TestRunner) -> String {
    let listed = std::process::Command::new("nft")
        .args(["list", "set", "inet", runner.runner.nft_table(), "served"])
        .output()
        .unwrap();
    assert!(listed.status.success(), "{listed:?}");
    String::from_utf8_lossy(&listed.stdout).into_owned()
}

/// Adds or deletes the server's element behind the runner's back.
fn nft_element(runner: &TestRunner, verb: &str, address: Ipv4Addr) {
    let table = runner.runner.nft_table();
    let script = format!("{verb} element inet {table} served {{ {address} . {SERVED} }}");
    let status = std::process::Command::new("nft")
        .args(script.split(' '))
        .status()
        .unwrap();
    assert!(status.success(), "nft {script}");
}

fn element(address: Ipv4Addr, port: u16) -> String {
    format!("{address} . {port}")
}

/// Runs a build step with `reach` that probes `probes`, then (`escalate`) tries to open its
/// own firewall and probes again as `after-*`; returns its stdout.
async fn client(
    runner: &TestRunner,
    reach: Vec<SocketAddrV4>,
    probes: &[(&str, Ipv4Addr, u16)],
    escalate: bool,
) -> String {
    let workspace = runner.workspace();
    let mut command = client_command(probes);
    if escalate {
        let after: Vec<(String, Ipv4Addr, u16)> = probes
            .iter()
            .map(|(name, host, port)| (format!("after-{name}"), *host, *port))
            .collect();
        let after: Vec<(&str, Ipv4Addr, u16)> = after
            .iter()
            .map(|(name, host, port)| (name.as_str(), *host, *port))
            .collect();
        command = format!(
            "{command}\ngrep CapEff: /proc/self/status\n\
             if nft flush ruleset 2>/dev/null; then echo flush ALLOWED; else echo flush refused; fi\n\
             if nft add rule inet sandbox output accept 2>/dev/null; then echo rule ALLOWED; \
             else echo rule refused; fi\n{}",
            client_command(&after)
        );
    }
    let kind = StepKind::Build {
        workspace: workspace.path().to_owned(),
        cache: None,
    };
    let mut spec = runner.spec(kind, &command);
    spec.name = format!("{}-client", runner.instance());
    spec.reach = reach;
    let finished = run(runner, spec, Duration::from_secs(60)).await;
    eprintln!("client:\n{}{}", finished.stdout, finished.stderr);
    assert_eq!(finished.exit, Exit::Code(0), "{}", finished.stderr);
    finished.stdout
}

/// A with `reach` to S's served port gets an answer there but not on S's other port; B
/// without `reach` and C with `reach` to the port S does not serve get nothing; neither can
/// open its own table (no capability). S restarted on its pinned link has the same address
/// and A reaches it again; when S ends its endpoint leaves the host's set.
#[tokio::test]
async fn reach_opens_only_a_served_port_of_another_sandbox() {
    let Some(runner) = TestRunner::start("reach") else {
        return;
    };
    let (link, address) = runner.runner.allocate_link().unwrap();
    let dirs = (runner.workspace(), runner.workspace());
    let served = SocketAddrV4::new(address, SERVED);
    for round in 0..2 {
        let mut server = runner
            .runner
            .spawn(server_spec(&runner, &dirs, link))
            .unwrap();
        assert_eq!(server.address, IpAddr::V4(address), "round {round}");
        until_listening(&mut server).await;
        assert!(served_set(&runner).contains(&element(address, SERVED)));
        assert!(!served_set(&runner).contains(&element(address, UNSERVED)));

        let probes = [("served", address, SERVED), ("other", address, UNSERVED)];
        if round == 1 {
            // The host's set decides too: out of it, the served port is closed to A.
            nft_element(&runner, "delete", address);
            let a = client(&runner, vec![served], &probes[..1], false).await;
            assert_eq!(verdict(&a, "served"), Some("blocked"), "{a}");
            nft_element(&runner, "add", address);
        }
        let a = client(&runner, vec![served], &probes, round == 0).await;
        assert_eq!(verdict(&a, "served"), Some("answer"), "{a}");
        assert!(a.contains("served answer HTTP/1.0 200 OK"), "{a}");
        assert_eq!(verdict(&a, "other"), Some("blocked"), "{a}");
        if round == 0 {
            // The client cannot widen its own allowance: no capability in its namespaces.
            assert!(a.contains("CapEff:\t0000000000000000"), "{a}");
            assert!(
                a.contains("flush refused") && a.contains("rule refused"),
                "{a}"
            );
            assert_eq!(verdict(&a, "after-served"), Some("answer"), "{a}");
            assert_eq!(verdict(&a, "after-other"), Some("blocked"), "{a}");

            let b = client(&runner, Vec::new(), &probes, true).await;
            assert_eq!(verdict(&b, "served"), Some("blocked"), "{b}");
            assert_eq!(verdict(&b, "other"), Some("blocked"), "{b}");
            assert_eq!(verdict(&b, "after-served"), Some("blocked"), "{b}");
            // Its own table would let C out to the port S does not serve: S's table and the
            // host's served set do not.
            let unserved = SocketAddrV4::new(address, UNSERVED);
            let c = client(&runner, vec![unserved], &probes[1..], false).await;
            assert_eq!(verdict(&c, "other"), Some("blocked"), "{c}");
        }
        server.stop(Duration::from_secs(2)).await.unwrap();
        assert!(
            !served_set(&runner).contains(&element(address, SERVED)),
            "round {round}: the ended server is still served:\n{}",
            served_set(&runner)
        );
        drop(server);
    }
    runner.runner.release_link(link);
    runner.finish();
}

/// Reach entries must be sandboxes' own addresses, pinned links inside the subnet.
#[tokio::test]
async fn reach_outside_the_sandboxes_and_links_outside_the_subnet_are_refused() {
    let Some(runner) = TestRunner::start("reach refused") else {
        return;
    };
    let (link, address) = runner.runner.allocate_link().unwrap();
    let host_end = Ipv4Addr::from(u32::from(address) - 1);
    let workspace = runner.workspace();
    let kind = StepKind::Build {
        workspace: workspace.path().to_owned(),
        cache: None,
    };
    for reach in [
        SocketAddrV4::new(host_end, 80),
        SocketAddrV4::new(Ipv4Addr::new(198, 51, 100, 2), 80),
        SocketAddrV4::new(address, 0),
    ] {
        let mut spec = runner.spec(kind.clone(), "true");
        spec.reach = vec![reach];
        let error = runner.runner.spawn(spec).err().expect("spawned");
        assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{reach}");
    }
    let mut spec = runner.spec(kind.clone(), "true");
    spec.link = Some(1 << 20);
    assert!(runner.runner.spawn(spec).is_err());
    // A pinned link is never handed to another step.
    let mut taken = Vec::new();
    while let Some((index, other)) = runner.runner.allocate_link() {
        assert_ne!((index, other), (link, address));
        taken.push(index);
    }
    for index in taken.into_iter().chain([link]) {
        runner.runner.release_link(index);
    }
    runner.finish();
}

/// An outliving server with a pinned link, adopted by the next daemon: its endpoint is
/// served again from the start, and when it ends its link stays taken.
#[tokio::test]
async fn an_adopted_server_keeps_its_pinned_link_and_its_endpoint() {
    let Some(runner) = TestRunner::start("reach adopt") else {
        return;
    };
    let (link, address) = runner.runner.allocate_link().unwrap();
    let dirs = (runner.workspace(), runner.workspace());
    let mut server = runner
        .runner
        .spawn(server_spec(&runner, &dirs, link))
        .unwrap();
    until_listening(&mut server).await;
    let handle = server.handle().expect("an app's handle");
    assert!(
        handle.pinned_link && handle.serve_port == Some(SERVED),
        "{handle:?}"
    );
    assert!(server.detach());

    let runner = runner.restart_with(std::slice::from_ref(&handle));
    assert!(served_set(&runner).contains(&element(address, SERVED)));
    assert_eq!(runner.runner.claim_link(link), address);
    let mut adopted = runner.runner.adopt(&handle).unwrap();
    assert_eq!(adopted.address, IpAddr::V4(address));
    let probes = [("served", address, SERVED)];
    let a = client(
        &runner,
        vec![SocketAddrV4::new(address, SERVED)],
        &probes,
        false,
    )
    .await;
    assert_eq!(verdict(&a, "served"), Some("answer"), "{a}");
    adopted.stop(Duration::from_secs(2)).await.unwrap();
    drop(adopted);
    assert!(!served_set(&runner).contains(&element(address, SERVED)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    while let Some((index, _)) = runner.runner.allocate_link() {
        assert_ne!(index, link, "the adopted step gave its pinned link back");
    }
    runner.finish();
}

/// Mode none has no links: loopback for every add-on, and `reach`, `serve_port` and `link`
/// change nothing (no root needed).
#[tokio::test]
async fn reach_mode_none_answers_loopback_and_runs_the_step() {
    assert_eq!(DirectRunner.allocate_link(), Some((0, Ipv4Addr::LOCALHOST)));
    assert_eq!(DirectRunner.claim_link(7), Ipv4Addr::LOCALHOST);
    DirectRunner.release_link(7);
    let workspace = tempfile::tempdir().unwrap();
    let spec = StepSpec {
        name: "none-reach".into(),
        kind: StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        command: "true".into(),
        env: Vec::new(),
        project_uid: 0,
        memory_mb: 64,
        pids: 32,
        cpus: 1.0,
        stop_grace: Duration::from_secs(1),
        limited_dirs: Vec::new(),
        tty: None,
        reach: vec![SocketAddrV4::new(Ipv4Addr::LOCALHOST, SERVED)],
        serve_port: Some(SERVED),
        link: Some(7),
    };
    let mut running = DirectRunner.spawn(spec).unwrap();
    assert_eq!(running.address, IpAddr::V4(Ipv4Addr::LOCALHOST));
    assert_eq!(running.wait().await.unwrap(), Exit::Code(0));
}
