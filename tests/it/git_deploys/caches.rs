//! Issue 31 item 3: a preview's build cannot change what the next production build restores.
//! A branch's build plants files in the framework cache (`.next/cache`) and in the package
//! managers' cache (`$XDG_CACHE_HOME`); the next production build finds neither, while the
//! preview's own next build finds its own (previews do have a cache). The old code shared one
//! cache volume per project, and production's second build served "poisoned". A torn-down
//! preview's cache goes with it.

use serde_json::json;

use super::fixtures::*;
use crate::support::TestDaemon;

/// Production's build: says what it found in the caches.
const MAIN_BUILD: &str = "mkdir -p out .next/cache\n\
    found=clean\n\
    if [ -e .next/cache/planted ]; then found=poisoned; fi\n\
    if [ -e \"$XDG_CACHE_HOME/planted\" ]; then found=poisoned; fi\n\
    echo \"$found\" > out/index.html\n";

/// The preview's build: plants in both caches, and says whether it found its own plant.
const EVIL_BUILD: &str = "mkdir -p out .next/cache \"$XDG_CACHE_HOME\"\n\
    if [ -e .next/cache/planted ]; then echo again > out/index.html; else echo first > out/index.html; fi\n\
    echo planted > .next/cache/planted\n\
    echo planted > \"$XDG_CACHE_HOME/planted\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_previews_build_cannot_change_what_production_restores() {
    let Some(git) = GitServer::start() else {
        return;
    };
    let daemon = TestDaemon::start_with(options());
    let web = set_up(
        &daemon,
        "cached",
        json!({"gitUrl": git.url(), "previews": true,
               "buildCommand": "sh build.sh", "outputDirectory": "out"}),
    )
    .await;
    // Each push follows the branch's last one (`before`), as a provider sends them.
    let push = |branch: &str, before: &str, commit: &str| {
        payload(
            "github/push.json",
            &[
                ("REF", format!("refs/heads/{branch}")),
                ("BEFORE", before.to_owned()),
                ("AFTER", commit.to_owned()),
                ("DELETED", "false".into()),
            ],
        )
    };
    let first = git.commit("main", &[("build.sh", MAIN_BUILD)]);
    let answer = web.github("push", "c-1", push("main", ZERO, &first)).await;
    web.completed(&answer, "deploy").await;
    assert_eq!(web.page("cached.localhost").await.text().trim(), "clean");

    let evil = git.commit("evil", &[("build.sh", EVIL_BUILD)]);
    let answer = web.github("push", "c-2", push("evil", ZERO, &evil)).await;
    web.completed(&answer, "preview").await;
    assert_eq!(
        web.page("evil--cached.localhost").await.text().trim(),
        "first"
    );

    // The next production build restores production's cache, which the preview never wrote.
    let second = git.commit("main", &[("README.md", "two")]);
    let answer = web
        .github("push", "c-3", push("main", &first, &second))
        .await;
    web.completed(&answer, "deploy").await;
    assert_eq!(
        web.page("cached.localhost").await.text().trim(),
        "clean",
        "production's build restored what a preview planted"
    );

    // The preview keeps a cache of its own between its builds.
    let evil_two = git.commit("evil", &[("README.md", "evil two")]);
    let answer = web
        .github("push", "c-4", push("evil", &evil, &evil_two))
        .await;
    web.completed(&answer, "preview").await;
    assert_eq!(
        web.page("evil--cached.localhost").await.text().trim(),
        "again"
    );

    // Its cache goes with it.
    let caches = daemon.data_dir().join("build-cache");
    let names = || {
        std::fs::read_dir(&caches)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with("--evil"))
            .count()
    };
    assert_eq!(names(), 1, "the preview's own cache");
    let torn = daemon
        .api("DELETE", "/api/projects/cached/previews/evil", None)
        .await;
    assert_eq!(torn.status, 200, "{}", torn.text());
    assert_eq!(names(), 0, "the preview's cache outlived it");
}
