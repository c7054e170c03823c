//! Socket activation: the daemon serves on sockets systemd bound (here
//! `systemd-socket-activate`, which speaks the same protocol: LISTEN_PID, LISTEN_FDS,
//! LISTEN_FDNAMES, fds from 3), and a client that connected before the daemon ran is served.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::support::{http_request, missing_tool, reserve_port, DaemonOptions, TestDaemon};

/// Connects to `addr` as soon as something listens there (within 10 s), sends a plain GET and
/// returns the whole response.
fn early_request(addr: SocketAddr, host: &'static str) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut stream = loop {
            match TcpStream::connect(addr) {
                Ok(stream) => break stream,
                Err(error) if Instant::now() > deadline => return format!("connect: {error}"),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let request = format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        if let Err(error) = stream.write_all(request.as_bytes()) {
            return format!("write: {error}");
        }
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response
    })
}

fn free_port() -> u16 {
    reserve_port().local_addr().unwrap().port()
}

/// `systemd-socket-activate` with the given sockets and names; it passes the daemon only the
/// variables named with -E.
fn launcher(addrs: &[String], names: &str) -> Vec<String> {
    let mut launcher = vec!["systemd-socket-activate".to_owned()];
    for addr in addrs {
        launcher.push(format!("--listen={addr}"));
    }
    launcher.push(format!("--fdname={names}"));
    for name in ["SLIPWAY_LOG", "NO_COLOR", "PATH"] {
        launcher.push(format!("--setenv={name}"));
    }
    launcher
}

#[tokio::test]
async fn the_daemon_serves_on_sockets_systemd_passed_and_early_clients_wait() {
    if missing_tool(
        "systemd-socket-activate",
        "socket activation test (package systemd)",
    ) {
        return;
    }
    let (http_port, api_port) = (free_port(), free_port());
    let http_addr: SocketAddr = format!("127.0.0.1:{http_port}").parse().unwrap();
    let api_addr: SocketAddr = format!("127.0.0.1:{api_port}").parse().unwrap();
    // This client connects before the daemon even runs (the launcher starts it on the first
    // connection): with the socket unit it waits in the backlog instead of being refused.
    let early = early_request(http_addr, "slipway.localhost");
    let launcher = launcher(&[http_addr.to_string(), api_addr.to_string()], "http:api");
    let launcher: Vec<&str> = launcher.iter().map(String::as_str).collect();
    // The config asks for port 0 and no api listener: the passed sockets win.
    let daemon = TestDaemon::start_with(DaemonOptions::default().launched_by(&launcher));
    assert_eq!(
        daemon.http, http_addr,
        "the http listener is the passed socket"
    );
    let early = early.join().unwrap();
    assert!(
        early.starts_with("HTTP/1.1 200") && early.contains(r#"{"status":"ok"}"#),
        "the early client got: {early:?}"
    );
    let auth = vec![("authorization", format!("Bearer {}", daemon.token))];
    let projects = http_request(
        api_addr,
        "GET",
        &daemon.control_host(),
        "/api/projects",
        &auth,
        vec![],
    )
    .await;
    assert_eq!(projects.status, 200, "the api socket serves the API");
    let log = daemon.log_with("using the socket systemd passed");
    assert!(log.contains(r#"listener="http""#), "{log}");
    assert!(log.contains(r#"listener="api""#), "{log}");
}

#[test]
fn a_passed_socket_with_a_name_slipway_does_not_know_stops_the_daemon() {
    if missing_tool(
        "systemd-socket-activate",
        "socket activation test (package systemd)",
    ) {
        return;
    }
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let trigger = early_request(addr, "slipway.localhost");
    let launcher = launcher(&[addr.to_string()], "web");
    let launcher: Vec<&str> = launcher.iter().map(String::as_str).collect();
    let (code, log) = TestDaemon::run_to_exit(DaemonOptions::default().launched_by(&launcher));
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains(r#"socket activation passed a socket named "web""#),
        "the message names the socket: {log}"
    );
    let _ = trigger.join();
}
