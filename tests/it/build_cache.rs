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

/// An install that says whether `node_modules` was already there, as a package manager would
/// find it, and fills it when not.
pub const MODULES_INSTALL: &str =
    "if test -f node_modules/pkg/marker; then echo MODULES-RESTORED; \
    else mkdir -p node_modules/pkg && echo one > node_modules/pkg/marker && echo MODULES-FRESH; fi";

/// Deploys a Node-shaped source with `lockfile`; the build fails when `fail` is set.
async fn node_build(daemon: &TestDaemon, slug: &str, lockfile: &str, fail: bool) -> String {
    let mut files = vec![
        ("public/index.html", "<h1>node</h1>", 0o644),
        ("package.json", r#"{"dependencies":{"pkg":"1.0.0"}}"#, 0o644),
        ("package-lock.json", lockfile, 0o644),
    ];
    if fail {
        files.push(("fail", "", 0o644));
    }
    let upload = daemon.upload(slug, targz(&files)).await;
    assert_eq!(upload.status, 201, "{}", upload.text());
    let body = json!({"installCommand": MODULES_INSTALL, "buildCommand": "test ! -e fail"});
    let started = daemon.provision(slug, body).await;
    let run = started["provisioningId"].as_str().unwrap();
    let status = daemon.wait_run(run, Duration::from_secs(60)).await;
    let expected = match fail {
        true => "provisioning_failed",
        false => "provisioning_complete",
    };
    let logs = daemon
        .logs_text(started["deploymentId"].as_str().unwrap())
        .await;
    assert_eq!(status["status"], expected, "{status}\n{logs}");
    logs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_modules_comes_back_for_the_same_lockfile_after_a_successful_build_only() {
    let daemon = TestDaemon::start();
    let first = node_build(&daemon, "web", "{\"v\":1}", false).await;
    assert!(
        first.contains("no node_modules in the build cache yet: fresh install"),
        "{first}"
    );
    assert!(first.contains("MODULES-FRESH"), "{first}");
    assert!(
        first.contains("node_modules kept in the build cache"),
        "{first}"
    );

    let second = node_build(&daemon, "web", "{\"v\":1}", false).await;
    assert!(
        second.contains("node_modules restored from the build cache (lockfile unchanged)"),
        "{second}"
    );
    assert!(second.contains("MODULES-RESTORED"), "{second}");
    assert!(
        !second.contains("node_modules kept"),
        "nothing new to keep: {second}"
    );

    let failed = node_build(&daemon, "web", "{\"v\":2}", true).await;
    assert!(
        failed.contains("lockfile changed: fresh install"),
        "{failed}"
    );
    assert!(failed.contains("MODULES-FRESH"), "{failed}");
    assert!(
        !failed.contains("node_modules kept"),
        "a failed build keeps nothing: {failed}"
    );
    let after_failure = node_build(&daemon, "web", "{\"v\":2}", false).await;
    assert!(
        after_failure.contains("lockfile changed: fresh install"),
        "the failed build kept nothing: {after_failure}"
    );

    let other = node_build(&daemon, "other", "{\"v\":2}", false).await;
    assert!(
        other.contains("no node_modules in the build cache yet"),
        "never another project's: {other}"
    );
    let cleared = daemon
        .api("DELETE", "/api/projects/web/build-cache", None)
        .await;
    assert_eq!(cleared.status, 200, "{}", cleared.text());
    let after_clear = node_build(&daemon, "web", "{\"v\":2}", false).await;
    assert!(
        after_clear.contains("MODULES-FRESH"),
        "cleared: {after_clear}"
    );
}
