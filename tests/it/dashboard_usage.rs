//! Usage charts in a real browser (issue 37): after traffic sent through the router (and a
//! daemon restart, which writes the minute under way to the history), the projects list shows
//! each project's last hour at a glance, and the project's Usage tab draws requests, errors,
//! latency, memory and CPU whose data (the charts' tables, the lines' point counts) is the
//! API's history for the same range. A running deployment shows a progress bar with its ETA.

use std::time::Duration;

use serde_json::{json, Value};

use crate::dashboard::shoot;
use crate::support::browser;
use crate::support::browser::Browser;
use crate::support::{missing_tool, registry_reachable};

/// axe-core, pinned, from the npm registry (`npm pack`).
const AXE: &str = "axe-core@4.10.2";

/// axe-core's script, fetched once per test run; `None` (after a SKIP line) without npm or
/// the registry.
fn axe_source() -> Option<&'static str> {
    static SOURCE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    SOURCE
        .get_or_init(|| {
            if missing_tool("npm", "axe-core comes from the npm registry")
                || !registry_reachable("registry.npmjs.org")
            {
                return None;
            }
            let dir = tempfile::tempdir().unwrap();
            let packed = std::process::Command::new("npm")
                .args(["pack", AXE, "--silent"])
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(packed.status.success(), "npm pack {AXE}: {packed:?}");
            let name = String::from_utf8(packed.stdout).unwrap().trim().to_owned();
            let unpacked = std::process::Command::new("tar")
                .args(["xzf", &name, "package/axe.min.js"])
                .current_dir(dir.path())
                .status()
                .unwrap();
            assert!(unpacked.success());
            Some(std::fs::read_to_string(dir.path().join("package/axe.min.js")).unwrap())
        })
        .as_deref()
}

/// axe-core's serious and critical violations on the page as it is now, each as
/// `page: rule (impact): elements`; added to `found` (the test expects none at its end).
pub(crate) async fn axe_check(browser: &mut Browser, page: &str, found: &mut Vec<String>) {
    let Some(source) = axe_source() else {
        return;
    };
    if browser.eval("typeof axe").await != "object" {
        browser.eval(&format!("{source};true")).await;
    }
    let violations = browser
        .eval(
            "axe.run(document, { resultTypes: ['violations'] }).then((r) => r.violations
               .filter((v) => v.impact === 'serious' || v.impact === 'critical')
               .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`))",
        )
        .await;
    for violation in violations.as_array().unwrap() {
        found.push(format!("{page}: {}", violation.as_str().unwrap()));
    }
}

/// Signs in on the daemon's dashboard (its origin has the daemon's current port); the origin.
async fn sign_in_on(browser: &mut Browser, daemon: &crate::support::TestDaemon) -> String {
    let origin = format!("http://slipway.localhost:{}", daemon.http.port());
    let page = format!("{origin}/");
    browser.open(&page, "#token", "the sign-in form").await;
    browser.sign_in(&daemon.token, "the project list").await;
    origin
}

/// A chart's table (opened: its rows are made then) as [time, value…] rows, the values as
/// the page wrote them.
fn table_of(chart: &str) -> String {
    format!(
        "(async () => {{
           document.querySelector('#{chart} details').open = true;
           await new Promise((resolve) => setTimeout(resolve, 100));
           return [...document.querySelectorAll('#{chart} tbody tr')].filter((r) => r.querySelector('time')).map((r) =>
             [r.querySelector('time').getAttribute('datetime'), ...[...r.querySelectorAll('td[data-value]')].map((td) => td.dataset.value)]);
         }})()"
    )
}

/// Rows of [time, numbers…] as (time, values) with every number an f64 (JavaScript writes
/// 16 where serde wrote 16.0); an empty cell or a null is `None`.
fn rows(table: &Value) -> Vec<(String, Vec<Option<f64>>)> {
    table
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let row = row.as_array().unwrap();
            let values = row[1..]
                .iter()
                .map(|v| match v {
                    Value::String(text) if text.is_empty() => None,
                    Value::String(text) => Some(text.parse().unwrap()),
                    other => other.as_f64(),
                })
                .collect();
            (row[0].as_str().unwrap().to_owned(), values)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charts_draw_the_apis_history() {
    let Some((mut browser, mut daemon, _)) =
        browser::dashboard("dashboard usage browser test").await
    else {
        return;
    };
    if !crate::usage_history::deploy_web(&daemon, "sleep 1").await {
        return;
    }
    let mut violations = Vec::new();

    // A slower build: its progress bar with the ETA, live.
    let origin = sign_in_on(&mut browser, &daemon).await;
    let started = daemon
        .provision(
            "web",
            json!({"startCommand": "node server.js", "buildCommand": "sleep 5"}),
        )
        .await;
    let deployment = started["deploymentId"].as_str().unwrap();
    browser
        .open(
            &format!("{origin}/#/projects/web/deployments/{deployment}"),
            "#deploy-progress",
            "the progress bar",
        )
        .await;
    browser
        .wait_for(
            "document.querySelector('#progress-words')?.textContent.includes('left')",
            "the ETA while it runs",
        )
        .await;
    let bar = browser
        .eval("(() => { const p = document.querySelector('#deploy-progress'); return [p.value, p.getAttribute('aria-valuetext')]; })()")
        .await;
    assert!(bar[0].as_f64().unwrap() < 100.0, "{bar}");
    shoot(&mut browser, "deployment-progress").await;
    axe_check(&mut browser, "a deployment in progress", &mut violations).await;
    browser
        .wait_for(
            "document.querySelector('#deploy-progress')?.value === 100",
            "the bar full when the run is complete",
        )
        .await;
    daemon
        .wait_complete(&started, Duration::from_secs(60))
        .await;

    // Traffic through the router: 12 answers, 3 of them errors.
    for path in [
        "/", "/", "/", "/", "/", "/", "/", "/", "/", "/boom", "/boom", "/boom",
    ] {
        daemon.app_get("web", path, &[]).await;
    }
    // For the README's screenshots (`SLIPWAY_SCREENSHOT_MINUTES=8`): minutes of varied
    // traffic first, so the charts have lines to draw.
    let minutes: u64 = std::env::var("SLIPWAY_SCREENSHOT_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    let mut extra = (0, 0);
    for second in 0..minutes * 60 {
        let burst = 1 + (second / 20) % 7;
        for i in 0..burst {
            let path = if (second + i) % 23 == 0 { "/boom" } else { "/" };
            let status = daemon.app_get("web", path, &[]).await.status;
            extra.0 += 1;
            extra.1 += u64::from(status == 500);
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
    daemon.restart();
    // A new daemon listens on a new port: a new origin to sign in on.
    let origin = sign_in_on(&mut browser, &daemon).await;

    // The projects list: the last hour at a glance, as the API says.
    browser
        .open(
            &format!("{origin}/#/projects"),
            ".glance",
            "the projects' last hour",
        )
        .await;
    let glance = browser
        .eval("(() => { const g = document.querySelector('.glance'); return [Number(g.dataset.requests), Number(g.dataset.errors), g.querySelector('svg').getAttribute('aria-label')]; })()")
        .await;
    assert_eq!(glance[0], 12 + extra.0, "{glance}");
    assert_eq!(glance[1], 3 + extra.1, "{glance}");
    let words = format!("{} requests, {} errors", 12 + extra.0, 3 + extra.1);
    assert!(glance[2].as_str().unwrap().contains(&words), "{glance}");
    browser
        .wait_for(
            "document.querySelector('#chart-machine-memory')",
            "the machine's charts (admin)",
        )
        .await;
    shoot(&mut browser, "projects-overview").await;
    axe_check(&mut browser, "the projects list", &mut violations).await;

    // The Usage tab: every chart's data is the API's history for the range it asked.
    browser
        .open(
            &format!("{origin}/#/projects/web/usage"),
            "#chart-requests",
            "the usage charts",
        )
        .await;
    let query = browser
        .eval("document.querySelector('#usage-charts').dataset.query")
        .await;
    let history = daemon
        .api(
            "GET",
            &format!(
                "/api/projects/web/usage/history?{}",
                query.as_str().unwrap()
            ),
            None,
        )
        .await
        .json();
    let points = history["points"].as_array().unwrap();
    assert!(!points.is_empty(), "{history}");
    let expect = |fields: &[&dyn Fn(&Value) -> Value]| {
        rows(&Value::Array(
            points
                .iter()
                .map(|p| {
                    let mut row = vec![Value::String(p["at"].as_str().unwrap().to_owned())];
                    row.extend(fields.iter().map(|f| f(p)));
                    Value::Array(row)
                })
                .collect(),
        ))
    };
    let requests = expect(&[&|p| p["requestsTotal"].clone(), &|p| {
        p["requests"]["5xx"].clone()
    }]);
    assert_eq!(
        rows(&browser.eval(&table_of("chart-requests")).await),
        requests
    );
    let latency = expect(&[&|p| p["latencyP50Ms"].clone(), &|p| {
        p["latencyP95Ms"].clone()
    }]);
    assert_eq!(
        rows(&browser.eval(&table_of("chart-latency")).await),
        latency
    );
    let memory = expect(&[&|p| p["memoryBytes"].clone()]);
    assert_eq!(rows(&browser.eval(&table_of("chart-memory")).await), memory);
    let cpu = expect(&[&|p| p["cpuCores"].clone()]);
    assert_eq!(rows(&browser.eval(&table_of("chart-cpu")).await), cpu);
    let total: u64 = points
        .iter()
        .map(|p| p["requestsTotal"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 12 + extra.0);
    let drawn = browser
        .eval("Number(document.querySelector('#chart-requests path.requests').dataset.points)")
        .await;
    assert_eq!(drawn, points.len(), "one point of the line per sample");
    let summary = browser.text("#chart-requests-summary").await;
    assert!(summary.contains("Requests: highest"), "{summary}");

    // Other ranges ask for what they show.
    browser.click("button[data-range=week]").await;
    browser
        .wait_for(
            "document.querySelector('#usage-charts').dataset.query.startsWith('step=hour')",
            "the week's hours",
        )
        .await;
    browser.click("button[data-range=hour]").await;
    browser
        .wait_for(
            "document.querySelector('#usage-charts').dataset.query.startsWith('step=minute')",
            "the hour's minutes",
        )
        .await;
    shoot(&mut browser, "usage").await;
    browser
        .eval("document.querySelectorAll('#usage-charts details').forEach((d) => d.open = true)")
        .await;
    axe_check(
        &mut browser,
        "the usage tab, its tables open",
        &mut violations,
    )
    .await;

    // Every other page, for axe-core.
    for (hash, what) in [
        ("#/new", "the new-project form"),
        ("#/tokens", "the tokens page"),
        ("#/notifications", "the notifications page"),
        ("#/audit", "the audit log"),
        ("#/projects/web/deployments", "the deployments tab"),
        ("#/projects/web/processes", "the processes tab"),
        ("#/projects/web/jobs", "the jobs tab"),
        ("#/projects/web/addons", "the add-ons tab"),
        ("#/projects/web/env", "the environment tab"),
        ("#/projects/web/domains", "the domains tab"),
        ("#/projects/web/git", "the git tab"),
        ("#/projects/web/previews", "the previews tab"),
    ] {
        browser
            .open(&format!("{origin}/{hash}"), "main .card", what)
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        axe_check(&mut browser, what, &mut violations).await;
    }
    // Signed out, then a new load of the page (by DevTools, which answers once the new
    // document is there: a reload inside an evaluation could lose its answer, and a wait
    // could see the old document's sign-in form just before the reload replaced it).
    browser.eval("sessionStorage.clear(); true").await;
    browser
        .open(&format!("{origin}/"), "#token", "the sign-in form")
        .await;
    axe_check(&mut browser, "the sign-in form", &mut violations).await;
    assert!(browser.errors.is_empty(), "{:?}", browser.errors);
    assert_eq!(
        violations,
        Vec::<String>::new(),
        "axe-core ({AXE}): serious or critical violations"
    );
}
