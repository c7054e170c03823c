//! Test support: `TestDaemon` starts the real `slipway` binary on port 0 in a temp data dir and
//! gives a small HTTP client that speaks to it over real sockets.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

mod deploying;

pub use deploying::targz;

pub const BIN: &str = env!("CARGO_BIN_EXE_slipway");

/// Options for a test daemon; `extra_toml` is appended to the generated config.
#[derive(Clone)]
pub struct DaemonOptions {
    /// Apps are served at `<slug>.<apps_domain>`, the API at `slipway.<apps_domain>`.
    pub apps_domain: String,
    /// HTTPS listens on 127.0.0.1 at this port (0: any).
    pub https_port: u16,
    pub tls_mode: &'static str,
    /// The whole `[tls]` table instead of `mode = "<tls_mode>"`.
    pub tls_table: Option<String>,
    /// Empty: no `sandbox.mode` line (the default of the mode `--dev` picks).
    pub sandbox_mode: &'static str,
    pub extra_toml: String,
    /// Run `serve --dev --config …` (the config still overrides the dev defaults).
    pub dev: bool,
    /// Extra environment for the daemon (e.g. a `PATH` without some tool).
    pub env: Vec<(&'static str, String)>,
    /// Run the daemon as this uid (and gid) instead of the test's own.
    pub uid: Option<u32>,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            apps_domain: "localhost".into(),
            https_port: 0,
            tls_mode: "off",
            tls_table: None,
            sandbox_mode: "none",
            extra_toml: String::new(),
            dev: false,
            env: Vec::new(),
            uid: None,
        }
    }
}

pub struct TestDaemon {
    pub dir: tempfile::TempDir,
    pub options: DaemonOptions,
    pub child: Option<Child>,
    pub http: SocketAddr,
    pub https: Option<SocketAddr>,
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

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `slipway.<apps_domain>`.
    pub fn control_host(&self) -> String {
        format!("slipway.{}", self.options.apps_domain)
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("slipway.toml")
    }

    fn write_config(&self) {
        let config = format!(
            "data_dir = {data:?}\napps_domain = {domain:?}\ncontrol_host = {control:?}\n\
             http_listen = \"127.0.0.1:0\"\nhttps_listen = \"127.0.0.1:{https_port}\"\n\n[tls]\n{tls}\n\n\
             [sandbox]\n{sandbox}\n{extra}\n",
            data = self.data_dir().display().to_string(),
            domain = self.options.apps_domain,
            control = self.control_host(),
            https_port = self.options.https_port,
            tls = match &self.options.tls_table {
                Some(table) => table.clone(),
                None => format!("mode = \"{}\"", self.options.tls_mode),
            },
            sandbox = match self.options.sandbox_mode {
                "" => String::new(),
                mode => format!("mode = \"{mode}\"\n"),
            },
            extra = self.options.extra_toml,
        );
        std::fs::write(self.config_path(), config).expect("write config");
    }

    /// The `slipway serve` command for this daemon's options.
    fn command(&self) -> Command {
        let mut command = Command::new(BIN);
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
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("slipway kept running; it was expected to refuse to start");
            }
            std::thread::sleep(Duration::from_millis(20));
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
            } else if line == "ready" {
                break;
            }
        }
        self.http = http.expect("http address printed");
        self.https = https;
        self.token = std::fs::read_to_string(self.data_dir().join("initial-admin-token"))
            .unwrap()
            .trim()
            .to_owned();
        self.child = Some(child);
    }

    /// SIGTERM and wait; returns the exit status code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("daemon did not stop within 30 s after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub struct TestResponse {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Bytes,
}

impl TestResponse {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// Asserts the contract's error envelope with `status` and `code`.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "status; body: {}", self.text());
        let body = self.json();
        assert_eq!(body["error"]["code"], code, "code; body: {body}");
        assert_eq!(
            body["error"]["status"], status,
            "envelope status; body: {body}"
        );
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "message; body: {body}"
        );
        assert_eq!(
            body.as_object().unwrap().len(),
            1,
            "only `error` at the top: {body}"
        );
        assert!(
            self.header("x-request-id").is_some(),
            "X-Request-Id on every response"
        );
    }
}

/// Whether `tool` is missing; if so, says which test skips and why (tests never skip silently).
pub fn missing_tool(tool: &str, why: &str) -> bool {
    let found = Command::new(tool).arg("--version").output().is_ok();
    if !found {
        println!("SKIP: {tool} is not installed ({why})");
    }
    !found
}

/// One HTTP/1.1 request on a fresh connection.
pub async fn http_request(
    addr: SocketAddr,
    method: &str,
    host: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Vec<u8>,
) -> TestResponse {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut builder = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", host);
    for (name, value) in headers {
        builder = builder.header(*name, value);
    }
    let request = builder.body(Full::new(Bytes::from(body))).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(60), sender.send_request(request))
        .await
        .expect("response within 60 s")
        .expect("response");
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    TestResponse {
        status,
        headers,
        body,
    }
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

/// Writes `request` as raw bytes (ignoring a peer that stops reading) and returns everything
/// the server sent back until it closed or went quiet.
pub async fn raw_exchange(addr: SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut read, mut write) = stream.into_split();
    let bytes = request.as_bytes().to_vec();
    let writer = tokio::spawn(async move {
        let _ = write.write_all(&bytes).await;
        write
    });
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), read.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
        if out.windows(4).any(|w| w == b"\r\n\r\n") && String::from_utf8_lossy(&out).contains("}}")
        {
            break;
        }
    }
    writer.abort();
    String::from_utf8_lossy(&out).into_owned()
}
