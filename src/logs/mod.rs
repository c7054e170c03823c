//! The log hub: every deployment's log lines, persisted and fanned out live.
//!
//! `append` assigns the next `seq` and keeps the line in memory until the flusher has
//! committed it to the store (batched, every 100 ms), while a `broadcast` channel carries it to
//! live followers. A follower takes a snapshot under the same lock as `append` (what is in the
//! store up to `flushed`, plus the pending lines, plus a receiver for everything after), so
//! replay-then-follow has no gap and no duplicate. A follower that lags re-reads from the store.
//!
//! One deployment cannot flood the daemon (`LogLimits`): past its byte rate lines are dropped
//! and counted in a `system` line; past a bound of pending lines the pumps (`pump.rs`) wait for
//! the flusher, so the child's pipe fills and its writes block; the flusher commits in small
//! transactions so one deployment's burst never stalls the store for the others.

mod pump;

pub use pump::pump_lines;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::store::{Store, StoredLine};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    System,
    Install,
    Build,
    // The release command's output (issue 33).
    Release,
    Stdout,
    Stderr,
}

impl LogStream {
    pub fn parse(text: &str) -> Option<LogStream> {
        Some(match text {
            "system" => LogStream::System,
            "install" => LogStream::Install,
            "build" => LogStream::Build,
            "release" => LogStream::Release,
            "stdout" => LogStream::Stdout,
            "stderr" => LogStream::Stderr,
            _ => return None,
        })
    }
}

/// A log line exactly as the API shows it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct LogLine {
    pub seq: u64,
    pub timestamp: String,
    pub stream: LogStream,
    /// The process instance that wrote it (`web.1`, `worker.2`), for a live app's lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<Arc<str>>,
    pub message: String,
}

/// What live followers receive.
#[derive(Debug, Clone)]
pub enum LogEvent {
    Line(Arc<LogLine>),
    /// The provisioning run's status object changed (serialized as JSON: the hub carries it,
    /// the pipeline owns its shape).
    Status(Arc<str>),
    /// The deployment will produce no more lines.
    End,
}

/// Longest single message kept (longer lines are cut, with a marker).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;

/// Lines of one deployment waiting for the flusher before its pumps wait too.
const MAX_PENDING_LINES: usize = 5_000;

/// Lines committed per store transaction.
const FLUSH_CHUNK_LINES: usize = 500;

/// What a line costs against the rate beyond its message (seq, timestamp, stream).
const LINE_OVERHEAD_BYTES: f64 = 64.0;

/// How much one deployment may log, from `[limits]` in the config.
#[derive(Debug, Clone, Copy)]
pub struct LogLimits {
    /// Bytes kept per deployment in the store (oldest lines go first).
    pub retention_bytes: u64,
    /// Sustained rate per deployment, and the burst above it.
    pub rate_bytes_per_second: u64,
    pub burst_bytes: u64,
}

struct Channel {
    next_seq: u64,
    /// Highest seq known to be committed to the store.
    flushed: u64,
    pending: Vec<Arc<LogLine>>,
    sender: broadcast::Sender<LogEvent>,
    ended: bool,
    /// Bytes the deployment may still log now (refilled at the rate, up to the burst).
    allowance: f64,
    refilled: Instant,
    /// Lines dropped over the rate since the last report.
    dropped: u64,
    reported: Instant,
}

pub struct LogHub {
    store: Store,
    limits: LogLimits,
    channels: Mutex<HashMap<String, Channel>>,
    flush_now: tokio::sync::Notify,
    /// Woken after every flush (pumps waiting for room).
    flushed: tokio::sync::Notify,
}

/// A follower's starting point: committed lines are read from the store up to `flushed`.
pub struct Subscription {
    pub flushed: u64,
    pub pending: Vec<Arc<LogLine>>,
    pub receiver: broadcast::Receiver<LogEvent>,
    pub ended: bool,
}

impl LogHub {
    pub fn new(store: Store, limits: LogLimits) -> Arc<LogHub> {
        Arc::new(LogHub {
            store,
            limits,
            channels: Mutex::new(HashMap::new()),
            flush_now: tokio::sync::Notify::new(),
            flushed: tokio::sync::Notify::new(),
        })
    }

    fn channel<'a>(
        &self,
        channels: &'a mut HashMap<String, Channel>,
        deployment_id: &str,
    ) -> &'a mut Channel {
        channels.entry(deployment_id.to_owned()).or_insert_with(|| {
            // A deployment seen for the first time since start continues after what is stored.
            let last = self.store.last_log_seq(deployment_id).unwrap_or(0);
            let now = Instant::now();
            Channel {
                next_seq: last + 1,
                flushed: last,
                pending: Vec::new(),
                sender: broadcast::channel(1024).0,
                ended: false,
                allowance: self.limits.burst_bytes as f64,
                refilled: now,
                dropped: 0,
                reported: now,
            }
        })
    }

    /// Adds a line from the deployment's output; over the deployment's rate it is dropped and
    /// counted instead. `system` lines (the daemon's own) are never dropped.
    pub fn append(&self, deployment_id: &str, stream: LogStream, message: &str) {
        self.append_from(deployment_id, stream, None, message);
    }

    /// [`LogHub::append`] for a line of one process instance (`web.1`), tagged with it.
    pub fn append_from(
        &self,
        deployment_id: &str,
        stream: LogStream,
        instance: Option<&Arc<str>>,
        message: &str,
    ) {
        if stream != LogStream::System {
            let mut channels = self.channels.lock().expect("log hub poisoned");
            let channel = self.channel(&mut channels, deployment_id);
            if !self.take_allowance(channel, message.len()) {
                channel.dropped += 1;
                return;
            }
            if channel.dropped > 0 {
                self.report_dropped(channel);
            }
        }
        self.push(deployment_id, stream, instance, message);
    }

    /// Refills the channel's allowance for the time passed and takes `bytes` from it.
    fn take_allowance(&self, channel: &mut Channel, bytes: usize) -> bool {
        let now = Instant::now();
        let elapsed = now.duration_since(channel.refilled).as_secs_f64();
        channel.refilled = now;
        channel.allowance = (channel.allowance
            + elapsed * self.limits.rate_bytes_per_second as f64)
            .min(self.limits.burst_bytes as f64);
        let cost = bytes as f64 + LINE_OVERHEAD_BYTES;
        if channel.allowance < cost {
            return false;
        }
        channel.allowance -= cost;
        true
    }

    /// The `system` line that says how many lines were dropped.
    fn report_dropped(&self, channel: &mut Channel) {
        let message = format!(
            "{} lines dropped: this deployment logged faster than {} KiB/s; lower its output",
            channel.dropped,
            self.limits.rate_bytes_per_second / 1024
        );
        channel.dropped = 0;
        channel.reported = Instant::now();
        Self::push_line(channel, LogStream::System, None, message);
    }

    /// Waits while the deployment has `MAX_PENDING_LINES` waiting for the flusher.
    pub async fn room(&self, deployment_id: &str) {
        loop {
            let flushed = self.flushed.notified();
            {
                let channels = self.channels.lock().expect("log hub poisoned");
                match channels.get(deployment_id) {
                    Some(channel) if channel.pending.len() >= MAX_PENDING_LINES => {}
                    _ => return,
                }
            }
            self.flush_now.notify_one();
            flushed.await;
        }
    }

    fn push(
        &self,
        deployment_id: &str,
        stream: LogStream,
        instance: Option<&Arc<str>>,
        message: &str,
    ) {
        let mut message = message.trim_end_matches(['\n', '\r']).to_owned();
        if message.len() > MAX_MESSAGE_BYTES {
            let mut cut = MAX_MESSAGE_BYTES;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str(" … [line truncated]");
        }
        let mut channels = self.channels.lock().expect("log hub poisoned");
        let channel = self.channel(&mut channels, deployment_id);
        Self::push_line(channel, stream, instance.cloned(), message);
    }

    fn push_line(
        channel: &mut Channel,
        stream: LogStream,
        instance: Option<Arc<str>>,
        message: String,
    ) {
        let line = Arc::new(LogLine {
            seq: channel.next_seq,
            timestamp: crate::ids::rfc3339(crate::ids::now_ms()),
            stream,
            instance,
            message,
        });
        channel.next_seq += 1;
        channel.pending.push(line.clone());
        let _ = channel.sender.send(LogEvent::Line(line));
    }

    pub fn system(&self, deployment_id: &str, message: &str) {
        self.append(deployment_id, LogStream::System, message);
    }

    /// A line from Slipway about one process instance of the deployment.
    pub fn system_from(&self, deployment_id: &str, instance: &Arc<str>, message: &str) {
        self.append_from(deployment_id, LogStream::System, Some(instance), message);
    }

    pub fn publish_status(&self, deployment_id: &str, status: Arc<str>) {
        let mut channels = self.channels.lock().expect("log hub poisoned");
        let channel = self.channel(&mut channels, deployment_id);
        let _ = channel.sender.send(LogEvent::Status(status));
    }

    /// Marks the deployment as finished: followers get `end` once they have every line.
    pub fn end(&self, deployment_id: &str) {
        let mut channels = self.channels.lock().expect("log hub poisoned");
        let channel = self.channel(&mut channels, deployment_id);
        channel.ended = true;
        let _ = channel.sender.send(LogEvent::End);
        self.flush_now.notify_one();
    }

    /// Forgets a deleted deployment (its stored lines are removed by the store).
    pub fn remove(&self, deployment_id: &str) {
        let removed = self
            .channels
            .lock()
            .expect("log hub poisoned")
            .remove(deployment_id);
        if let Some(channel) = removed {
            let _ = channel.sender.send(LogEvent::End);
        }
    }

    pub fn subscribe(&self, deployment_id: &str, ended_in_store: bool) -> Subscription {
        let mut channels = self.channels.lock().expect("log hub poisoned");
        let channel = self.channel(&mut channels, deployment_id);
        if ended_in_store {
            channel.ended = true;
        }
        Subscription {
            flushed: channel.flushed,
            pending: channel.pending.clone(),
            receiver: channel.sender.subscribe(),
            ended: channel.ended,
        }
    }

    /// Lines after `after` (store, then pending), at most `limit`, optionally one stream only.
    pub fn read(
        &self,
        deployment_id: &str,
        after: u64,
        limit: usize,
        stream: Option<LogStream>,
    ) -> crate::store::Result<(Vec<LogLine>, bool)> {
        let (flushed, pending) = {
            let mut channels = self.channels.lock().expect("log hub poisoned");
            let channel = self.channel(&mut channels, deployment_id);
            (channel.flushed, channel.pending.clone())
        };
        let mut out = Vec::new();
        let mut cursor = after;
        // Read in pages so a stream filter still fills `limit`.
        while cursor < flushed && out.len() <= limit {
            let page = self.store.read_logs(deployment_id, cursor, 1000)?;
            if page.is_empty() {
                break;
            }
            for stored in page {
                cursor = stored.seq;
                if stored.seq > flushed {
                    break;
                }
                let line: StoredLogLine = serde_json::from_slice(&stored.json).map_err(|e| {
                    crate::store::StoreError::Corrupt {
                        table: "logs",
                        message: e.to_string(),
                    }
                })?;
                if stream.is_none_or(|s| s == line.stream) {
                    out.push(line.into_line(stored.seq));
                }
            }
        }
        for line in pending.iter().filter(|l| l.seq > after.max(flushed)) {
            if stream.is_none_or(|s| s == line.stream) {
                out.push(LogLine::clone(line));
            }
        }
        let has_more = out.len() > limit;
        out.truncate(limit);
        Ok((out, has_more))
    }

    /// Commits pending lines; runs until `shutdown`, then flushes once more.
    pub async fn run_flusher(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = self.flush_now.notified() => {}
            }
            self.flush().await;
        }
        self.flush().await;
    }

    pub async fn flush(self: &Arc<Self>) {
        let batches: Vec<(String, Vec<Arc<LogLine>>)> = {
            let mut channels = self.channels.lock().expect("log hub poisoned");
            for channel in channels.values_mut() {
                // A flood that stopped still gets its count reported, at most once a second.
                if channel.dropped > 0 && channel.reported.elapsed() >= Duration::from_secs(1) {
                    self.report_dropped(channel);
                }
            }
            channels
                .iter()
                .filter(|(_, c)| !c.pending.is_empty())
                .flat_map(|(id, c)| {
                    c.pending
                        .chunks(FLUSH_CHUNK_LINES)
                        .map(|chunk| (id.clone(), chunk.to_vec()))
                })
                .collect()
        };
        for (deployment_id, lines) in batches {
            let stored: Vec<StoredLine> = lines
                .iter()
                .map(|line| StoredLine {
                    seq: line.seq,
                    json: serde_json::to_vec(&**line).expect("log lines serialize"),
                })
                .collect();
            let last = lines.last().map(|l| l.seq).unwrap_or(0);
            let store = self.store.clone();
            let retention = self.limits.retention_bytes;
            let id = deployment_id.clone();
            match store
                .call(move |s| s.append_logs(&id, &stored, retention))
                .await
            {
                Ok(()) => {
                    let mut channels = self.channels.lock().expect("log hub poisoned");
                    if let Some(channel) = channels.get_mut(&deployment_id) {
                        channel.pending.retain(|l| l.seq > last);
                        channel.flushed = channel.flushed.max(last);
                    }
                    drop(channels);
                    self.flushed.notify_waiters();
                }
                Err(error) => {
                    tracing::error!(%error, deployment = %deployment_id, "could not persist log lines")
                }
            }
        }
        // Drop channels of finished deployments that nobody follows and that are flushed.
        let mut channels = self.channels.lock().expect("log hub poisoned");
        channels
            .retain(|_, c| !(c.ended && c.pending.is_empty() && c.sender.receiver_count() == 0));
    }
}

#[derive(serde::Deserialize)]
struct StoredLogLine {
    timestamp: String,
    stream: LogStream,
    #[serde(default)]
    instance: Option<Arc<str>>,
    message: String,
}

impl StoredLogLine {
    fn into_line(self, seq: u64) -> LogLine {
        LogLine {
            seq,
            timestamp: self.timestamp,
            stream: self.stream,
            instance: self.instance,
            message: self.message,
        }
    }
}

impl<'de> serde::Deserialize<'de> for LogStream {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        LogStream::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown log stream {text}")))
    }
}
