//! Issue 4's must-shows at the daemon level: the real `slipway` binary in
//! `sandbox.mode = "namespaces"`, each attack a real build or start command provisioned through
//! the API. Every daemon gets its own sandbox instance (nftables table, veth prefix, cgroups),
//! subnet and uid range, so tests (and a daemon already running on the machine) do not meet.
//! Tests skip with a printed reason without root, namespaces, `ip` or `nft`.

mod addon_backups;
mod addon_ops;
mod addon_pitr;
mod addon_sleep;
mod addon_tunnel;
mod addon_upgrade;
mod addons;
mod attacks;
mod backup;
mod chaos;
mod comeback;
mod cron;
mod disk;
mod formation;
mod machine;
mod network;
mod next_to_docker;
mod outlive;
mod release;
mod runs;
mod sleeping;
mod starts;

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde_json::json;

use crate::support::{targz, DaemonOptions, TestDaemon};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A namespaced daemon and the names it was given.
pub(crate) struct Sandboxed {
    pub daemon: TestDaemon,
    /// Projects get uids `uid_base + index` in creation order (index 0 first).
    pub uid_base: u32,
    /// The nftables table (`inet <instance>`) the daemon's runner owns.
    pub instance: String,
}

impl Sandboxed {
    /// Starts a daemon in namespaces mode with `extra` appended to its config (after the
    /// `[sandbox]` keys this sets), or returns `None` with a printed reason.
    pub fn start(test: &str, extra: &str) -> Option<Sandboxed> {
        Sandboxed::start_with(test, DaemonOptions::default(), extra)
    }

    /// [`Sandboxed::start`] from `options` (e.g. with top-level keys) instead of the defaults.
    pub fn start_with(test: &str, options: DaemonOptions, extra: &str) -> Option<Sandboxed> {
        Sandboxed::start_prepared(test, options, extra, |_| {})
    }

    /// [`Sandboxed::start_with`], with `prepare` called on the (not yet existing) data dir
    /// first, e.g. to restore a backup into it.
    pub fn start_prepared(
        test: &str,
        options: DaemonOptions,
        extra: &str,
        prepare: impl FnOnce(&Path),
    ) -> Option<Sandboxed> {
        if let Some(reason) = unavailable() {
            eprintln!("SKIP {test}: {reason}");
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let instance = format!("slwd{}_{n}", pid % 100_000);
        // 64 project uids per daemon (the 50-apps test needs 50), never shared between the
        // daemons of one test run.
        let uid_base = 300_000 + (pid % 1_000) * 4_096 + (n % 64) * 64;
        let subnet = format!("10.214.{}.0/24", (pid.wrapping_mul(8) + n) % 256);
        let extra_toml = format!(
            "uid_base = {uid_base}\ninstance = \"{instance}\"\nsubnet = \"{subnet}\"\n\n{extra}\n\
             [rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n"
        );
        // Under /var/tmp: the sandbox's own /tmp would hide a data dir under /tmp anyway.
        let daemon = TestDaemon::start_prepared_in(
            Path::new("/var/tmp"),
            options.sandbox_mode("namespaces").extra_toml(&extra_toml),
            prepare,
        );
        Some(Sandboxed {
            daemon,
            uid_base,
            instance,
        })
    }

    /// Every process on the host whose real uid is one of this daemon's project uids, as
    /// `uid: command line`.
    pub fn project_processes(&self) -> Vec<String> {
        processes_with_uids(self.uid_base..self.uid_base + 64)
    }

    /// Asserts that no process of the daemon's projects is left (polling up to 2 s, for the
    /// kernel to finish reaping).
    #[track_caller]
    pub fn assert_no_project_processes(&self, after: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        loop {
            let left = self.project_processes();
            if left.is_empty() {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "processes of the projects' uids left after {after}: {left:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Uploads `files` for `slug` (once per call), provisions `body` and waits for the end.
    /// Returns the final status and the deployment's logs.
    pub async fn run(
        &self,
        slug: &str,
        files: &[(&str, &str, u32)],
        body: serde_json::Value,
        timeout: Duration,
    ) -> (serde_json::Value, String) {
        self.daemon
            .run_archive(slug, targz(files), body, timeout)
            .await
    }

    /// What the host ends of this daemon's veth pairs start with: `sw` + 16 bits of the
    /// instance's FNV-1a hash.
    pub fn interface_prefix(&self) -> String {
        let hash = self.instance.bytes().fold(0x811c_9dc5u32, |hash, byte| {
            (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
        });
        format!("sw{:04x}", hash & 0xffff)
    }

    /// The host ends of this daemon's veth pairs (named `sw` + 16 bits of the instance's
    /// FNV-1a hash + the link index).
    pub fn interfaces(&self) -> Vec<String> {
        let prefix = self.interface_prefix();
        let output = std::process::Command::new("ip")
            .args(["-o", "link", "show"])
            .output()
            .expect("ip link");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.split(": ").nth(1))
            .map(|name| name.split('@').next().unwrap_or(name).to_owned())
            .filter(|name| name.starts_with(&prefix))
            .collect()
    }

    /// `GET /healthz` on the control host.
    pub async fn healthz(&self) -> u16 {
        self.daemon.healthz().await
    }
}

/// Why the namespaced sandbox cannot run here, if it cannot.
/// Why this machine cannot run a namespaced daemon, if it cannot (for tests outside this
/// module that fall back to mode none).
pub(crate) fn namespaces_unavailable() -> Option<String> {
    unavailable()
}

fn unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("the namespaced sandbox needs root".into());
    }
    for ns in ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"] {
        if !Path::new("/proc/self/ns").join(ns).exists() {
            return Some(format!("this kernel has no {ns} namespaces"));
        }
    }
    if std::fs::read_to_string("/proc/sys/user/max_user_namespaces").is_ok_and(|v| v.trim() == "0")
    {
        return Some("user namespaces are disabled (user.max_user_namespaces = 0)".into());
    }
    for (tool, argument) in [("ip", "-V"), ("nft", "--version")] {
        let works = std::process::Command::new(tool)
            .arg(argument)
            .output()
            .is_ok_and(|output| output.status.success());
        if !works {
            return Some(format!("`{tool}` is not installed"));
        }
    }
    None
}

pub(crate) fn node_missing(test: &str) -> bool {
    let found = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if !found {
        eprintln!("SKIP {test}: node is not installed");
    }
    !found
}

/// `uid: cmdline` of every process whose real uid is in `uids`.
pub(crate) fn processes_with_uids(uids: std::ops::Range<u32>) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let uid = status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().next())
            .and_then(|uid| uid.parse::<u32>().ok());
        if let Some(uid) = uid.filter(|uid| uids.contains(uid)) {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            found.push(format!(
                "{uid}: {} (pid {})",
                cmdline.trim(),
                name.to_string_lossy()
            ));
        }
    }
    found
}

/// The host address and port a deployment's app listens on, from its system log line
/// "app is accepting connections on port N (ADDR:N)".
pub(crate) fn app_address(logs: &str) -> Option<String> {
    let line = logs
        .lines()
        .find(|line| line.contains("app is accepting connections on port"))?;
    let start = line.rfind('(')? + 1;
    let end = line.rfind(')')?;
    Some(line[start..end].to_owned())
}

#[tokio::test]
async fn builds_run_as_uid_1000_without_privileges_and_leave_nothing_behind() {
    let Some(sandboxed) = Sandboxed::start("identity", "") else {
        return;
    };
    let command = "id -u; grep -E 'CapEff|NoNewPrivs|Seccomp' /proc/self/status; \
                   echo mine > made-by-build; setsid sleep 300 & \
                   mkdir -p dist && echo ok > dist/index.html";
    let (status, logs) = sandboxed
        .run(
            "whoami",
            &[("x", "x", 0o644)],
            json!({"buildCommand": command, "installCommand": ""}),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    for expected in [
        "[build] 1000\n",
        "[build] CapEff:\t0000000000000000",
        "[build] NoNewPrivs:\t1",
        "[build] Seccomp:\t2",
    ] {
        assert!(
            logs.contains(expected),
            "{expected:?} missing from:\n{logs}"
        );
    }
    // The file the build wrote belongs to the project's uid on the host.
    let dpl = status["deploymentId"].as_str().unwrap();
    let made = sandboxed
        .daemon
        .data_dir()
        .join("deployments")
        .join(dpl)
        .join("app/made-by-build");
    use std::os::unix::fs::MetadataExt;
    let metadata = std::fs::metadata(&made).unwrap_or_else(|e| panic!("{}: {e}", made.display()));
    assert_eq!(
        (metadata.uid(), metadata.gid()),
        (sandboxed.uid_base, sandboxed.uid_base),
        "owned by the first project's uid"
    );
    // The background `setsid sleep 300` went with the build step.
    sandboxed.assert_no_project_processes("the build");
    assert_eq!(
        sandboxed.daemon.app_get("whoami", "/", &[]).await.text(),
        "ok\n"
    );
}

/// Prints the app's identity, then becomes the Node server.
const START_WITH_IDENTITY: &str =
    "id -u; grep -E 'CapEff|NoNewPrivs|Seccomp' /proc/self/status; exec node server.js";

#[tokio::test]
async fn a_live_app_comes_back_after_a_daemon_restart() {
    if node_missing("restart") {
        return;
    }
    let Some(mut sandboxed) = Sandboxed::start("restart", "") else {
        return;
    };
    let (status, logs) = sandboxed
        .run(
            "lasting",
            &[("server.js", crate::pipeline::NODE_APP, 0o644)],
            json!({"startCommand": START_WITH_IDENTITY}),
            Duration::from_secs(120),
        )
        .await;
    assert_eq!(
        status["status"], "provisioning_complete",
        "{status}\n{logs}"
    );
    assert_eq!(
        sandboxed.daemon.app_get("lasting", "/", &[]).await.status,
        200
    );
    // The app has the build's identity and restrictions too.
    for expected in [
        "[stdout] 1000\n",
        "[stdout] CapEff:\t0000000000000000",
        "[stdout] NoNewPrivs:\t1",
        "[stdout] Seccomp:\t2",
    ] {
        assert!(
            logs.contains(expected),
            "{expected:?} missing from:\n{logs}"
        );
    }
    let running = sandboxed.project_processes();
    assert!(
        running
            .iter()
            .any(|p| p.starts_with(&format!("{}: node server.js", sandboxed.uid_base))),
        "the app runs as the project's uid on the host: {running:?}"
    );
    let table = sandboxed.instance.clone();
    let table_exists = move || {
        std::process::Command::new("nft")
            .args(["list", "table", "inet", &table])
            .output()
            .is_ok_and(|output| output.status.success())
    };
    assert!(table_exists(), "the runner's nftables table is installed");

    // A clean stop leaves the app running (apps outlive the daemon) with its link and table.
    assert_eq!(sandboxed.daemon.stop(), Some(0));
    assert!(table_exists(), "the app still needs the nftables table");
    assert_eq!(sandboxed.interfaces().len(), 1);
    assert_eq!(sandboxed.project_processes(), running);
    sandboxed.daemon.start_again();
    // Ready means the live apps are back.
    let response = sandboxed.daemon.app_get("lasting", "/", &[]).await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert!(
        response.text().starts_with("secret="),
        "{}",
        response.text()
    );
    assert!(table_exists());

    // A daemon killed outright (no cleanup of its own) with a build in flight: the build's
    // sandbox dies with it, the app's does not; the next start adopts the app.
    let slow = sandboxed
        .daemon
        .provision(
            "lasting",
            json!({"buildCommand": "echo working; sleep 60", "startCommand": START_WITH_IDENTITY}),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut child = sandboxed.daemon.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sandboxed.project_processes() != running {
        assert!(
            std::time::Instant::now() < deadline,
            "the build outlived the killed daemon (or the app did not): {:?}",
            sandboxed.project_processes()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sandboxed.daemon.start_again();
    let response = sandboxed.daemon.app_get("lasting", "/", &[]).await;
    assert_eq!(response.status, 200, "{}", response.text());
    let status = sandboxed
        .daemon
        .wait_run(
            slow["provisioningId"].as_str().unwrap(),
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(status["error"]["code"], "INTERRUPTED", "{status}");
    assert_eq!(
        sandboxed.interfaces().len(),
        1,
        "only the app's link: {:?}",
        sandboxed.interfaces()
    );
    assert_eq!(sandboxed.daemon.stop(), Some(0));
    // `slipway stop-apps` without a daemon stops the app and removes what was left on the host.
    let output = sandboxed.daemon.stop_apps();
    assert!(output.status.success(), "{output:?}");
    assert!(!table_exists());
    assert_eq!(sandboxed.interfaces(), Vec::<String>::new());
    sandboxed.assert_no_project_processes("stop-apps");
}
