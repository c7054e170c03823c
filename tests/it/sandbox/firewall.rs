//! Each sandbox's own firewall (issue 9): it holds after the host's ruleset is flushed, lets
//! TCP out to a public address but not SMTP, other UDP or IPv6, and caps the connections a
//! sandbox may hold. The "public" server is a namespace the test creates ([`Outside`]).

use std::net::IpAddr;
use std::time::Duration;

use slipway::sandbox::{Exit, Runner, StepKind, MAX_SANDBOX_CONNECTIONS};

use super::outside::{probe_command, verdict, Outside};
use super::support::{finish_step, run, Lines, TestRunner, HOST_RULESET};

const APP_PORT: u16 = 8080;

fn nft(args: &[&str]) -> std::process::Output {
    std::process::Command::new("nft")
        .args(args)
        .output()
        .unwrap()
}

/// `nft flush ruleset` on the host while an app and a build are live; neither can then reach
/// the host (its sandbox link, or any other host address), the other sandbox or the metadata
/// addresses. The next spawn puts the runner's host table back.
#[tokio::test]
async fn isolation_holds_after_the_host_ruleset_is_flushed() {
    let _flushing = HOST_RULESET.lock().await;
    let Some(runner) = TestRunner::start("flush") else {
        return;
    };
    let outside = Outside::create();
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let host_port = listener.local_addr().unwrap().port();

    // Both steps wait for a go file, then probe; the app serves meanwhile.
    let output = runner.workspace();
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().join("data");
    let app_probes = [
        format!("probe host-link $gw {host_port}"),
        format!("probe host-address {} {host_port}", outside.host_address),
        "probe metadata 169.254.169.254 80".to_owned(),
        "probe azure 168.63.129.16 80".to_owned(),
    ];
    let wait_for = |go: &str, probes: &[String]| {
        format!(
            "gw=$(ip route show default | cut -d' ' -f3)\n\
             echo ready\n\
             until [ -e {go} ]; do sleep 0.1; done\n\
             {}",
            probe_command(probes).replace("$gw", "'\"$gw\"'")
        )
    };
    let app_command = format!(
        "python3 -m http.server {APP_PORT} -d /app >/dev/null 2>&1 &\n{}\nwait",
        wait_for("/data/go", &app_probes)
    );
    let mut app = runner
        .runner
        .spawn(runner.spec(
            StepKind::App {
                output: output.path().to_owned(),
                data_dir: data_dir.clone(),
            },
            &app_command,
        ))
        .unwrap();
    let mut app_lines = Lines::new(app.stdout.take().unwrap());
    assert_eq!(
        app_lines.next(Duration::from_secs(20)).await.as_deref(),
        Some("ready")
    );
    let app_address = app.address;
    let mut build_probes = app_probes.to_vec();
    build_probes.push(format!("probe other-sandbox {app_address} {APP_PORT}"));
    let workspace = runner.workspace();
    let mut build = runner
        .runner
        .spawn(runner.spec(
            StepKind::Build {
                workspace: workspace.path().to_owned(),
                cache: None,
            },
            &wait_for("/app/go", &build_probes),
        ))
        .unwrap();
    let mut build_lines = Lines::new(build.stdout.take().unwrap());
    assert_eq!(
        build_lines.next(Duration::from_secs(20)).await.as_deref(),
        Some("ready")
    );
    assert!(
        serves(app_address).await,
        "the router does not reach the app"
    );

    let ruleset = nft(&["list", "ruleset"]);
    eprintln!(
        "flushing the host's nftables ruleset, which was:\n{}",
        String::from_utf8_lossy(&ruleset.stdout)
    );
    assert!(nft(&["flush", "ruleset"]).status.success());
    assert!(!nft(&["list", "table", "inet", runner.instance()])
        .status
        .success());
    std::fs::write(data_dir.join("go"), "").unwrap();
    std::fs::write(workspace.path().join("go"), "").unwrap();

    let build_output = until_probes_done(&mut build_lines).await;
    let app_output = until_probes_done(&mut app_lines).await;
    eprintln!("build:\n{build_output}\napp:\n{app_output}");
    let build_exit = finish_step(build, Duration::from_secs(10)).await;
    assert_eq!(build_exit.exit, Exit::Code(0), "{}", build_exit.stderr);
    for (step, output) in [("build", &build_output), ("app", &app_output)] {
        assert_eq!(verdict(output, "own-loopback"), Some("open"), "{step}");
        for probe in &build_probes {
            let name = probe.split(' ').nth(1).unwrap();
            if step == "app" && name == "other-sandbox" {
                continue;
            }
            assert_eq!(verdict(output, name), Some("blocked"), "{step}: {name}");
        }
    }
    // The router still reaches the app: the sandbox's own table lets its host end in.
    assert!(serves(app_address).await, "the router lost the app");

    // The next spawn puts the host table (egress NAT) back.
    let finished = run(
        &runner,
        runner.spec(
            StepKind::Build {
                workspace: workspace.path().to_owned(),
                cache: None,
            },
            "true",
        ),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(finished.exit, Exit::Code(0), "{}", finished.stderr);
    assert!(nft(&["list", "table", "inet", runner.instance()])
        .status
        .success());
    app.stop(Duration::from_secs(2)).await.unwrap();
    drop((app, listener, outside));
    runner.finish();
}

/// A step's output lines up to the probe script's last one.
async fn until_probes_done(lines: &mut Lines) -> String {
    let mut output = String::new();
    while let Some(line) = lines.next(Duration::from_secs(30)).await {
        output.push_str(&line);
        output.push('\n');
        if line == "probes-done" {
            break;
        }
    }
    output
}

/// Whether an HTTP GET from the host (as the router sends it) gets an answer within 10 s.
async fn serves(address: IpAddr) -> bool {
    for _ in 0..50 {
        if answers(address).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

async fn answers(address: IpAddr) -> bool {
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect_timeout(
            &(address, APP_PORT).into(),
            Duration::from_secs(2),
        ) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = stream.write_all(b"GET / HTTP/1.0\r\n\r\n");
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response.starts_with("HTTP/1.0 200")
    })
    .await
    .unwrap()
}

/// Out of a sandbox: TCP to a public address works; SMTP (unless `sandbox.allow_smtp`), UDP
/// other than DNS to the host's resolvers, and IPv6 do not, and `eth0` has no IPv6 address.
#[tokio::test]
async fn tcp_goes_out_but_not_smtp_other_udp_or_ipv6() {
    let Some(runner) = TestRunner::start("egress") else {
        return;
    };
    let outside = Outside::create();
    for port in [80, 25, 465, 587] {
        outside.listen(port);
    }
    let udp = [outside.udp(5353), outside.udp(53)];
    let address = outside.address;
    let probes = [
        format!("probe web {address} 80"),
        format!("probe smtp {address} 25"),
        format!("probe smtps {address} 465"),
        format!("probe submission {address} 587"),
        format!("probe ipv6 {} 80", outside.address_v6),
        format!("udp udp-other {address} 5353"),
        format!("udp udp-dns-elsewhere {address} 53"),
    ];
    let command = format!(
        "echo eth0-ipv6: $(grep -c eth0 /proc/net/if_inet6)\n{}",
        probe_command(&probes)
    );
    let workspace = runner.workspace();
    let spec = runner.spec(
        StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        &command,
    );
    let finished = run(&runner, spec, Duration::from_secs(30)).await;
    eprintln!("{}\n{}", finished.stdout, finished.stderr);
    assert_eq!(finished.exit, Exit::Code(0));
    let stdout = &finished.stdout;
    assert!(stdout.contains("eth0-ipv6: 0"), "eth0 has IPv6: {stdout}");
    assert_eq!(verdict(stdout, "web"), Some("open"), "no egress at all");
    for name in ["smtp", "smtps", "submission", "ipv6"] {
        assert_eq!(verdict(stdout, name), Some("blocked"), "{name}");
    }
    std::thread::sleep(Duration::from_millis(200));
    for socket in &udp {
        let mut buffer = [0u8; 16];
        let received = socket.recv_from(&mut buffer);
        assert!(received.is_err(), "a datagram got out: {received:?}");
    }
    // The web probe's connection is the only one the outside saw.
    assert_eq!(outside.accepted(), 1);
    drop(outside);
    runner.finish();

    // With `sandbox.allow_smtp`, mail goes out.
    let Some(runner) = TestRunner::start_with("egress smtp", |config| config.allow_smtp = true)
    else {
        return;
    };
    let outside = Outside::create();
    outside.listen(25);
    let spec = runner.spec(
        StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        &probe_command(&[format!("probe smtp {} 25", outside.address)]),
    );
    let finished = run(&runner, spec, Duration::from_secs(30)).await;
    assert_eq!(
        verdict(&finished.stdout, "smtp"),
        Some("open"),
        "{}",
        finished.stderr
    );
    drop(outside);
    runner.finish();
}

/// A sandbox holds at most `MAX_SANDBOX_CONNECTIONS` connections at once; the next one is
/// refused at once rather than filling the host's conntrack table.
#[tokio::test]
async fn a_sandbox_cannot_hold_more_than_its_connection_cap() {
    let Some(runner) = TestRunner::start("conntrack cap") else {
        return;
    };
    let outside = Outside::create();
    outside.listen(80);
    let script = format!(
        "import resource, socket\n\
         hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n\
         resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))\n\
         held = []\n\
         try:\n\
         \x20   for _ in range({}):\n\
         \x20       s = socket.create_connection((\"{}\", 80), timeout=2)\n\
         \x20       held.append(s)\n\
         except OSError as e:\n\
         \x20   print(\"stopped\", type(e).__name__, flush=True)\n\
         print(\"held\", len(held), flush=True)\n",
        MAX_SANDBOX_CONNECTIONS + 50,
        outside.address
    );
    let workspace = runner.workspace();
    std::fs::write(workspace.path().join("cap.py"), script).unwrap();
    let mut spec = runner.spec(
        StepKind::Build {
            workspace: workspace.path().to_owned(),
            cache: None,
        },
        "python3 cap.py",
    );
    spec.memory_mb = 512;
    let finished = finish_step(runner.runner.spawn(spec).unwrap(), Duration::from_secs(60)).await;
    eprintln!("{}\n{}", finished.stdout, finished.stderr);
    assert_eq!(finished.exit, Exit::Code(0));
    assert!(
        finished
            .stdout
            .contains(&format!("held {MAX_SANDBOX_CONNECTIONS}")),
        "{}",
        finished.stdout
    );
    // Refused at once, not left to time out.
    assert!(
        !finished.stdout.contains("stopped TimeoutError"),
        "{}",
        finished.stdout
    );
    drop(outside);
    runner.finish();
}
