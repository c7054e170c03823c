//! The router threads (issue 17): visitors are served by `limits.router_threads` threads of
//! their own, each with its own pool of connections to apps, while the API keeps answering
//! from the main runtime.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;

use crate::support::{DaemonOptions, TestDaemon};

/// A python3 app that answers every GET with its path. Its listen backlog is raised from
/// socketserver's 5: a hundred HTTP/2 streams open as many connections to it at once.
const PATH_APP: &str = r#"import http.server, os
class Path(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = self.path.encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
class Server(http.server.ThreadingHTTPServer):
    request_queue_size = 256
Server(("0.0.0.0", int(os.environ["PORT"])), Path).serve_forever()
"#;

/// The names of the daemon's threads that serve visitors, once there are `expected` (a
/// thread names itself as it starts, which may be just after the daemon said it is ready).
fn router_threads(daemon: &TestDaemon, expected: usize) -> Vec<String> {
    let pid = daemon.child.as_ref().expect("the daemon runs").id();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .expect("the daemon's threads")
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
            .map(|name| name.trim().to_owned())
            .filter(|name| name.starts_with("router-"))
            .collect();
        if names.len() == expected || std::time::Instant::now() > deadline {
            names.sort();
            return names;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `requests` GETs on one HTTP/1.1 keep-alive connection; each answer must echo its path.
async fn keep_alive_client(
    addr: std::net::SocketAddr,
    host: String,
    client: usize,
    requests: usize,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    for n in 0..requests {
        let path = format!("/c{client}/r{n}");
        let request = http::Request::builder()
            .uri(&path)
            .header("host", &host)
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, path.as_bytes());
    }
}

/// `streams` concurrent GETs on one HTTP/2 (prior knowledge) connection.
async fn h2_client(addr: std::net::SocketAddr, host: String, streams: usize) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut answers = tokio::task::JoinSet::new();
    for n in 0..streams {
        let mut sender = sender.clone();
        let uri = format!("http://{host}/h2/{n}");
        answers.spawn(async move {
            let request = http::Request::get(&uri)
                .body(Empty::<Bytes>::new())
                .unwrap();
            let response = sender.send_request(request).await.unwrap();
            assert_eq!(response.status(), 200, "{uri}");
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(body, format!("/h2/{n}").as_bytes());
        });
    }
    while let Some(answer) = answers.join_next().await {
        answer.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn visitors_are_served_by_the_configured_threads_and_the_api_answers_meanwhile() {
    if crate::support::missing_tool("python3", "the app is a python3 http.server") {
        return;
    }
    let daemon = TestDaemon::start_with(
        DaemonOptions::default().extra_toml("[limits]\nrouter_threads = 3\n"),
    );
    assert_eq!(
        router_threads(&daemon, 3),
        ["router-0", "router-1", "router-2"]
    );
    daemon
        .deploy(
            "paths",
            &[("app.py", PATH_APP, 0o644)],
            json!({"installCommand": "", "buildCommand": "", "startCommand": "python3 app.py"}),
        )
        .await;
    let host = daemon.app_host("paths");

    // 24 keep-alive clients and 4 HTTP/2 connections at once: whichever thread accepts a
    // connection proxies it through its own pool; every answer must be its own request's.
    let mut clients = tokio::task::JoinSet::new();
    for client in 0..24 {
        clients.spawn(keep_alive_client(daemon.http, host.clone(), client, 20));
    }
    for _ in 0..4 {
        clients.spawn(h2_client(daemon.http, host.clone(), 25));
    }
    // The API runs on the main runtime, whatever the visitors do.
    for _ in 0..5 {
        let project = daemon.api("GET", "/api/projects/paths", None).await;
        assert_eq!(project.status, 200, "{}", project.text());
    }
    let finished = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(client) = clients.join_next().await {
            client.unwrap();
        }
    })
    .await;
    assert!(finished.is_ok(), "the visitors' requests did not finish");
}

#[test]
fn by_default_there_is_one_router_thread_per_cpu() {
    let daemon = TestDaemon::start();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(router_threads(&daemon, cpus).len(), cpus);
}

/// `slipway_router_connections` per thread, from the metrics page.
async fn open_per_thread(daemon: &TestDaemon) -> Vec<u64> {
    let page = daemon.api("GET", "/api/metrics", None).await;
    assert_eq!(page.status, 200, "{}", page.text());
    let mut open = Vec::new();
    for (thread, line) in page
        .text()
        .lines()
        .filter(|line| line.starts_with("slipway_router_connections{"))
        .enumerate()
    {
        assert!(line.contains(&format!("thread=\"{thread}\"")), "{line}");
        open.push(line.rsplit(' ').next().unwrap().parse().unwrap());
    }
    open
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn new_connections_go_to_the_router_thread_with_the_fewest() {
    let daemon = TestDaemon::start_with(
        DaemonOptions::default().extra_toml("[limits]\nrouter_threads = 2\n"),
    );
    assert_eq!(open_per_thread(&daemon).await.len(), 2);
    // 40 keep-alive connections opened at once: whichever thread wakes first accepts most of
    // such a burst, and hands half of them to the other.
    let host = daemon.control_host();
    let mut opening = tokio::task::JoinSet::new();
    for _ in 0..40 {
        let (addr, host) = (daemon.http, host.clone());
        opening.spawn(async move {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .unwrap();
            tokio::spawn(connection);
            let mut client = (sender, host);
            healthz(&mut client).await;
            client
        });
    }
    let mut clients = Vec::new();
    while let Some(client) = opening.join_next().await {
        clients.push(client.unwrap());
    }
    let open = open_per_thread(&daemon).await;
    // The 40, and the metrics request's own connection if it is still counted.
    let total: u64 = open.iter().sum();
    assert!((40..=41).contains(&total), "{open:?}");
    assert!(open[0].abs_diff(open[1]) <= 2, "unbalanced: {open:?}");
    // A handed-over connection is served by its new thread like any other.
    for client in &mut clients {
        healthz(client).await;
    }
    drop(clients);
    let closed = crate::support::eventually(Duration::from_secs(5), || async {
        open_per_thread(&daemon).await.iter().sum::<u64>() <= 1
    })
    .await;
    assert!(
        closed,
        "closed connections still counted: {:?}",
        open_per_thread(&daemon).await
    );
}

async fn healthz(
    client: &mut (
        hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
        String,
    ),
) {
    let request = http::Request::get("/healthz")
        .header("host", &client.1)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = client.0.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    response.into_body().collect().await.unwrap();
}
