//! Logs: paging with since/limit/stream, and SSE with `Last-Event-ID` resume (no gap, no
//! duplicate), status events and the end event.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::json;

use crate::support::{targz, TestDaemon};

#[derive(Debug, Default)]
struct Sse {
    ids: Vec<u64>,
    statuses: Vec<serde_json::Value>,
    ended: bool,
    content_type: String,
}

/// Follows the stream until `end`, or until the event with id `stop_at` arrived.
async fn follow(
    daemon: &TestDaemon,
    deployment_id: &str,
    last_event_id: Option<u64>,
    stop_at: Option<u64>,
) -> Sse {
    let stream = tokio::net::TcpStream::connect(daemon.http).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut request = http::Request::get(format!("/api/deployments/{deployment_id}/logs/stream"))
        .header("host", "slipway.localhost")
        .header("authorization", format!("Bearer {}", daemon.token));
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    let response = sender
        .send_request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut sse = Sse {
        content_type: response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned(),
        ..Default::default()
    };
    let mut body = response.into_body();
    let mut buffer = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .expect("SSE stalled")
            .expect("stream closed without end")
            .unwrap();
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buffer.push_str(std::str::from_utf8(&data).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            let mut kind = "message";
            let mut id = None;
            let mut payload = "";
            for line in event.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    kind = v;
                } else if let Some(v) = line.strip_prefix("id: ") {
                    id = v.parse::<u64>().ok();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    payload = v;
                }
            }
            match kind {
                "log" => {
                    let line: serde_json::Value = serde_json::from_str(payload).unwrap();
                    assert_eq!(line["seq"].as_u64(), id, "id matches seq");
                    sse.ids.push(id.unwrap());
                    if id == stop_at {
                        return sse;
                    }
                }
                "status" => sse.statuses.push(serde_json::from_str(payload).unwrap()),
                "end" => {
                    sse.ended = true;
                    return sse;
                }
                _ => {}
            }
        }
    }
}

const CHATTY_BUILD: &str = "for i in $(seq 1 40); do echo line $i; sleep 0.02; done; mkdir -p dist; echo ok > dist/index.html";

#[tokio::test]
async fn sse_resumes_after_last_event_id_with_no_gap_or_duplicate() {
    let daemon = TestDaemon::start();
    assert_eq!(
        daemon
            .upload("chatty", targz(&[("x", "x", 0o644)]))
            .await
            .status,
        201
    );
    let started = daemon
        .provision("chatty", json!({"buildCommand": CHATTY_BUILD}))
        .await;
    let dpl = started["deploymentId"].as_str().unwrap().to_owned();

    // Follow live from the start, drop the connection after line 10, resume from there.
    let first = follow(&daemon, &dpl, None, Some(10)).await;
    assert_eq!(first.content_type, "text/event-stream");
    assert_eq!(first.ids, (1..=10).collect::<Vec<_>>());
    let rest = follow(&daemon, &dpl, Some(10), None).await;
    assert!(
        rest.ended,
        "the stream ends when the static deployment is done"
    );
    let last = *rest.ids.last().unwrap();
    assert_eq!(
        rest.ids,
        (11..=last).collect::<Vec<_>>(),
        "exactly the lines after 10, in order"
    );
    assert!(
        rest.statuses
            .iter()
            .any(|s| s["status"] == "provisioning_complete"),
        "status events carry the run's state"
    );

    // The same lines through the paged endpoint, and a replay of a finished deployment.
    let all = daemon
        .api(
            "GET",
            &format!("/api/deployments/{dpl}/logs?limit=5000"),
            None,
        )
        .await
        .json();
    assert_eq!(all["logs"].as_array().unwrap().len() as u64, last);
    assert_eq!(all["hasMore"], false);
    let replay = follow(&daemon, &dpl, Some(last - 3), None).await;
    assert_eq!(replay.ids, vec![last - 2, last - 1, last]);
    assert!(replay.ended);
}

#[tokio::test]
async fn log_pages_filter_and_validate() {
    let daemon = TestDaemon::start();
    let status = daemon
        .deploy(
            "paged",
            &[("x", "x", 0o644)],
            json!({"buildCommand": CHATTY_BUILD}),
        )
        .await;
    let dpl = status["deploymentId"].as_str().unwrap();
    let page = daemon
        .api(
            "GET",
            &format!("/api/deployments/{dpl}/logs?since=5&limit=3"),
            None,
        )
        .await
        .json();
    let seqs: Vec<u64> = page["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, vec![6, 7, 8]);
    assert_eq!(page["nextSince"], 8);
    assert_eq!(page["hasMore"], true);
    let line = &page["logs"][0];
    assert!(line["timestamp"].as_str().unwrap().ends_with('Z'));
    let builds = daemon
        .api(
            "GET",
            &format!("/api/deployments/{dpl}/logs?stream=build&limit=5000"),
            None,
        )
        .await
        .json();
    let builds = builds["logs"].as_array().unwrap();
    assert_eq!(builds.len(), 40);
    assert!(builds.iter().all(|l| l["stream"] == "build"));
    assert_eq!(builds[0]["message"], "line 1");
    for bad in [
        "since=-1",
        "limit=0",
        "limit=5001",
        "stream=nope",
        "colour=red",
    ] {
        daemon
            .api("GET", &format!("/api/deployments/{dpl}/logs?{bad}"), None)
            .await
            .assert_error(400, "INVALID_QUERY");
    }
    daemon
        .api("GET", "/api/deployments/dpl_nope/logs", None)
        .await
        .assert_error(404, "NOT_FOUND");
}
