//! Add-on services in the dashboard (issue 34), in a real browser against the real daemon and
//! a real Redis server: a project's Add-ons tab shows the API's refusal in its words, creates
//! a Redis add-on from its form and lists it `running`; its page backs it up ("Back up now"),
//! following the backup until it is `ok` with the counts its proof found, links and unlinks
//! another project, reads the credentials only when asked (the audit log says so), works at
//! 390 px without sideways scrolling, and deletes the add-on once its id is typed. Each step
//! is checked against the API. The daemon runs in namespaces mode where the machine allows
//! it, else in mode none (where add-ons listen on 127.0.0.1; Redis works there, PostgreSQL
//! would refuse to run as root, which is why the test uses Redis).

use serde_json::{json, Value};

use crate::dashboard::shoot;
use crate::dashboard_forms::assert_labeled;
use crate::sandboxed::{namespaces_unavailable, Sandboxed};
use crate::support::browser::Browser;
use crate::support::{missing_tool, DaemonOptions, TestDaemon};

/// What the page shows as a refusal: the flash line and any error next to a form.
const SHOWN_ERRORS: &str =
    "[...document.querySelectorAll('#flash, .form-error')].map((e) => e.textContent).join(' ')";

/// A JS string literal of `text`.
fn js(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// The daemon: namespaced when the machine allows it (kept alive with its sandbox names).
enum Daemon {
    Namespaces(Sandboxed),
    None(TestDaemon),
}

impl Daemon {
    fn start(test: &str) -> Daemon {
        match namespaces_unavailable() {
            None => Daemon::Namespaces(Sandboxed::start(test, "").expect("namespaces available")),
            Some(reason) => {
                eprintln!("{test}: sandbox mode none ({reason}); the add-on listens on 127.0.0.1");
                Daemon::None(TestDaemon::start_with(DaemonOptions::default().extra_toml(
                    "[rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n",
                )))
            }
        }
    }

    fn daemon(&self) -> &TestDaemon {
        match self {
            Daemon::Namespaces(sandboxed) => &sandboxed.daemon,
            Daemon::None(daemon) => daemon,
        }
    }
}

async fn get(daemon: &TestDaemon, path: &str) -> Value {
    let response = daemon.api("GET", path, None).await;
    assert_eq!(response.status, 200, "{path}: {}", response.text());
    response.json()
}

/// How many times the add-on's credentials were read, as the audit log says.
async fn credential_reads(daemon: &TestDaemon, addon: &str) -> usize {
    let audit = get(daemon, "/api/audit?limit=200").await;
    audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["route"] == "/api/addons/{addonId}/credentials" && e["target"].as_str() == Some(addon)
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_addons_tab_creates_backs_up_links_and_deletes_a_redis_addon() {
    let test = "the_addons_tab_creates_backs_up_links_and_deletes_a_redis_addon";
    if !std::path::Path::new("/usr/bin/redis-server").exists() {
        eprintln!("SKIP {test}: /usr/bin/redis-server is not installed (redis-server)");
        return;
    }
    if missing_tool("redis-cli", "the test writes keys with redis-cli") {
        return;
    }
    let mut browser = match Browser::start().await {
        Ok(browser) => browser,
        Err(reason) => {
            eprintln!("SKIP: {test}: {reason}");
            return;
        }
    };
    let started = Daemon::start(test);
    let daemon = started.daemon();
    let origin = format!("http://slipway.localhost:{}", daemon.http.port());
    for slug in ["shop", "blog"] {
        let created = daemon
            .api("POST", "/api/projects", Some(json!({"slug": slug})))
            .await;
        assert_eq!(created.status, 201, "{}", created.text());
    }
    let blog_id = get(daemon, "/api/projects/blog").await["id"]
        .as_str()
        .unwrap()
        .to_owned();

    browser
        .open(&format!("{origin}/"), "#token", "the sign-in form")
        .await;
    browser.sign_in(&daemon.token, "the project list").await;
    browser
        .open(
            &format!("{origin}/#/projects/shop/addons"),
            "#addon-kind",
            "the Add-ons tab",
        )
        .await;
    assert_labeled(&mut browser, "the Add-ons tab").await;

    // A refusal shows the API's own words.
    let refusal = daemon
        .api(
            "POST",
            "/api/projects/shop/addons",
            Some(json!({"kind": "redis", "envName": "PORT"})),
        )
        .await;
    assert!(refusal.status >= 400, "{}", refusal.text());
    let message = refusal.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    browser.fill("#addon-kind", "redis").await;
    browser.fill("#addon-env", "PORT").await;
    browser.click("#addon-create").await;
    browser
        .wait_for(
            &format!("{SHOWN_ERRORS}.includes({})", js(&message)),
            "the API's refusal of the variable name",
        )
        .await;
    assert_eq!(
        get(daemon, "/api/projects/shop/addons").await["addons"],
        json!([])
    );

    // Created from the form: listed running, as the API says.
    browser.fill("#addon-env", "").await;
    browser.fill("#addon-memory", "128").await;
    browser.fill("#addon-disk", "128").await;
    browser.click("#addon-create").await;
    browser
        .wait_for(
            "document.querySelector('a.addon-link')?.closest('tr')?.querySelector('.addon-state')?.textContent.startsWith('running')",
            "the new add-on listed running",
        )
        .await;
    let listed = get(daemon, "/api/projects/shop/addons").await["addons"].clone();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let addon = listed[0].clone();
    assert_eq!(
        (&addon["kind"], &addon["state"], &addon["mode"]),
        (&json!("redis"), &json!("running"), &json!("persistent")),
        "{addon}"
    );
    assert_eq!(
        (&addon["memoryMb"], &addon["diskMb"], &addon["envName"]),
        (&json!(128), &json!(128), &json!("REDIS_URL")),
        "{addon}"
    );
    let id = addon["id"].as_str().unwrap().to_owned();
    let row = browser
        .eval("document.querySelector('a.addon-link').closest('tr').textContent")
        .await;
    let row = row.as_str().unwrap();
    for shown in [
        id.as_str(),
        "Redis",
        addon["version"].as_str().unwrap(),
        "128 MiB",
        "of 128 MiB",
        "REDIS_URL",
        "shop",
    ] {
        assert!(row.contains(shown), "{shown} in the row: {row}");
    }
    shoot(&mut browser, "addons-list").await;

    // Its page: the credentials are not read on the way in.
    browser.click("a.addon-link").await;
    browser
        .wait_for(
            "document.querySelector('#addon-state')?.textContent.startsWith('running') && document.querySelector('#backup-now')",
            "the add-on's page",
        )
        .await;
    assert_labeled(&mut browser, "the add-on's page").await;
    assert_eq!(credential_reads(daemon, &id).await, 0, "read on page load");

    // A few keys, so the backup's proof has something to count.
    let credentials = get(daemon, &format!("/api/addons/{id}/credentials")).await;
    let url = credentials["url"].as_str().unwrap().to_owned();
    for key in ["a", "b", "c"] {
        let set = std::process::Command::new("redis-cli")
            .args(["-u", &url, "--no-auth-warning", "SET", key, "1"])
            .output()
            .unwrap();
        if !set.status.success() || !String::from_utf8_lossy(&set.stdout).contains("OK") {
            eprintln!(
                "{test}: cannot write to the add-on from the host ({}); its backup counts no keys",
                String::from_utf8_lossy(&set.stderr).trim()
            );
            break;
        }
    }

    // Back up now: followed until ok, with the counts its proof found.
    browser.click("#backup-now").await;
    browser
        .wait_for(
            "document.querySelector('#backup-list .backup-state')",
            "the backup listed",
        )
        .await;
    browser
        .wait_for(
            "document.querySelector('#backup-list .backup-state .badge')?.textContent === 'ok' \
             && document.querySelector('#backup-status')?.textContent.includes('is ok')",
            "the backup proven ok",
        )
        .await;
    let backups = get(daemon, &format!("/api/addons/{id}/backups")).await["backups"].clone();
    let backup = backups[0].clone();
    assert_eq!(backup["state"], "ok", "{backup}");
    assert!(backup["verifiedAt"].is_string(), "{backup}");
    let tables = backup["check"]["tables"].as_object().unwrap().clone();
    let total: u64 = tables.values().map(|n| n.as_u64().unwrap()).sum();
    let summary = format!("{total} key(s) in {} database(s)", tables.len());
    assert_eq!(
        browser.text("#backup-list details.counts summary").await,
        summary
    );
    browser.click("#backup-list details.counts summary").await;
    let listed = browser
        .eval("[...document.querySelectorAll('#backup-list details.counts li')].map((li) => li.textContent)")
        .await;
    let expected: Vec<String> = tables.iter().map(|(db, n)| format!("{db}: {n}")).collect();
    assert_eq!(listed, json!(expected));
    browser
        .eval("document.querySelector('#backups-title').scrollIntoView()")
        .await;
    shoot(&mut browser, "addon-backups").await;

    // Link another project by its name, then unlink it.
    browser.fill("#link-project", "blog").await;
    browser.click("#link-add").await;
    browser
        .wait_for(
            "document.querySelector('button.unlink[data-project=blog]')",
            "blog linked",
        )
        .await;
    let links = get(daemon, &format!("/api/addons/{id}")).await["links"].clone();
    assert!(
        links.as_array().unwrap().contains(&json!(blog_id)),
        "{links}"
    );
    browser.click("button.unlink[data-project=blog]").await;
    browser
        .wait_for(
            "!document.querySelector('button.unlink[data-project=blog]') && document.querySelector('button.unlink[data-project=shop]')",
            "blog unlinked",
        )
        .await;
    let links = get(daemon, &format!("/api/addons/{id}")).await["links"].clone();
    assert!(
        !links.as_array().unwrap().contains(&json!(blog_id)),
        "{links}"
    );

    // The credentials, only when asked for.
    let before = credential_reads(daemon, &id).await;
    browser.click("#credentials-show").await;
    browser
        .wait_for(
            "document.querySelector('#credentials-url')",
            "the credentials",
        )
        .await;
    assert_eq!(browser.text("#credentials-url").await, url);
    assert_eq!(credential_reads(daemon, &id).await, before + 1);

    // A phone's width: nothing scrolls sideways.
    browser.resize(390, 844).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let wide = browser
        .eval("document.documentElement.scrollWidth")
        .await
        .as_u64()
        .unwrap();
    assert!(wide <= 390, "the add-on's page is {wide} px wide at 390 px");
    browser.resize(1280, 860).await;
    shoot(&mut browser, "addon-page").await;

    // A larger disk, saved from the page: the API has it, the page shows it.
    browser.fill("#addon-change-disk", "192").await;
    browser.click("#addon-save").await;
    browser
        .wait_for(
            "document.querySelector('#addon-disk-used')?.textContent.includes('of 192 MiB')",
            "the grown disk on the page",
        )
        .await;
    let grown = daemon.api("GET", &format!("/api/addons/{id}"), None).await;
    assert_eq!(grown.json()["diskMb"], 192, "{}", grown.text());

    // Delete, once its id is typed.
    assert_eq!(
        browser
            .eval("document.querySelector('#addon-delete').disabled")
            .await,
        json!(true),
        "delete waits for the id"
    );
    browser.fill("#addon-delete-confirm", &id).await;
    browser.click("#addon-delete").await;
    browser
        .wait_for(
            "location.hash.endsWith('/addons') && document.querySelector('#addon-list')?.textContent.includes('Nothing yet.')",
            "the add-on gone from the list",
        )
        .await;
    let gone = daemon.api("GET", &format!("/api/addons/{id}"), None).await;
    assert_eq!(gone.status, 404, "{}", gone.text());

    let errors: Vec<&String> = browser
        .errors
        .iter()
        .filter(|e| !e.contains("400"))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}
