//! `serve --dev` on a machine that cannot sandbox (issue 20): with `nft` and `ip` missing from
//! PATH (as root, and as an unprivileged user) it starts in sandbox mode `none` with a warning
//! naming what is missing and the packages; without `--dev` it refuses to start and says how to
//! try it anyway.

use std::path::Path;

use crate::support::{DaemonOptions, TestDaemon};

/// A directory of links to every command on this machine except `nft` and `ip`.
fn path_without_nft_and_ip(dir: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for system_dir in ["/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"] {
        let Ok(entries) = std::fs::read_dir(system_dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name == "nft" || name == "ip" || bin.join(&name).exists() {
                continue;
            }
            let _ = std::os::unix::fs::symlink(entry.path(), bin.join(&name));
        }
    }
    bin.display().to_string()
}

/// The daemon's own sandbox mode default, with `path` as its `PATH`.
fn options(path: &str) -> DaemonOptions {
    DaemonOptions::default()
        .default_sandbox_mode()
        .env("PATH", path)
}

#[tokio::test]
async fn dev_falls_back_to_no_sandbox_without_nft_and_ip() {
    let tools = tempfile::tempdir().unwrap();
    let path = path_without_nft_and_ip(tools.path());
    let daemon = TestDaemon::start_with(options(&path).dev());
    let log = daemon.log_with("slipway is ready");
    assert!(
        log.contains("sandbox.mode = \"auto\"") && log.contains("WITHOUT ANY ISOLATION"),
        "no fallback warning:\n{log}"
    );
    if nix::unistd::geteuid().is_root() {
        // As root only the tools are missing, and the warning names them and their packages.
        for needle in ["`ip`", "`nft`", "iproute2", "nftables"] {
            assert!(log.contains(needle), "warning lacks {needle}:\n{log}");
        }
    }
    assert!(
        log.contains("slipway is ready") && log.contains("sandbox=none"),
        "the ready line names the mode:\n{log}"
    );
    assert_eq!(daemon.healthz().await, 200);
    // The dashboard shows the mode in force from the API.
    let system = daemon.api("GET", "/api/system", None).await.json();
    assert_eq!(system["sandboxMode"], "none", "{system}");
    // And it deploys: the README's first deployment, a static site.
    daemon
        .deploy(
            "hello",
            &[("index.html", "<h1>hello</h1>\n", 0o644)],
            serde_json::json!({"buildCommand": "mkdir -p dist && cp index.html dist/"}),
        )
        .await;
    let page = daemon.app_get("hello", "/", &[]).await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("hello"));
}

#[tokio::test]
async fn without_dev_a_machine_that_cannot_sandbox_refuses_to_start() {
    let tools = tempfile::tempdir().unwrap();
    let path = path_without_nft_and_ip(tools.path());
    let (code, log) = TestDaemon::run_to_exit(options(&path));
    assert_ne!(code, Some(0), "it started:\n{log}");
    assert!(log.contains("starting the sandbox"), "{log}");
    assert!(log.contains("slipway serve --dev"), "no --dev hint:\n{log}");
    if nix::unistd::geteuid().is_root() {
        assert!(
            log.contains("nftables") && log.contains("iproute2"),
            "{log}"
        );
    }
}

#[tokio::test]
async fn dev_as_an_unprivileged_user_falls_back_too() {
    if !nix::unistd::geteuid().is_root() {
        println!("SKIP: needs root to start the daemon as another user (this run is that user)");
        return;
    }
    let tools = tempfile::tempdir().unwrap();
    let path = path_without_nft_and_ip(tools.path());
    // The daemon as `nobody` must be able to create its data dir in the test's temp dir.
    let parent = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(parent.path(), Some(65534), Some(65534)).unwrap();
    let daemon = TestDaemon::start_in(parent.path(), options(&path).dev().uid(65534));
    let log = daemon.log_with("slipway is ready");
    assert!(log.contains("needs the daemon to run as root"), "{log}");
    assert!(log.contains("sandbox=none"), "{log}");
    assert_eq!(daemon.healthz().await, 200);
}
