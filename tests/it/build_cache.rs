//! Build caches (issue 16): a project's package-manager cache survives between its own builds
//! (the second build finds what the first left), is never another project's, shows in the
//! usage figures, and `DELETE …/build-cache` empties it. The same command runs in a sandbox
//! in `sandboxed::disk` terms: `/cache` there, the host path in mode `none` (here).

use std::time::Duration;

use serde_json::json;

use crate::support::{targz, TestDaemon};

/// A build that reports whether the npm cache already holds what an earlier build left.
pub const PROBE: &str = "if test -f \"$npm_config_cache/seen\"; then echo CACHE-HIT; \
    else mkdir -p \"$npm_config_cache\" && head -c 200000 /dev/zero > \"$npm_config_cache/seen\" && echo CACHE-MISS; fi";

async fn build(daemon: &TestDaemon, slug: &str) -> String {
    let upload = daemon
        .upload(
            slug,
            targz(&[("public/index.html", "<h1>cache</h1>", 0o644)]),
        )
        .await;
    assert_eq!(upload.status, 201, "{}", upload.text());
    let started = daemon.provision(slug, json!({"buildCommand": PROBE})).await;
    daemon
        .wait_complete(&started, Duration::from_secs(60))
        .await;
    daemon
        .logs_text(started["deploymentId"].as_str().unwrap())
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_cache_survives_its_builds_is_its_own_and_can_be_cleared() {
    let daemon = TestDaemon::start();
    assert!(build(&daemon, "web").await.contains("CACHE-MISS"));
    assert!(
        build(&daemon, "web").await.contains("CACHE-HIT"),
        "the second build found the cache"
    );
    assert!(
        build(&daemon, "other").await.contains("CACHE-MISS"),
        "never another project's"
    );
    let usage = daemon
        .api("GET", "/api/projects/web/usage", None)
        .await
        .json();
    assert!(
        usage["buildCacheBytes"].as_u64().unwrap() >= 200_000,
        "{usage}"
    );
    let cleared = daemon
        .api("DELETE", "/api/projects/web/build-cache", None)
        .await;
    assert_eq!(cleared.status, 200, "{}", cleared.text());
    assert_eq!(cleared.json()["deleted"], true);
    assert!(cleared.json()["freedBytes"].as_u64().unwrap() >= 200_000);
    assert!(
        build(&daemon, "web").await.contains("CACHE-MISS"),
        "cleared"
    );
}
