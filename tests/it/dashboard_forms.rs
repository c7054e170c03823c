//! The dashboard's forms in a real browser (see `dashboard.rs` for the tour): every field has
//! a label in words tied to it, a refused call shows the API's own message on the page, the
//! Notifications form subscribes with its defaults, and a new deploy hook's or webhook's URL
//! names the daemon's origin once.

use serde_json::Value;

use crate::support::browser::{self, Browser};

/// Every input, select and textarea on the page without a `<label>` tied to it, or whose
/// label (its own words, not the control's) reads like an API field name (`gitUrl`).
const UNLABELED: &str = "[...document.querySelectorAll('main input, main select, main textarea')]
  .filter((e) => e.type !== 'hidden')
  .map((e) => ({ id: e.id || e.outerHTML, label: [...(e.labels || [])].map((l) => {
    const words = l.cloneNode(true);
    words.querySelectorAll('input, select, textarea').forEach((c) => c.remove());
    return words.textContent.trim();
  }).join(' ') }))
  .filter((f) => !f.label || /\\b[a-z]+[A-Z][A-Za-z]*\\b/.test(f.label))";

pub(crate) async fn assert_labeled(browser: &mut Browser, page: &str) {
    let unlabeled = browser.eval(UNLABELED).await;
    assert_eq!(
        unlabeled,
        Value::Array(Vec::new()),
        "fields without a label in words on {page}"
    );
}

/// What the page shows as a refusal: the flash line and any error next to a form.
const SHOWN_ERRORS: &str =
    "[...document.querySelectorAll('#flash, [role=alert]')].map((e) => e.textContent).join(' ')";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_forms_speak_words_and_show_the_apis_errors() {
    let Some((mut browser, daemon, origin)) =
        browser::dashboard("dashboard forms browser test").await
    else {
        return;
    };
    let created = daemon
        .api(
            "POST",
            "/api/projects",
            Some(serde_json::json!({"slug": "web"})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());

    browser
        .open(&format!("{origin}/"), "#token", "the sign-in form")
        .await;
    assert_labeled(&mut browser, "the sign-in page").await;
    browser.sign_in(&daemon.token, "the project list").await;

    // Labels in words on every form.
    for (hash, ready, page) in [
        ("#/new", "#new-slug", "the new-project form"),
        ("#/projects/web/git", "#git-gitUrl", "git settings"),
        ("#/projects/web/env", "#env-input", "the env form"),
        ("#/projects/web/domains", "#domain-name", "the domain form"),
        ("#/tokens", "#token-name", "the tokens page"),
        ("#/notifications", "#hook-url", "the notifications page"),
    ] {
        browser.open(&format!("{origin}/{hash}"), ready, page).await;
        assert_labeled(&mut browser, page).await;
    }
    // A project with no deployment yet: its page says so and nothing more (no stray "null").
    browser
        .open(
            &format!("{origin}/#/projects/web/deployments"),
            "#redeploy",
            "the deployments tab",
        )
        .await;
    let text = browser.text("main").await;
    assert!(!text.contains("null"), "{text}");

    browser
        .open(
            &format!("{origin}/#/notifications"),
            "#hook-url",
            "the notifications page",
        )
        .await;
    // Subscribing with the form's defaults works: the API accepts the events it sends.
    browser
        .fill("#hook-url", "https://hooks.example.com/slipway")
        .await;
    browser.click("#hook-subscribe").await;
    browser
        .wait_for(
            "document.querySelector('#hook-secret code')",
            "the new subscription's secret",
        )
        .await;
    let listed = daemon.api("GET", "/api/notifications", None).await.json();
    let events = &listed["notifications"][0]["events"];
    assert!(
        events
            .as_array()
            .is_some_and(|e| e.contains(&Value::from("deployment.failed"))),
        "{listed}"
    );

    // A refused subscription shows the API's message on the page.
    let refusal = daemon
        .api(
            "POST",
            "/api/notifications",
            Some(serde_json::json!({"url": "ftp://nowhere", "events": ["deployment.failed"]})),
        )
        .await
        .json();
    let message = refusal["error"]["message"].as_str().unwrap().to_owned();
    // Sent the way Enter in a field sends it (the fields are a form), not by the button.
    browser.fill("#hook-url", "ftp://nowhere").await;
    browser
        .eval("document.querySelector('#hook-url').form.requestSubmit()")
        .await;
    browser
        .wait_for(
            &format!(
                "{SHOWN_ERRORS}.includes({})",
                serde_json::to_string(&message).unwrap()
            ),
            "the API's message for a refused subscription",
        )
        .await;

    // A deploy hook's shown-once URL and the webhook URL name the origin once.
    browser
        .open(
            &format!("{origin}/#/projects/web/git"),
            "#hook-name",
            "the deploy hooks",
        )
        .await;
    browser.fill("#hook-name", "cms").await;
    browser.click("#hook-create").await;
    browser
        .wait_for(
            "document.querySelector('#deploy-hook-url')",
            "the new hook's URL",
        )
        .await;
    let hook_url = browser.text("#deploy-hook-url").await;
    assert!(
        hook_url.starts_with(&format!("{origin}/api/hooks/dh_")),
        "{hook_url}"
    );
    assert_eq!(hook_url.matches("http").count(), 1, "{hook_url}");
    browser.click("#webhook-rotate").await;
    browser
        .wait_for("document.querySelector('#webhook-url')", "the webhook URL")
        .await;
    assert_eq!(
        browser.text("#webhook-url").await,
        format!(
            "{origin}/api/webhooks/{}",
            created.json()["id"].as_str().unwrap()
        )
    );

    // A failed call anywhere shows its message: a hook name longer than the API allows.
    browser.fill("#hook-name", &"x".repeat(101)).await;
    browser.click("#hook-create").await;
    browser
        .wait_for(
            &format!("{SHOWN_ERRORS}.includes('INVALID_BODY: field `name` must be 1 to 100')"),
            "the API's refusal of the name",
        )
        .await;

    let errors: Vec<&String> = browser
        .errors
        .iter()
        .filter(|e| !e.contains("400"))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:#?}");
}
