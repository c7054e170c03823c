//! The shapes of the log endpoints: the query both take, a page of `GET …/logs`, and the
//! server-sent events of `GET …/logs/stream` (the server writes them in `api::logs`, the CLI
//! reads them in `client::follow`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{LogLine, LogStream, ProvisionStatus};

/// The query of `GET …/logs` and `GET …/logs/stream` (`api::logs` parses it; the OpenAPI
/// document lists its fields as query parameters).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct LogQuery {
    /// Only lines with a larger seq.
    #[schemars(range(max = 9_007_199_254_740_991u64))]
    pub since: u64,
    /// At most this many lines (default 1000, at most 5000).
    #[schemars(range(min = 1, max = 5000))]
    pub limit: usize,
    /// One stream only: system, install, build, stdout or stderr.
    #[schemars(with = "LogStream")]
    pub stream: Option<LogStream>,
}

impl LogQuery {
    /// The largest `limit`.
    pub const MAX_LIMIT: usize = 5000;
}

impl Default for LogQuery {
    fn default() -> LogQuery {
        LogQuery {
            since: 0,
            limit: 1000,
            stream: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogPage {
    pub deployment_id: String,
    pub logs: Vec<LogLine>,
    pub next_since: u64,
    pub has_more: bool,
}

/// One server-sent event of `GET …/logs/stream`, by its `event:` name.
#[derive(Debug, Clone)]
pub enum LogStreamEvent {
    /// `log`: one line; the event's id is the line's `seq` (resume with `Last-Event-ID`).
    Log(LogLine),
    /// `status`: the provisioning run's status, when it changes.
    Status(ProvisionStatus),
    /// `end`: the deployment produces no more lines; its data is `{}`.
    End(StreamEnd),
}

/// The data of the `end` event: an empty object.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct StreamEnd {}

impl LogStreamEvent {
    pub const LOG: &'static str = "log";
    pub const STATUS: &'static str = "status";
    pub const END: &'static str = "end";

    /// Reads one received event; `None` for a name this client does not know or data that is
    /// not its shape (both are skipped). The `end` event's data is not looked at.
    pub fn parse(name: &str, data: &str) -> Option<LogStreamEvent> {
        match name {
            LogStreamEvent::LOG => serde_json::from_str(data).ok().map(LogStreamEvent::Log),
            LogStreamEvent::STATUS => serde_json::from_str(data).ok().map(LogStreamEvent::Status),
            LogStreamEvent::END => Some(LogStreamEvent::End(StreamEnd {})),
            _ => None,
        }
    }
}
