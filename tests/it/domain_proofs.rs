//! Proof of ownership of custom domains (issue 31, item 5), through the real daemon asking a
//! DNS server the test runs on loopback: a domain without its `_slipway-challenge` TXT record
//! is neither routed nor certified, with the record it is (by the verify action or the
//! background re-check); another project's token proves nothing, so a deleted domain whose
//! record is still published cannot be taken; a name under another project's proven domain is
//! refused; a squatter's unproven claim yields to the owner's proof; an operator-trusted
//! suffix needs no record; `internal` mode refuses names outside its signing list.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::dns::TestDns;
use crate::support::{eventually, DaemonOptions, TestDaemon, TlsSetup};

fn options(dns: &TestDns) -> DaemonOptions {
    DaemonOptions::default()
        .extra_toml(
            "[rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n",
        )
        .domains_table(&dns.nameserver_toml())
}

async fn call(daemon: &TestDaemon, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let response = daemon.api(method, path, body).await;
    let json = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    (response.status, json)
}

async fn add(daemon: &TestDaemon, project: &str, domain: &str) -> (u16, Value) {
    let path = format!("/api/projects/{project}/domains");
    call(daemon, "POST", &path, Some(json!({ "domain": domain }))).await
}

async fn verify(daemon: &TestDaemon, project: &str, domain: &str) -> Value {
    let path = format!("/api/projects/{project}/domains/{domain}/verify");
    let (status, record) = call(daemon, "POST", &path, None).await;
    assert_eq!(status, 200, "{record}");
    record
}

/// The page a visitor of `host` gets over plain HTTP.
async fn visit(daemon: &TestDaemon, host: &str) -> (u16, String) {
    let response = daemon.request("GET", host, "/", &[], Vec::new()).await;
    (response.status, response.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_domain_is_routed_only_once_its_txt_record_holds_the_projects_token() {
    let dns = TestDns::start().await;
    let daemon = TestDaemon::start_with(options(&dns));
    daemon.deploy_page("web", "<h1>the shop</h1>").await;
    daemon.deploy_page("rival", "<h1>rival</h1>").await;

    let (status, added) = add(&daemon, "web", "shop.example.org").await;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["status"], "unverified", "{added}");
    assert_eq!(added["certificate"], Value::Null);
    let proof = &added["verification"];
    assert_eq!(proof["recordType"], "TXT");
    assert_eq!(proof["recordName"], "_slipway-challenge.shop.example.org");
    let value = proof["recordValue"].as_str().unwrap().to_owned();
    assert!(value.starts_with("slipway-verify="), "{value}");
    assert!(
        added["lastError"]
            .as_str()
            .unwrap()
            .contains("no TXT record"),
        "{added}"
    );
    let (status, page) = visit(&daemon, "shop.example.org").await;
    assert!(
        !page.contains("the shop"),
        "served before proof: {status} {page}"
    );

    // Another project's token (the rival's, for a name it adds) proves nothing for web.
    let (_, rival) = add(&daemon, "rival", "rival.example.org").await;
    let rival_value = rival["verification"]["recordValue"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(rival_value, value, "tokens are per project");
    dns.set_txt("_slipway-challenge.shop.example.org", &rival_value);
    let record = verify(&daemon, "web", "shop.example.org").await;
    assert_eq!(record["status"], "unverified", "{record}");
    assert!(
        record["lastError"]
            .as_str()
            .unwrap()
            .contains("none of them"),
        "{record}"
    );
    assert!(!visit(&daemon, "shop.example.org")
        .await
        .1
        .contains("the shop"));

    dns.set_txt("_slipway-challenge.shop.example.org", &value);
    let record = verify(&daemon, "web", "shop.example.org").await;
    assert_eq!(record["status"], "active", "{record}");
    assert!(record["verification"]["verifiedAt"].is_string(), "{record}");
    let (status, page) = visit(&daemon, "shop.example.org").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("the shop"), "{page}");

    // The background re-check proves a name without the verify action.
    let (_, blog) = add(&daemon, "web", "blog.example.org").await;
    assert_eq!(blog["status"], "unverified", "{blog}");
    dns.set_txt("_slipway-challenge.blog.example.org", &value);
    let proven = eventually(Duration::from_secs(40), || async {
        visit(&daemon, "blog.example.org")
            .await
            .1
            .contains("the shop")
    })
    .await;
    assert!(proven, "never re-checked:\n{}", daemon.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_of_proven_owners_cannot_be_taken_by_another_project() {
    let dns = TestDns::start().await;
    let mut daemon = TestDaemon::start_with(options(&dns));
    daemon.deploy_page("victim", "<h1>victim</h1>").await;
    daemon.deploy_page("attacker", "<h1>attacker</h1>").await;
    let (_, claim) = add(&daemon, "victim", "victim.example.org").await;
    let victim_value = claim["verification"]["recordValue"]
        .as_str()
        .unwrap()
        .to_owned();
    dns.set_txt("_slipway-challenge.victim.example.org", &victim_value);
    assert_eq!(
        verify(&daemon, "victim", "victim.example.org").await["status"],
        "active"
    );

    // A name under the victim's proven domain.
    for name in ["login.victim.example.org", "a.b.victim.example.org"] {
        let (status, refused) = add(&daemon, "attacker", name).await;
        assert_eq!(status, 400, "{name}: {refused}");
        assert_eq!(
            refused["error"]["code"], "INVALID_DOMAIN_TAKEN",
            "{refused}"
        );
    }

    // Deleted while its record is still published: the attacker's claim stays unproven.
    let path = "/api/projects/victim/domains/victim.example.org";
    assert_eq!(call(&daemon, "DELETE", path, None).await.0, 200);
    let (status, squat) = add(&daemon, "attacker", "victim.example.org").await;
    assert_eq!(status, 201, "{squat}");
    assert_eq!(squat["status"], "unverified", "{squat}");
    assert_eq!(
        verify(&daemon, "attacker", "victim.example.org").await["status"],
        "unverified"
    );
    assert!(!visit(&daemon, "victim.example.org")
        .await
        .1
        .contains("attacker"));

    // A restart does not prove it either; the owner's proof takes the name back.
    daemon.restart();
    assert!(!visit(&daemon, "victim.example.org")
        .await
        .1
        .contains("attacker"));
    let (status, back) = add(&daemon, "victim", "victim.example.org").await;
    assert_eq!(status, 201, "{back}");
    assert_eq!(back["status"], "active", "{back}");
    assert!(visit(&daemon, "victim.example.org")
        .await
        .1
        .contains("victim"));
    let (_, list) = call(&daemon, "GET", "/api/projects/attacker/domains", None).await;
    assert_eq!(list["domains"], json!([]), "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_suffix_needs_no_record_and_internal_mode_signs_only_its_list() {
    let dns = TestDns::start().await;
    let table = format!(
        "trusted_suffixes = [\"brand.test\", \"corp.example\"]\n{}",
        dns.nameserver_toml()
    );
    let daemon = TestDaemon::start_with(
        options(&dns)
            .domains_table(&table)
            .apps_domain("apps.test")
            .tls(TlsSetup::Internal),
    );
    daemon.deploy_page("web", "<h1>web</h1>").await;

    let (status, trusted) = add(&daemon, "web", "shop.brand.test").await;
    assert_eq!(status, 201, "{trusted}");
    assert_eq!(trusted["status"], "active", "{trusted}");
    let issuer = trusted["certificate"]["issuer"].as_str().unwrap();
    assert!(issuer.contains("Slipway internal"), "{issuer}");

    // Trusted for proof, but outside tls.internal_domain_suffixes (["test"]): refused.
    let (status, refused) = add(&daemon, "web", "www.corp.example").await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "INVALID_DOMAIN", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("internal_domain_suffixes"), "{message}");

    // Not trusted and no record: unproven, no certificate.
    let (_, pending) = add(&daemon, "web", "other.test").await;
    assert_eq!(pending["status"], "unverified", "{pending}");
    assert_eq!(pending["certificate"], Value::Null);
}
