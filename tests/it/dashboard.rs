//! The dashboard in a real browser (Debian's headless Chromium over the DevTools protocol):
//! sign in, create a project from an upload, watch its logs arrive live, set an env var, add a
//! domain, redeploy and roll back, create a read-only token and see a write refused. No
//! console errors or CSP refusals on the way. With `SLIPWAY_SCREENSHOTS=<dir>` every page is
//! saved at 1280 px and 390 px (how `docs/screenshots/` is made).

use std::time::Duration;

use crate::support::browser::{self, Browser};
use crate::support::targz;

/// Screenshots at 1280 px and 390 px, saved under `SLIPWAY_SCREENSHOTS` when it is set.
pub(crate) async fn shoot(browser: &mut Browser, name: &str) {
    let dir = std::env::var_os("SLIPWAY_SCREENSHOTS");
    for (width, height) in [(1280, 860), (390, 844)] {
        browser.resize(width, height).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
        let png = browser.screenshot().await;
        assert!(png.starts_with(b"\x89PNG"), "{name} at {width}px");
        if let Some(dir) = &dir {
            let path = std::path::Path::new(dir).join(format!("{name}-{width}.png"));
            std::fs::write(path, png).unwrap();
        }
    }
    browser.resize(1280, 860).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_runs_a_site_from_the_dashboard() {
    let Some((mut browser, daemon, base)) = browser::dashboard("dashboard browser test").await
    else {
        return;
    };

    // The page's own headers: strict CSP, no framing.
    let page = daemon
        .request("GET", "slipway.localhost", "/", &[], Vec::new())
        .await;
    let csp = page.header("content-security-policy").unwrap().to_owned();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.header("x-frame-options"), Some("DENY"));

    // Sign in.
    browser.navigate(&format!("{base}/")).await;
    browser
        .wait_for("document.querySelector('#token')", "the sign-in form")
        .await;
    shoot(&mut browser, "sign-in").await;
    browser.fill("#token", "slw_wrong").await;
    browser.click("form button[type=submit]").await;
    browser
        .wait_for(
            "document.querySelector('#flash').textContent.includes('UNAUTHORIZED')",
            "the API's refusal",
        )
        .await;
    browser.sign_in(&daemon.token, "the project list").await;
    assert!(
        !browser
            .eval("location.href")
            .await
            .as_str()
            .unwrap()
            .contains("slw_"),
        "the token is never in a URL"
    );

    // A new project from an upload; its build logs a line every 0.4 s.
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("site.tar.gz");
    std::fs::write(
        &archive,
        targz(&[("index.html", "<h1>from the dashboard</h1>", 0o644)]),
    )
    .unwrap();
    browser.navigate(&format!("{base}/#/new")).await;
    browser
        .wait_for(
            "document.querySelector('#new-slug')",
            "the new-project form",
        )
        .await;
    browser.fill("#new-slug", "web").await;
    browser.set_file("#new-archive", &archive).await;
    browser
        .fill("#new-build", "for i in 1 2 3 4 5 6; do echo step $i; sleep 0.4; done; mkdir -p dist && cp index.html dist/")
        .await;
    shoot(&mut browser, "new-project").await;
    browser.click("#new-submit").await;
    let logs = "document.querySelector('#logs')?.textContent || ''";
    browser
        .wait_for(
            &format!("{logs}.includes('step 1') && !{logs}.includes('step 6')"),
            "the first lines while the build runs",
        )
        .await;
    browser
        .wait_for(&format!("{logs}.includes('step 6')"), "the last line")
        .await;
    browser
        .wait_for(
            "document.querySelector('#log-state')?.textContent === 'finished'",
            "the end of the stream",
        )
        .await;
    browser
        .wait_for(
            "document.querySelector('.badge.live')",
            "the deployment live",
        )
        .await;
    shoot(&mut browser, "deployments").await;
    let served = daemon.app_get("web", "/", &[]).await;
    assert!(served.text().contains("from the dashboard"));

    // An env var.
    browser
        .navigate(&format!("{base}/#/projects/web/env"))
        .await;
    browser
        .wait_for("document.querySelector('#env-input')", "the env form")
        .await;
    browser.fill("#env-input", "GREETING=hello there").await;
    browser.click("#env-save").await;
    browser
        .wait_for(
            "document.body.innerText.includes('GREETING')",
            "the variable listed",
        )
        .await;
    assert!(
        !browser
            .eval("document.body.innerText")
            .await
            .as_str()
            .unwrap()
            .contains("hello there"),
        "values hidden until revealed"
    );
    shoot(&mut browser, "env").await;
    let vars = daemon
        .api("GET", "/api/projects/web/env-vars", None)
        .await
        .json();
    assert_eq!(vars["envVars"]["GREETING"], "hello there");

    // A domain.
    browser
        .navigate(&format!("{base}/#/projects/web/domains"))
        .await;
    browser
        .wait_for("document.querySelector('#domain-name')", "the domain form")
        .await;
    browser.fill("#domain-name", "www.example.com").await;
    browser.click("#domain-add").await;
    browser
        .wait_for(
            "document.body.innerText.includes('www.example.com')",
            "the domain listed",
        )
        .await;
    shoot(&mut browser, "domains").await;

    // Redeploy, then roll back to the first deployment.
    browser
        .navigate(&format!("{base}/#/projects/web/deployments"))
        .await;
    browser
        .wait_for(
            "document.querySelector('#redeploy')",
            "the deployments page",
        )
        .await;
    let first =
        daemon.api("GET", "/api/projects/web", None).await.json()["liveDeploymentId"].clone();
    browser.click("#redeploy").await;
    // The previous deployment's panel says 'finished' too: first wait for the new one's.
    let first_id = first.as_str().unwrap_or_default();
    let redeploy_shown =
        format!("location.hash.includes('/deployments/') && !location.hash.endsWith('{first_id}')");
    for (condition, what) in [
        (redeploy_shown.as_str(), "the redeploy's panel"),
        (
            "document.querySelector('#log-state')?.textContent === 'finished'",
            "the redeploy",
        ),
        (
            "document.querySelector('button.rollback')",
            "a deployment to roll back to",
        ),
    ] {
        if let Err(message) = browser.try_wait_for(condition, what).await {
            let deployments = daemon
                .api("GET", "/api/projects/web/deployments", None)
                .await;
            let log = daemon.log_text();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            panic!(
                "{message}\n\nthe API's deployments: {}\n\nthe daemon's last log lines:\n{}",
                deployments.text(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
    // A finished run's page stays put: its log stream (which replays and ends at once) is
    // opened once, not again and again.
    let streams = || daemon.log_text().matches("route=LogStream").count();
    // The page showing the run as finished may still be the one that watched it end and
    // reloads once (its stream request logged a moment later): let that settle first. A page
    // that reloads itself in a loop never settles.
    let mut opened = streams();
    let settle_by = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = streams();
        if now == opened {
            break;
        }
        assert!(
            std::time::Instant::now() < settle_by,
            "the finished deployment's page keeps reloading ({now} streams opened)"
        );
        opened = now;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        streams(),
        opened,
        "the finished deployment's page keeps reloading"
    );
    browser.click("button.rollback").await;
    browser
        .wait_for(
            "document.querySelector('#flash').textContent.startsWith('Rolled back')",
            "the rollback",
        )
        .await;
    // A rollback is a run (202 Accepted): the page says "Rolling back" while it runs and
    // "Rolled back" only once it is live.
    let live =
        daemon.api("GET", "/api/projects/web", None).await.json()["liveDeploymentId"].clone();
    assert_eq!(live, first, "the first deployment is live again");

    // A running build canceled from its page.
    let upload = daemon
        .upload("slow", targz(&[("index.html", "x", 0o644)]))
        .await;
    assert_eq!(upload.status, 201, "{}", upload.text());
    let started = daemon
        .provision(
            "slow",
            serde_json::json!({"buildCommand": "echo building; sleep 60"}),
        )
        .await;
    browser
        .navigate(&format!("{base}/#/projects/slow/deployments"))
        .await;
    browser
        .wait_for(
            &format!("{logs}.includes('building')"),
            "the slow build running",
        )
        .await;
    browser.click("button.cancel").await;
    browser
        .wait_for(
            "document.querySelector('.badge.canceled')",
            "the run canceled",
        )
        .await;
    let status = daemon
        .api(
            "GET",
            &format!(
                "/api/provisioning/{}/status",
                started["provisioningId"].as_str().unwrap()
            ),
            None,
        )
        .await
        .json();
    assert_eq!(status["status"], "provisioning_canceled", "{status}");

    // The other pages render.
    browser
        .navigate(&format!("{base}/#/projects/web/git"))
        .await;
    browser
        .wait_for("document.querySelector('#git-gitUrl')", "git settings")
        .await;
    shoot(&mut browser, "git").await;
    browser.navigate(&format!("{base}/#/projects")).await;
    browser
        .wait_for(
            "document.body.innerText.includes('web.localhost')",
            "the project with its URL",
        )
        .await;
    shoot(&mut browser, "projects").await;
    browser
        .navigate(&format!("{base}/#/projects/web/previews"))
        .await;
    browser
        .wait_for(
            "document.querySelector('.tabs a[aria-current=page]')?.textContent === 'Previews'",
            "the previews tab",
        )
        .await;
    shoot(&mut browser, "previews").await;
    browser.navigate(&format!("{base}/#/notifications")).await;
    browser
        .wait_for(
            "document.querySelector('#hook-url')",
            "the notifications page",
        )
        .await;
    shoot(&mut browser, "notifications").await;
    browser.navigate(&format!("{base}/#/audit")).await;
    browser
        .wait_for(
            "document.body.innerText.includes('/api/projects/{projectId}/rollback')",
            "the rollback in the audit log",
        )
        .await;
    shoot(&mut browser, "audit").await;

    // A read-only token: it signs in, sees the project, and a write is refused with the API's message.
    browser.navigate(&format!("{base}/#/tokens")).await;
    browser
        .wait_for("document.querySelector('#token-name')", "the tokens page")
        .await;
    browser.fill("#token-name", "viewer").await;
    browser
        .eval("document.querySelector('#token-scope').value = 'read'")
        .await;
    browser.click("#token-create").await;
    browser
        .wait_for("document.querySelector('#token-secret')", "the new token")
        .await;
    shoot(&mut browser, "tokens").await;
    let viewer = browser
        .eval("document.querySelector('#token-secret').textContent")
        .await;
    browser.click("#signout").await;
    browser
        .wait_for("document.querySelector('#token')", "the sign-in form")
        .await;
    browser
        .sign_in(viewer.as_str().unwrap(), "the list for the viewer")
        .await;
    browser
        .navigate(&format!("{base}/#/projects/web/env"))
        .await;
    browser
        .wait_for("document.querySelector('#env-input')", "the env form")
        .await;
    browser.fill("#env-input", "OTHER=1").await;
    browser.click("#env-save").await;
    browser
        .wait_for(
            "document.querySelector('#flash').textContent.includes('FORBIDDEN')",
            "the refusal",
        )
        .await;
    let vars = daemon
        .api("GET", "/api/projects/web/env-vars", None)
        .await
        .json();
    assert!(vars["envVars"].get("OTHER").is_none(), "nothing changed");

    let errors: Vec<&String> = browser
        .errors
        .iter()
        .filter(|e| !e.contains("401") && !e.contains("403"))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");

    // Another origin (an app on a sibling subdomain) gets no CORS grant to read the API.
    let cross = daemon
        .request(
            "GET",
            "slipway.localhost",
            "/api/projects",
            &[
                ("origin", "http://web.localhost".to_owned()),
                ("authorization", format!("Bearer {}", daemon.token)),
            ],
            Vec::new(),
        )
        .await;
    assert!(cross.header("access-control-allow-origin").is_none());
}
