//! Anonymous clients against the listeners (issue 9): floods of idle HTTP/2 connections from
//! many loopback addresses, one client over its cap, and a reader that stops reading a large
//! response. Meanwhile `/healthz` on the control host and another app keep answering.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::{DaemonOptions, TestDaemon};

const LIMITS: &str = "[limits]\nmax_connections = 400\ncontrol_reserved_connections = 40\n\
     max_connections_per_client = 100\nidle_timeout_s = 10\nwrite_timeout_s = 3\n";

fn daemon() -> TestDaemon {
    TestDaemon::start_with(DaemonOptions::default().extra_toml(LIMITS))
}

async fn connect_from(source: IpAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(to).await
}

/// An HTTP/2 (prior knowledge) connection that pings every 500 ms and sends no request: what
/// a client holding connections open for nothing does. Resolves when the server closes it.
struct IdleH2 {
    closed: tokio::task::JoinHandle<()>,
}

async fn idle_h2(source: IpAddr, to: SocketAddr) -> Option<IdleH2> {
    let stream = connect_from(source, to).await.ok()?;
    let handshake = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_millis(500))
        .keep_alive_while_idle(true)
        .handshake::<_, Empty<Bytes>>(TokioIo::new(stream));
    let (sender, connection) = tokio::time::timeout(Duration::from_secs(5), handshake)
        .await
        .ok()?
        .ok()?;
    let closed = tokio::spawn(async move {
        let _sender = sender;
        let _ = connection.await;
    });
    Some(IdleH2 { closed })
}

async fn deploy_static(daemon: &TestDaemon, slug: &str, big: bool) {
    let mut files = vec![("index.html", "<h1>up</h1>\n".to_owned(), 0o644)];
    if big {
        // 8 MiB that compresses well in the archive but not on the wire (no Accept-Encoding).
        files.push(("big.txt", "0123456789abcdef".repeat(512 * 1024), 0o644));
    }
    let files: Vec<(&str, &str, u32)> =
        files.iter().map(|(n, c, m)| (*n, c.as_str(), *m)).collect();
    daemon
        .deploy(
            slug,
            &files,
            json!({
                "installCommand": "",
                "buildCommand": "mkdir -p dist && cp index.html dist/ && if [ -f big.txt ]; then cp big.txt dist/; fi",
                "outputDirectory": "dist"
            }),
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_floods_are_capped_per_client_and_closed_while_others_answer() {
    let daemon = daemon();
    deploy_static(&daemon, "other", false).await;

    // One client (127.0.0.2) opens 150 idle HTTP/2 connections: 100 are admitted.
    let one_client: IpAddr = "127.0.0.2".parse().unwrap();
    let mut held = Vec::new();
    for _ in 0..150 {
        if let Some(connection) = idle_h2(one_client, daemon.http).await {
            held.push(connection);
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let open = held.iter().filter(|c| !c.closed.is_finished()).count();
    assert_eq!(
        open, 100,
        "one client holds at most max_connections_per_client"
    );

    // Three more clients try 300 more: the general budget (360 = 400 - 40 reserved) fills,
    // and the reserve refuses HTTP/2 without a host.
    for last in 3..=5u8 {
        for _ in 0..100 {
            if let Some(connection) = idle_h2(IpAddr::from([127, 0, 0, last]), daemon.http).await {
                held.push(connection);
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let open = held.iter().filter(|c| !c.closed.is_finished()).count();
    assert_eq!(
        open, 360,
        "the flood holds the general budget, not the reserve"
    );

    // The control host answers at once (from the reserve); an app host on a reserve connection
    // is told to come back later instead of taking the operator's room.
    let asked = Instant::now();
    assert_eq!(daemon.healthz().await, 200);
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    let app = daemon.app_get("other", "/", &[]).await;
    assert_eq!(app.status, 503, "app host on the reserve: {}", app.text());
    assert_eq!(app.header("retry-after"), Some("5"));
    // ... while the flood still held every general connection (the reserve answered, not a
    // connection the idle timeout had freed).
    let open = held.iter().filter(|c| !c.closed.is_finished()).count();
    assert_eq!(
        open, 360,
        "the flood was still held when the operator got in"
    );

    // Pings are not use: after the idle timeout every flood connection is closed.
    let deadline = Instant::now() + Duration::from_secs(30);
    while held.iter().any(|c| !c.closed.is_finished()) {
        assert!(
            Instant::now() < deadline,
            "idle HTTP/2 connections still open after 30 s (idle_timeout_s = 10)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(daemon.app_get("other", "/", &[]).await.status, 200);
    assert_eq!(daemon.healthz().await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_loses_its_connection() {
    let daemon = daemon();
    deploy_static(&daemon, "big", true).await;
    let mut stream = TcpStream::connect(daemon.http).await.unwrap();
    stream
        .write_all(b"GET /big.txt HTTP/1.1\r\nHost: big.localhost\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 64];
    stream.read_exact(&mut head).await.unwrap();
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    // Stop reading: the socket buffers fill and the daemon's writes stall.
    let stalled = Instant::now();
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(daemon.healthz().await, 200, "others are served meanwhile");
    // Now drain what was buffered: the stream must end well short of the 8 MiB.
    let mut received = 0usize;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => received += n,
            Err(_) => panic!("the daemon kept the stalled connection open"),
        }
    }
    assert!(
        received < 8 * 1024 * 1024,
        "the whole body arrived ({received} bytes): no write deadline"
    );
    assert!(stalled.elapsed() < Duration::from_secs(30));
}

/// WebSocket tunnels: one client holds at most its share, idle ones are closed, and the
/// daemon keeps answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_tunnels_are_capped_per_client_and_idle_ones_closed() {
    use futures_util::StreamExt;
    if crate::support::missing_tool("node", "the WebSocket echo app is a node server") {
        return;
    }
    let daemon = TestDaemon::start_with(
        DaemonOptions::default()
            .extra_toml("[limits]\nmax_websockets_per_client = 5\nwebsocket_idle_timeout_s = 2\n"),
    );
    daemon
        .deploy(
            "chat",
            &[("server.js", crate::pipeline::NODE_APP, 0o644)],
            json!({"startCommand": "node server.js"}),
        )
        .await;
    let mut open = Vec::new();
    let mut refused = 0;
    for _ in 0..8 {
        let stream = TcpStream::connect(daemon.http).await.unwrap();
        match tokio_tungstenite::client_async("ws://chat.localhost/socket", stream).await {
            Ok((socket, _)) => open.push(socket),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                assert_eq!(response.status(), 503);
                refused += 1;
            }
            Err(other) => panic!("unexpected handshake error: {other}"),
        }
    }
    assert_eq!(
        (open.len(), refused),
        (5, 3),
        "a client holds at most 5 tunnels"
    );
    assert_eq!(daemon.healthz().await, 200);
    // Silent for longer than the idle timeout: every tunnel is closed by the daemon.
    for socket in &mut open {
        let next = tokio::time::timeout(Duration::from_secs(10), socket.next()).await;
        match next {
            Ok(None) | Ok(Some(Err(_))) => {}
            Ok(Some(Ok(message))) if message.is_close() => {}
            Ok(Some(Ok(message))) => panic!("unexpected message {message:?}"),
            Err(_) => panic!("an idle tunnel stayed open past websocket_idle_timeout_s"),
        }
    }
    // Their permits are back: a new tunnel opens.
    let stream = TcpStream::connect(daemon.http).await.unwrap();
    tokio_tungstenite::client_async("ws://chat.localhost/socket", stream)
        .await
        .expect("a tunnel after the idle ones closed");
}

/// `header_timeout_s` bounds both the reading of a request head and the keep-alive wait for
/// the next one (the connection's idle timer enforces it for HTTP/1, not a timer per request):
/// a client dribbling a head and one idling between requests are closed at it, well before
/// `idle_timeout_s`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_head_and_an_idle_keep_alive_end_at_the_header_timeout() {
    let daemon = TestDaemon::start_with(
        DaemonOptions::default().extra_toml(&format!("{LIMITS}header_timeout_s = 2\n")),
    );

    // A head that never ends: one header line every 400 ms.
    let mut slow = TcpStream::connect(daemon.http).await.unwrap();
    let started = Instant::now();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: nobody.localhost\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 1024];
    let closed_after = loop {
        assert!(
            started.elapsed() < Duration::from_secs(9),
            "a head dribbled for 9 s was still being read (header_timeout_s = 2)"
        );
        match tokio::time::timeout(Duration::from_millis(400), slow.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break started.elapsed(),
            Ok(Ok(_)) => {} // an error page: the connection closes next
            Err(_) => {
                if slow.write_all(b"X-Slow: 1\r\n").await.is_err() {
                    break started.elapsed();
                }
            }
        }
    };
    assert!(
        closed_after >= Duration::from_millis(1500),
        "closed after {closed_after:?}, before the header timeout"
    );

    // A keep-alive connection that goes quiet after one answer.
    let mut idle = TcpStream::connect(daemon.http).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: nobody.localhost\r\n\r\n")
        .await
        .unwrap();
    let n = idle.read(&mut buffer).await.unwrap();
    assert!(
        buffer[..n].starts_with(b"HTTP/1.1 404"),
        "{}",
        String::from_utf8_lossy(&buffer[..n])
    );
    let answered = Instant::now();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(8), idle.read_to_end(&mut rest))
        .await
        .expect("an idle keep-alive connection outlived the header timeout by 6 s")
        .ok();
    assert!(answered.elapsed() >= Duration::from_millis(1500));
    assert_eq!(daemon.healthz().await, 200);
}

/// The "Max open files" soft and hard limits of a process, from /proc.
fn open_files_limits(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap();
    let mut fields = line["Max open files".len()..].split_whitespace();
    (
        fields.next().unwrap().to_owned(),
        fields.next().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_open_files_limit_is_raised_so_visitors_are_not_refused() {
    if crate::support::missing_tool("prlimit", "it starts the daemon with a low soft limit") {
        return;
    }
    // systemd's default is 1024 soft; 256 makes the point with fewer sockets.
    let daemon =
        TestDaemon::start_with(DaemonOptions::default().extra_toml(LIMITS).launched_by(&[
            "prlimit",
            "--nofile=256:4096",
            "--",
        ]));
    let pid = daemon.child.as_ref().unwrap().id();
    assert_eq!(
        open_files_limits(pid),
        ("4096".to_owned(), "4096".to_owned())
    );

    // 300 visitors at once (100 from each of three addresses), more than the 256 the daemon
    // was started with: every one is answered.
    let mut streams = Vec::new();
    for last in 2..=4u8 {
        for _ in 0..100 {
            let stream = connect_from(IpAddr::from([127, 0, 0, last]), daemon.http)
                .await
                .unwrap();
            streams.push(stream);
        }
    }
    let request = format!(
        "GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n",
        daemon.control_host()
    );
    for stream in &mut streams {
        stream.write_all(request.as_bytes()).await.unwrap();
    }
    for stream in &mut streams {
        let mut answer = [0u8; 12];
        tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut answer))
            .await
            .expect("an answer")
            .expect("the connection stayed open");
        assert_eq!(&answer, b"HTTP/1.1 200");
    }
}
