//! A token in `gitUrl` (issue 9): git gets it as an HTTP `Authorization` header through its
//! environment; it is in no log, no status, no record, no file of the data dir and no
//! process's command line.

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use serde_json::json;

use crate::support::TestDaemon;

const SECRET: &str = "s3cr3t-token-7f1d";

/// A loopback HTTP server that answers 401 to everything and reports each request's
/// `Authorization` header.
fn recording_server() -> (u16, std::sync::mpsc::Receiver<String>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(8).flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut authorization = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if line.to_ascii_lowercase().starts_with("authorization:") {
                    authorization = line.trim().to_owned();
                }
            }
            let _ = sender.send(authorization);
            let mut stream = stream;
            let _ = stream.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"t\"\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            );
            let _ = stream.read(&mut [0u8; 1]);
        }
    });
    (port, receiver)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_git_url_reaches_git_and_nothing_else() {
    if crate::support::missing_tool("git", "git clones the repository") {
        return;
    }
    let mut daemon = TestDaemon::start();
    let (port, requests) = recording_server();
    // http: the recording server speaks plain HTTP (the same split applies to https).
    let url = format!("http://ci:{SECRET}@127.0.0.1:{port}/team/app.git");
    let started = daemon
        .provision("private", json!({"gitUrl": url, "installCommand": ""}))
        .await;
    let status = daemon
        .wait_run(
            started["provisioningId"].as_str().unwrap(),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(status["status"], "provisioning_failed", "{status}");
    assert_eq!(status["error"]["code"], "SOURCE_FAILED", "{status}");
    // git sent the credentials as a header.
    let expected = format!(
        "Authorization: Basic {}",
        slipway::ids::base64(format!("ci:{SECRET}").as_bytes())
    );
    let seen: Vec<String> = requests.try_iter().collect();
    assert!(
        seen.iter().any(|header| header == &expected),
        "git did not send the credentials: {seen:?}"
    );
    // Nowhere else.
    let logs = daemon
        .logs_text(started["deploymentId"].as_str().unwrap())
        .await;
    assert!(!logs.contains(SECRET), "{logs}");
    assert!(
        logs.contains(&format!(
            "source: cloning http://127.0.0.1:{port}/team/app.git"
        )),
        "{logs}"
    );
    assert!(!status.to_string().contains(SECRET), "{status}");
    let deployments = daemon
        .api("GET", "/api/projects/private/deployments", None)
        .await;
    assert!(!deployments.text().contains(SECRET));
    assert!(!daemon.log_text().contains(SECRET), "the daemon's own log");
    assert_eq!(daemon.stop(), Some(0));
    assert_eq!(
        crate::support::dir_contains(&daemon.data_dir(), SECRET.as_bytes()),
        None,
        "the secret is stored in the data dir"
    );
}
