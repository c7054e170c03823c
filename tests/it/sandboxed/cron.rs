//! Cron jobs (issue 33) with a fake clock (`[jobs] clock_file`): the scheduler's "now" is the
//! time the test writes, the runs are real sandboxes. `forbid` never runs two at once and
//! records the skipped due times, `replace` stops the running one, a timeout stops the
//! sandbox, jobs and their history survive a restart, and `missed: runOnce` runs one catch-up
//! after downtime while `skip` records one skipped run.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::runs::{no_process_with, wait_run_final};
use super::Sandboxed;
use crate::support::{eventually, missing_tool, TestDaemon};

const SERVER: &str = "exec python3 -m http.server $PORT";

/// Sets the daemon's clock at once (written aside, then renamed: never read half written).
fn set_clock(path: &Path, at: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, at).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// A daemon whose scheduler reads its time from `clock`, with project `shop` deployed.
async fn start(test: &str, clock: &Path) -> Option<Sandboxed> {
    if missing_tool("python3", "the app is python's http.server") {
        return None;
    }
    let extra = format!("[jobs]\nclock_file = \"{}\"\n", clock.display());
    let sandboxed = Sandboxed::start(test, &extra)?;
    sandboxed
        .daemon
        .deploy(
            "shop",
            &[("index.html", "hi", 0o644)],
            json!({"startCommand": SERVER}),
        )
        .await;
    Some(sandboxed)
}

async fn create_job(daemon: &TestDaemon, body: serde_json::Value) -> serde_json::Value {
    let created = daemon
        .api("POST", "/api/projects/shop/cron-jobs", Some(body))
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    created.json()
}

async fn runs_of(daemon: &TestDaemon, job: &serde_json::Value) -> Vec<serde_json::Value> {
    let path = format!(
        "/api/projects/shop/cron-jobs/{}/runs",
        job["id"].as_str().unwrap()
    );
    let list = daemon.api("GET", &path, None).await.json();
    list["runs"].as_array().cloned().unwrap_or_default()
}

fn states(runs: &[serde_json::Value]) -> Vec<String> {
    runs.iter()
        .map(|run| run["state"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits until `job`'s runs (newest first) have the `expected` states.
async fn wait_states(daemon: &TestDaemon, job: &serde_json::Value, expected: &[&str]) {
    let reached = eventually(Duration::from_secs(30), || async {
        states(&runs_of(daemon, job).await) == expected
    })
    .await;
    let runs = runs_of(daemon, job).await;
    assert!(
        reached,
        "job {}: runs {:?}, expected {expected:?}; messages {:?}",
        job["name"],
        states(&runs),
        runs.iter().map(|run| &run["message"]).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_jobs_follow_the_clock_with_their_concurrency_rules() {
    let dir = tempfile::tempdir().unwrap();
    let clock = dir.path().join("clock");
    set_clock(&clock, "2026-01-01T00:00:30Z");
    let test = "cron_jobs_follow_the_clock_with_their_concurrency_rules";
    let Some(sandboxed) = start(test, &clock).await else {
        return;
    };
    let daemon = &sandboxed.daemon;
    // A 90-second job every minute, three ways.
    let long = "echo started; sleep 90";
    let forbid = create_job(
        daemon,
        json!({"name": "forbid", "schedule": "* * * * *", "command": long}),
    )
    .await;
    assert_eq!(forbid["concurrency"], "forbid");
    assert_eq!(
        forbid["nextRuns"][0]["atUtc"], "2026-01-01T00:01:00.000Z",
        "{forbid}"
    );
    assert_eq!(forbid["nextRuns"].as_array().unwrap().len(), 5);
    let replace = create_job(
        daemon,
        json!({"name": "replace", "schedule": "* * * * *", "command": long,
               "concurrency": "replace"}),
    )
    .await;
    let timeout = create_job(
        daemon,
        json!({"name": "timeout", "schedule": "* * * * *", "command": "sleep 300 & wait",
               "timeoutS": 2}),
    )
    .await;
    // Not due yet: nothing ran.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(runs_of(daemon, &forbid).await.is_empty());

    set_clock(&clock, "2026-01-01T00:01:00Z");
    wait_states(daemon, &forbid, &["running"]).await;
    wait_states(daemon, &replace, &["running"]).await;
    wait_states(daemon, &timeout, &["timed_out"]).await;
    let first_replace = runs_of(daemon, &replace).await[0]["id"].clone();

    set_clock(&clock, "2026-01-01T00:02:00Z");
    // forbid: the due time is recorded as skipped, the first run still runs, alone.
    wait_states(daemon, &forbid, &["skipped", "running"]).await;
    let skipped = &runs_of(daemon, &forbid).await[0];
    assert_eq!(
        skipped["scheduledAt"], "2026-01-01T00:02:00.000Z",
        "{skipped}"
    );
    assert!(
        skipped["message"].as_str().unwrap().contains("forbid"),
        "{skipped}"
    );
    // replace: the first was stopped, a new one runs.
    wait_states(daemon, &replace, &["running", "canceled"]).await;
    let replaced = &runs_of(daemon, &replace).await[1];
    assert_eq!(replaced["id"], first_replace);
    assert!(
        replaced["message"].as_str().unwrap().contains("replaced"),
        "{replaced}"
    );
    wait_states(daemon, &timeout, &["timed_out", "timed_out"]).await;
    let timed_out = &runs_of(daemon, &timeout).await[0];
    assert!(no_process_with(timed_out["id"].as_str().unwrap()));

    set_clock(&clock, "2026-01-01T00:03:00Z");
    wait_states(daemon, &forbid, &["skipped", "skipped", "running"]).await;

    // Disabled: no next runs, nothing more runs.
    let path = format!(
        "/api/projects/shop/cron-jobs/{}",
        forbid["id"].as_str().unwrap()
    );
    let disabled = daemon
        .api("PATCH", &path, Some(json!({"enabled": false})))
        .await;
    assert_eq!(disabled.status, 200, "{}", disabled.text());
    assert_eq!(disabled.json()["nextRuns"], json!([]));
    set_clock(&clock, "2026-01-01T00:04:00Z");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(runs_of(daemon, &forbid).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_survive_a_restart_and_missed_due_times_run_once_or_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let clock = dir.path().join("clock");
    set_clock(&clock, "2026-03-01T00:00:30Z");
    let test = "jobs_survive_a_restart_and_missed_due_times_run_once_or_are_skipped";
    let Some(mut sandboxed) = start(test, &clock).await else {
        return;
    };
    let catch_up = create_job(
        &sandboxed.daemon,
        json!({"name": "catch-up", "schedule": "*/5 * * * *", "command": "echo caught-up",
               "missed": "runOnce"}),
    )
    .await;
    let skipper = create_job(
        &sandboxed.daemon,
        json!({"name": "skipper", "schedule": "*/5 * * * *", "command": "echo on-time"}),
    )
    .await;
    set_clock(&clock, "2026-03-01T00:05:00Z");
    wait_states(&sandboxed.daemon, &catch_up, &["succeeded"]).await;
    wait_states(&sandboxed.daemon, &skipper, &["succeeded"]).await;

    // Down from 00:05 to 00:31: five due times (00:10 … 00:30) went by.
    sandboxed.daemon.stop();
    set_clock(&clock, "2026-03-01T00:31:00Z");
    sandboxed.daemon.start_again();
    let daemon = &sandboxed.daemon;
    wait_states(daemon, &catch_up, &["succeeded", "succeeded"]).await;
    let caught = &runs_of(daemon, &catch_up).await[0];
    assert_eq!(
        caught["scheduledAt"], "2026-03-01T00:30:00.000Z",
        "{caught}"
    );
    let id = caught["id"].as_str().unwrap();
    let run = wait_run_final(daemon, id, Duration::from_secs(30)).await;
    assert_eq!(run["exitCode"], 0);
    let logs = daemon
        .api("GET", &format!("/api/runs/{id}/logs"), None)
        .await
        .text();
    assert!(
        logs.contains("catch-up run for 5 missed due times"),
        "{logs}"
    );
    assert!(logs.contains("caught-up"), "{logs}");
    wait_states(daemon, &skipper, &["skipped", "succeeded"]).await;
    let skipped = &runs_of(daemon, &skipper).await[0];
    assert!(
        skipped["message"]
            .as_str()
            .unwrap()
            .contains("5 due times went by"),
        "{skipped}"
    );
    // The job itself and its first run came back with the daemon.
    let job = daemon
        .api(
            "GET",
            &format!(
                "/api/projects/shop/cron-jobs/{}",
                catch_up["id"].as_str().unwrap()
            ),
            None,
        )
        .await
        .json();
    assert_eq!(
        job["nextRuns"][0]["atUtc"], "2026-03-01T00:35:00.000Z",
        "{job}"
    );
    assert_eq!(job["lastRun"]["id"], caught["id"], "{job}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slipway_toml_declares_jobs_that_follow_the_live_build() {
    let dir = tempfile::tempdir().unwrap();
    let clock = dir.path().join("clock");
    set_clock(&clock, "2026-06-01T12:00:00Z");
    let test = "slipway_toml_declares_jobs_that_follow_the_live_build";
    let Some(sandboxed) = start(test, &clock).await else {
        return;
    };
    let daemon = &sandboxed.daemon;
    // A job made through the API is the API's: a declared one of its name is not applied.
    create_job(
        daemon,
        json!({"name": "mine", "schedule": "@hourly", "command": "echo api"}),
    )
    .await;
    let file =
        "[[cron]]\nname = \"report\"\nschedule = \"30 2 * * *\"\ntimezone = \"Europe/Berlin\"\n\
                command = \"echo report\"\nmissed = \"runOnce\"\n\n\
                [[cron]]\nname = \"cleanup\"\nschedule = \"@daily\"\ncommand = \"echo clean\"\n\n\
                [[cron]]\nname = \"mine\"\nschedule = \"@daily\"\ncommand = \"echo file\"\n";
    let first = daemon
        .deploy(
            "shop",
            &[("index.html", "hi", 0o644), ("slipway.toml", file, 0o644)],
            json!({"startCommand": SERVER}),
        )
        .await;
    let jobs = |list: &serde_json::Value| -> Vec<(String, String, String)> {
        list["cronJobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|job| {
                (
                    job["name"].as_str().unwrap().to_owned(),
                    job["origin"].as_str().unwrap().to_owned(),
                    job["command"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let list = daemon
        .api("GET", "/api/projects/shop/cron-jobs", None)
        .await
        .json();
    let mut found = jobs(&list);
    found.sort();
    assert_eq!(
        found,
        vec![
            ("cleanup".into(), "project_file".into(), "echo clean".into()),
            ("mine".into(), "api".into(), "echo api".into()),
            ("report".into(), "project_file".into(), "echo report".into()),
        ]
    );
    let report = list["cronJobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|job| job["name"] == "report")
        .unwrap();
    // 02:30 in Berlin (CEST, +02:00) on the next day.
    assert_eq!(
        report["nextRuns"][0]["at"], "2026-06-02T02:30:00+02:00",
        "{report}"
    );
    assert_eq!(
        report["nextRuns"][0]["atUtc"], "2026-06-02T00:30:00.000Z",
        "{report}"
    );
    let logs = daemon
        .logs_text(first["deploymentId"].as_str().unwrap())
        .await;
    assert!(logs.contains("made through the API"), "{logs}");

    // The next build drops `cleanup` and declares a bad schedule for `report`: cleanup goes,
    // report stays as it was, and the log says why.
    let file = "[[cron]]\nname = \"report\"\nschedule = \"61 2 * * *\"\ncommand = \"echo new\"\n";
    let second = daemon
        .deploy(
            "shop",
            &[("index.html", "hi", 0o644), ("slipway.toml", file, 0o644)],
            json!({"startCommand": SERVER}),
        )
        .await;
    let list = daemon
        .api("GET", "/api/projects/shop/cron-jobs", None)
        .await
        .json();
    let mut found = jobs(&list);
    found.sort();
    assert_eq!(
        found,
        vec![
            ("mine".into(), "api".into(), "echo api".into()),
            ("report".into(), "project_file".into(), "echo report".into()),
        ]
    );
    let logs = daemon
        .logs_text(second["deploymentId"].as_str().unwrap())
        .await;
    assert!(logs.contains("\"cleanup\" is no longer declared"), "{logs}");
    assert!(logs.contains("61 2 * * *"), "{logs}");
}
