//! Token scopes (issue 13): every route of the API's route table × every kind of token, with
//! the expected outcome written out here (not derived from the daemon's own table), so a
//! route that is added without a decision on its scope fails this test; plus expiry, masked
//! env values for read tokens, and paging through 250 projects exactly once each.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use serde_json::json;

use crate::support::{targz, TestDaemon};

/// The least scope each route needs, by `METHOD template`: the contract's rules.
fn expected_needs() -> HashMap<&'static str, &'static str> {
    HashMap::from([
        ("GET /api/projects", "read"),
        ("POST /api/projects", "admin"),
        ("GET /api/projects/{projectId}", "read"),
        ("DELETE /api/projects/{projectId}", "admin"),
        ("POST /api/projects/{projectId}/env-vars", "deploy"),
        ("GET /api/projects/{projectId}/env-vars", "read"),
        ("DELETE /api/projects/{projectId}/env-vars/{key}", "deploy"),
        ("POST /api/tokens", "admin"),
        ("GET /api/tokens", "admin"),
        ("DELETE /api/tokens/{tokenId}", "admin"),
        ("POST /api/projects/{projectId}/source", "deploy"),
        ("POST /api/projects/{projectId}/provision", "deploy"),
        ("GET /api/provisioning/{provisioningId}/status", "read"),
        ("POST /api/provisioning/{provisioningId}/cancel", "deploy"),
        ("GET /api/deployments/{deploymentId}", "read"),
        ("GET /api/projects/{projectId}/deployments", "read"),
        ("POST /api/projects/{projectId}/rollback", "deploy"),
        ("GET /api/deployments/{deploymentId}/logs", "read"),
        ("GET /api/deployments/{deploymentId}/logs/stream", "read"),
        ("GET /api/audit", "admin"),
        ("GET /api/nodes", "admin"),
        ("GET /api/metrics", "read"),
        ("GET /api/projects/{projectId}/usage", "read"),
        ("GET /api/projects/{projectId}/usage/history", "read"),
        ("GET /api/usage/history", "admin"),
        ("POST /api/notifications", "admin"),
        ("GET /api/notifications", "admin"),
        ("GET /api/notifications/{notificationId}", "admin"),
        ("DELETE /api/notifications/{notificationId}", "admin"),
        (
            "GET /api/notifications/{notificationId}/deliveries",
            "admin",
        ),
        ("POST /api/projects/{projectId}/domains", "deploy"),
        ("GET /api/projects/{projectId}/domains", "read"),
        ("GET /api/projects/{projectId}/formation", "read"),
        ("POST /api/projects/{projectId}/runs", "deploy"),
        ("GET /api/projects/{projectId}/runs", "read"),
        ("GET /api/runs/{runId}", "read"),
        ("POST /api/projects/{projectId}/addons", "admin"),
        ("GET /api/projects/{projectId}/addons", "read"),
        ("GET /api/addons/{addonId}", "read"),
        ("PATCH /api/addons/{addonId}", "admin"),
        ("DELETE /api/addons/{addonId}", "admin"),
        ("PUT /api/addons/{addonId}/links/{projectId}", "deploy"),
        ("DELETE /api/addons/{addonId}/links/{projectId}", "deploy"),
        ("GET /api/addons/{addonId}/credentials", "deploy"),
        ("POST /api/addons/{addonId}/backups", "deploy"),
        ("GET /api/addons/{addonId}/backups", "read"),
        ("GET /api/addons/{addonId}/backups/{backupId}", "read"),
        (
            "POST /api/addons/{addonId}/backups/{backupId}/verify",
            "deploy",
        ),
        ("POST /api/addons/{addonId}/restore", "admin"),
        ("POST /api/addons/{addonId}/upgrade", "admin"),
        ("POST /api/addons/{addonId}/rollback", "admin"),
        ("GET /api/addons/{addonId}/export", "deploy"),
        ("PUT /api/addons/{addonId}/import", "admin"),
        ("GET /api/addons/{addonId}/tunnel", "deploy"),
        ("GET /api/addons/{addonId}/logs", "read"),
        ("GET /api/addons/{addonId}/logs/stream", "read"),
        ("GET /api/runs/{runId}/tty", "deploy"),
        ("POST /api/projects/{projectId}/cron-jobs", "deploy"),
        ("GET /api/projects/{projectId}/cron-jobs", "read"),
        ("GET /api/projects/{projectId}/cron-jobs/{jobId}", "read"),
        (
            "PATCH /api/projects/{projectId}/cron-jobs/{jobId}",
            "deploy",
        ),
        (
            "DELETE /api/projects/{projectId}/cron-jobs/{jobId}",
            "deploy",
        ),
        (
            "POST /api/projects/{projectId}/cron-jobs/{jobId}/runs",
            "deploy",
        ),
        (
            "GET /api/projects/{projectId}/cron-jobs/{jobId}/runs",
            "read",
        ),
        ("POST /api/runs/{runId}/cancel", "deploy"),
        ("GET /api/runs/{runId}/logs", "read"),
        ("GET /api/runs/{runId}/logs/stream", "read"),
        ("PATCH /api/projects/{projectId}/formation", "deploy"),
        ("POST /api/projects/{projectId}/sleep", "deploy"),
        ("POST /api/projects/{projectId}/wake", "deploy"),
        (
            "POST /api/projects/{projectId}/previews/{name}/sleep",
            "deploy",
        ),
        (
            "POST /api/projects/{projectId}/previews/{name}/wake",
            "deploy",
        ),
        ("GET /api/projects/{projectId}/domains/{domain}", "read"),
        (
            "DELETE /api/projects/{projectId}/domains/{domain}",
            "deploy",
        ),
        (
            "POST /api/projects/{projectId}/domains/{domain}/verify",
            "deploy",
        ),
        ("PATCH /api/projects/{projectId}", "deploy"),
        ("POST /api/projects/{projectId}/webhook-secret", "deploy"),
        ("POST /api/projects/{projectId}/deploy-hooks", "deploy"),
        ("GET /api/projects/{projectId}/deploy-hooks", "read"),
        (
            "DELETE /api/projects/{projectId}/deploy-hooks/{hookId}",
            "deploy",
        ),
        ("GET /api/projects/{projectId}/previews", "read"),
        ("DELETE /api/projects/{projectId}/previews/{name}", "deploy"),
        ("DELETE /api/projects/{projectId}/build-cache", "deploy"),
        // No token opens these: the provider's signature or the hook's secret does.
        ("POST /api/webhooks/{projectId}", "public"),
        ("POST /api/hooks/{secret}", "public"),
        ("GET /api/openapi.json", "read"),
        ("GET /api/system", "read"),
    ])
}

/// A finished one-off run of a server project (`srv`), for the `/api/runs/{runId}` routes.
async fn one_off_run(daemon: &TestDaemon) -> String {
    let upload = daemon
        .upload("srv", targz(&[("index.html", "x", 0o644)]))
        .await;
    assert_eq!(upload.status, 201, "{}", upload.text());
    let started = daemon
        .provision(
            "srv",
            json!({"startCommand": "exec python3 -m http.server $PORT"}),
        )
        .await;
    daemon
        .wait_complete(&started, Duration::from_secs(60))
        .await;
    let run = daemon
        .api(
            "POST",
            "/api/projects/srv/runs",
            Some(json!({"command": "true"})),
        )
        .await;
    assert_eq!(run.status, 202, "{}", run.text());
    run.json()["runId"].as_str().unwrap().to_owned()
}

/// A Redis add-on of `srv` (when redis-server is installed), for the `/api/addons/{addonId}`
/// routes.
async fn an_addon(daemon: &TestDaemon) -> Option<String> {
    if !std::path::Path::new("/usr/bin/redis-server").exists() {
        return None;
    }
    let created = daemon
        .api(
            "POST",
            "/api/projects/srv/addons",
            Some(json!({"kind": "redis"})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    Some(created.json()["id"].as_str().unwrap().to_owned())
}

fn covers(scope: &str, needs: &str) -> bool {
    matches!(
        (scope, needs),
        ("admin", _) | ("deploy", "deploy" | "read") | ("read", "read")
    )
}

async fn create_token(daemon: &TestDaemon, body: serde_json::Value) -> String {
    let created = daemon.api("POST", "/api/tokens", Some(body)).await;
    assert_eq!(created.status, 201, "{}", created.text());
    created.json()["token"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_each_scope_as_the_contract_says() {
    // Four tokens on every route: more than the default 60 requests a minute per token.
    let daemon = TestDaemon::start_with(crate::support::DaemonOptions::default().extra_toml(
        "[rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n",
    ));
    let site = daemon.deploy_page("web", "<h1>web</h1>").await;
    let run_id = site["provisioningId"].as_str().unwrap().to_owned();
    let deployment_id = site["deploymentId"].as_str().unwrap().to_owned();
    let one_off = one_off_run(&daemon).await;
    let addon = an_addon(&daemon).await;
    // A grant names projects that exist (issue 31, item 13).
    let other = daemon
        .api("POST", "/api/projects", Some(json!({"slug": "other"})))
        .await;
    assert_eq!(other.status, 201, "{}", other.text());
    let tokens = [
        ("admin", daemon.token.clone(), "admin"),
        (
            "deploy",
            create_token(&daemon, json!({"name": "ci", "scope": "deploy"})).await,
            "deploy",
        ),
        (
            "read",
            create_token(&daemon, json!({"name": "viewer", "scope": "read"})).await,
            "read",
        ),
        (
            "deploy-elsewhere",
            create_token(
                &daemon,
                json!({"name": "other", "scope": "deploy", "projects": ["other"]}),
            )
            .await,
            "deploy",
        ),
    ];
    let needs = expected_needs();
    let routes: Vec<(String, String)> = slipway::api::ROUTES
        .iter()
        .map(|spec| (spec.method.to_string(), spec.template.to_owned()))
        .collect();
    for (method, template) in &routes {
        let key = format!("{method} {template}");
        let need = needs
            .get(key.as_str())
            .unwrap_or_else(|| panic!("decide the scope of the new route {key} in this test"));
        let path = template
            .replace(
                "{projectId}",
                if template.starts_with("/api/projects/{projectId}")
                    && method == "DELETE"
                    && !template.contains("env-vars")
                {
                    "gone-project"
                } else {
                    "web"
                },
            )
            .replace("{provisioningId}", &run_id)
            .replace("{deploymentId}", &deployment_id)
            .replace("{runId}", &one_off)
            .replace("{jobId}", "crn_missing")
            .replace("{backupId}", "bak_missing")
            .replace("{addonId}", addon.as_deref().unwrap_or("adn_missing"))
            .replace("{key}", "NOPE")
            .replace("{tokenId}", "tok_missing")
            .replace("{notificationId}", "ntf_missing")
            .replace("{domain}", "www.example.test")
            .replace("{hookId}", "hook_missing")
            .replace("{secret}", "dh_missing")
            .replace("{name}", "nope");
        if template.contains("{addonId}") && addon.is_none() {
            eprintln!("SKIP {key}: redis-server is not installed, no add-on to try it on");
            continue;
        }
        let targets_project = template.contains('{')
            && !template.contains("{tokenId}")
            && !template.contains("{notificationId}");
        for (label, token, scope) in &tokens {
            let (content_type, body) = if template.ends_with("/source") {
                (
                    Some("application/gzip"),
                    targz(&[("index.html", "x", 0o644)]),
                )
            } else if method == "POST" {
                (Some("application/json"), b"{}".to_vec())
            } else {
                (None, Vec::new())
            };
            let response = tokio::time::timeout(
                Duration::from_secs(3),
                daemon.api_as(token, method, &path, content_type, body),
            )
            .await;
            // A stream that stays open was let in.
            let status = response.map(|r| r.status).unwrap_or(200);
            if *need == "public" {
                assert!(
                    status == 401 || status == 404,
                    "{label} token on {key} ({path}): a bearer token must not open it, got {status}"
                );
                continue;
            }
            let limited_out = *label == "deploy-elsewhere" && targets_project;
            let allowed = covers(scope, need) && !limited_out;
            if allowed {
                assert_ne!(status, 403, "{label} token on {key} ({path}) was refused");
                assert_ne!(status, 401, "{label} token on {key}");
            } else {
                assert_eq!(status, 403, "{label} token on {key} ({path}) was let in");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_tokens_see_masked_values_and_limited_tokens_see_their_projects_only() {
    let daemon = TestDaemon::start();
    daemon.deploy_page("web", "<h1>web</h1>").await;
    let set = daemon
        .api(
            "POST",
            "/api/projects/web/env-vars",
            Some(json!({"SECRET": "s3cret"})),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.text());
    let read = create_token(&daemon, json!({"name": "viewer", "scope": "read"})).await;
    let env = daemon
        .api_as(&read, "GET", "/api/projects/web/env-vars", None, Vec::new())
        .await;
    assert_eq!(env.status, 200);
    assert_eq!(env.json()["envVars"]["SECRET"], "********");
    assert!(!env.text().contains("s3cret"));

    // A token limited to one project lists only that one.
    daemon.deploy_page("other", "<h1>other</h1>").await;
    let limited = create_token(
        &daemon,
        json!({"name": "o", "scope": "read", "projects": ["other"]}),
    )
    .await;
    let list = daemon
        .api_as(&limited, "GET", "/api/projects", None, Vec::new())
        .await;
    let slugs: Vec<String> = list.json()["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["slug"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(slugs, vec!["other".to_owned()]);

    // Token records show their grant; a deploy token cannot create projects.
    let tokens = daemon.api("GET", "/api/tokens", None).await.json();
    let viewer = tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "o")
        .unwrap()
        .clone();
    assert_eq!(viewer["scope"], "read");
    assert_eq!(viewer["projects"], json!(["other"]));
    let deploy = create_token(&daemon, json!({"name": "ci", "scope": "deploy"})).await;
    let upload = daemon
        .api_as(
            &deploy,
            "POST",
            "/api/projects/brand-new/source",
            Some("application/gzip"),
            targz(&[("index.html", "x", 0o644)]),
        )
        .await;
    upload.assert_error(403, "FORBIDDEN");
    assert!(upload.text().contains("admin"), "{}", upload.text());
    let bad = daemon
        .api(
            "POST",
            "/api/tokens",
            Some(json!({"name": "x", "scope": "root"})),
        )
        .await;
    bad.assert_error(400, "INVALID_BODY");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_through_250_projects_sees_each_exactly_once() {
    let daemon = TestDaemon::start_with(crate::support::DaemonOptions::default().extra_toml(
        "[rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n",
    ));
    for chunk in (0..250).collect::<Vec<_>>().chunks(25) {
        let creates = chunk.iter().map(|i| {
            let daemon = &daemon;
            async move {
                let created = daemon
                    .api(
                        "POST",
                        "/api/projects",
                        Some(json!({"slug": format!("site-{i:03}")})),
                    )
                    .await;
                assert_eq!(created.status, 201, "{}", created.text());
            }
        });
        futures_util::future::join_all(creates).await;
    }
    let mut seen = Vec::new();
    let mut path = "/api/projects?limit=40".to_owned();
    let mut pages = 0;
    loop {
        let page = daemon.api("GET", &path, None).await;
        assert_eq!(page.status, 200, "{}", page.text());
        let body = page.json();
        let projects = body["projects"].as_array().unwrap();
        assert!(projects.len() <= 40);
        seen.extend(
            projects
                .iter()
                .map(|p| p["slug"].as_str().unwrap().to_owned()),
        );
        pages += 1;
        match body["nextCursor"].as_str() {
            Some(cursor) => path = format!("/api/projects?limit=40&cursor={cursor}"),
            None => break,
        }
    }
    assert_eq!(pages, 7);
    assert_eq!(seen.len(), 250);
    assert_eq!(
        seen.iter().collect::<BTreeSet<_>>().len(),
        250,
        "a project came twice"
    );
    daemon
        .api("GET", "/api/projects?limit=0", None)
        .await
        .assert_error(400, "INVALID_QUERY");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_run_can_be_canceled_and_a_finished_one_cannot() {
    let daemon = TestDaemon::start();
    let done = daemon.deploy_page("web", "<h1>v1</h1>").await;
    let finished = daemon
        .api(
            "POST",
            &format!(
                "/api/provisioning/{}/cancel",
                done["provisioningId"].as_str().unwrap()
            ),
            None,
        )
        .await;
    finished.assert_error(409, "CONFLICT");
    let upload = daemon
        .upload("web", targz(&[("index.html", "<h1>v2</h1>", 0o644)]))
        .await;
    assert_eq!(upload.status, 201);
    let started = daemon
        .provision("web", json!({"buildCommand": "sleep 30"}))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let id = started["provisioningId"].as_str().unwrap();
    let canceled = daemon
        .api("POST", &format!("/api/provisioning/{id}/cancel"), None)
        .await;
    assert_eq!(canceled.status, 200, "{}", canceled.text());
    assert_eq!(canceled.json()["status"], "provisioning_canceled");
    // The live deployment is untouched.
    let page = daemon.app_get("web", "/", &[]).await;
    assert!(page.text().contains("v1"), "{}", page.text());
    let deployment = daemon
        .api(
            "GET",
            &format!(
                "/api/deployments/{}",
                done["deploymentId"].as_str().unwrap()
            ),
            None,
        )
        .await
        .json();
    assert_eq!(deployment["live"], true);
    assert!(
        deployment["url"].as_str().unwrap().contains("web."),
        "{deployment}"
    );
    daemon
        .api("POST", "/api/provisioning/pvn_missing/cancel", None)
        .await
        .assert_error(404, "NOT_FOUND");
}

/// Issue 31 item 8: only an admin creates projects. A deploy token (unlimited; one limited to
/// the new slug itself cannot be made) tries every route of the route table that names a
/// project, with a body the route would accept, on a slug and a `prj_` id that do not exist:
/// each is refused and no project appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_token_cannot_create_a_project_by_any_route() {
    // No 429 may stand in for the refusal.
    let daemon = TestDaemon::start_with(crate::support::DaemonOptions::default().extra_toml(
        "[rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n",
    ));
    // A token limited to the new slug itself cannot be made (grants name projects that
    // exist, issue 31 item 13), so the unlimited deploy token is the one to try.
    let ahead = daemon
        .api(
            "POST",
            "/api/tokens",
            Some(json!({"name": "ci-new", "scope": "deploy", "projects": ["brand-new"]})),
        )
        .await;
    ahead.assert_error(404, "NOT_FOUND");
    let deployers = [create_token(&daemon, json!({"name": "ci", "scope": "deploy"})).await];
    let body_for = |template: &str| -> (Option<&'static str>, Vec<u8>) {
        let json = |value: serde_json::Value| (Some("application/json"), value.to_string().into());
        match template.rsplit('/').next().unwrap() {
            "source" => (
                Some("application/gzip"),
                targz(&[("index.html", "x", 0o644)]),
            ),
            "env-vars" => json(json!({"NEW": "value"})),
            "provision" => json(json!({"projectSlug": "brand-new"})),
            "domains" => json(json!({"domain": "www.brand-new.test"})),
            "formation" => json(json!({"web": {"instances": 2}})),
            "deploy-hooks" => json(json!({"name": "cms", "branch": "main"})),
            "rollback" => json(json!({"deploymentId": "dpl_missing"})),
            "{projectId}" => json(json!({"previews": true})),
            _ => (None, Vec::new()),
        }
    };
    let mut tried = BTreeSet::new();
    for spec in slipway::api::ROUTES.iter() {
        let (method, template) = (spec.method.to_string(), spec.template);
        if !template.contains("{projectId}") || method == "GET" {
            continue;
        }
        for project in ["brand-new", "prj_aaaaaaaaaaaaaaaaaaaaaaaa"] {
            let path = template
                .replace("{projectId}", project)
                .replace("{key}", "NEW")
                .replace("{domain}", "www.brand-new.test")
                .replace("{hookId}", "hook_missing")
                .replace("{name}", "nope");
            for token in &deployers {
                let (content_type, body) = body_for(template);
                let answer = daemon
                    .api_as(token, &method, &path, content_type, body)
                    .await;
                assert!(
                    !(200..300).contains(&answer.status),
                    "{method} {path} with a deploy token: {} {}",
                    answer.status,
                    answer.text()
                );
            }
            tried.insert(format!("{method} {template}"));
        }
    }
    for must in [
        "POST /api/projects/{projectId}/env-vars",
        "PATCH /api/projects/{projectId}",
        "POST /api/projects/{projectId}/source",
        "POST /api/projects/{projectId}/provision",
        "POST /api/projects/{projectId}/domains",
        "POST /api/projects/{projectId}/deploy-hooks",
    ] {
        assert!(tried.contains(must), "{must} was not tried: {tried:?}");
    }
    // The plain route, too.
    for token in &deployers {
        let created = daemon
            .api_as(
                token,
                "POST",
                "/api/projects",
                Some("application/json"),
                json!({"slug": "brand-new"}).to_string().into(),
            )
            .await;
        created.assert_error(403, "FORBIDDEN");
    }
    let gone = daemon.api("GET", "/api/projects/brand-new", None).await;
    assert_eq!(gone.status, 404, "{}", gone.text());
    let list = daemon.api("GET", "/api/projects", None).await.json();
    assert_eq!(list["projects"], json!([]), "{list}");
    // An admin still creates a project by setting its variables.
    let set = daemon
        .api(
            "POST",
            "/api/projects/brand-new/env-vars",
            Some(json!({"NEW": "value"})),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.text());
}
