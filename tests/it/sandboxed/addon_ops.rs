//! Running a real PostgreSQL add-on (issue 34's must-shows): `kill -9` of its postmaster →
//! the supervisor starts it again with the data intact; a daemon restart adopts it (the same
//! postmaster pid); a new memory limit restarts it with the new settings; its logs (a page,
//! and a stream that ends when the add-on is deleted) show the server's startup; a small disk
//! fills up → writes fail, `addon.disk_full` arrives, the disk grows (`PATCH … {"diskMb"}`)
//! and writes go on — online (the same pid) where the kernel lets the daemon grow a mounted
//! filesystem (`CAP_SYS_RESOURCE`), with a restart elsewhere.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::json;

use super::addons::create_addon_id;
use super::Sandboxed;
use crate::notifications::allow_loopback;
use crate::notifications::receiver::Receiver;
use crate::support::{eventually, missing_tool, TestDaemon};

const POSTGRES: &str = "/usr/lib/postgresql/15/bin/postgres";

/// Whether the tests can run here (postgres and psql installed), with the reason printed.
fn postgres_missing(test: &str) -> bool {
    if !std::path::Path::new(POSTGRES).exists() {
        eprintln!("SKIP {test}: {POSTGRES} is not installed (postgresql-15)");
        return true;
    }
    missing_tool("psql", "the project talks to postgres with psql")
        || missing_tool("python3", "the project's server is python's http.server")
}

/// A project `shop` (a server: runs need a live one) and a postgres add-on of it.
async fn shop_with_postgres(daemon: &TestDaemon, disk_mb: u64) -> String {
    daemon
        .deploy(
            "shop",
            &[("index.html", "hi", 0o644)],
            json!({"startCommand": "exec python3 -m http.server $PORT"}),
        )
        .await;
    create_addon_id(
        daemon,
        json!({"kind": "postgres", "memoryMb": 256, "diskMb": disk_mb}),
    )
    .await
}

/// Runs `sql` with psql in `shop`: (state, output).
async fn psql(daemon: &TestDaemon, sql: &str) -> (String, String) {
    let command = format!("psql \"$DATABASE_URL\" -v ON_ERROR_STOP=1 -tAc \"{sql}\" 2>&1");
    let started = daemon
        .api(
            "POST",
            "/api/projects/shop/runs",
            Some(json!({"command": command, "timeoutS": 120})),
        )
        .await;
    assert_eq!(started.status, 202, "{}", started.text());
    let id = started.json()["runId"].as_str().unwrap().to_owned();
    let finished = super::runs::wait_run_final(daemon, &id, Duration::from_secs(150)).await;
    let logs = daemon
        .api("GET", &format!("/api/runs/{id}/logs"), None)
        .await
        .json();
    let text: Vec<&str> = logs["logs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|line| line["stream"] != "system")
        .map(|line| line["message"].as_str().unwrap())
        .collect();
    (
        finished["state"].as_str().unwrap().to_owned(),
        text.join("\n"),
    )
}

/// The pid (on this host) of the add-on's postmaster: the process in the add-on's cgroup
/// whose command line is the server's own (its children rename theirs `postgres: …`).
fn postmaster_pid(addon: &str) -> Option<u32> {
    let cgroup = format!("slipway-{addon}-app-");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let in_cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
                .is_ok_and(|text| text.contains(&cgroup));
            let command = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            in_cgroup && command.starts_with(POSTGRES.as_bytes())
        })
}

/// Waits up to `within` for a postmaster other than `not` (`None`: any).
async fn wait_postmaster(addon: &str, not: Option<u32>, within: Duration) -> u32 {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match postmaster_pid(addon) {
            Some(pid) if Some(pid) != not => return pid,
            _ if tokio::time::Instant::now() > deadline => {
                panic!("no postmaster for {addon} (other than {not:?}) within {within:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Follows the add-on's log stream until its text holds `until`, then calls `then` and reads
/// on until the stream ends; the text read. Panics if either takes longer than 30 s.
async fn follow_logs<F: std::future::Future<Output = ()>>(
    daemon: &TestDaemon,
    addon: &str,
    until: &str,
    then: F,
) -> String {
    let stream = tokio::net::TcpStream::connect(daemon.http).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = http::Request::get(format!("/api/addons/{addon}/logs/stream"))
        .header("host", "slipway.localhost")
        .header("authorization", format!("Bearer {}", daemon.token))
        .body(Empty::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let mut text = String::new();
    let mut then = Some(then);
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), body.frame())
            .await
            .unwrap_or_else(|_| panic!("the log stream stalled: {text}"));
        let Some(frame) = frame else {
            return text;
        };
        if let Ok(data) = frame.unwrap().into_data() {
            text.push_str(std::str::from_utf8(&data).unwrap());
        }
        if text.contains(until) {
            if let Some(then) = then.take() {
                then.await;
            }
        }
    }
}

/// Whether this process (and so the daemon it starts) may grow a mounted ext4:
/// `CAP_SYS_RESOURCE` (bit 24) in its effective set.
fn may_grow_online() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 24) != 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_survives_kill_9_is_adopted_by_the_next_daemon_and_shows_its_logs() {
    let test = "postgres_survives_kill_9_is_adopted_by_the_next_daemon_and_shows_its_logs";
    if postgres_missing(test) {
        return;
    }
    let Some(mut sandboxed) = Sandboxed::start(test, "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    let id = shop_with_postgres(daemon, 128).await;
    let (state, out) = psql(
        daemon,
        "create table t (x int); insert into t values (42); select sum(x) from t",
    )
    .await;
    assert_eq!(state, "succeeded", "{out}");

    // Its logs: the server's own startup lines.
    let logs = daemon
        .api("GET", &format!("/api/addons/{id}/logs"), None)
        .await;
    assert_eq!(logs.status, 200, "{}", logs.text());
    assert_eq!(logs.json()["addonId"], id.as_str());
    assert!(
        logs.text()
            .contains("database system is ready to accept connections"),
        "{}",
        logs.text()
    );

    // kill -9 of the postmaster: the supervisor starts it again; the row is there.
    let first = wait_postmaster(&id, None, Duration::from_secs(10)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_postmaster(&id, Some(first), Duration::from_secs(30)).await;
    let read = "select sum(x) from t";
    let answered = eventually(Duration::from_secs(30), || async {
        let (state, out) = psql(daemon, read).await;
        state == "succeeded" && out.trim() == "42"
    })
    .await;
    assert!(answered, "{:?}", psql(daemon, read).await);
    let second = postmaster_pid(&id).expect("a postmaster serves");
    // A restarted instance counts as started after the supervisor's 2 s grace; a daemon that
    // stops before that stops it rather than leaving it running (supervisor::app_loop).
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The daemon restarts: the same postmaster goes on serving, data intact.
    sandboxed.daemon.restart();
    let daemon = &sandboxed.daemon;
    let (state, out) = psql(daemon, read).await;
    assert_eq!((state.as_str(), out.trim()), ("succeeded", "42"), "{out}");
    assert_eq!(
        postmaster_pid(&id),
        Some(second),
        "the next daemon adopted the running postmaster: {}",
        daemon.log_text()
    );

    // A new memory limit: settings derived again, the server restarted with them.
    let patched = tokio::time::timeout(
        Duration::from_secs(45),
        daemon.api(
            "PATCH",
            &format!("/api/addons/{id}"),
            Some(json!({"memoryMb": 128})),
        ),
    )
    .await;
    let Ok(patched) = patched else {
        let logs = daemon
            .api("GET", &format!("/api/addons/{id}/logs"), None)
            .await
            .text();
        panic!("PATCH took long: {}\n{logs}", daemon.log_text());
    };
    if patched.status != 200 {
        // A restart that failed its sandbox's setup (exit 125) under load: say why.
        let logs = daemon
            .api("GET", &format!("/api/addons/{id}/logs"), None)
            .await
            .text();
        panic!("PATCH: {}\nadd-on logs: {logs}", patched.text());
    }
    assert_eq!(patched.json()["memoryMb"], 128);
    let third = wait_postmaster(&id, Some(second), Duration::from_secs(10)).await;
    let (state, out) = psql(daemon, "show shared_buffers").await;
    assert_eq!((state.as_str(), out.trim()), ("succeeded", "32MB"), "{out}");
    assert_eq!(psql(daemon, read).await.1.trim(), "42");
    assert_eq!(postmaster_pid(&id), Some(third));

    // An empty body changes nothing and answers the add-on; bad bodies change nothing.
    let same = daemon
        .api("PATCH", &format!("/api/addons/{id}"), Some(json!({})))
        .await;
    assert_eq!(same.status, 200, "{}", same.text());
    for body in [
        json!({"memoryMb": 8}),
        json!({"diskMb": "big"}),
        json!({"colour": 1}),
    ] {
        let refused = daemon
            .api("PATCH", &format!("/api/addons/{id}"), Some(body.clone()))
            .await;
        assert_eq!(refused.status, 400, "{body}: {}", refused.text());
        assert_eq!(refused.json()["error"]["code"], "INVALID_BODY", "{body}");
    }
    let shrink = daemon
        .api(
            "PATCH",
            &format!("/api/addons/{id}"),
            Some(json!({"diskMb": 64})),
        )
        .await;
    assert_eq!(shrink.status, 409, "{}", shrink.text());
    assert!(shrink.text().contains("export"), "{}", shrink.text());
    let addon = daemon
        .api("GET", &format!("/api/addons/{id}"), None)
        .await
        .json();
    assert_eq!(
        (addon["diskMb"].as_u64(), addon["memoryMb"].as_u64()),
        (Some(128), Some(128))
    );
    assert_eq!(postmaster_pid(&id), Some(third), "nothing restarted");

    // The stream replays the server's output and follows it until the add-on is deleted.
    let delete = async {
        let deleted = daemon
            .api("DELETE", &format!("/api/addons/{id}?confirm={id}"), None)
            .await;
        assert_eq!(deleted.status, 200, "{}", deleted.text());
    };
    let streamed = follow_logs(daemon, &id, "ready to accept connections", delete).await;
    assert!(streamed.contains("event: log"), "{streamed}");
    assert!(streamed.contains("event: end"), "{streamed}");
    let gone = daemon
        .api("GET", &format!("/api/addons/{id}/logs"), None)
        .await;
    assert_eq!(gone.status, 404, "{}", gone.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_writes_alerts_and_grows_until_writes_resume() {
    let test = "a_full_disk_fails_writes_alerts_and_grows_until_writes_resume";
    if postgres_missing(test) {
        return;
    }
    let receiver = Receiver::start("127.0.0.1:0".parse().unwrap()).await;
    let extra = format!(
        "{}\n[addons]\ndisk_check_interval_s = 1\n",
        allow_loopback()
    );
    let Some(sandboxed) = Sandboxed::start(test, &extra) else {
        return;
    };
    let daemon = &sandboxed.daemon;
    let subscribed = daemon
        .api(
            "POST",
            "/api/notifications",
            Some(json!({"url": receiver.url("/hook"), "events": ["addon.disk_full"]})),
        )
        .await;
    assert_eq!(subscribed.status, 201, "{}", subscribed.text());
    let id = shop_with_postgres(daemon, 96).await;
    let system = daemon.api("GET", "/api/system", None).await.json();
    if system["diskLimits"] != true {
        eprintln!("SKIP {test}: disk limits are off here (no loop devices)");
        return;
    }
    // An unlogged table: its rows write no WAL, so the data files, not the WAL, fill the
    // disk (a WAL write that fails is a PANIC, a data file that cannot grow an ERROR).
    let (state, out) = psql(
        daemon,
        "create unlogged table big (x text); alter table big alter column x set storage external",
    )
    .await;
    assert_eq!(state, "succeeded", "{out}");
    let rows =
        "insert into big select (select string_agg(md5(random()::text || g::text || n::text), '') \
                from generate_series(1, 256) n) from generate_series(1, 1000) g";
    let mut failed = None;
    for _ in 0..20 {
        let (state, out) = psql(daemon, rows).await;
        if state != "succeeded" {
            failed = Some(out);
            break;
        }
    }
    let failed = failed.expect("writes never failed on a 96 MB disk");
    assert!(
        failed.contains("No space left on device") || failed.contains("could not extend"),
        "{failed}"
    );
    let pid = wait_postmaster(&id, None, Duration::from_secs(10)).await;

    // The alert, with the add-on and its project.
    let alerted = eventually(Duration::from_secs(20), || async {
        !receiver.events("/hook", "addon.disk_full").is_empty()
    })
    .await;
    assert!(alerted, "no addon.disk_full: {:?}", receiver.got().len());
    let alert = receiver.events("/hook", "addon.disk_full")[0].json();
    assert_eq!(alert["addon"], id.as_str(), "{alert}");
    assert_eq!(alert["project"], "shop", "{alert}");
    let used = daemon
        .api("GET", &format!("/api/addons/{id}"), None)
        .await
        .json()["diskUsedBytes"]
        .as_u64()
        .unwrap();
    assert!(used > 80 << 20, "{used}");
    let metrics = daemon.api("GET", "/api/metrics", None).await.text();
    let up = format!("slipway_addon_up{{addon=\"{id}\",project=\"shop\"}} 1");
    assert!(metrics.contains(&up), "{metrics}");
    let disk = format!("slipway_addon_disk_used_bytes{{addon=\"{id}\",project=\"shop\"}} ");
    assert!(metrics.contains(&disk), "{metrics}");

    // Grown: writes go on.
    let grown = daemon
        .api(
            "PATCH",
            &format!("/api/addons/{id}"),
            Some(json!({"diskMb": 256})),
        )
        .await;
    assert_eq!(grown.status, 200, "{}", grown.text());
    assert_eq!(grown.json()["diskMb"], 256);
    let (state, out) = psql(daemon, rows).await;
    assert_eq!(state, "succeeded", "{out}");
    let (_, count) = psql(daemon, "select count(*) > 0 from big").await;
    assert_eq!(count.trim(), "t");
    if may_grow_online() {
        assert_eq!(postmaster_pid(&id), Some(pid), "grown online, no restart");
    } else {
        eprintln!(
            "NOTE {test}: without CAP_SYS_RESOURCE here the kernel refuses to grow a mounted \
             ext4; the disk grew with a restart instead, so the same pid is not checked"
        );
    }
}
