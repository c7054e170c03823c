//! `Running::reachable` (issue 29 §4): once it resolves, the host reaches the sandbox's
//! address through the step's own link at once. Before, the health probe was sent as soon as
//! `spawn` returned, while the helper was still wiring the link: the SYN left by the host's
//! default route, or waited a second in the neighbour queue, and the app's start lost one or
//! two seconds; and even after the link was made, its host end drops everything (the
//! neighbour request too) until the kernel's link watcher has started it. Deterministic: it
//! checks the route, the host end's state and that a connection is answered (refused:
//! nothing listens) without a retry, not how fast an app boots.

use std::net::SocketAddr;
use std::time::Duration;

use slipway::sandbox::{Runner, StepKind};

use super::support::TestRunner;

/// A closed port: the sandbox's kernel answers a SYN to it with a reset.
const CLOSED_PORT: u16 = 9;

#[tokio::test]
async fn once_reachable_the_sandbox_answers_through_its_own_link() {
    let Some(runner) = TestRunner::start("reachable") else {
        return;
    };
    let output = runner.workspace();
    let data = runner.workspace();
    for _ in 0..3 {
        let kind = StepKind::App {
            output: output.path().to_owned(),
            data_dir: data.path().join("data"),
        };
        let mut app = runner.runner.spawn(runner.spec(kind, "sleep 60")).unwrap();
        let reachable = std::mem::take(&mut app.reachable);
        tokio::time::timeout(Duration::from_secs(20), reachable.wait())
            .await
            .expect("the helper never said the sandbox was reachable")
            .expect("the helper exited before the sandbox was reachable");

        // The host routes the address through the step's veth, not the default route.
        let route = std::process::Command::new("ip")
            .args(["route", "get", &app.address.to_string()])
            .output()
            .unwrap();
        let route = String::from_utf8_lossy(&route.stdout);
        let device = route
            .split_whitespace()
            .skip_while(|word| *word != "dev")
            .nth(1)
            .unwrap_or_default();
        assert!(
            device.starts_with(runner.runner.interface_prefix()),
            "{} is not routed through its link: {route}",
            app.address
        );
        // The kernel has started the link's host end: until then it drops what the host sends,
        // the neighbour request too, and the SYN waits a second for the next one.
        let operstate = std::fs::read_to_string(format!("/sys/class/net/{device}/operstate"));
        assert_eq!(operstate.unwrap().trim(), "up", "the host end {device}");

        // The sandbox end is up and its firewall lets the host's end in: the SYN is answered
        // at once (a lost one would be retried only after 1 s).
        let connect = tokio::net::TcpStream::connect(SocketAddr::new(app.address, CLOSED_PORT));
        match tokio::time::timeout(Duration::from_millis(900), connect).await {
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => {}
            other => panic!("a connection to the sandbox right after it was reachable: {other:?}"),
        }
        app.stop(Duration::from_secs(2)).await.unwrap();
    }
    runner.finish();
}
