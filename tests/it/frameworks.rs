//! Zero-config deploys of real projects made by each framework's own create tool
//! (`tests/fixtures/projects/`): a Vite React app and an Astro site (static, with a deep link
//! that a single-page app routes on the client) and a Next.js app in server mode, each
//! deployed with `"framework": "auto"` and nothing else. Skips, saying so, without npm or the
//! npm registry.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::support::{missing_tool, registry_reachable, DaemonOptions, TestDaemon};

/// The fixture directory as the `.tar.gz` a user would upload.
fn archive(name: &str) -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/projects")
        .join(name);
    let encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut builder = tar::Builder::new(encoder);
    builder.append_dir_all(".", &dir).unwrap();
    builder.into_inner().unwrap().finish().unwrap()
}

/// Uploads, provisions with `framework: auto`, waits; the run's logs.
async fn deploy(daemon: &TestDaemon, slug: &str, fixture: &str) -> String {
    let (status, logs) = daemon
        .run_archive(
            slug,
            archive(fixture),
            json!({"framework": "auto"}),
            Duration::from_secs(400),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{slug}: {status}\n{logs}"
    );
    logs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vite_astro_and_next_projects_deploy_with_no_commands() {
    if missing_tool("npm", "the projects install with npm")
        || !registry_reachable("registry.npmjs.org")
    {
        return;
    }
    let daemon = TestDaemon::start_with(DaemonOptions::default().extra_toml(
        "[limits]\nbuild_timeout_s = 600\nhealth_timeout_s = 120\n[rate_limits]\nrequests_per_minute = 100000\n",
    ));
    let (vite, astro, next) = tokio::join!(
        deploy(&daemon, "vite-react", "vite-react"),
        deploy(&daemon, "astro-site", "astro-site"),
        deploy(&daemon, "next-app", "next-app"),
    );

    // Vite + React: npm ci, vite build, dist/ served; a deep link gets the app shell.
    assert!(vite.contains("detect: vite"), "{vite}");
    assert!(vite.contains("detect: install command `npm ci`"), "{vite}");
    assert!(
        vite.contains("deploy: serving static files from dist"),
        "{vite}"
    );
    let page = daemon.app_get("vite-react", "/", &[]).await;
    assert_eq!(page.status, 200);
    let shell = page.text();
    assert!(shell.contains("<div id=\"root\">"), "{shell}");
    let script = shell
        .split("src=\"")
        .find_map(|rest| {
            rest.split('"')
                .next()
                .filter(|src| src.starts_with("/assets/"))
        })
        .expect("a bundled script");
    let asset = daemon.app_get("vite-react", script, &[]).await;
    assert_eq!(asset.status, 200);
    assert!(asset.header("content-type").unwrap().contains("javascript"));
    let deep = daemon.app_get("vite-react", "/some/deep/link", &[]).await;
    assert_eq!(deep.status, 200, "single-page apps route on the client");
    assert_eq!(deep.text(), shell);
    let missing_asset = daemon.app_get("vite-react", "/assets/gone.js", &[]).await;
    assert_eq!(
        missing_asset.status, 404,
        "a file path is not the app shell"
    );

    // Astro: a static build in dist/, clean URLs.
    assert!(astro.contains("detect: astro"), "{astro}");
    assert!(astro.contains("Astro without a server adapter"), "{astro}");
    let home = daemon.app_get("astro-site", "/", &[]).await;
    assert!(home.text().contains("<h1>Astro</h1>"), "{}", home.text());
    // Astro writes about/index.html: /about is sent on to /about/, which serves it.
    let about = daemon.app_get("astro-site", "/about", &[]).await;
    assert_eq!(about.status, 308);
    assert_eq!(about.header("location"), Some("/about/"));
    let about = daemon.app_get("astro-site", "/about/", &[]).await;
    assert_eq!(about.status, 200);
    assert!(about.text().contains("About this Astro site"));

    // Next.js in server mode: next build, then next start on PORT.
    assert!(next.contains("detect: next"), "{next}");
    assert!(next.contains("Next.js (server mode)"), "{next}");
    assert!(next.contains("[build]"), "{next}");
    let page = daemon.app_get("next-app", "/", &[]).await;
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(
        page.header("x-powered-by") == Some("Next.js") || page.text().contains("/_next/"),
        "served by next start: {}",
        page.text()
    );
}
