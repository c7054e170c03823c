//! A cluster task reaches its project's add-on through its tunnel: the add-on (Redis) runs in
//! the daemon's namespaces sandbox, the app on the swarm counts visits in it through
//! `REDIS_URL`, which names the tunnel's loopback address inside the task. The tunnel's
//! capability opens only that add-on for that deployment: forged, or naming another address,
//! it is refused.

use std::time::Duration;

use serde_json::{json, Value};

use super::dockerd::{Dockerd, GATEWAY};
use super::usage::fetch_status;
use super::{boot_document, cluster_toml};
use crate::sandboxed::Sandboxed;
use crate::support::{eventually, missing_tool, TestDaemon};

/// Counts visits in Redis with the node's `redis-cli`.
const COUNTER: &str = r#"
const { execFileSync } = require('child_process');
require('http').createServer((req, res) => {
  try {
    const out = execFileSync('redis-cli',
      ['-u', process.env.REDIS_URL, '--no-auth-warning', 'INCR', 'visits']);
    const host = new URL(process.env.REDIS_URL).host;
    res.end(JSON.stringify({visits: Number(String(out).trim()), host}));
  } catch (e) {
    res.statusCode = 500;
    res.end(String(e));
  }
}).listen(process.env.PORT);
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_task_reaches_its_linked_addon_through_its_tunnel() {
    let test = "a_task_reaches_its_linked_addon_through_its_tunnel";
    if !std::path::Path::new("/usr/bin/redis-server").exists() {
        eprintln!("SKIP {test}: redis-server is not installed (apt-get install redis-server)");
        return;
    }
    if missing_tool("redis-cli", "the app counts with redis-cli") {
        return;
    }
    let Some(dockerd) = Dockerd::start_or_skip(test) else {
        return;
    };
    let cluster = cluster_toml(&dockerd, GATEWAY.parse().unwrap());
    let Some(sandboxed) = Sandboxed::start(test, &cluster) else {
        return;
    };
    let daemon = &sandboxed.daemon;
    let made = daemon
        .api("POST", "/api/projects", Some(json!({"slug": "tally"})))
        .await;
    assert_eq!(made.status, 201, "{}", made.text());
    let created = daemon
        .api(
            "POST",
            "/api/projects/tally/addons",
            Some(json!({"kind": "redis"})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let files = [("server.js", COUNTER, 0o644)];
    daemon
        .deploy("tally", &files, json!({"startCommand": "node server.js"}))
        .await;
    let reached = eventually(Duration::from_secs(60), || async {
        count(daemon).await.is_some()
    })
    .await;
    let last = daemon.app_get("tally", "/", &[]).await;
    assert!(
        reached,
        "the task never counted: {} {}",
        last.status,
        last.text()
    );
    let (visits, host) = count(daemon).await.expect("counted");
    assert_eq!(host, "127.0.1.1:6379", "REDIS_URL names the tunnel");
    let (next, _) = count(daemon).await.expect("counted again");
    assert_eq!(next, visits + 1);

    // The tunnel's capability: valid (a GET that is not an upgrade: 400), forged or moved
    // to another address: 404.
    let services = dockerd.names("service");
    let web = services
        .iter()
        .find(|name| name.ends_with("-web"))
        .expect("the web service");
    let boot = boot_document(&dockerd, web);
    let url = boot["tunnels"][0]["url"]
        .as_str()
        .expect("a tunnel")
        .to_owned();
    let cert = &boot["certPem"];
    assert_eq!(fetch_status(&url, cert, None).await, 400);
    let forged = format!(
        "{}0000",
        url.trim_end_matches(|c: char| c.is_ascii_hexdigit())
    );
    assert_eq!(fetch_status(&forged, cert, None).await, 404);
    let moved = url.replacen(":6379/", ":22/", 1);
    assert_ne!(moved, url);
    assert_eq!(fetch_status(&moved, cert, None).await, 404);

    // What the hop costs (printed, not asserted): PINGs one at a time through the tunnel
    // from inside the task, and straight to the add-on from this machine.
    let env = boot["env"].as_array().expect("the environment");
    let tunneled = env
        .iter()
        .find(|pair| pair[0] == "REDIS_URL")
        .and_then(|pair| pair[1].as_str())
        .expect("REDIS_URL")
        .to_owned();
    let target = url.split('/').nth(5).expect("the add-on's address");
    let direct = tunneled.replace("127.0.1.1:6379", target);
    let bench = "redis-benchmark -t ping -n 2000 -c 1 --csv -u";
    let container = dockerd
        .docker(&[
            "ps",
            "-q",
            "--filter",
            &format!("label=com.docker.swarm.service.name={web}"),
        ])
        .unwrap();
    let inside = dockerd.docker(&[
        "exec",
        container.lines().next().unwrap(),
        "/bin/sh",
        "-c",
        &format!("{bench} '{tunneled}' 2>/dev/null"),
    ]);
    let outside = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{bench} '{direct}' 2>&1"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    println!("redis PING through the tunnel: {inside:?}; straight: {outside:?}");
}

/// One visit to the app: the count it read back and the Redis address it used.
async fn count(daemon: &TestDaemon) -> Option<(u64, String)> {
    let response = daemon.app_get("tally", "/", &[]).await;
    let answer: Value = (response.status == 200).then(|| response.json())?;
    Some((
        answer["visits"].as_u64()?,
        answer["host"].as_str()?.to_owned(),
    ))
}
