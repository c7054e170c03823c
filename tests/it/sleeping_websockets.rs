//! Scale to zero and WebSockets (issue 35): a tunnel held open, silent, for three idle
//! timeouts keeps its app awake and is never cut (a message goes both ways afterwards); once
//! it closes the app sleeps; an upgrade to a sleeping app wakes it and the tunnel works.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use crate::pipeline::NODE_APP;
use crate::support::{eventually, missing_tool, DaemonOptions, TestDaemon};

async fn app_state(daemon: &TestDaemon) -> String {
    let project = daemon.api("GET", "/api/projects/chat", None).await.json();
    project["appState"].as_str().unwrap_or("?").to_owned()
}

type Socket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

async fn open(daemon: &TestDaemon) -> Socket {
    let stream = tokio::net::TcpStream::connect(daemon.http).await.unwrap();
    let (socket, response) = tokio_tungstenite::client_async("ws://chat.localhost/socket", stream)
        .await
        .expect("websocket handshake");
    assert_eq!(response.status(), 101);
    socket
}

async fn echo(socket: &mut Socket, text: &str) -> String {
    socket.send(Message::text(text)).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), socket.next())
        .await
        .expect("an answer within 10 s")
        .expect("the tunnel is open")
        .expect("a frame");
    reply.into_text().unwrap().as_str().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_websocket_keeps_its_app_awake_and_is_never_cut() {
    if missing_tool("node", "the WebSocket echo app is a node server") {
        return;
    }
    let daemon =
        TestDaemon::start_with(DaemonOptions::default().extra_toml("[sleep]\ntick_ms = 200\n"));
    daemon
        .deploy(
            "chat",
            &[("server.js", NODE_APP, 0o644)],
            json!({"startCommand": "node server.js"}),
        )
        .await;
    let mut socket = open(&daemon).await;
    let sleep = json!({"sleep": {"idleTimeoutS": 2, "strategy": "hold"}});
    let patched = daemon.api("PATCH", "/api/projects/chat", Some(sleep)).await;
    assert_eq!(patched.status, 200, "{}", patched.text());

    // Silent for 6 s, three timeouts: awake the whole time, then a message both ways.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            app_state(&daemon).await,
            "running",
            "asleep under an open tunnel"
        );
    }
    assert_eq!(echo(&mut socket, "still there").await, "echo:still there");
    let metrics = daemon.api("GET", "/api/metrics", None).await.text();
    assert!(metrics.contains("slipway_sleeping_apps 0"), "{metrics}");

    // Closed: the app sleeps after its timeout.
    socket.close(None).await.unwrap();
    drop(socket);
    let slept = eventually(Duration::from_secs(15), || async {
        app_state(&daemon).await == "sleeping"
    })
    .await;
    assert!(
        slept,
        "never slept after the tunnel closed: {}",
        app_state(&daemon).await
    );

    // An upgrade to the sleeping app wakes it; the tunnel works.
    let mut socket = open(&daemon).await;
    assert_eq!(echo(&mut socket, "hello").await, "echo:hello");
    assert_eq!(app_state(&daemon).await, "running");
    let metrics = daemon.api("GET", "/api/metrics", None).await.text();
    assert!(
        metrics.contains("slipway_app_wakes_total{result=\"ok\"} 1"),
        "{metrics}"
    );
}
