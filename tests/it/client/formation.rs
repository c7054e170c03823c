//! `slipway scale` and `slipway ps` (issue 32) against a real daemon: the instances table,
//! scaling one type by `TYPE=N` with `--memory`, the JSON, usage errors (exit 2) and the
//! API's refusals (exit 1 with its message).

use serde_json::Value;

use super::{daemon, project_dir, Client};
use crate::support::missing_tool;

const SERVER: &str =
    "require('http').createServer((req, res) => res.end('web')).listen(process.env.PORT);\n";
const WORKER: &str = "setInterval(() => {}, 1000);\n";
const PROCFILE: &str = "web: node server.js\nworker: node worker.js\n";

#[tokio::test]
async fn scale_and_ps_show_and_change_the_formation() {
    if missing_tool("node", "the app is a node server with a worker") {
        return;
    }
    let daemon = daemon();
    let client = Client::for_daemon(&daemon);
    daemon
        .deploy(
            "shop",
            &[
                ("server.js", SERVER, 0o644),
                ("worker.js", WORKER, 0o644),
                ("Procfile", PROCFILE, 0o644),
            ],
            serde_json::json!({"startCommand": "node server.js"}),
        )
        .await;
    // The project comes from ./slipway.toml, as for `env` and `domains`.
    let (_parent, dir) = project_dir("shop", &[("slipway.toml", "project = \"shop\"\n")]);

    let run = client.run(&dir, &["ps"]).await;
    run.assert_code(0);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines[0].starts_with("TYPE") && lines[0].contains("MEMORY"),
        "{}",
        run.stdout
    );
    for instance in ["web.1", "worker.1"] {
        assert!(
            lines
                .iter()
                .any(|line| line.contains(instance) && line.contains("running")),
            "{instance}: {}",
            run.stdout
        );
    }

    let run = client
        .run(&dir, &["scale", "worker=2", "--memory", "worker=128"])
        .await;
    run.assert_code(0);
    let worker = run
        .stdout
        .lines()
        .find(|line| line.starts_with("worker "))
        .unwrap_or_else(|| panic!("{}", run.stdout));
    let cells: Vec<&str> = worker.split_whitespace().collect();
    assert_eq!(&cells[..5], ["worker", "2", "2", "128", "MiB"], "{worker}");

    let run = client.run(&dir, &["ps", "--json"]).await;
    run.assert_code(0);
    let formation: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        formation["types"]["worker"]["running"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{formation}"
    );
    assert_eq!(formation["types"]["worker"]["memoryMb"], 128);

    // Usage errors stop before any request: exit 2, saying what is wrong.
    for (args, says) in [
        (&["scale", "web"][..], "TYPE=N"),
        (&["scale", "web=lots"], "not a whole number"),
        (&["scale", "web=2", "web=3"], "named twice"),
        (&["scale"], "TYPE=N"),
    ] {
        let run = client.run(&dir, args).await;
        run.assert_code(2);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
    }
    // The API's refusal: exit 1 with its message and code.
    let run = client.run(&dir, &["scale", "web=33"]).await;
    run.assert_code(1);
    assert!(
        run.stderr.contains("must be 0 to 32") && run.stderr.contains("INVALID_BODY"),
        "{}",
        run.stderr
    );

    // A type scaled to 0 gets a line saying so.
    client
        .run(&dir, &["scale", "worker=0"])
        .await
        .assert_code(0);
    let run = client.run(&dir, &["ps"]).await;
    run.assert_code(0);
    assert!(
        run.stdout.contains("worker: scaled to 0") && run.stdout.contains("web.1"),
        "{}",
        run.stdout
    );

    // A project with nothing live says so.
    let created = daemon
        .api(
            "POST",
            "/api/projects",
            Some(serde_json::json!({"slug": "empty"})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let run = client.run(&dir, &["ps", "--project", "empty"]).await;
    run.assert_code(0);
    assert!(
        run.stderr.contains("no live server deployment"),
        "{}",
        run.stderr
    );
}
