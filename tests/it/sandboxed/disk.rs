//! Disk limits (issue 10): a build that writes past `limits.build_disk_mb` fails
//! `BUILD_FAILED` naming the limit without filling the host's disk, an app that fills its
//! `/data` gets ENOSPC, and a data dir whose filesystem is short of room refuses uploads and
//! runs with `INSUFFICIENT_STORAGE` while everything stored stays intact.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use super::Sandboxed;
use crate::support::{missing_tool, targz, DaemonOptions, TestDaemon};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_fills_its_disk_fails_and_an_app_gets_enospc() {
    let Some(sandboxed) = Sandboxed::start(
        "a_build_that_fills_its_disk_fails_and_an_app_gets_enospc",
        "[limits]\nbuild_disk_mb = 48\napp_disk_mb = 24\n",
    ) else {
        return;
    };
    // Limits are on only where the daemon's probe loop mount worked; where loop devices are
    // usable, it must have.
    let system = sandboxed
        .daemon
        .api("GET", "/api/system", None)
        .await
        .json();
    if system["diskLimits"] != true {
        let loops_usable = Path::new("/dev/loop-control").exists()
            && Command::new("losetup")
                .arg("-f")
                .output()
                .is_ok_and(|output| output.status.success());
        assert!(
            !loops_usable,
            "loop devices work here but the daemon runs without disk limits:\n{}",
            sandboxed.daemon.log_text()
        );
        eprintln!("SKIP a_build_that_fills_its_disk_fails_and_an_app_gets_enospc: no usable loop devices here, so no disk limits");
        return;
    }
    // The build tries to write 1000 MB. Other tests write to the same disk meanwhile (npm
    // installs, build caches: ~100-200 MB), so the check allows 400 MB: far above what they
    // write, far below what an unlimited build would.
    let before = slipway::disk::available_bytes(Path::new("/var/tmp")).unwrap();
    let (status, logs) = sandboxed
        .run(
            "filler",
            &[("index.html", "<h1>x</h1>", 0o644)],
            json!({"buildCommand": "dd if=/dev/zero of=big bs=1M count=1000"}),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(status["status"], "provisioning_failed", "{status}");
    assert_eq!(status["error"]["code"], "BUILD_FAILED", "{status}");
    let message = status["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("disk limit") && message.contains("limits.build_disk_mb = 48"),
        "{message}"
    );
    assert!(logs.contains("No space left on device"), "{logs}");
    let after = slipway::disk::available_bytes(Path::new("/var/tmp")).unwrap();
    assert!(
        before.saturating_sub(after) < 400 << 20,
        "the build wrote {} MB to the host's disk",
        (before - after) >> 20
    );

    if missing_tool("node", "the app is a node server") {
        return;
    }
    let app = "require('http').createServer((q, r) => r.end('ok')).listen(process.env.PORT);";
    let (status, logs) = sandboxed
        .run(
            "hoarder",
            &[("server.js", app, 0o644)],
            json!({"startCommand": "dd if=/dev/zero of=/data/fill bs=1M count=100; echo dd-exit=$?; exec node server.js"}),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    assert!(logs.contains("dd-exit=1"), "{logs}");
    assert!(logs.contains("No space left on device"), "{logs}");
}

/// A loop-mounted ext4 filesystem of `size_mb` the test owns; unmounted on drop.
struct SmallDisk {
    mount: PathBuf,
}

impl SmallDisk {
    fn new(size_mb: u64) -> Option<SmallDisk> {
        let mount = PathBuf::from(format!("/var/tmp/slipway-small-{}", std::process::id()));
        let image = mount.with_extension("img");
        std::fs::create_dir_all(&mount).ok()?;
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(size_mb << 20))
            .ok()?;
        let made = Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&image)
            .status();
        // The daemon's own loop mount: it makes the loop device's node where /dev lacks it
        // (the install test's container), which `mount -o loop` does not.
        let mounted =
            made.is_ok_and(|s| s.success()) && slipway::disk::mount_image(&image, &mount).is_ok();
        let _ = std::fs::remove_file(&image);
        mounted.then_some(SmallDisk { mount })
    }

    /// Fills the filesystem until `free_mb` are left.
    fn leave_free(&self, free_mb: u64) {
        let filler = self.mount.join("filler");
        let _ = std::fs::remove_file(&filler);
        let free = slipway::disk::available_bytes(&self.mount).unwrap();
        let size = free.saturating_sub(free_mb << 20);
        let file = std::fs::File::create(&filler).unwrap();
        nix::fcntl::fallocate(&file, nix::fcntl::FallocateFlags::empty(), 0, size as i64).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        let _ = std::fs::remove_dir(&self.mount);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_dir_refuses_uploads_and_runs_and_keeps_what_it_has() {
    if !nix::unistd::geteuid().is_root()
        || missing_tool("mkfs.ext4", "the test makes a small filesystem")
    {
        eprintln!("SKIP a_full_data_dir_refuses_uploads_and_runs_and_keeps_what_it_has: needs root and mkfs.ext4");
        return;
    }
    let Some(disk) = SmallDisk::new(256) else {
        eprintln!("SKIP a_full_data_dir_refuses_uploads_and_runs_and_keeps_what_it_has: no loop mount here");
        return;
    };
    let daemon = TestDaemon::start_in(
        &disk.mount,
        DaemonOptions::default().extra_toml("[limits]\ndisk_reserve_mb = 40\nbuild_disk_mb = 64\n"),
    );
    let site = daemon.deploy_page("site", "<h1>kept</h1>").await;
    assert_eq!(site["status"], "provisioning_complete");

    // Room for an upload but not for a build's workspace plus the reserve.
    disk.leave_free(80);
    let upload = daemon
        .upload("site", targz(&[("index.html", "<h1>new</h1>", 0o644)]))
        .await;
    assert_eq!(upload.status, 201, "{}", upload.text());
    let refused = daemon
        .api(
            "POST",
            "/api/projects/site/provision",
            Some(json!({"projectSlug": "site"})),
        )
        .await;
    refused.assert_error(507, "INSUFFICIENT_STORAGE");
    assert!(
        refused.text().contains("limits.disk_reserve_mb"),
        "{}",
        refused.text()
    );

    // Not even room for an upload.
    disk.leave_free(20);
    let refused = daemon
        .upload("site", targz(&[("index.html", "<h1>newer</h1>", 0o644)]))
        .await;
    refused.assert_error(507, "INSUFFICIENT_STORAGE");

    // What was stored is intact: the API answers from the store and the site is served.
    let project = daemon.api("GET", "/api/projects/site", None).await;
    assert_eq!(project.status, 200, "{}", project.text());
    let page = daemon.app_get("site", "/", &[]).await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("kept"));

    // With room again, the same requests work.
    let _ = std::fs::remove_file(disk.mount.join("filler"));
    let upload = daemon
        .upload("site", targz(&[("index.html", "<h1>newest</h1>", 0o644)]))
        .await;
    assert_eq!(upload.status, 201, "{}", upload.text());
    drop(daemon);
}

/// In a sandbox the project's build cache is at `/cache`, kept between its builds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_build_cache_is_mounted_in_the_sandbox_and_kept() {
    let Some(sandboxed) =
        Sandboxed::start("the_build_cache_is_mounted_in_the_sandbox_and_kept", "")
    else {
        return;
    };
    let files = [("index.html", "<h1>x</h1>", 0o644)];
    let body = json!({"buildCommand": format!("echo cache at $npm_config_cache; {}", crate::build_cache::PROBE)});
    let (status, logs) = sandboxed
        .run("cached", &files, body.clone(), Duration::from_secs(60))
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    assert!(
        logs.contains("cache at /cache/npm") && logs.contains("CACHE-MISS"),
        "{logs}"
    );
    let (_, logs) = sandboxed
        .run("cached", &files, body, Duration::from_secs(60))
        .await;
    assert!(logs.contains("CACHE-HIT"), "{logs}");
}

/// In a sandbox `node_modules` comes back as the project's own (the daemon copies it across
/// the workspace's and the cache's filesystems): the next install can write into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_modules_comes_back_writable_by_the_project_in_the_sandbox() {
    let Some(sandboxed) = Sandboxed::start(
        "node_modules_comes_back_writable_by_the_project_in_the_sandbox",
        "",
    ) else {
        return;
    };
    let files = [
        ("index.html", "<h1>x</h1>", 0o644),
        ("package.json", r#"{"dependencies":{"pkg":"1.0.0"}}"#, 0o644),
        ("package-lock.json", "{}", 0o644),
    ];
    let install = format!(
        "{} && touch node_modules/pkg/added node_modules/pkg/new-$$",
        crate::build_cache::MODULES_INSTALL
    );
    let body = json!({"installCommand": install, "buildCommand": "true"});
    for expected in ["MODULES-FRESH", "MODULES-RESTORED"] {
        let (status, logs) = sandboxed
            .run("modules", &files, body.clone(), Duration::from_secs(60))
            .await;
        assert_eq!(
            status["status"], "provisioning_complete",
            "{status}\n{logs}"
        );
        assert!(logs.contains(expected), "{logs}");
    }
}
