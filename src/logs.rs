//! The log hub: every deployment's log lines, persisted and fanned out live.
//!
//! `append` assigns the next `seq` and keeps the line in memory until the flusher has
//! committed it to the store (batched, every 100 ms), while a `broadcast` channel carries it to
//! live followers. A follower takes a snapshot under the same lock as `append` (what is in the
//! store up to `flushed`, plus the pending lines, plus a receiver for everything after), so
//! replay-then-follow has no gap and no duplicate. A follower that lags re-reads from the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::store::{Store, StoredLine};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    System,
    Install,
    Build,
    Stdout,
    Stderr,
}

impl LogStream {
    pub fn parse(text: &str) -> Option<LogStream> {
        Some(match text {
            "system" => LogStream::System,
            "install" => LogStream::Install,
            "build" => LogStream::Build,
            "stdout" => LogStream::Stdout,
            "stderr" => LogStream::Stderr,
            _ => return None,
        })
    }
}

/// A log line exactly as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LogLine {
    pub seq: u64,
    pub timestamp: String,
    pub stream: LogStream,
    pub message: String,
}

/// What live followers receive.
#[derive(Debug, Clone)]
pub enum LogEvent {
    Line(Arc<LogLine>),
    /// The provisioning run's status object changed.
    Status(Arc<serde_json::Value>),
    /// The deployment will produce no more lines.
    End,
}

/// Longest single message kept (longer lines are cut, with a marker).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;

struct Channel {
    next_seq: u64,
    /// Highest seq known to be committed to the store.
    flushed: u64,
    pending: Vec<Arc<LogLine>>,
    sender: broadcast::Sender<LogEvent>,
    ended: bool,
}

pub struct LogHub {
    store: Store,
    retention_bytes: u64,
    channels: Mutex<HashMap<String, Channel>>,
    flush_now: tokio::sync::Notify,
}

/// A follower's starting point: committed lines are read from the store up to `flushed`.
pub struct Subscription {
    pub flushed: u64,
    pub pending: Vec<Arc<LogLine>>,
    pub receiver: broadcast::Receiver<LogEvent>,
    pub ended: bool,
}

impl LogHub {
    pub fn new(store: Store, retention_bytes: u64) -> Arc<LogHub> {
        Arc::new(LogHub {
            store,
            retention_bytes,
            channels: Mutex::new(HashMap::new()),
            flush_now: tokio::sync::Notify::new(),
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
            Channel {
                next_seq: last + 1,
                flushed: last,
                pending: Vec::new(),
                sender: broadcast::channel(1024).0,
                ended: false,
            }
        })
    }

    pub fn append(&self, deployment_id: &str, stream: LogStream, message: &str) {
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
        let line = Arc::new(LogLine {
            seq: channel.next_seq,
            timestamp: crate::ids::rfc3339(crate::ids::now_ms()),
            stream,
            message,
        });
        channel.next_seq += 1;
        channel.pending.push(line.clone());
        let _ = channel.sender.send(LogEvent::Line(line));
    }

    pub fn system(&self, deployment_id: &str, message: &str) {
        self.append(deployment_id, LogStream::System, message);
    }

    pub fn publish_status(&self, deployment_id: &str, status: serde_json::Value) {
        let mut channels = self.channels.lock().expect("log hub poisoned");
        let channel = self.channel(&mut channels, deployment_id);
        let _ = channel.sender.send(LogEvent::Status(Arc::new(status)));
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
            let channels = self.channels.lock().expect("log hub poisoned");
            channels
                .iter()
                .filter(|(_, c)| !c.pending.is_empty())
                .map(|(id, c)| (id.clone(), c.pending.clone()))
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
            let retention = self.retention_bytes;
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
    message: String,
}

impl StoredLogLine {
    fn into_line(self, seq: u64) -> LogLine {
        LogLine {
            seq,
            timestamp: self.timestamp,
            stream: self.stream,
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

/// Copies a child's output into the hub line by line as it is produced; a line longer than
/// [`MAX_MESSAGE_BYTES`] is split. Returns at end of file.
pub async fn pump_lines<R: tokio::io::AsyncRead + Unpin>(
    reader: R,
    hub: Arc<LogHub>,
    deployment_id: String,
    stream: LogStream,
) {
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::with_capacity(16 * 1024, reader);
    let mut line = Vec::with_capacity(256);
    loop {
        let buffer = match reader.fill_buf().await {
            Ok([]) | Err(_) => break,
            Ok(buffer) => buffer,
        };
        let (consumed, complete) = match buffer.iter().position(|&b| b == b'\n') {
            Some(newline) => {
                line.extend_from_slice(&buffer[..newline]);
                (newline + 1, true)
            }
            None => {
                line.extend_from_slice(buffer);
                (buffer.len(), false)
            }
        };
        reader.consume(consumed);
        if complete || line.len() >= MAX_MESSAGE_BYTES {
            hub.append(&deployment_id, stream, &String::from_utf8_lossy(&line));
            line.clear();
        }
    }
    if !line.is_empty() {
        hub.append(&deployment_id, stream, &String::from_utf8_lossy(&line));
    }
}
