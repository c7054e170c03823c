//! One-off runs (issue 33): a fresh sandbox from the live deployment's build with the app's
//! environment and `/data`; its output in the logs (fetched and streamed), its exit code in
//! the run and as `slipway run`'s exit code; timeouts stop the sandbox, cancel stops it; a
//! project with nothing live has nothing to run in.

use std::time::Duration;

use serde_json::json;

use super::Sandboxed;
use crate::support::{cli_output, missing_tool, TestDaemon};

/// Serves `/data/fromrun` (what a run wrote into the project's `/data`).
const WEB: &str = r#"
const fs = require('fs');
require('http').createServer((req, res) => {
  let text = 'none';
  try { text = fs.readFileSync('/data/fromrun', 'utf8'); } catch (e) {}
  res.end(text);
}).listen(process.env.PORT);
"#;

/// Polls a run until its state is final.
pub(crate) async fn wait_run_final(
    daemon: &TestDaemon,
    run_id: &str,
    within: Duration,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + within;
    loop {
        let run = daemon
            .api("GET", &format!("/api/runs/{run_id}"), None)
            .await
            .json();
        let state = run["state"].as_str().unwrap_or("").to_owned();
        if !["queued", "running"].contains(&state.as_str()) {
            return run;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "run {run_id} still {state}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn start_run(daemon: &TestDaemon, body: serde_json::Value) -> String {
    let started = daemon
        .api("POST", "/api/projects/shop/runs", Some(body))
        .await;
    assert_eq!(started.status, 202, "{}", started.text());
    let accepted = started.json();
    assert!(accepted["statusUrl"]
        .as_str()
        .unwrap()
        .ends_with(accepted["runId"].as_str().unwrap()));
    accepted["runId"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_off_runs_use_the_live_build_and_report_their_output_and_exit() {
    if missing_tool("node", "the app is a node server") {
        return;
    }
    let test = "one_off_runs_use_the_live_build_and_report_their_output_and_exit";
    let Some(sandboxed) = Sandboxed::start(test, "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    // Nothing live yet: nothing to run in.
    let created = daemon
        .api("POST", "/api/projects", Some(json!({"slug": "shop"})))
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let refused = daemon
        .api(
            "POST",
            "/api/projects/shop/runs",
            Some(json!({"command": "true"})),
        )
        .await;
    assert_eq!(refused.status, 409, "{}", refused.text());
    assert!(
        refused.text().contains("deploy it first"),
        "{}",
        refused.text()
    );
    let env = daemon
        .api(
            "POST",
            "/api/projects/shop/env-vars",
            Some(json!({"V": "1"})),
        )
        .await;
    assert!(env.status < 300, "{}", env.text());
    let files = [
        ("server.js", WEB, 0o644),
        ("tool.sh", "echo \"tool sees $V and $EXTRA\"\n", 0o755),
    ];
    daemon
        .deploy("shop", &files, json!({"startCommand": "node server.js"}))
        .await;

    // A run of the build's own file, with the app's and the request's variables, writing the
    // app's /data; its stdout and stderr kept apart; a non-zero exit is RUN_FAILED with it.
    let command = "sh tool.sh; echo oops >&2; echo written > /data/fromrun; \
                   touch /app/new 2>/dev/null || echo read-only; exit 7";
    let id = start_run(
        daemon,
        json!({"command": command, "env": {"EXTRA": "secret-value"}}),
    )
    .await;
    let run = wait_run_final(daemon, &id, Duration::from_secs(60)).await;
    assert_eq!(run["state"], "failed", "{run}");
    assert_eq!(run["exitCode"], 7, "{run}");
    assert_eq!(run["trigger"], "oneoff", "{run}");
    assert_eq!(run["envKeys"], json!(["EXTRA"]), "{run}");
    assert!(
        run["message"].as_str().unwrap().contains("RUN_FAILED"),
        "{run}"
    );
    let logs = daemon
        .api("GET", &format!("/api/runs/{id}/logs"), None)
        .await
        .json();
    let lines = |stream: &str| -> Vec<String> {
        logs["logs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|line| line["stream"] == stream)
            .map(|line| line["message"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        lines("stdout"),
        vec!["tool sees 1 and secret-value", "read-only"],
        "{logs}"
    );
    assert_eq!(lines("stderr"), vec!["oops"], "{logs}");
    assert_eq!(daemon.app_get("shop", "/", &[]).await.text(), "written\n");
    // The variable's value is nowhere in the run's record.
    let record = daemon.api("GET", &format!("/api/runs/{id}"), None).await;
    assert!(!record.text().contains("secret-value"), "{}", record.text());
    // The stream replays the finished run and ends.
    let stream = daemon
        .api("GET", &format!("/api/runs/{id}/logs/stream"), None)
        .await
        .text();
    assert!(
        stream.contains("tool sees 1") && stream.contains("event: end"),
        "{stream}"
    );

    // `slipway run` prints the output and exits with the command's code.
    let output = cli_output(
        daemon,
        &[
            "run",
            "--project",
            "shop",
            "--",
            "echo",
            "from-cli;",
            "exit",
            "3",
        ],
    );
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "from-cli\n");
    let output = cli_output(daemon, &["run", "--project", "shop", "--", "true"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");

    // The list has them all, newest first.
    let list = daemon
        .api("GET", "/api/projects/shop/runs", None)
        .await
        .json();
    assert_eq!(list["runs"].as_array().unwrap().len(), 3, "{list}");
    assert_eq!(list["runs"][2]["id"], id.as_str(), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_timeout_or_canceled_is_stopped_with_its_sandbox() {
    let test = "a_run_past_its_timeout_or_canceled_is_stopped_with_its_sandbox";
    let Some(sandboxed) = Sandboxed::start(test, "") else {
        return;
    };
    let daemon = &sandboxed.daemon;
    let server = "exec python3 -m http.server $PORT";
    if missing_tool("python3", "the app is python's http.server") {
        return;
    }
    daemon
        .deploy(
            "shop",
            &[("index.html", "hi", 0o644)],
            json!({"startCommand": server}),
        )
        .await;
    let started = std::time::Instant::now();
    // The child keeps running after the shell is told to stop: the whole sandbox goes.
    let id = start_run(
        daemon,
        json!({"command": "sleep 300 & echo started; wait", "timeoutS": 2}),
    )
    .await;
    let run = wait_run_final(daemon, &id, Duration::from_secs(30)).await;
    assert_eq!(run["state"], "timed_out", "{run}");
    assert!(
        run["message"].as_str().unwrap().contains("RUN_TIMED_OUT"),
        "{run}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(
        no_process_with(&id),
        "the timed-out run's processes live on"
    );

    let id = start_run(daemon, json!({"command": "echo waiting; sleep 300"})).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let canceled = daemon
        .api("POST", &format!("/api/runs/{id}/cancel"), None)
        .await;
    assert_eq!(canceled.status, 200, "{}", canceled.text());
    assert_eq!(canceled.json()["state"], "canceled", "{}", canceled.text());
    assert!(no_process_with(&id), "the canceled run's processes live on");
    let again = daemon
        .api("POST", &format!("/api/runs/{id}/cancel"), None)
        .await;
    assert_eq!(again.status, 409, "{}", again.text());
}

/// Whether no process of the machine has the run's sandbox name in its cgroup.
pub(crate) fn no_process_with(run_id: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    for entry in entries.flatten() {
        let cgroup = entry.path().join("cgroup");
        if let Ok(text) = std::fs::read_to_string(cgroup) {
            if text.contains(run_id) {
                return false;
            }
        }
    }
    true
}

/// Reads the terminal's output until it contains `needle`; everything read so far.
async fn read_until<S>(socket: &mut S, seen: &mut String, needle: &str)
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    use futures_util::StreamExt;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !seen.contains(needle) {
        let message = tokio::time::timeout_at(deadline, socket.next())
            .await
            .unwrap_or_else(|_| panic!("no {needle:?} on the terminal; it showed {seen:?}"));
        match message {
            Some(Ok(Message::Binary(bytes))) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            Some(Ok(Message::Text(text))) => seen.push_str(text.as_str()),
            Some(Ok(_)) => {}
            other => panic!("the terminal ended ({other:?}) before {needle:?}; it showed {seen:?}"),
        }
    }
}

use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_run_answers_typed_input_and_a_resize_under_a_real_pty() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let test = "an_interactive_run_answers_typed_input_and_a_resize_under_a_real_pty";
    let Some(sandboxed) = Sandboxed::start(test, "") else {
        return;
    };
    if missing_tool("python3", "the app is python's http.server") {
        return;
    }
    let daemon = &sandboxed.daemon;
    let server = "exec python3 -m http.server $PORT";
    daemon
        .deploy(
            "shop",
            &[("index.html", "hi", 0o644)],
            json!({"startCommand": server}),
        )
        .await;
    let command = "stty size; test -t 0 && echo is-a-tty; read line; echo got:$line; stty size";
    let started = daemon
        .api(
            "POST",
            "/api/projects/shop/runs",
            Some(json!({"command": command, "interactive": true})),
        )
        .await;
    assert_eq!(started.status, 202, "{}", started.text());
    let accepted = started.json();
    let id = accepted["runId"].as_str().unwrap().to_owned();
    assert!(
        accepted["ttyUrl"].as_str().unwrap().starts_with("ws://"),
        "{accepted}"
    );
    // Without the token, or without an upgrade, nothing attaches.
    let plain = daemon
        .api("GET", &format!("/api/runs/{id}/tty"), None)
        .await;
    assert_eq!(plain.status, 400, "{}", plain.text());

    let port = daemon.http.port();
    let url = format!("ws://slipway.localhost:{port}/api/runs/{id}/tty?cols=100&rows=30");
    let mut request = url.as_str().into_client_request().unwrap();
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let refused = tokio_tungstenite::client_async(request.clone(), stream).await;
    assert!(refused.is_err(), "attached without a token");
    request.headers_mut().insert(
        "authorization",
        format!("Bearer {}", daemon.token).parse().unwrap(),
    );
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let (mut socket, _) = tokio_tungstenite::client_async(request.clone(), stream)
        .await
        .expect("attach the terminal");
    let mut seen = String::new();
    read_until(&mut socket, &mut seen, "30 100").await;
    read_until(&mut socket, &mut seen, "is-a-tty").await;
    socket
        .send(Message::text(json!({"resize": [120, 40]}).to_string()))
        .await
        .unwrap();
    socket
        .send(Message::binary(b"hello\r".to_vec()))
        .await
        .unwrap();
    read_until(&mut socket, &mut seen, "got:hello").await;
    read_until(&mut socket, &mut seen, "40 120").await;
    read_until(&mut socket, &mut seen, "\"state\":\"succeeded\"").await;
    let run = wait_run_final(daemon, &id, Duration::from_secs(20)).await;
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(run["exitCode"], 0, "{run}");
    assert_eq!(run["interactive"], true, "{run}");
    // The terminal is gone with the run: a second attach is refused.
    let again = daemon
        .api("GET", &format!("/api/runs/{id}/tty"), None)
        .await;
    assert_eq!(again.status, 400, "{}", again.text());
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    assert!(tokio_tungstenite::client_async(request, stream)
        .await
        .is_err());

    // `slipway run -it` with its input from a pipe: the command reads it, the exit code
    // is the command's.
    let mut child = std::process::Command::new(crate::support::BIN)
        .args([
            "run",
            "-it",
            "--project",
            "shop",
            "--",
            "read x; echo got-$x; exit 4",
        ])
        .env("SLIPWAY_URL", format!("http://slipway.localhost:{port}"))
        .env("SLIPWAY_TOKEN", &daemon.token)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(b"typed\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(4), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("got-typed"),
        "{output:?}"
    );
}
