//! Process types in the dashboard (issue 32), in a real browser: a project's Processes tab
//! lists the live deployment's types (`web` and the Procfile's `worker`) with their
//! instances, its form scales one type through `PATCH …/formation`, and a refusal (more
//! instances than allowed, more memory than the machine has) shows the API's own message.

use serde_json::{json, Value};

use crate::dashboard::shoot;
use crate::dashboard_forms::assert_labeled;
use crate::support::browser;
use crate::support::{missing_tool, TestDaemon};

const SERVER: &str =
    "require('http').createServer((req, res) => res.end('web')).listen(process.env.PORT);\n";
const WORKER: &str = "setInterval(() => {}, 1000);\n";
const PROCFILE: &str = "web: node server.js\nworker: node worker.js\n";

/// What the page shows as a refusal: the flash line and any error next to a form.
const SHOWN_ERRORS: &str =
    "[...document.querySelectorAll('#flash, .form-error')].map((e) => e.textContent).join(' ')";

async fn formation(daemon: &TestDaemon) -> Value {
    let response = daemon
        .api("GET", "/api/projects/shop/formation", None)
        .await;
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()
}

/// A type's instances as (name, pid, start time): the same only while none was restarted.
fn instances(formation: &Value, process: &str) -> Vec<(Value, Value, Value)> {
    formation["types"][process]["running"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["instance"].clone(),
                i["pid"].clone(),
                i["startedAt"].clone(),
            )
        })
        .collect()
}

/// How many of a type's instances the API lists as running.
fn running(formation: &Value, process: &str) -> usize {
    formation["types"][process]["running"]
        .as_array()
        .map(|running| running.iter().filter(|i| i["state"] == "running").count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_processes_tab_lists_types_and_scales_them() {
    if missing_tool("node", "the app is a node server with a worker") {
        return;
    }
    let Some((mut browser, daemon, origin)) =
        browser::dashboard("dashboard formation browser test").await
    else {
        return;
    };
    daemon
        .deploy(
            "shop",
            &[
                ("server.js", SERVER, 0o644),
                ("worker.js", WORKER, 0o644),
                ("Procfile", PROCFILE, 0o644),
            ],
            json!({"startCommand": "node server.js"}),
        )
        .await;

    browser
        .open(&format!("{origin}/"), "#token", "the sign-in form")
        .await;
    browser.sign_in(&daemon.token, "the project list").await;
    let tab = format!("{origin}/#/projects/shop/processes");
    browser
        .open(&tab, "#process-worker", "the Processes tab")
        .await;
    assert_labeled(&mut browser, "the Processes tab").await;

    // Both types, one instance each, with their commands.
    for (process, command) in [("web", "node server.js"), ("worker", "node worker.js")] {
        let section = format!("#process-{process}");
        let text = browser.text(&section).await;
        assert!(
            text.contains(command) && text.contains(&format!("{process}.1")),
            "{process}: {text}"
        );
        assert_eq!(
            browser.text(&format!("{section} .instances")).await,
            "1 asked, 1 running"
        );
        assert_eq!(
            browser
                .eval(&format!(
                    "document.querySelector('#instances-{process}').value"
                ))
                .await,
            json!("1")
        );
    }
    shoot(&mut browser, "processes").await;

    // Scaling the worker to 2 through the form: the API then runs two worker instances.
    let web_before = instances(&formation(&daemon).await, "web");
    browser.fill("#instances-worker", "2").await;
    browser.click("#scale-worker").await;
    browser
        .wait_for(
            "document.querySelector('#process-worker .instances')?.textContent === '2 asked, 2 running'",
            "the worker shown with two instances",
        )
        .await;
    let scaled = formation(&daemon).await;
    assert_eq!(scaled["types"]["worker"]["instances"], 2, "{scaled}");
    assert_eq!(
        scaled["types"]["worker"]["running"]
            .as_array()
            .map(Vec::len),
        Some(2),
        "{scaled}"
    );
    assert_eq!(
        instances(&scaled, "web"),
        web_before,
        "scaling the worker touched web"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while running(&formation(&daemon).await, "worker") < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "two worker instances never ran: {}",
            formation(&daemon).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }

    // More instances than the API allows: the page shows the API's message, nothing changes.
    let refusal = daemon
        .api(
            "PATCH",
            "/api/projects/shop/formation",
            Some(json!({"web": {"instances": 33}})),
        )
        .await;
    refusal.assert_error(400, "INVALID_BODY");
    let message = refusal.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    browser.fill("#instances-web", "33").await;
    browser.click("#scale-web").await;
    browser
        .wait_for(
            &format!(
                "{SHOWN_ERRORS}.includes({})",
                serde_json::to_string(&format!("INVALID_BODY: {message}")).unwrap()
            ),
            "the API's refusal of 33 instances",
        )
        .await;
    assert_eq!(
        browser
            .eval("document.querySelector('#process-web form .form-error') !== null")
            .await,
        json!(true),
        "the refusal is shown next to the form it answers"
    );

    // More memory than the machine has: the API's conflict, with what is asked and free.
    browser.fill("#instances-web", "32").await;
    browser.fill("#memory-web", "262144").await;
    browser.click("#scale-web").await;
    browser
        .wait_for(
            &format!("{SHOWN_ERRORS}.includes('CONFLICT: not enough memory') && {SHOWN_ERRORS}.includes('MiB is free')"),
            "the API's refusal of the memory",
        )
        .await;
    let after = formation(&daemon).await;
    assert_eq!(after["types"]["web"]["instances"], 1, "{after}");
    assert_eq!(instances(&after, "web"), web_before, "{after}");

    let errors: Vec<&String> = browser
        .errors
        .iter()
        .filter(|e| !e.contains("400") && !e.contains("409"))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_with_nothing_running_says_so() {
    let Some((mut browser, daemon, origin)) =
        browser::dashboard("dashboard formation browser test").await
    else {
        return;
    };
    let created = daemon
        .api("POST", "/api/projects", Some(json!({"slug": "shop"})))
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    browser
        .open(&format!("{origin}/"), "#token", "the sign-in form")
        .await;
    browser.sign_in(&daemon.token, "the project list").await;
    browser
        .open(
            &format!("{origin}/#/projects/shop/processes"),
            "#processes-none",
            "the Processes tab of a project with nothing live",
        )
        .await;
    let text = browser.text("main").await;
    assert!(
        text.contains("no live server deployment") && !text.contains("null"),
        "{text}"
    );
    assert!(
        browser.errors.is_empty(),
        "console errors: {:#?}",
        browser.errors
    );
}
