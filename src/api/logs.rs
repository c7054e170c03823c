//! Deployment logs: `GET /api/deployments/{deploymentId}/logs` (a page) and
//! `GET …/logs/stream` (server-sent events: replay from `Last-Event-ID`/`since`, then live
//! lines, status events, keepalives, and `end`).

use super::reply::Reply;
use crate::error_code::ErrorCode;
use std::sync::Arc;
use std::time::Duration;

use super::ApiRequest;
use bytes::Bytes;
use http::{HeaderValue, Response};
use http_body_util::BodyExt;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use super::types::{LogPage, LogQuery, LogStreamEvent, StreamEnd};
use super::{ApiError, Context};
use crate::http_util::ChannelBody;
use crate::logs::{LogEvent, LogHub, LogLine, LogStream};
use crate::store::records::{DeploymentMode, DeploymentRecord, DeploymentState};

const KEEPALIVE: Duration = Duration::from_secs(15);

/// The largest `since` (JSON's safe integers, as the document says).
const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// The query as [`LogQuery`]; a bad or unknown parameter is refused with `INVALID_QUERY`.
pub(super) fn parse_query(query: Option<&str>) -> Result<LogQuery, ApiError> {
    let mut parsed = LogQuery::default();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "since" => {
                parsed.since = value
                    .parse()
                    .ok()
                    .filter(|n| *n <= MAX_SAFE_INTEGER)
                    .ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::InvalidQuery,
                            format!(
                                "since={value:?} must be a log sequence number (an integer from \
                                 0 to 2^53 - 1)"
                            ),
                        )
                    })?
            }
            "limit" => {
                parsed.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=LogQuery::MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::InvalidQuery,
                            format!(
                                "limit={value:?} must be an integer from 1 to {}",
                                LogQuery::MAX_LIMIT
                            ),
                        )
                    })?
            }
            "stream" => {
                parsed.stream = Some(LogStream::parse(value).ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::InvalidQuery,
                        format!(
                        "stream={value:?} must be one of system, install, build, release, stdout, stderr"
                    ),
                    )
                })?)
            }
            other => {
                return Err(ApiError::new(
                    ErrorCode::InvalidQuery,
                    format!("unknown query parameter {other:?}; use since, limit, stream"),
                ))
            }
        }
    }
    Ok(parsed)
}

async fn deployment(ctx: &Context, id: &str) -> Result<DeploymentRecord, ApiError> {
    let key = id.to_owned();
    ctx.store
        .call(move |s| s.deployment(&key))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no deployment {id:?}")))
}

pub async fn page(ctx: &Arc<Context>, id: &str, request: &ApiRequest) -> Result<Reply, ApiError> {
    let query = parse_query(request.uri().query())?;
    let deployment = deployment(ctx, id).await?;
    let hub = ctx.hub.clone();
    let deployment_id = deployment.id.clone();
    let (lines, has_more) = ctx
        .store
        .call(move |_| hub.read(&deployment_id, query.since, query.limit, query.stream))
        .await?;
    let next_since = lines.last().map(|l| l.seq).unwrap_or(query.since);
    Ok(Reply::json(&LogPage {
        deployment_id: deployment.id,
        logs: lines,
        next_since,
        has_more,
    }))
}

/// Whether a deployment can still produce lines.
fn finished(deployment: &DeploymentRecord) -> bool {
    match deployment.state {
        DeploymentState::Failed | DeploymentState::Canceled | DeploymentState::Inactive => true,
        DeploymentState::Live => deployment.mode == Some(DeploymentMode::Static),
        DeploymentState::Building => false,
    }
}

pub async fn stream(ctx: &Arc<Context>, id: &str, request: &ApiRequest) -> Result<Reply, ApiError> {
    let (query, since) = stream_query(request)?;
    let deployment = deployment(ctx, id).await?;
    let status = ctx
        .pipeline
        .status(&deployment.provisioning_id)
        .await
        .ok()
        .flatten()
        .map(|status| crate::pipeline::status_event(&status));
    let ended = finished(&deployment);
    Ok(event_stream(
        ctx.hub.clone(),
        deployment.id,
        since,
        query.stream,
        ended,
        status,
    ))
}

/// The query of a log stream and where it starts: `Last-Event-ID` if sent, else `since`.
pub(super) fn stream_query(request: &ApiRequest) -> Result<(LogQuery, u64), ApiError> {
    let query = parse_query(request.uri().query())?;
    let last_event_id = request
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    let since = match last_event_id {
        Some(value) if !value.is_empty() => value.parse().map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidQuery,
                format!("Last-Event-ID {value:?} must be a log sequence number"),
            )
        })?,
        _ => query.since,
    };
    Ok((query, since))
}

/// The server-sent events of the log channel `key` (a deployment's or a run's): replay after
/// `since`, `status` once if given, then live lines until the channel ends.
pub(super) fn event_stream(
    hub: Arc<LogHub>,
    key: String,
    since: u64,
    stream: Option<LogStream>,
    ended: bool,
    status: Option<Arc<str>>,
) -> Reply {
    let (sender, receiver) = mpsc::channel::<Bytes>(256);
    tokio::spawn(follow(hub, key, since, stream, ended, status, sender));
    let mut response = Response::new(ChannelBody(receiver).boxed());
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Reply::Whole(response)
}

fn line_event(line: &LogLine) -> Bytes {
    let data = serde_json::to_string(line).expect("log lines serialize");
    Bytes::from(format!(
        "id: {}\nevent: {}\ndata: {data}\n\n",
        line.seq,
        LogStreamEvent::LOG
    ))
}

/// `status` is the status object serialized as JSON (as the hub carries it).
fn status_event(status: &str) -> Bytes {
    Bytes::from(format!(
        "event: {}\ndata: {status}\n\n",
        LogStreamEvent::STATUS
    ))
}

fn end_event() -> Bytes {
    let data = serde_json::to_string(&StreamEnd {}).expect("the end event serializes");
    Bytes::from(format!("event: {}\ndata: {data}\n\n", LogStreamEvent::END))
}

async fn follow(
    hub: Arc<LogHub>,
    deployment_id: String,
    since: u64,
    stream: Option<LogStream>,
    ended_in_store: bool,
    status: Option<Arc<str>>,
    sender: mpsc::Sender<Bytes>,
) {
    let wanted = |line: &LogLine| stream.is_none_or(|s| s == line.stream);
    let mut subscription = hub.subscribe(&deployment_id, ended_in_store);
    let _ = sender
        .send(Bytes::from_static(b": connected\nretry: 2000\n\n"))
        .await;
    // Replay: everything after `since` that exists now (store, then pending); then the run's
    // current status, so a client that stops at a final status has seen every line before it.
    let mut last = since;
    if !replay(&hub, &deployment_id, &mut last, &sender, &wanted).await {
        return;
    }
    if let Some(status) = &status {
        if sender.send(status_event(status)).await.is_err() {
            return;
        }
    }
    if subscription.ended {
        let _ = sender.send(end_event()).await;
        return;
    }
    loop {
        let event = tokio::select! {
            _ = sender.closed() => return,
            _ = tokio::time::sleep(KEEPALIVE) => {
                if sender.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                    return;
                }
                continue;
            }
            event = subscription.receiver.recv() => event,
        };
        match event {
            Ok(LogEvent::Line(line)) => {
                if line.seq > last {
                    last = line.seq;
                    if wanted(&line) && sender.send(line_event(&line)).await.is_err() {
                        return;
                    }
                }
            }
            Ok(LogEvent::Status(status)) => {
                if sender.send(status_event(&status)).await.is_err() {
                    return;
                }
            }
            Ok(LogEvent::End) | Err(RecvError::Closed) => {
                // Lines appended just before the end are in the channel already (sent before
                // End); a final replay covers any the receiver missed.
                replay(&hub, &deployment_id, &mut last, &sender, &wanted).await;
                let _ = sender.send(end_event()).await;
                return;
            }
            Err(RecvError::Lagged(_)) => {
                // Too slow for the live channel: catch up from the store and pending lines.
                if !replay(&hub, &deployment_id, &mut last, &sender, &wanted).await {
                    return;
                }
            }
        }
    }
}

/// Sends every line after `*last` that the hub has now; false when the client went away.
async fn replay(
    hub: &Arc<LogHub>,
    deployment_id: &str,
    last: &mut u64,
    sender: &mpsc::Sender<Bytes>,
    wanted: &impl Fn(&LogLine) -> bool,
) -> bool {
    loop {
        let (hub2, id, after) = (hub.clone(), deployment_id.to_owned(), *last);
        let page = tokio::task::spawn_blocking(move || hub2.read(&id, after, 1000, None)).await;
        let Ok(Ok((lines, _))) = page else {
            return true;
        };
        if lines.is_empty() {
            return true;
        }
        for line in &lines {
            *last = line.seq;
            if wanted(line) && sender.send(line_event(line)).await.is_err() {
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::sse::Parser;

    #[test]
    fn the_client_reads_the_events_the_stream_sends() {
        let line = LogLine {
            seq: 7,
            timestamp: "2025-01-01T00:00:00.000Z".into(),
            stream: LogStream::Build,
            instance: None,
            message: "compiled".into(),
        };
        let mut bytes = line_event(&line).to_vec();
        bytes.extend_from_slice(&end_event());
        let events = Parser::default().feed(&bytes).unwrap();
        let parsed: Vec<_> = events
            .iter()
            .map(|event| LogStreamEvent::parse(&event.name, &event.data))
            .collect();
        assert_eq!(events[0].id.as_deref(), Some("7"));
        assert!(
            matches!(&parsed[0], Some(LogStreamEvent::Log(got)) if got.message == "compiled"),
            "{parsed:?}"
        );
        assert!(
            matches!(parsed[1], Some(LogStreamEvent::End(_))),
            "{parsed:?}"
        );
    }

    #[test]
    fn queries_parse_into_the_typed_query() {
        assert_eq!(parse_query(None).unwrap(), LogQuery::default());
        let query = parse_query(Some("since=5&limit=10&stream=stderr")).unwrap();
        assert_eq!((query.since, query.limit), (5, 10));
        assert_eq!(query.stream, Some(LogStream::Stderr));
        for bad in ["limit=0", "limit=5001", "since=-1", "stream=x", "page=2"] {
            let error = parse_query(Some(bad)).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidQuery, "{bad}");
        }
    }
}
