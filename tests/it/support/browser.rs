//! A real Chromium (Debian's `chromium`), headless, driven over the DevTools protocol on a
//! loopback WebSocket: navigate, evaluate, wait for a condition, set a file input, resize,
//! screenshot. Console errors and uncaught exceptions are collected for the test to check.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    socket: Socket,
    next_id: u64,
    /// Console errors, CSP refusals and uncaught exceptions seen so far.
    pub errors: Vec<String>,
}

/// A browser and a daemon for a dashboard test (its rate limits out of the way: a page makes
/// many calls), with the dashboard's origin; `None` after printing a SKIP when Chromium
/// cannot run.
pub async fn dashboard(test: &str) -> Option<(Browser, super::TestDaemon, String)> {
    let browser = match Browser::start().await {
        Ok(browser) => browser,
        Err(reason) => {
            eprintln!("SKIP: {test}: {reason}");
            return None;
        }
    };
    let daemon = super::TestDaemon::start_with(super::DaemonOptions::default().extra_toml(
        "[rate_limits]\nrequests_per_minute = 100000\nposts_per_minute_per_endpoint = 100000\n",
    ));
    let origin = format!("http://slipway.localhost:{}", daemon.http.port());
    Some((browser, daemon, origin))
}

impl Browser {
    /// Starts Chromium, or says why not (printed by the caller as a SKIP).
    pub async fn start() -> Result<Browser, String> {
        let binary = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .find(|path| std::path::Path::new(path).exists())
            .ok_or("chromium is not installed (apt-get install chromium)")?;
        let profile = tempfile::tempdir().map_err(|e| e.to_string())?;
        let child = Command::new(binary)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--disable-background-networking",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "--window-size=1280,900",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {binary}: {e}"))?;
        let active = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&active)
                .ok()
                .and_then(|text| text.lines().next().and_then(|l| l.parse::<u16>().ok()))
            {
                break port;
            }
            if Instant::now() > deadline {
                return Err("chromium did not open its DevTools port within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        // The page target shows up in the list shortly after the port opens.
        let url = loop {
            let pages: Value = http_get(port, "/json/list")
                .ok()
                .and_then(|text| serde_json::from_str(&text).ok())
                .unwrap_or_default();
            let found = pages
                .as_array()
                .and_then(|list| list.iter().find(|p| p["type"] == "page"))
                .and_then(|p| p["webSocketDebuggerUrl"].as_str())
                .map(str::to_owned);
            if let Some(url) = found {
                break url;
            }
            if Instant::now() > deadline {
                return Err("chromium listed no page target within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let (socket, _) = tokio_tungstenite::connect_async(url.as_str())
            .await
            .map_err(|e| e.to_string())?;
        let mut browser = Browser {
            child,
            _profile: profile,
            socket,
            next_id: 1,
            errors: Vec::new(),
        };
        for method in ["Page.enable", "Runtime.enable", "Log.enable", "DOM.enable"] {
            browser.call(method, json!({})).await;
        }
        Ok(browser)
    }

    /// One DevTools command; its result. Events that arrive meanwhile are noted.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let message = json!({"id": id, "method": method, "params": params}).to_string();
        self.socket.send(Message::text(message)).await.unwrap();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(60), self.socket.next())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method} within 60 s"))
                .expect("the DevTools socket closed")
                .unwrap();
            let Message::Text(text) = frame else { continue };
            let value: Value = serde_json::from_str(&text).unwrap();
            if value["id"] == id {
                assert!(value.get("error").is_none(), "{method}: {value}");
                return value["result"].clone();
            }
            self.note_event(&value);
        }
    }

    fn note_event(&mut self, event: &Value) {
        let params = &event["params"];
        match event["method"].as_str() {
            Some("Runtime.exceptionThrown") => self
                .errors
                .push(format!("exception: {}", params["exceptionDetails"])),
            Some("Log.entryAdded") if params["entry"]["level"] == "error" => {
                let text = params["entry"]["text"].as_str().unwrap_or("").to_owned();
                // A failed request is the page's to show (tests provoke 401 and 403).
                if !text.starts_with("Failed to load resource") {
                    self.errors.push(text);
                }
            }
            Some("Runtime.consoleAPICalled") if params["type"] == "error" => self
                .errors
                .push(format!("console.error: {}", params["args"])),
            _ => {}
        }
    }

    pub async fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url})).await;
        self.wait_for("document.readyState === 'complete'", "the page to load")
            .await;
    }

    /// Goes to `url` and waits until `selector` is on the page (pages render after their
    /// API calls); `what` names the page in the failure.
    pub async fn open(&mut self, url: &str, selector: &str, what: &str) {
        self.navigate(url).await;
        let selector = serde_json::to_string(selector).unwrap();
        self.wait_for(&format!("document.querySelector({selector})"), what)
            .await;
    }

    /// The text of the first element matching `selector` (empty when there is none).
    pub async fn text(&mut self, selector: &str) -> String {
        let selector = serde_json::to_string(selector).unwrap();
        let value = self
            .eval(&format!(
                "document.querySelector({selector})?.textContent ?? ''"
            ))
            .await;
        value.as_str().unwrap_or_default().to_owned()
    }

    /// Signs in on the sign-in form with `token` and waits for the project list.
    pub async fn sign_in(&mut self, token: &str, what: &str) {
        self.fill("#token", token).await;
        self.click("form button[type=submit]").await;
        self.wait_for(
            "document.querySelector('h1')?.textContent === 'Projects'",
            what,
        )
        .await;
    }

    /// Evaluates `expression` in the page (promises awaited); its value.
    pub async fn eval(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "awaitPromise": true, "returnByValue": true}),
            )
            .await;
        if let Some(details) = result.get("exceptionDetails") {
            panic!("{expression}: {details}");
        }
        result["result"]["value"].clone()
    }

    /// Polls `condition` (a JS expression) until it is truthy; panics with `what` after 60 s.
    pub async fn wait_for(&mut self, condition: &str, what: &str) {
        if let Err(message) = self.try_wait_for(condition, what).await {
            panic!("{message}");
        }
    }

    /// [`Browser::wait_for`] that gives the failure back (with what the page shows), for a
    /// test that has more to tell about it.
    pub async fn try_wait_for(&mut self, condition: &str, what: &str) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let value = self.eval(&format!("!!({condition})")).await;
            if value == Value::Bool(true) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let text = self.eval("document.body.innerText").await;
                return Err(format!(
                    "waited 60 s for {what} ({condition}); the page shows:\n{text}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Types into an input (sets its value and fires `input`).
    pub async fn fill(&mut self, selector: &str, value: &str) {
        let script = format!(
            "(() => {{ const e = document.querySelector({s}); e.value = {v}; e.dispatchEvent(new Event('input')); return true; }})()",
            s = serde_json::to_string(selector).unwrap(),
            v = serde_json::to_string(value).unwrap()
        );
        assert_eq!(self.eval(&script).await, Value::Bool(true), "{selector}");
    }

    /// Clicks the element once it is there (pages render after their API calls, and
    /// re-render when a deployment ends): find and click in one step, retried up to 60 s.
    pub async fn click(&mut self, selector: &str) {
        let script = format!(
            "(() => {{ const e = document.querySelector({s}); if (!e || e.disabled) return false; e.click(); return true; }})()",
            s = serde_json::to_string(selector).unwrap()
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.eval(&script).await != Value::Bool(true) {
            assert!(
                Instant::now() < deadline,
                "no {selector} to click within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Puts `path` into a file input, as choosing it in the file dialog does.
    pub async fn set_file(&mut self, selector: &str, path: &std::path::Path) {
        let found = self
            .call(
                "Runtime.evaluate",
                json!({"expression": format!("document.querySelector({})", serde_json::to_string(selector).unwrap())}),
            )
            .await;
        let object = found["result"]["objectId"]
            .as_str()
            .expect(selector)
            .to_owned();
        self.call(
            "DOM.setFileInputFiles",
            json!({"files": [path.to_str().unwrap()], "objectId": object}),
        )
        .await;
    }

    /// Sets the viewport (a phone is `mobile`), for screenshots at a given width.
    pub async fn resize(&mut self, width: u32, height: u32) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}),
        )
        .await;
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&mut self) -> Vec<u8> {
        use base64::Engine;
        let shot = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.1 GET on loopback (the DevTools list of targets): the body, read up to its
/// Content-Length (the DevTools server keeps the connection open).
fn http_get(port: u16, path: &str) -> Result<String, String> {
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut received = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        received.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&received);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head.lines().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())
                    .flatten()
            });
            if length.is_some_and(|length| body.len() >= length) {
                return Ok(body.to_owned());
            }
        }
    }
    Err("the DevTools server closed the connection early".into())
}
