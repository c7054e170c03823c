//! Issue 31 item 4 in the dashboard (a real browser): with previews on, the env form asks
//! where new variables apply, in words (a branch field only for one branch's previews), sends
//! the scoped body, and the list says where each variable applies. With previews off it asks
//! nothing, and what it saves applies everywhere.

use serde_json::json;

use crate::dashboard_forms::assert_labeled;
use crate::support::browser;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_previews_on_the_env_form_asks_where_a_variable_applies() {
    let Some((mut browser, daemon, origin)) =
        browser::dashboard("dashboard env browser test").await
    else {
        return;
    };
    for slug in ["plain", "previewed"] {
        let created = daemon
            .api("POST", "/api/projects", Some(json!({ "slug": slug })))
            .await;
        assert_eq!(created.status, 201, "{}", created.text());
    }
    let patched = daemon
        .api(
            "PATCH",
            "/api/projects/previewed",
            Some(json!({"previews": true})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.text());
    browser
        .open(&format!("{origin}/"), "#token", "the sign-in form")
        .await;
    browser.sign_in(&daemon.token, "the project list").await;

    // Previews off: no question, the variable applies everywhere.
    let env_form = |slug: &str| format!("{origin}/#/projects/{slug}/env");
    browser
        .open(&env_form("plain"), "#env-input", "the env form")
        .await;
    assert_eq!(
        browser
            .eval("document.querySelector('#env-applies') === null")
            .await,
        json!(true)
    );
    browser.fill("#env-input", "EVERYWHERE=1").await;
    browser.click("#env-save").await;
    browser
        .wait_for(
            "document.body.innerText.includes('Production and previews')",
            "the variable listed with where it applies",
        )
        .await;

    // Previews on: the form asks; one branch's previews is chosen.
    browser
        .open(
            &env_form("previewed"),
            "#env-applies",
            "the env form's question",
        )
        .await;
    assert_labeled(&mut browser, "the env form with previews on").await;
    assert_eq!(
        browser
            .eval("document.querySelector('#env-branch').closest('label').hidden")
            .await,
        json!(true),
        "the branch field waits for its choice"
    );
    browser.fill("#env-input", "STAGING_KEY=s").await;
    browser
        .eval("(() => { const s = document.querySelector('#env-applies'); s.value = 'branch'; s.dispatchEvent(new Event('change')); })()")
        .await;
    browser.fill("#env-branch", "feature-x").await;
    browser.click("#env-save").await;
    browser
        .wait_for(
            "document.body.innerText.includes('Previews of feature-x only')",
            "the variable listed as one branch's",
        )
        .await;
    let listed = daemon
        .api("GET", "/api/projects/previewed/env-vars", None)
        .await
        .json();
    assert_eq!(
        listed["scopes"]["STAGING_KEY"],
        json!({"environments": ["preview"], "branch": "feature-x"}),
        "{listed}"
    );
    let plain = daemon
        .api("GET", "/api/projects/plain/env-vars", None)
        .await
        .json();
    assert_eq!(
        plain["scopes"]["EVERYWHERE"],
        json!({"environments": ["production", "preview"]})
    );
    assert!(
        browser.errors.is_empty(),
        "console errors: {:#?}",
        browser.errors
    );
}
