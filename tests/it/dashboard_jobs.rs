//! One-off runs and cron jobs in the dashboard (issue 33), in a real browser: a project's
//! Jobs tab runs a command through its form and shows its output live, then its final state
//! and exit code, and Cancel stops one that lasts; a cron job with a schedule that does not
//! parse shows the API's own message, a valid one its next due time in its zone; Run now
//! shows the run in the job's history with its output; Disable disables it (as the API says
//! too).

use serde_json::{json, Value};

use crate::dashboard::shoot;
use crate::dashboard_forms::assert_labeled;
use crate::support::browser;
use crate::support::{missing_tool, TestDaemon};

const SERVER: &str = "exec python3 -m http.server $PORT";

/// What the page shows as a refusal: the flash line and any error next to a form.
const SHOWN_ERRORS: &str =
    "[...document.querySelectorAll('#flash, .form-error')].map((e) => e.textContent).join(' ')";

/// A JS string literal of `text`.
fn js(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

async fn cron_jobs(daemon: &TestDaemon) -> Vec<Value> {
    let response = daemon
        .api("GET", "/api/projects/shop/cron-jobs", None)
        .await;
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()["cronJobs"].as_array().unwrap().clone()
}

/// The shown run's output card reads `state` with exit code `exit`, and its output `text`.
fn output_shows(state: &str, exit: &str, text: &str) -> String {
    format!(
        "document.querySelector('#run-state')?.textContent === {} \
         && document.querySelector('#run-exit')?.textContent === {} \
         && (document.querySelector('#run-logs')?.textContent || '').includes({})",
        js(state),
        js(exit),
        js(text)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jobs_tab_runs_commands_and_manages_cron_jobs() {
    if missing_tool("python3", "the app is python's http.server") {
        return;
    }
    let Some((mut browser, daemon, origin)) =
        browser::dashboard("dashboard jobs browser test").await
    else {
        return;
    };
    daemon
        .deploy(
            "shop",
            &[("index.html", "hi", 0o644)],
            json!({"startCommand": SERVER}),
        )
        .await;

    browser
        .open(&format!("{origin}/"), "#token", "the sign-in form")
        .await;
    browser.sign_in(&daemon.token, "the project list").await;
    browser
        .open(
            &format!("{origin}/#/projects/shop/jobs"),
            "#run-command",
            "the Jobs tab",
        )
        .await;
    assert_labeled(&mut browser, "the Jobs tab").await;

    // A one-off run through the form: its output, then its final state and exit code.
    browser
        .fill("#run-command", "echo hello-from-run; exit 3")
        .await;
    browser.click("#run-submit").await;
    browser
        .wait_for(
            &output_shows("failed", "3", "hello-from-run"),
            "the run's output, state failed and exit code 3",
        )
        .await;
    let runs = daemon.api("GET", "/api/projects/shop/runs", None).await;
    let run = runs.json()["runs"][0].clone();
    assert_eq!(run["command"], "echo hello-from-run; exit 3", "{run}");
    assert_eq!(run["state"], "failed", "{run}");
    assert_eq!(run["exitCode"], 3, "{run}");
    let id = run["id"].as_str().unwrap().to_owned();
    assert!(
        browser
            .eval("location.hash")
            .await
            .as_str()
            .unwrap()
            .ends_with(&id),
        "the address names the run shown"
    );
    // The runs table lists it, in words.
    browser
        .wait_for(
            &format!(
                "document.querySelector('a.run-link[data-id={}]')?.closest('tr')?.textContent.includes('failed')",
                js(&id)
            ),
            "the run in the table of runs",
        )
        .await;
    shoot(&mut browser, "jobs-run").await;

    // A run that lasts: its output followed live, and Cancel stops it.
    browser
        .fill("#run-command", "echo still-going; sleep 60")
        .await;
    browser.click("#run-submit").await;
    browser
        .wait_for(
            "document.querySelector('#run-state')?.textContent === 'running' \
             && document.querySelector('#run-log-state')?.textContent === 'following live' \
             && document.querySelector('#run-logs')?.textContent.includes('still-going') \
             && document.querySelector('#run-cancel')",
            "the running run's output followed live, with Cancel",
        )
        .await;
    browser.click("#run-cancel").await;
    browser
        .wait_for(
            "document.querySelector('#run-state')?.textContent === 'canceled' && !document.querySelector('#run-cancel')",
            "the run shown canceled",
        )
        .await;
    let runs = daemon.api("GET", "/api/projects/shop/runs", None).await;
    assert_eq!(
        runs.json()["runs"][0]["state"],
        "canceled",
        "{}",
        runs.text()
    );

    // A cron job whose schedule does not parse: the API's own message on the page.
    let bad = json!({"name": "tick", "schedule": "61 * * * *", "command": "echo tick-ran"});
    let refusal = daemon
        .api("POST", "/api/projects/shop/cron-jobs", Some(bad))
        .await;
    assert_eq!(refusal.status, 400, "{}", refusal.text());
    let message = refusal.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(message.contains("61 * * * *"), "{message}");
    browser.fill("#cron-name", "tick").await;
    browser.fill("#cron-schedule", "61 * * * *").await;
    browser.fill("#cron-command", "echo tick-ran").await;
    browser.click("#cron-create").await;
    browser
        .wait_for(
            &format!("{SHOWN_ERRORS}.includes({})", js(&message)),
            "the API's refusal of the schedule",
        )
        .await;
    assert!(cron_jobs(&daemon).await.is_empty());

    // A valid one: its schedule, zone and next due time (in its zone) in the table.
    let zone = browser
        .eval("Intl.DateTimeFormat().resolvedOptions().timeZone")
        .await;
    assert_eq!(
        browser
            .eval("document.querySelector('#cron-timezone').value")
            .await,
        zone,
        "the time zone defaults to the browser's"
    );
    browser.fill("#cron-schedule", "*/5 * * * *").await;
    browser.click("#cron-create").await;
    browser
        .wait_for(
            "document.querySelector('button.run-now[data-job=tick]')?.closest('tr')?.querySelector('.next-due')",
            "the new job's next due time",
        )
        .await;
    let jobs = cron_jobs(&daemon).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job = jobs[0].clone();
    assert_eq!(job["timezone"], zone, "{job}");
    let next = job["nextRuns"][0]["at"].as_str().unwrap();
    let shown = format!(
        "{} {}",
        next[..16].replace('T', " "),
        zone.as_str().unwrap()
    );
    let row = "document.querySelector('button.run-now[data-job=tick]').closest('tr').textContent";
    let text = browser.eval(row).await;
    let text = text.as_str().unwrap();
    assert!(
        text.contains(&shown) && text.contains("*/5 * * * *") && text.contains("enabled"),
        "{shown} in: {text}"
    );

    // Run now: the run in the job's history, with its output.
    browser.click("button.run-now[data-job=tick]").await;
    browser
        .wait_for(
            &format!(
                "document.querySelector('#cron-history a.run-link') && {}",
                output_shows("succeeded", "0", "tick-ran")
            ),
            "the job's run in its history with its output",
        )
        .await;
    let job_id = job["id"].as_str().unwrap();
    let history = daemon
        .api(
            "GET",
            &format!("/api/projects/shop/cron-jobs/{job_id}/runs"),
            None,
        )
        .await
        .json();
    let ran = history["runs"][0].clone();
    assert_eq!(ran["trigger"], "cron", "{history}");
    assert_eq!(ran["state"], "succeeded", "{history}");
    assert_eq!(
        browser
            .eval("document.querySelector('#cron-history a.run-link').dataset.id")
            .await,
        ran["id"],
        "the history lists the run"
    );
    // The output shows under the history it was chosen from.
    assert_eq!(
        browser
            .eval("document.querySelector('#cron-history + #run-output') !== null")
            .await,
        json!(true)
    );
    shoot(&mut browser, "jobs-cron").await;

    // Disable: the page says so, and the API too.
    browser.click("button.toggle[data-job=tick]").await;
    browser
        .wait_for(
            "document.querySelector('button.toggle[data-job=tick]')?.textContent === 'Enable' \
             && document.querySelector('button.toggle[data-job=tick]').closest('tr').querySelector('.cron-enabled').textContent === 'disabled'",
            "the job shown disabled",
        )
        .await;
    let job = cron_jobs(&daemon).await[0].clone();
    assert_eq!(job["enabled"], false, "{job}");
    assert_eq!(job["nextRuns"], json!([]), "{job}");
    let text = browser.eval(row).await;
    assert!(
        text.as_str().unwrap().contains("not while disabled"),
        "{text}"
    );
    assert_labeled(&mut browser, "the Jobs tab with a run and a job").await;
    browser.eval("window.scrollTo(0, 0)").await;
    shoot(&mut browser, "jobs-runs-table").await;
    browser
        .eval("document.querySelector('#cron-jobs').scrollIntoView()")
        .await;
    shoot(&mut browser, "jobs-cron-table").await;

    // The deployment's steps list the release step between build and deploy, like the others
    // (this app has no release command: skipped).
    browser
        .open(
            &format!("{origin}/#/projects/shop/deployments"),
            "#steps span",
            "the deployment's steps",
        )
        .await;
    let steps = browser
        .eval("[...document.querySelectorAll('#steps > span')].map((s) => s.textContent)")
        .await;
    let steps: Vec<&str> = steps
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let at = |name: &str| {
        steps
            .iter()
            .position(|s| s.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("no {name} step in {steps:?}"))
    };
    assert!(
        at("build") < at("release") && at("release") < at("deploy"),
        "{steps:?}"
    );
    assert!(steps[at("release")].starts_with("skipped"), "{steps:?}");

    let errors: Vec<&String> = browser
        .errors
        .iter()
        .filter(|e| !e.contains("400"))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}
