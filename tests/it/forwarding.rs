//! What an app learns about its visitors (issue 9, host confusion): the host the router routed
//! by, whatever `Host`, absolute-form target or `:authority` the visitor sent, and no
//! forwarding header the visitor made up.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};

use crate::support::TestDaemon;

/// A python3 app that answers every GET with the request headers it received, as JSON.
const ECHO_APP: &str = r#"import http.server, json, os
class Echo(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Echo).serve_forever()
"#;

async fn echo_daemon() -> Option<TestDaemon> {
    if crate::support::missing_tool("python3", "the echo app is a python3 http.server") {
        return None;
    }
    let daemon = TestDaemon::start();
    daemon
        .deploy(
            "victim",
            &[("app.py", ECHO_APP, 0o644)],
            json!({"installCommand": "", "buildCommand": "", "startCommand": "python3 app.py"}),
        )
        .await;
    Some(daemon)
}

fn json_body(raw: &str) -> Value {
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {raw}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absolute_form_target_cannot_present_another_host_to_the_app() {
    let Some(daemon) = echo_daemon().await else {
        return;
    };
    let routed = format!("victim.localhost:{}", daemon.http.port());
    let raw = crate::support::raw_exchange(
        daemon.http,
        &format!(
            "GET http://{routed}/reset HTTP/1.1\r\nHost: evil.example\r\n\
             X-Forwarded-Host: evil.example\r\nX-Forwarded-For: 6.6.6.6\r\n\
             X-Real-IP: 6.6.6.6\r\nForwarded: for=6.6.6.6;host=evil.example\r\n\
             X-Forwarded-Port: 1\r\nTrue-Client-IP: 6.6.6.6\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    let seen = json_body(&raw);
    assert_eq!(seen["host"], routed.as_str(), "{seen}");
    assert_eq!(seen["x-forwarded-host"], routed.as_str(), "{seen}");
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1", "{seen}");
    assert_eq!(seen["x-real-ip"], "127.0.0.1", "{seen}");
    for made_up in ["forwarded", "x-forwarded-port", "true-client-ip"] {
        assert!(
            seen.get(made_up).is_none(),
            "{made_up} reached the app: {seen}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_authority_that_differs_from_host_is_what_the_app_sees() {
    let Some(daemon) = echo_daemon().await else {
        return;
    };
    let routed = format!("victim.localhost:{}", daemon.http.port());
    // HTTP/2 with prior knowledge over the plain listener: `:authority` routes the request,
    // a `host` header says something else.
    let stream = tokio::net::TcpStream::connect(daemon.http).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = http::Request::builder()
        .uri(format!("http://{routed}/reset"))
        .header("host", "evil.example")
        .header("x-forwarded-host", "evil.example")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), sender.send_request(request))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let seen: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(seen["host"], routed.as_str(), "{seen}");
    assert_eq!(seen["x-forwarded-host"], routed.as_str(), "{seen}");
}
