//! An add-on reached from outside without a public port (issue 34): `slipway db connect`
//! runs the local psql / redis-cli through `GET /api/addons/{addonId}/tunnel`, `slipway db
//! proxy` serves any local client, a read token is refused the tunnel, and the tunnel is
//! audited; `slipway addons` makes, lists, shows, links and deletes them. Real PostgreSQL 15 and Redis in namespaced sandboxes; the real `slipway` binary.

use std::process::Stdio;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use super::addons::create_addon_id;
use super::Sandboxed;
use crate::support::{cli_output, missing_tool, TestDaemon, BIN};

/// Whether the servers and clients are here; says SKIP when not.
fn tools_missing(test: &str) -> bool {
    for program in [
        "/usr/lib/postgresql/15/bin/postgres",
        "/usr/bin/redis-server",
    ] {
        if !std::path::Path::new(program).exists() {
            eprintln!("SKIP {test}: {program} is not installed (postgresql-15, redis-server)");
            return true;
        }
    }
    missing_tool("psql", "db connect runs psql (postgresql-client)")
        || missing_tool("redis-cli", "db connect runs redis-cli (redis-tools)")
}

/// `slipway ARGS` on a blocking thread (it may take a while); (exit code, stdout, stderr).
async fn slipway(daemon: &TestDaemon, args: &[&str]) -> (Option<i32>, String, String) {
    let output = tokio::task::block_in_place(|| cli_output(daemon, args));
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Opens the tunnel of `addon` with `token`: the socket, or the HTTP status it was refused with.
async fn open_tunnel(
    daemon: &TestDaemon,
    token: &str,
    addon: &str,
) -> Result<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    u16,
> {
    let url = format!(
        "ws://127.0.0.1:{}/api/addons/{addon}/tunnel",
        daemon.http.port()
    );
    let mut request = url.into_client_request().unwrap();
    let headers = request.headers_mut();
    headers.insert("host", daemon.control_host().parse().unwrap());
    headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(socket),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(other) => panic!("opening the tunnel: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn addon_tunnel_carries_psql_and_redis_cli_from_outside() {
    let test = "addon_tunnel_carries_psql_and_redis_cli_from_outside";
    if tools_missing(test) {
        return;
    }
    let Some(sandboxed) = Sandboxed::start(test, "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    daemon.deploy_page("shop", "<h1>shop</h1>").await;
    let postgres = create_addon_id(
        daemon,
        json!({"kind": "postgres", "memoryMb": 256, "diskMb": 256}),
    )
    .await;

    // `db connect`: psql here, its arguments passed on, its output and exit code ours.
    let sql = "create table t(x int); insert into t values (7); select sum(x) from t";
    let (code, stdout, stderr) =
        slipway(daemon, &["db", "connect", &postgres, "--", "-tAc", sql]).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().last(), Some("7"), "{stdout}\n{stderr}");
    let (code, _, stderr) = slipway(
        daemon,
        &["db", "connect", &postgres, "--", "-c", "select nope"],
    )
    .await;
    assert_ne!(code, Some(0), "psql's failure is the exit code: {stderr}");
    assert!(stderr.contains("nope"), "{stderr}");

    // `db proxy --port 0` in the background: it prints the URL to connect to.
    let home = tempfile::tempdir().unwrap();
    let mut proxy = tokio::process::Command::new(BIN)
        .args(["db", "proxy", &postgres, "--port", "0"])
        .env(
            "SLIPWAY_URL",
            format!("http://slipway.localhost:{}", daemon.http.port()),
        )
        .env("SLIPWAY_TOKEN", &daemon.token)
        .env("HOME", home.path())
        .env_remove("XDG_CONFIG_HOME")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start slipway db proxy");
    let mut lines = BufReader::new(proxy.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the proxy printed its URL within 30 s")
        .unwrap()
        .expect("a line");
    assert!(url.starts_with("postgres://slipway:"), "{url}");
    assert!(
        url.contains("@127.0.0.1:") && url.ends_with("/app"),
        "{url}"
    );
    // Two clients at once, each through a tunnel of its own.
    let query = || {
        tokio::process::Command::new("psql")
            .args([url.as_str(), "-tAc", "select sum(x) from t, pg_sleep(0.3)"])
            .output()
    };
    let (first, second) = tokio::join!(query(), query());
    for output in [first.unwrap(), second.unwrap()] {
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.trim() == "7",
            "{stdout} {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Ctrl-C stops the proxy cleanly.
    let pid = nix::unistd::Pid::from_raw(proxy.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), proxy.wait())
        .await
        .expect("the proxy ended on Ctrl-C")
        .unwrap();
    assert!(status.success(), "{status:?}");

    // Redis through `db connect`, a counter.
    let redis = create_addon_id(daemon, json!({"kind": "redis"})).await;
    for expected in ["1", "2"] {
        let (code, stdout, stderr) =
            slipway(daemon, &["db", "connect", &redis, "--", "INCR", "n"]).await;
        assert_eq!(code, Some(0), "{stdout}\n{stderr}");
        assert_eq!(stdout.trim(), expected, "{stderr}");
    }

    // The tunnel itself: a deploy token gets the add-on's bytes; a read token gets 403.
    let deploy = daemon
        .api(
            "POST",
            "/api/tokens",
            Some(json!({"name": "ci", "scope": "deploy"})),
        )
        .await
        .json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let read = daemon
        .api(
            "POST",
            "/api/tokens",
            Some(json!({"name": "viewer", "scope": "read"})),
        )
        .await
        .json()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(open_tunnel(daemon, &read, &redis).await.err(), Some(403));
    let mut socket = open_tunnel(daemon, &deploy, &redis)
        .await
        .expect("a deploy token opens the tunnel");
    socket
        .send(Message::binary(b"PING\r\n".to_vec()))
        .await
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), socket.next())
        .await
        .expect("redis answered through the tunnel")
        .unwrap()
        .unwrap();
    assert_eq!(
        answer.into_data().as_ref(),
        b"-NOAUTH Authentication required.\r\n"
    );
    socket.close(None).await.unwrap();

    // Both the credentials reads and the tunnels are in the audit log.
    let audit = daemon.api("GET", "/api/audit?limit=100", None).await.json();
    let routes: Vec<(String, u64)> = audit["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("{audit}"))
        .iter()
        .map(|entry| {
            (
                entry["route"].as_str().unwrap_or("").to_owned(),
                entry["status"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert!(
        routes.contains(&("/api/addons/{addonId}/tunnel".to_owned(), 101)),
        "{routes:?}"
    );
    assert!(
        routes.contains(&("/api/addons/{addonId}/tunnel".to_owned(), 403)),
        "{routes:?}"
    );
    assert!(
        routes.contains(&("/api/addons/{addonId}/credentials".to_owned(), 200)),
        "{routes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn addon_tunnel_slipway_addons_manages_them() {
    let test = "addon_tunnel_slipway_addons_manages_them";
    if tools_missing(test) {
        return;
    }
    let Some(sandboxed) = Sandboxed::start(test, "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    daemon.deploy_page("shop", "<h1>shop</h1>").await;
    daemon.deploy_page("blog", "<h1>blog</h1>").await;
    let args = [
        "addons",
        "create",
        "redis",
        "--mode",
        "cache",
        "--project",
        "shop",
    ];
    let (code, stdout, stderr) = slipway(daemon, &args).await;
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("redis (cache)") && stdout.contains("running"),
        "{stdout}"
    );
    let id = stdout
        .split_whitespace()
        .find(|word| word.starts_with("adn_"))
        .unwrap_or_else(|| panic!("{stdout}"))
        .to_owned();

    let (_, listed, _) = slipway(daemon, &["addons", "list", "--project", "shop"]).await;
    assert!(listed.lines().next().unwrap().starts_with("ID"), "{listed}");
    assert!(listed.contains(&id), "{listed}");
    let (_, json, _) = slipway(daemon, &["addons", "list", "--project", "shop", "--json"]).await;
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["addons"][0]["id"], id.as_str(), "{json}");
    let (_, shown, _) = slipway(daemon, &["addons", "show", &id]).await;
    assert!(
        shown.contains("REDIS_URL") && !shown.contains("password"),
        "{shown}"
    );
    let (_, credentials, _) = slipway(daemon, &["addons", "credentials", &id]).await;
    assert!(
        credentials.starts_with("url       redis://default:"),
        "{credentials}"
    );

    let (code, linked, stderr) = slipway(daemon, &["addons", "link", &id, "blog"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(linked.contains("linked blog"), "{linked}");
    let (code, _, stderr) = slipway(daemon, &["addons", "unlink", &id, "blog"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    // A second Redis would give shop REDIS_URL twice: refused, until the first is unlinked.
    let (code, _, stderr) =
        slipway(daemon, &["addons", "create", "redis", "--project", "shop"]).await;
    assert_eq!(code, Some(1), "REDIS_URL is taken: {stderr}");
    assert!(
        stderr.contains("CONFLICT") && stderr.contains(&id),
        "{stderr}"
    );
    let (code, _, stderr) = slipway(daemon, &["addons", "unlink", &id, "shop"]).await;
    assert_eq!(code, Some(0), "the owner may unlink too: {stderr}");

    let (code, _, stderr) =
        slipway(daemon, &["addons", "delete", &id, "--confirm", "adn_other"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    let (code, deleted, stderr) =
        slipway(daemon, &["addons", "delete", &id, "--confirm", &id]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(deleted.contains(&format!("deleted {id}")), "{deleted}");
    let gone = daemon.api("GET", &format!("/api/addons/{id}"), None).await;
    assert_eq!(gone.status, 404, "{}", gone.text());
}
