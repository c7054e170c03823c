//! Custom domains (issue 11) through the real daemon: every invalid-domain case of the
//! contract is refused with its code and stores nothing; a domain serves its project exactly
//! like the slug host; `redirectTo` answers 308 with path and query kept; deleting a domain
//! or its project stops serving it at once; a restart keeps them. The TLS modes are in
//! `tls_daemon::domains`.

use serde_json::json;

use crate::support::{DaemonOptions, TestDaemon};

fn options() -> DaemonOptions {
    DaemonOptions::default().extra_toml(
        "[rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n",
    )
}

async fn add(
    daemon: &TestDaemon,
    project: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let response = daemon
        .api(
            "POST",
            &format!("/api/projects/{project}/domains"),
            Some(body),
        )
        .await;
    let json = serde_json::from_slice(&response.body).unwrap_or(serde_json::Value::Null);
    (response.status, json)
}

async fn domain_names(daemon: &TestDaemon, project: &str) -> Vec<String> {
    let list = daemon
        .api("GET", &format!("/api/projects/{project}/domains"), None)
        .await;
    assert_eq!(list.status, 200, "{}", list.text());
    list.json()["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["domain"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_invalid_domain_is_refused_with_its_code_and_nothing_is_stored() {
    let daemon = TestDaemon::start_with(options());
    daemon.deploy_page("web", "<h1>web</h1>").await;
    daemon.deploy_page("blog", "<h1>blog</h1>").await;
    let invalid = [
        json!({"domain": ""}),
        json!({"domain": "localhost"}),
        json!({"domain": "127.0.0.1"}),
        json!({"domain": "[::1]"}),
        json!({"domain": "1.2.3.4"}),
        json!({"domain": "slipway.localhost"}),
        json!({"domain": "localhost."}),
        json!({"domain": "other.localhost"}),
        json!({"domain": "a.b.localhost"}),
        json!({"domain": "https://www.example.test"}),
        json!({"domain": "www.example.test/path"}),
        json!({"domain": "www.example.test:8080"}),
        json!({"domain": "*.example.test"}),
        json!({"domain": "exa mple.test"}),
        json!({"domain": "example..test"}),
        json!({"domain": "-bad.example.test"}),
        json!({"domain": format!("{}.example.test", "a".repeat(64))}),
        json!({"domain": format!("{}test", "abcdefghi.".repeat(25))}),
        json!({"domain": "www.example.test", "redirectTo": "elsewhere.test"}),
        json!({"domain": "www.example.test", "redirectTo": "blog.localhost"}),
        json!({"domain": "www.example.test", "redirectTo": "www.example.test"}),
    ];
    for body in &invalid {
        let (status, answer) = add(&daemon, "web", body.clone()).await;
        assert_eq!(status, 400, "{body} → {answer}");
        assert_eq!(
            answer["error"]["code"], "INVALID_DOMAIN",
            "{body} → {answer}"
        );
    }
    for body in [
        json!({}),
        json!({"domain": 5}),
        json!({"domain": "a.test", "extra": 1}),
    ] {
        let (status, answer) = add(&daemon, "web", body.clone()).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (400, Some("INVALID_BODY")),
            "{body}"
        );
    }
    assert!(
        domain_names(&daemon, "web").await.is_empty(),
        "a refused domain was stored"
    );

    // Names are normalized; one project per name; the same name twice is taken too.
    let (status, added) = add(
        &daemon,
        "web",
        json!({"domain": "WWW.Bücher.Example.TEST."}),
    )
    .await;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["domain"], "www.xn--bcher-kva.example.test");
    assert_eq!(added["status"], "active", "tls is off: active at once");
    assert_eq!(added["certificate"], serde_json::Value::Null);
    for (project, name) in [
        ("blog", "www.bücher.example.test"),
        ("web", "www.xn--bcher-kva.example.test"),
    ] {
        let (status, answer) = add(&daemon, project, json!({"domain": name})).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["code"], "INVALID_DOMAIN_TAKEN");
    }
    assert!(domain_names(&daemon, "blog").await.is_empty());

    // At most 50 per project; the 51st changes nothing.
    for n in 1..50 {
        let (status, answer) = add(
            &daemon,
            "web",
            json!({"domain": format!("d{n}.example.test")}),
        )
        .await;
        assert_eq!(status, 201, "{answer}");
    }
    let (status, answer) = add(&daemon, "web", json!({"domain": "d51.example.test"})).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("INVALID_DOMAIN")),
        "{answer}"
    );
    assert_eq!(domain_names(&daemon, "web").await.len(), 50);
    let project = daemon.api("GET", "/api/projects/web", None).await.json();
    assert_eq!(project["domains"].as_array().unwrap().len(), 50);

    // Pages of the list.
    let page = daemon
        .api("GET", "/api/projects/web/domains?limit=20", None)
        .await
        .json();
    assert_eq!(page["domains"].as_array().unwrap().len(), 20);
    let cursor = page["nextCursor"].as_str().unwrap().to_owned();
    let next = daemon
        .api(
            "GET",
            &format!("/api/projects/web/domains?limit=40&cursor={cursor}"),
            None,
        )
        .await
        .json();
    assert_eq!(next["domains"].as_array().unwrap().len(), 30);
    assert!(next["nextCursor"].is_null());
}

async fn get(daemon: &TestDaemon, host: &str, path: &str) -> crate::support::TestResponse {
    daemon.request("GET", host, path, &[], Vec::new()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domains_serve_redirect_go_away_at_once_and_survive_a_restart() {
    let mut daemon = TestDaemon::start_with(options());
    daemon.deploy_page("web", "<h1>web site</h1>").await;
    daemon.deploy_page("blog", "<h1>blog site</h1>").await;
    assert_eq!(
        get(&daemon, "www.example.test", "/").await.status,
        404,
        "not a domain yet"
    );

    let (status, _) = add(&daemon, "web", json!({"domain": "www.example.test"})).await;
    assert_eq!(status, 201);
    let (status, apex) = add(
        &daemon,
        "web",
        json!({"domain": "example.test", "redirectTo": "www.example.test"}),
    )
    .await;
    assert_eq!(status, 201, "{apex}");
    assert_eq!(apex["redirectTo"], "www.example.test");
    let (status, _) = add(
        &daemon,
        "web",
        json!({"domain": "old.example.test", "redirectTo": "web.localhost"}),
    )
    .await;
    assert_eq!(status, 201);
    add(&daemon, "blog", json!({"domain": "blog.other.test"})).await;

    let served = get(&daemon, "www.example.test", "/").await;
    assert_eq!(served.status, 200);
    assert!(served.text().contains("web site"));
    assert!(get(&daemon, "blog.other.test", "/")
        .await
        .text()
        .contains("blog site"));
    let moved = daemon
        .request("GET", "example.test:8080", "/a/b?c=d&e", &[], Vec::new())
        .await;
    assert_eq!(moved.status, 308);
    assert_eq!(
        moved.header("location"),
        Some("http://www.example.test:8080/a/b?c=d&e"),
        "TLS is off: plain HTTP, the visitor's port, path and query kept"
    );
    let to_slug = get(&daemon, "old.example.test", "/x").await;
    assert_eq!(to_slug.header("location"), Some("http://web.localhost/x"));

    // A domain others redirect to cannot go first.
    let refused = daemon
        .api("DELETE", "/api/projects/web/domains/www.example.test", None)
        .await;
    assert_eq!(refused.status, 409, "{}", refused.text());
    assert!(refused.text().contains("example.test"));
    let gone = daemon
        .api("DELETE", "/api/projects/web/domains/example.test", None)
        .await;
    assert_eq!(gone.status, 200, "{}", gone.text());
    assert_eq!(
        gone.json(),
        json!({"domain": "example.test", "deleted": true})
    );
    assert_eq!(
        get(&daemon, "example.test", "/").await.status,
        404,
        "stops at once"
    );
    let one = daemon
        .api("GET", "/api/projects/web/domains/WWW.example.test", None)
        .await;
    assert_eq!(one.status, 200);
    assert_eq!(
        one.json()["projectId"],
        daemon.api("GET", "/api/projects/web", None).await.json()["id"]
    );
    let not_here = daemon
        .api("GET", "/api/projects/blog/domains/www.example.test", None)
        .await;
    assert_eq!(
        not_here.status, 404,
        "another project's domain is not found here"
    );

    let listed = crate::support::cli(&daemon, &["domains", "ls", "--project", "web"]);
    assert!(
        listed.contains("www.example.test") && listed.contains("active"),
        "{listed}"
    );
    assert!(listed.contains("308 → web.localhost"), "{listed}");

    // A restart keeps every domain, served the same way.
    daemon.restart();
    assert!(get(&daemon, "www.example.test", "/")
        .await
        .text()
        .contains("web site"));
    assert_eq!(get(&daemon, "old.example.test", "/").await.status, 308);
    assert_eq!(
        domain_names(&daemon, "web").await,
        ["www.example.test", "old.example.test"]
    );

    // Deleting the project deletes its domains; the name is free again.
    let deleted = daemon.api("DELETE", "/api/projects/web", None).await;
    assert_eq!(deleted.status, 200);
    assert_eq!(get(&daemon, "www.example.test", "/").await.status, 404);
    assert_eq!(get(&daemon, "old.example.test", "/").await.status, 404);
    let (status, _) = add(&daemon, "blog", json!({"domain": "www.example.test"})).await;
    assert_eq!(status, 201, "a deleted project's name can be taken");
    assert!(get(&daemon, "www.example.test", "/")
        .await
        .text()
        .contains("blog site"));
}
