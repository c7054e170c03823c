//! The one daemon harness of the integration tests: [`TestDaemon`] starts the real `slipway`
//! binary (plain HTTP on port 0, HTTPS on a chosen port, any TLS mode) in a temp data dir with
//! the [`DaemonOptions`] a test builds, restarts and stops it, and talks to it over real
//! sockets. Deploying through it is in `deploying.rs`, raw HTTP in `http.rs`, TLS clients
//! (curl, a rustls probe) in `tls.rs`. Used by every daemon-level test module.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub mod browser;
mod deploying;
pub mod dns;
mod http;
mod options;
pub mod tls;

pub use deploying::{step_state, targz};
pub use http::{http_request, raw_exchange, TestResponse};
pub use options::{DaemonOptions, TlsSetup};

pub const BIN: &str = env!("CARGO_BIN_EXE_slipway");

pub struct TestDaemon {
    pub dir: tempfile::TempDir,
    pub options: DaemonOptions,
    pub child: Option<Child>,
    pub http: SocketAddr,
    pub https: Option<SocketAddr>,
    /// The `metrics_listen` listener, when configured.
    pub metrics: Option<SocketAddr>,
    pub token: String,
    /// stderr of the daemon (its log), collected by a thread.
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl TestDaemon {
    pub fn start() -> TestDaemon {
        TestDaemon::start_with(DaemonOptions::default())
    }

    pub fn start_with(options: DaemonOptions) -> TestDaemon {
        TestDaemon::start_in(&std::env::temp_dir(), options)
    }

    /// Like [`TestDaemon::start_with`], with the temp dir (and so the data dir) under `parent`.
    pub fn start_in(parent: &Path, options: DaemonOptions) -> TestDaemon {
        let mut daemon = TestDaemon::unstarted(parent, options);
        daemon.spawn();
        daemon
    }

    /// Like [`TestDaemon::start_with`], with `prepare` called on the (not yet existing) data
    /// dir first, e.g. to restore a backup into it.
    pub fn start_prepared(options: DaemonOptions, prepare: impl FnOnce(&Path)) -> TestDaemon {
        TestDaemon::start_prepared_in(&std::env::temp_dir(), options, prepare)
    }

    /// [`TestDaemon::start_prepared`] with the temp dir under `parent`.
    pub fn start_prepared_in(
        parent: &Path,
        options: DaemonOptions,
        prepare: impl FnOnce(&Path),
    ) -> TestDaemon {
        let mut daemon = TestDaemon::unstarted(parent, options);
        prepare(&daemon.data_dir());
        daemon.spawn();
        daemon
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `slipway.<apps_domain>`.
    pub fn control_host(&self) -> String {
        self.options.control_host()
    }

    /// `<slug>.<apps_domain>`.
    pub fn app_host(&self, slug: &str) -> String {
        format!("{slug}.{}", self.options.apps_domain)
    }

    /// The HTTPS listener's address (every TLS mode but `off` has one).
    pub fn https_addr(&self) -> SocketAddr {
        self.https.expect("the daemon has an HTTPS listener")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("slipway.toml")
    }

    fn write_config(&self) {
        let config = self.options.config_toml(&self.data_dir());
        std::fs::write(self.config_path(), config).expect("write config");
    }

    /// The `slipway serve` command for this daemon's options.
    fn command(&self) -> Command {
        let mut command = prefixed(&self.options.prefix(true));
        command.arg("serve");
        if self.options.dev {
            command.arg("--dev");
        }
        command
            .arg("--config")
            .arg(self.config_path())
            .env("SLIPWAY_LOG", "info,slipway=debug")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        for (name, value) in &self.options.env {
            command.env(name, value);
        }
        if let Some(uid) = self.options.uid {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(uid);
        }
        command
    }

    /// A daemon with its temp dir under `parent`, not started yet.
    fn unstarted(parent: &Path, options: DaemonOptions) -> TestDaemon {
        let dir = tempfile::tempdir_in(parent).expect("temp dir");
        if let Some(uid) = options.uid {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(uid)).expect("chown temp dir");
        }
        TestDaemon {
            dir,
            options,
            child: None,
            http: "0.0.0.0:0".parse().unwrap(),
            https: None,
            metrics: None,
            token: String::new(),
            log: Default::default(),
        }
    }

    /// Runs a daemon that is expected to refuse to start: its exit code and its log.
    pub fn run_to_exit(options: DaemonOptions) -> (Option<i32>, String) {
        let daemon = TestDaemon::unstarted(&std::env::temp_dir(), options);
        daemon.write_config();
        let mut command = daemon.command();
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn slipway");
        let Some(status) = wait_exit(&mut child, Duration::from_secs(30)) else {
            let _ = child.kill();
            panic!("slipway kept running; it was expected to refuse to start");
        };
        let mut log = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
        (status.code(), log)
    }

    fn spawn(&mut self) {
        self.write_config();
        let mut child = self
            .command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn slipway");
        let stderr = child.stderr.take().unwrap();
        let log = self.log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log.lock().unwrap().push_str(&line);
                log.lock().unwrap().push('\n');
            }
        });
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut https = None;
        let mut http = None;
        let mut metrics = None;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let line = match rx.recv_timeout(remaining) {
                Ok(line) => line,
                Err(_) => panic!(
                    "daemon did not become ready; log:\n{}",
                    self.log.lock().unwrap()
                ),
            };
            if let Some(addr) = line.strip_prefix("listening http ") {
                http = Some(addr.parse().unwrap());
            } else if let Some(addr) = line.strip_prefix("listening https ") {
                https = Some(addr.parse().unwrap());
            } else if let Some(addr) = line.strip_prefix("listening metrics ") {
                metrics = Some(addr.parse().unwrap());
            } else if line == "ready" {
                break;
            }
        }
        self.http = http.expect("http address printed");
        self.https = https;
        self.metrics = metrics;
        self.token = std::fs::read_to_string(self.data_dir().join("initial-admin-token"))
            .unwrap()
            .trim()
            .to_owned();
        self.child = Some(child);
    }

    /// SIGTERM and wait; returns the exit status code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        match terminate(&mut child, Duration::from_secs(30)) {
            Some(status) => status.code(),
            None => {
                let _ = child.kill();
                panic!("daemon did not stop within 30 s after SIGTERM");
            }
        }
    }

    /// `kill -9` of the daemon (a crash): nothing of its shutdown runs.
    pub fn kill_hard(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the daemon again on the same data dir (after [`TestDaemon::kill_hard`] or
    /// [`TestDaemon::stop`]); returns once it printed "ready".
    pub fn start_again(&mut self) {
        self.spawn();
    }

    /// `slipway stop-apps` for this daemon's data dir (through it when it runs).
    pub fn stop_apps(&self) -> std::process::Output {
        let mut command = prefixed(&self.options.prefix(false));
        command.arg("stop-apps");
        if self.options.dev {
            command.arg("--dev");
        }
        command
            .arg("--config")
            .arg(self.config_path())
            .env("NO_COLOR", "1")
            .output()
            .expect("run slipway stop-apps")
    }

    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The log once it contains `needle` (stderr is read by its own thread, so a line the
    /// daemon wrote before "ready" on stdout may arrive a moment later); at most 10 s.
    pub fn log_with(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.log_text();
            if log.contains(needle) || Instant::now() > deadline {
                return log;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An authenticated API request to the control host.
    pub async fn api(
        &self,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> TestResponse {
        let mut headers = vec![("authorization", format!("Bearer {}", self.token))];
        let bytes = match body {
            Some(value) => {
                headers.push(("content-type", "application/json".into()));
                value.to_string().into_bytes()
            }
            None => Vec::new(),
        };
        self.request(method, &self.control_host(), path, &headers, bytes)
            .await
    }

    /// An API request with another token (`Bearer <token>`) and a raw body.
    pub async fn api_as(
        &self,
        token: &str,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> TestResponse {
        let mut headers = vec![("authorization", format!("Bearer {token}"))];
        if let Some(content_type) = content_type {
            headers.push(("content-type", content_type.to_owned()));
        }
        self.request(method, &self.control_host(), path, &headers, body)
            .await
    }

    /// `GET /healthz` on the control host: its status.
    pub async fn healthz(&self) -> u16 {
        self.request("GET", &self.control_host(), "/healthz", &[], vec![])
            .await
            .status
    }

    /// A raw request over plain HTTP to the daemon's http listener with the given Host.
    pub async fn request(
        &self,
        method: &str,
        host: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> TestResponse {
        http_request(self.http, method, host, path, headers, body).await
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if terminate(&mut child, Duration::from_secs(10)).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // Apps outlive the daemon (namespaces mode): a test leaves none behind, nor the
        // volumes (loop mounts) its daemon made.
        let left_running = std::fs::read_dir(self.data_dir().join("run"))
            .is_ok_and(|mut entries| entries.next().is_some());
        let data_dir = self.data_dir().to_string_lossy().into_owned();
        let mounted = std::fs::read_to_string("/proc/self/mountinfo")
            .is_ok_and(|info| info.contains(&format!(" {data_dir}/")));
        if left_running || mounted {
            let output = self.stop_apps();
            if !output.status.success() {
                eprintln!(
                    "stop-apps after the test failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }
    }
}

/// `slipway` started through `prefix` (programs and their arguments), or directly.
fn prefixed(prefix: &[String]) -> Command {
    match prefix.split_first() {
        Some((program, args)) => {
            let mut command = Command::new(program);
            command.args(args).arg(BIN);
            command
        }
        None => Command::new(BIN),
    }
}

/// SIGTERM, then [`wait_exit`].
fn terminate(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    wait_exit(child, within)
}

/// The child's exit status once it exits; `None` if it still runs after `within`.
fn wait_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Resident memory of a process, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Whether `tool` is missing; if so, says which test skips and why (tests never skip silently).
pub fn missing_tool(tool: &str, why: &str) -> bool {
    let found = Command::new(tool).arg("--version").output().is_ok();
    if !found {
        println!("SKIP: {tool} is not installed ({why})");
    }
    !found
}

/// Whether a package registry (`registry.npmjs.org`, `pypi.org`) answers on 443; says SKIP
/// when it does not.
pub fn registry_reachable(host: &str) -> bool {
    use std::net::ToSocketAddrs;
    let reachable = (host, 443)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .is_some_and(|addr| {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_ok()
        });
    if !reachable {
        eprintln!("SKIP: {host} cannot be reached from here");
    }
    reachable
}

/// Polls `check` every 100 ms until it is true or `within` has passed; returns the last result.
pub async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    loop {
        if check().await {
            return true;
        }
        if started.elapsed() > within {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A TCP port on loopback that was free a moment ago, and the listener holding it until the
/// caller drops it (bind-to-0-then-release; the daemon then binds it itself).
pub fn reserve_port() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0")
}

/// Reads every file under `dir` and returns whether any contains `needle`.
pub fn dir_contains(dir: &Path, needle: &[u8]) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        if path.is_dir() {
            if let Some(found) = dir_contains(&path, needle) {
                return Some(found);
            }
        } else if let Ok(bytes) = std::fs::read(&path) {
            if bytes.windows(needle.len()).any(|w| w == needle) {
                return Some(path);
            }
        }
    }
    None
}

/// `slipway ARGS` against the daemon (credentials in the environment); its stdout.
pub fn cli(daemon: &TestDaemon, args: &[&str]) -> String {
    let output = cli_output(daemon, args);
    assert!(
        output.status.success(),
        "slipway {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `slipway ARGS` against the daemon, however it exits.
pub fn cli_output(daemon: &TestDaemon, args: &[&str]) -> std::process::Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(crate::support::BIN)
        .args(args)
        .env(
            "SLIPWAY_URL",
            format!("http://slipway.localhost:{}", daemon.http.port()),
        )
        .env("SLIPWAY_TOKEN", &daemon.token)
        .env("HOME", home.path())
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .expect("run slipway")
}
