//! Following a deployment from the client: the SSE log stream (`GET /api/deployments/{id}/
//! logs/stream`, resumed with `Last-Event-ID` after a drop) and, for `deploy` and `rollback`,
//! the provisioning run until its status is final — from the stream's `status` events, with
//! the status endpoint polled as a fallback. Every wait is bounded.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::api::types::{LogLine, LogStreamEvent, ProvisionStatus};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::display::Display;
use super::http::ApiClient;
use super::sse::{Event, Parser};
use super::ClientError;

/// No bytes (not even a keepalive, sent every 15 s) for this long: the stream is dead.
const STREAM_IDLE: Duration = Duration::from_secs(45);
/// How often the status endpoint is polled while the stream is followed.
const POLL_WHILE_STREAMING: Duration = Duration::from_secs(5);
/// How often it is polled when there is no stream to follow.
const POLL_ALONE: Duration = Duration::from_secs(1);
/// How long lines are still read after a poll saw the run end.
const DRAIN: Duration = Duration::from_secs(2);
/// Reconnections in a row before giving up on the stream.
const MAX_RECONNECTS: u32 = 10;
const RECONNECT_DELAY: Duration = Duration::from_secs(2);
/// The pause before resuming a stream that closed after delivering events.
const RESUME_DELAY: Duration = Duration::from_millis(500);
/// The longest a client waits for one run (the daemon's own build timeout is 15 min).
const RUN_DEADLINE: Duration = Duration::from_secs(3 * 60 * 60);

/// Follows run `provisioning_id` of `deployment_id` until its status is final, printing log
/// lines (when `logs`) and progress; returns the final status object.
pub async fn follow_run(
    api: &ApiClient,
    provisioning_id: &str,
    deployment_id: &str,
    logs: bool,
    display: &mut Display,
) -> Result<ProvisionStatus, ClientError> {
    let deadline = Instant::now() + RUN_DEADLINE;
    let status_path = format!("/api/provisioning/{provisioning_id}/status");
    let mut last_seq = None;
    let mut streaming = logs;
    let mut reconnects = 0;
    loop {
        if Instant::now() > deadline {
            return Err(ClientError::Timeout(format!(
                "waiting for {provisioning_id}: still running after {} minutes",
                RUN_DEADLINE.as_secs() / 60
            )));
        }
        if !streaming {
            let status: ProvisionStatus = api.get(&status_path).await?;
            display.status(&status);
            if status.is_final() {
                return Ok(status);
            }
            tokio::time::sleep(POLL_ALONE).await;
            continue;
        }
        let mut run = RunStream {
            api,
            provisioning_id,
            status_path: &status_path,
            display,
            last_seq: &mut last_seq,
        };
        match run.follow(deployment_id).await {
            Ok(StreamOutcome::Final(status)) => return Ok(status),
            Ok(StreamOutcome::Ended) => streaming = false,
            Ok(StreamOutcome::Progressed) => {
                reconnects = 0;
                tokio::time::sleep(RESUME_DELAY).await;
            }
            Err(StreamBroken(why)) => {
                reconnects += 1;
                if reconnects > MAX_RECONNECTS {
                    display.message(&format!(
                        "slipway: the log stream keeps failing ({why}); waiting for the run without it"
                    ));
                    streaming = false;
                } else {
                    tokio::time::sleep(RECONNECT_DELAY).await;
                }
            }
        }
    }
}

/// Prints a deployment's logs live until the stream's `end` (reconnecting after drops).
pub async fn follow_logs(
    api: &ApiClient,
    deployment_id: &str,
    display: &mut Display,
) -> Result<(), ClientError> {
    let path = format!("/api/deployments/{deployment_id}/logs/stream");
    follow_stream(api, &path, |event| match event {
        LogStreamEvent::Log(line) => display
            .log_line(&line)
            .map_err(|error| ClientError::Io(format!("writing the log: {error}"))),
        LogStreamEvent::Status(status) => {
            display.status(&status);
            Ok(())
        }
        LogStreamEvent::End(_) => {
            display.finish();
            Ok(())
        }
    })
    .await
}

/// Follows the log stream at `path` until its `end`, reconnecting after drops (resumed with
/// `Last-Event-ID`, so no line is handed over twice); `on_event` gets each event.
pub async fn follow_stream(
    api: &ApiClient,
    path: &str,
    mut on_event: impl FnMut(LogStreamEvent) -> Result<(), ClientError>,
) -> Result<(), ClientError> {
    let mut last_seq: Option<u64> = None;
    let mut reconnects = 0;
    loop {
        let mut events = match EventStream::open(api, path, last_seq).await {
            Ok(events) => events,
            Err(OpenError::Api(error)) => return Err(error),
            Err(OpenError::Broken(why)) => {
                reconnects += 1;
                if reconnects > MAX_RECONNECTS {
                    return Err(ClientError::Protocol(format!(
                        "the log stream failed: {why}"
                    )));
                }
                tokio::time::sleep(RECONNECT_DELAY).await;
                continue;
            }
        };
        // The loop ends when the stream closes or breaks; either way, reconnect.
        while let Ok(Some(event)) = events.next().await {
            reconnects = 0;
            match LogStreamEvent::parse(&event.name, &event.data) {
                Some(LogStreamEvent::Log(line)) => {
                    if last_seq.is_some_and(|last| line.seq <= last) {
                        continue;
                    }
                    last_seq = Some(line.seq);
                    on_event(LogStreamEvent::Log(line))?;
                }
                Some(end @ LogStreamEvent::End(_)) => return on_event(end),
                Some(other) => on_event(other)?,
                None => {}
            }
        }
        reconnects += 1;
        if reconnects > MAX_RECONNECTS {
            return Err(ClientError::Protocol(
                "the log stream keeps closing without its end".into(),
            ));
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}

/// Prints one `log` event's line, remembering its sequence number for a resumption.
fn print_line(
    line: &LogLine,
    last_seq: &mut Option<u64>,
    display: &mut Display,
) -> Result<(), ClientError> {
    if last_seq.is_some_and(|last| line.seq <= last) {
        return Ok(());
    }
    *last_seq = Some(line.seq);
    display
        .log_line(line)
        .map_err(|error| ClientError::Io(format!("writing the log: {error}")))
}

struct StreamBroken(String);

enum OpenError {
    /// The API refused (e.g. an unknown deployment): not worth retrying.
    Api(ClientError),
    Broken(String),
}

enum StreamOutcome {
    /// The run's status became final.
    Final(ProvisionStatus),
    /// The stream sent `end`: no more lines will come.
    Ended,
    /// The stream closed after delivering something; reconnect.
    Progressed,
}

struct RunStream<'a> {
    api: &'a ApiClient,
    provisioning_id: &'a str,
    status_path: &'a str,
    display: &'a mut Display,
    last_seq: &'a mut Option<u64>,
}

impl RunStream<'_> {
    async fn follow(&mut self, deployment_id: &str) -> Result<StreamOutcome, StreamBroken> {
        let path = format!("/api/deployments/{deployment_id}/logs/stream");
        let mut events = match EventStream::open(self.api, &path, *self.last_seq).await {
            Ok(events) => events,
            Err(OpenError::Api(error)) => {
                // No stream for this deployment: the status endpoint alone tells the outcome.
                self.display
                    .message(&format!("slipway: cannot follow the logs: {error}"));
                return Ok(StreamOutcome::Ended);
            }
            Err(OpenError::Broken(why)) => return Err(StreamBroken(why)),
        };
        let mut poll = tokio::time::interval(POLL_WHILE_STREAMING);
        poll.tick().await;
        let mut polled_final: Option<(ProvisionStatus, tokio::time::Instant)> = None;
        let mut received = false;
        loop {
            let drain_deadline = polled_final.as_ref().map(|(_, at)| *at);
            tokio::select! {
                event = events.next() => match event {
                    Ok(Some(event)) => {
                        received = true;
                        match self.event(&event).map_err(|e| StreamBroken(e.to_string()))? {
                            // A final status: the lines before `end` may still be on the way.
                            Some(StreamOutcome::Final(status)) if polled_final.is_none() => {
                                polled_final = Some((status, tokio::time::Instant::now() + DRAIN));
                            }
                            Some(StreamOutcome::Final(_)) => {}
                            Some(StreamOutcome::Ended) => {
                                return Ok(match polled_final.take() {
                                    Some((status, _)) => StreamOutcome::Final(status),
                                    None => StreamOutcome::Ended,
                                });
                            }
                            Some(outcome) => return Ok(outcome),
                            None => {}
                        }
                    }
                    Ok(None) | Err(_) => {
                        return match polled_final {
                            Some((status, _)) => Ok(StreamOutcome::Final(status)),
                            None if received => Ok(StreamOutcome::Progressed),
                            None => Err(StreamBroken("the stream closed".into())),
                        };
                    }
                },
                _ = poll.tick(), if polled_final.is_none() => {
                    // The stream is the main source; a failed poll is retried at the next tick.
                    if let Ok(status) = self.api.get::<ProvisionStatus>(self.status_path).await {
                        self.display.status(&status);
                        if status.is_final() {
                            polled_final = Some((status, tokio::time::Instant::now() + DRAIN));
                        }
                    }
                }
                _ = sleep_until_option(drain_deadline) => {
                    let (status, _) = polled_final.take().expect("a drain deadline has a status");
                    return Ok(StreamOutcome::Final(status));
                }
            }
        }
    }

    /// Handles one event; `Some` when it ends the following.
    fn event(&mut self, event: &Event) -> Result<Option<StreamOutcome>, ClientError> {
        match LogStreamEvent::parse(&event.name, &event.data) {
            Some(LogStreamEvent::Log(line)) => print_line(&line, self.last_seq, self.display)?,
            Some(LogStreamEvent::Status(status)) => {
                // A stream may carry another run's status (e.g. the deployment's first run).
                if status.provisioning_id() != self.provisioning_id {
                    return Ok(None);
                }
                self.display.status(&status);
                if status.is_final() {
                    return Ok(Some(StreamOutcome::Final(status)));
                }
            }
            Some(LogStreamEvent::End(_)) => return Ok(Some(StreamOutcome::Ended)),
            None => {}
        }
        Ok(None)
    }
}

async fn sleep_until_option(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Events from one open stream.
struct EventStream {
    body: Incoming,
    parser: Parser,
    queued: VecDeque<Event>,
}

impl EventStream {
    async fn open(
        api: &ApiClient,
        path: &str,
        last_seq: Option<u64>,
    ) -> Result<EventStream, OpenError> {
        match api.open_stream(path, last_seq).await {
            Ok(body) => Ok(EventStream {
                body,
                parser: Parser::default(),
                queued: VecDeque::new(),
            }),
            Err(error @ ClientError::Api { status, .. }) if status != 429 && status < 500 => {
                Err(OpenError::Api(error))
            }
            Err(error) => Err(OpenError::Broken(error.to_string())),
        }
    }

    /// The next event; `None` when the server closed the stream. Cancel-safe.
    async fn next(&mut self) -> Result<Option<Event>, StreamBroken> {
        loop {
            if let Some(event) = self.queued.pop_front() {
                return Ok(Some(event));
            }
            let frame = match tokio::time::timeout(STREAM_IDLE, self.body.frame()).await {
                Err(_) => {
                    return Err(StreamBroken(format!(
                        "no data for {} s",
                        STREAM_IDLE.as_secs()
                    )))
                }
                Ok(None) => return Ok(None),
                Ok(Some(Err(error))) => return Err(StreamBroken(error.to_string())),
                Ok(Some(Ok(frame))) => frame,
            };
            if let Ok(data) = frame.into_data() {
                let events = self
                    .parser
                    .feed(&data)
                    .map_err(|error| StreamBroken(error.to_string()))?;
                self.queued.extend(events);
            }
        }
    }
}
