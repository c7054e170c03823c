//! Helpers for the sandbox tests: a runner with unique names per test that checks its own
//! cleanup, step specs, and running a step to completion with its output.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use slipway::config::{SandboxConfig, SandboxMode};
use slipway::sandbox::{
    hand_over, AppHandle, Exit, NamespaceRunner, Runner, Running, StepKind, StepSpec,
};
use tokio::io::AsyncReadExt;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Held by the test that flushes the host's nftables ruleset, and by tests that need egress
/// (NAT through the runners' host tables) meanwhile.
pub static HOST_RULESET: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A runner of its own (table, veth prefix, cgroups, /24), or `None` with a printed reason.
pub struct TestRunner {
    pub runner: NamespaceRunner,
    config: SandboxConfig,
    /// A uid no other test uses: every process of this test runs as it on the host.
    pub project_uid: u32,
    instance: String,
}

impl TestRunner {
    pub fn start(test: &str) -> Option<TestRunner> {
        TestRunner::start_with(test, |_| {})
    }

    /// [`TestRunner::start`] with a change to the runner's config.
    pub fn start_with(test: &str, change: impl FnOnce(&mut SandboxConfig)) -> Option<TestRunner> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIP {test}: the namespaced sandbox needs root");
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let instance = format!("slwt{}_{n}", pid % 100_000);
        let mut config = SandboxConfig {
            mode: SandboxMode::Namespaces,
            uid_base: 200_000,
            subnet: (
                Ipv4Addr::new(10, 213, 100 + ((pid % 20) * 6 + n) as u8 % 150, 0),
                24,
            ),
            pass_env: Vec::new(),
            instance: instance.clone(),
            allow_smtp: false,
        };
        change(&mut config);
        let exe = PathBuf::from(env!("CARGO_BIN_EXE_slipway"));
        let run_dir = std::env::temp_dir().join(format!("slipway-run-{instance}"));
        match NamespaceRunner::start_instance(&instance, &config, exe, run_dir, &[]) {
            Ok(runner) => Some(TestRunner {
                runner,
                config,
                project_uid: 230_000 + (pid % 1000) * 50 + n,
                instance,
            }),
            Err(error) => {
                eprintln!("SKIP {test}: the namespaced sandbox is unavailable here: {error}");
                None
            }
        }
    }

    /// Simulates a daemon crash and restart: the old runner is dropped without shutdown and
    /// a new one starts with the same names.
    pub fn restart(self) -> TestRunner {
        self.restart_with(&[])
    }

    /// [`TestRunner::restart`] where the new runner is told of apps that outlived the old
    /// one, as the daemon does with those on record.
    pub fn restart_with(self, survivors: &[AppHandle]) -> TestRunner {
        let exe = PathBuf::from(env!("CARGO_BIN_EXE_slipway"));
        drop(self.runner);
        let run_dir = std::env::temp_dir().join(format!("slipway-run-{}", self.instance));
        let runner =
            NamespaceRunner::start_instance(&self.instance, &self.config, exe, run_dir, survivors)
                .unwrap();
        TestRunner { runner, ..self }
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    pub fn spec(&self, kind: StepKind, command: &str) -> StepSpec {
        StepSpec {
            name: format!("{}-step", self.instance),
            kind,
            command: command.to_owned(),
            env: Vec::new(),
            project_uid: self.project_uid,
            memory_mb: 256,
            pids: 128,
            cpus: 1.0,
            stop_grace: Duration::from_secs(2),
            limited_dirs: Vec::new(),
            tty: None,
            reach: Vec::new(),
            serve_port: None,
            link: None,
        }
    }

    /// A workspace owned by the project's uid, as the pipeline prepares it.
    pub fn workspace(&self) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        hand_over(dir.path(), self.project_uid).unwrap();
        dir
    }

    /// Shuts the runner down and checks that nothing of it is left on the host.
    pub fn finish(self) {
        let table = self.runner.nft_table().to_owned();
        let prefix = self.runner.interface_prefix().to_owned();
        self.runner.shutdown();
        let listed = std::process::Command::new("nft")
            .args(["list", "table", "inet", &table])
            .output()
            .unwrap();
        assert!(
            !listed.status.success(),
            "the nftables table {table} is still there"
        );
        let links = std::process::Command::new("ip")
            .args(["-o", "link", "show"])
            .output()
            .unwrap();
        let links = String::from_utf8_lossy(&links.stdout);
        assert!(
            !links.contains(&format!(": {prefix}")),
            "interfaces with prefix {prefix} remain:\n{links}"
        );
        for hierarchy in ["memory", "pids", "cpu", "freezer", "unified"] {
            let leftovers = find_dirs_named(
                Path::new("/sys/fs/cgroup").join(hierarchy).as_path(),
                &self.instance,
                3,
            );
            assert!(leftovers.is_empty(), "cgroups left: {leftovers:?}");
        }
        assert_eq!(
            processes_of(self.project_uid),
            Vec::<i32>::new(),
            "processes of the project uid remain"
        );
    }
}

pub fn find_dirs_named(dir: &Path, name: &str, depth: u32) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            continue;
        }
        if path.file_name().is_some_and(|file| file == name) {
            found.push(path);
        } else if depth > 0 {
            found.extend(find_dirs_named(&path, name, depth - 1));
        }
    }
    found
}

/// Host pids whose real uid is `uid`.
pub fn processes_of(uid: u32) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let real_uid = status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().next()?.parse::<u32>().ok());
        if real_uid == Some(uid) {
            pids.push(pid);
        }
    }
    pids
}

/// Waits (bounded) until no process of `uid` is left.
pub async fn no_processes_of(uid: u32, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if processes_of(uid).is_empty() {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub struct Finished {
    pub exit: Exit,
    pub stdout: String,
    pub stderr: String,
}

/// Reads a step's output to the end and waits for it, stopping it after `timeout`.
pub async fn finish_step(mut running: Running, timeout: Duration) -> Finished {
    let stdout = running.stdout.take().map(|mut pipe| {
        tokio::spawn(async move {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text).await;
            text
        })
    });
    let stderr = running.stderr.take().map(|mut pipe| {
        tokio::spawn(async move {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text).await;
            text
        })
    });
    let exit = match tokio::time::timeout(timeout, running.wait()).await {
        Ok(exit) => exit.unwrap(),
        Err(_) => {
            eprintln!("step timed out after {timeout:?}; stopping it");
            running.stop(Duration::from_millis(200)).await.unwrap()
        }
    };
    let stdout = match stdout {
        Some(task) => task.await.unwrap(),
        None => String::new(),
    };
    let stderr = match stderr {
        Some(task) => task.await.unwrap(),
        None => String::new(),
    };
    Finished {
        exit,
        stdout,
        stderr,
    }
}

pub async fn run(runner: &TestRunner, spec: StepSpec, timeout: Duration) -> Finished {
    let running = runner.runner.spawn(spec).unwrap();
    finish_step(running, timeout).await
}

/// Line-by-line reading of a step's output, each line with a deadline.
pub struct Lines {
    lines: tokio::io::Lines<tokio::io::BufReader<slipway::sandbox::LogPipe>>,
}

impl Lines {
    pub fn new(stdout: slipway::sandbox::LogPipe) -> Lines {
        use tokio::io::AsyncBufReadExt;
        Lines {
            lines: tokio::io::BufReader::new(stdout).lines(),
        }
    }

    pub async fn next(&mut self, within: Duration) -> Option<String> {
        tokio::time::timeout(within, self.lines.next_line())
            .await
            .ok()?
            .ok()?
    }
}
