//! A second node: a dockerd in a network namespace of its own (its own data root, hostname
//! and firewall, reached over a veth pair) joins the test's swarm as a worker by the real
//! `slipway node join`; a 4-replica app spreads over both nodes and every task answers
//! through the router; the worker then stops (its link cut, its dockerd stopped, as a
//! machine that goes away) → the manager marks it down, its tasks are rescheduled on the
//! manager and the router serves all four from there. Every task's memory and CPU is
//! measured on both nodes (each task reports its own), and again once the worker's tasks
//! moved. Prints how long each step took and the figures.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::dockerd::Dockerd;
use super::load::Load;
use super::netns::Netns;
use super::usage::{every_task_measured, print_figures};
use super::{daemon_fetching_at, scale, web_running, SERVER};
use crate::notifications::receiver::Receiver;
use crate::support::{eventually, TestDaemon, BIN};

const TEST: &str = "the two-node swarm test";
const WORKER: &str = "slipway-node2";
const RESPONSE_TIMEOUT_S: u64 = 10;

/// The ids (12 characters, the tasks' hostnames) of the containers running on `dockerd`
/// (inside the test's multi-thread runtime).
fn containers(dockerd: &Dockerd) -> BTreeSet<String> {
    // The CLI blocks: the request loop's tasks move to another thread meanwhile.
    tokio::task::block_in_place(|| dockerd.docker(&["ps", "-q", "--no-trunc"]))
        .unwrap_or_default()
        .lines()
        .map(|id| id[..12].to_owned())
        .collect()
}

/// The hosts answering `tries` requests through the router; `None` if one was not a 200.
async fn answers(daemon: &TestDaemon, tries: usize) -> Option<BTreeSet<String>> {
    let mut hosts = BTreeSet::new();
    for _ in 0..tries {
        let response = daemon.app_get("orbit", "/", &[]).await;
        if response.status != 200 {
            return None;
        }
        let answer: Value = response.json();
        hosts.insert(answer["host"].as_str()?.to_owned());
    }
    Some(hosts)
}

/// The node each running instance is on, by the formation.
async fn placement(daemon: &TestDaemon) -> Vec<String> {
    web_running(daemon)
        .await
        .iter()
        .map(|i| i["node"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Whether `tries` requests all succeed, answered by at least `count` of the manager's tasks
/// and by no other.
async fn on_manager_only(daemon: &TestDaemon, manager: &Dockerd, count: usize) -> bool {
    let on_manager = containers(manager);
    answers(daemon, 12)
        .await
        .is_some_and(|hosts| hosts.len() >= count && hosts.is_subset(&on_manager))
}

/// Each node's name, state and address, by `GET /api/nodes`.
async fn node_states(daemon: &TestDaemon) -> Vec<(String, String, String)> {
    let nodes: Value = daemon.api("GET", "/api/nodes", None).await.json();
    nodes["nodes"]
        .as_array()
        .map(|nodes| {
            nodes
                .iter()
                .map(|n| {
                    let field = |f: &str| n[f].as_str().unwrap_or_default().to_owned();
                    (field("name"), field("state"), field("address"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `slipway node join` run inside the namespace against the worker's engine.
fn join(netns: &Netns, manager: &Dockerd, worker: &Dockerd) -> String {
    let token = manager.worker_token().expect("the worker token");
    let output = std::process::Command::new("nsenter")
        .arg(format!("--net=/run/netns/{}", netns.name))
        .arg(BIN)
        .args(["node", "join", "--manager", &manager.swarm_addr, "--token"])
        .arg(&token)
        .arg("--docker-socket")
        .arg(worker.socket())
        .args(["--advertise-addr", &netns.inner_ip.to_string()])
        .args(["--listen-addr", &format!("{}:2377", netns.inner_ip)])
        .output()
        .expect("slipway node join runs");
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "slipway node join: {said}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    said
}

/// The two nodes and the daemon on them (dropped in this order: the daemon first, the
/// namespace last).
struct Cluster {
    daemon: TestDaemon,
    worker: Dockerd,
    manager: Dockerd,
    netns: Netns,
    /// The manager's node name (the machine's hostname).
    manager_node: String,
}

/// The manager on the host's end of the veth, the worker in the namespace joined by
/// `slipway node join`, the daemon on the manager; `None` where it cannot run here.
async fn two_nodes() -> Option<Cluster> {
    if !Dockerd::can_run(TEST) {
        return None;
    }
    for tool in ["ip", "nsenter", "unshare"] {
        if crate::support::missing_tool(tool, "the second node's namespaces") {
            return None;
        }
    }
    let netns = Netns::create().expect("a network namespace for the second node");
    let manager = Dockerd::manager_or_skip(TEST, netns.host_ip.into())?;
    let worker = Dockerd::worker_in(&netns, WORKER)
        .unwrap_or_else(|e| panic!("{TEST}: the worker's dockerd did not start: {e}"));
    let said = join(&netns, &manager, &worker);
    assert!(
        said.contains("made the runtime image") && said.contains("joined the swarm"),
        "{said}"
    );
    // A request sent to a task of a node that vanished gets no answer and no reset: it
    // waits for the response timeout (60 s by default), bounded here.
    let more = format!(
        "[limits]\nproxy_response_timeout_s = {RESPONSE_TIMEOUT_S}\n{}",
        crate::notifications::allow_loopback()
    );
    let daemon = daemon_fetching_at(&manager, netns.host_ip.into(), &more);
    let both_ready = eventually(Duration::from_secs(30), || async {
        let states = node_states(&daemon).await;
        states.len() == 2 && states.iter().all(|(_, s, _)| s == "ready")
    })
    .await;
    let nodes = node_states(&daemon).await;
    assert!(both_ready, "{nodes:?}");
    println!("nodes (name, state, address): {nodes:?}");
    // The worker is reached at the address it advertised (the router dials it there).
    let inner_ip = netns.inner_ip.to_string();
    assert!(
        nodes.iter().any(|(n, _, a)| n == WORKER && *a == inner_ip),
        "{nodes:?}"
    );
    let manager_node = nodes
        .iter()
        .map(|(name, _, _)| name.clone())
        .find(|name| name != WORKER)
        .expect("the manager's node");
    Some(Cluster {
        daemon,
        worker,
        manager,
        netns,
        manager_node,
    })
}

/// Four replicas spread over both nodes; each task answers through the router, those on the
/// worker too (their builds fetched from the control plane over the veth).
async fn spread_over_both(cluster: &Cluster) {
    let Cluster {
        daemon,
        worker,
        manager,
        manager_node,
        ..
    } = cluster;
    let files = [("server.js", SERVER, 0o644)];
    // Pinned to the worker by a placement constraint: the first deployment runs there only.
    let made = daemon
        .api("POST", "/api/projects", Some(json!({"slug": "orbit"})))
        .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let pin = |constraints: Value| {
        daemon.api(
            "PATCH",
            "/api/projects/orbit",
            Some(json!({"placementConstraints": constraints})),
        )
    };
    let pinned = pin(json!([format!("node.hostname=={WORKER}")])).await;
    assert_eq!(pinned.status, 200, "{}", pinned.text());
    let body = json!({"startCommand": "node server.js"});
    daemon.deploy("orbit", &files, body.clone()).await;
    assert_eq!(placement(daemon).await, [WORKER], "pinned to the worker");
    // Unpinned: the next deployment spreads.
    let unpinned = pin(Value::Null).await;
    assert_eq!(unpinned.status, 200, "{}", unpinned.text());
    assert_eq!(
        unpinned.json()["settings"]["placementConstraints"],
        json!([])
    );
    daemon.deploy("orbit", &files, body).await;
    scale(daemon, 4).await;
    let started = Instant::now();
    let spread = eventually(Duration::from_secs(60), || async {
        let (on_worker, on_manager) = (containers(worker), containers(manager));
        let hosts = answers(daemon, 16).await.unwrap_or_default();
        hosts.len() == 4
            && hosts.iter().any(|h| on_worker.contains(h))
            && hosts.iter().any(|h| on_manager.contains(h))
    })
    .await;
    let placed = placement(daemon).await;
    assert!(
        spread,
        "4 tasks on both nodes answer through the router: {:?}, worker {:?}, manager {:?}, \
         formation {placed:?}",
        answers(daemon, 16).await,
        containers(worker),
        containers(manager)
    );
    let on_worker = placed.iter().filter(|n| *n == WORKER).count();
    println!(
        "4 tasks answered through the router {:?} after the scale: {on_worker} on {WORKER}, \
         {} on {manager_node}",
        started.elapsed(),
        placed.len() - on_worker
    );
    assert!(on_worker > 0 && placed.len() == 4, "{placed:?}");
    assert!(placed.iter().all(|n| n == WORKER || n == manager_node));
    let listed = crate::support::cli(daemon, &["ps", "--project", "orbit"]);
    assert!(
        listed.contains(WORKER) && listed.contains(manager_node.as_str()),
        "{listed}"
    );
    // The worker's tasks are measured as the manager's are: each reports its own cgroup.
    let started = Instant::now();
    let figures = every_task_measured(daemon, 4).await;
    println!("all 4 tasks measured {:?} later", started.elapsed());
    print_figures("two nodes", &figures);
    assert!(figures.iter().any(|(at, _)| at.ends_with(WORKER)));
    // A report later (the first may predate the app), next to the worker's engine's view.
    tokio::time::sleep(Duration::from_secs(6)).await;
    print_figures(
        "two nodes, 6 s later",
        &every_task_measured(daemon, 4).await,
    );
    let format = "{{.Name}} {{.MemUsage}}";
    let engine = tokio::task::block_in_place(|| {
        worker.docker(&["stats", "--no-stream", "--format", format])
    });
    println!("the worker's engine: {}", engine.unwrap_or_else(|e| e));
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_run_on_a_second_node_and_move_to_the_first_when_it_stops() {
    let Some(mut cluster) = two_nodes().await else {
        return;
    };
    // The operator is told when a node goes down.
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap()).await;
    let subscribed = cluster
        .daemon
        .api(
            "POST",
            "/api/notifications",
            Some(json!({"url": receiver.url("/nodes"), "events": ["node.down"]})),
        )
        .await;
    assert_eq!(subscribed.status, 201, "{}", subscribed.text());
    spread_over_both(&cluster).await;

    // The worker goes away under a request loop: cut off, then its engine stopped.
    let daemon = &cluster.daemon;
    let load = Load::start(daemon.http, &daemon.app_host("orbit"), 2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stopped = Instant::now();
    cluster.netns.cut().expect("the link cut");
    tokio::task::block_in_place(|| cluster.worker.stop());
    println!(
        "the worker's dockerd stopped {:?} after the cut (the loop started 2 s before it)",
        stopped.elapsed()
    );
    let (daemon, manager) = (&cluster.daemon, &cluster.manager);
    let served = eventually(Duration::from_secs(30), || {
        on_manager_only(daemon, manager, 1)
    })
    .await;
    assert!(served, "requests are served by the manager's tasks");
    let served_after = stopped.elapsed();
    let down = eventually(Duration::from_secs(60), || async {
        node_states(daemon)
            .await
            .iter()
            .any(|(name, state, _)| name == WORKER && state == "down")
    })
    .await;
    assert!(down, "the worker is down: {:?}", node_states(daemon).await);
    let down_after = stopped.elapsed();
    let manager_node = cluster.manager_node.as_str();
    let moved = eventually(Duration::from_secs(90), || async {
        placement(daemon)
            .await
            .iter()
            .filter(|n| *n == manager_node)
            .count()
            == 4
            && on_manager_only(daemon, manager, 4).await
    })
    .await;
    assert!(
        moved,
        "all 4 tasks run on the manager and answer: {:?} {:?}",
        placement(daemon).await,
        answers(daemon, 16).await
    );
    let moved_after = stopped.elapsed();
    // The rescheduled tasks report from their new node (the lost ones' readings expired).
    print_figures("moved", &every_task_measured(daemon, 4).await);
    let (ok, failed) = load.stop().await;
    println!(
        "worker stopped: every request served by the manager's tasks after {served_after:?}; \
         node down after {down_after:?}; its tasks rescheduled and all 4 answering on \
         {manager_node} after {moved_after:?}; the loop meanwhile: {ok} ok, {} failed {:?}",
        failed.len(),
        failed.iter().take(3).collect::<Vec<_>>()
    );
    assert!(ok > 50, "the loop ran ({ok})");
    // Only what was sent to the lost tasks before the route dropped them failed: a 502 once
    // the response timeout passed, one per client at most (each waits for its answer).
    assert!(failed.len() <= 2, "{failed:?}");
    assert!(
        failed.iter().all(|f| f.ends_with("status 502 Bad Gateway")),
        "{failed:?}"
    );
    let listed = crate::support::cli(daemon, &["nodes"]);
    assert!(
        listed
            .lines()
            .any(|l| l.contains(WORKER) && l.contains("down")),
        "{listed}"
    );
    let told = eventually(Duration::from_secs(20), || async {
        !receiver.events("/nodes", "node.down").is_empty()
    })
    .await;
    assert!(told, "node.down is sent: {:?}", receiver.got().len());
    let event = receiver.events("/nodes", "node.down")[0].json();
    assert!(
        event["error"].as_str().unwrap().contains(WORKER) && event["project"].is_null(),
        "{event}"
    );
}
