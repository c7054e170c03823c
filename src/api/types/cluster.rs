//! The shapes of `GET /api/nodes` (issue 36).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One node of the cluster apps run on.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// `nod_` and the engine's node id.
    pub id: String,
    /// The node's hostname.
    pub name: String,
    /// The address the node advertises to the cluster.
    pub address: String,
    /// The engine, e.g. `swarm`.
    pub engine: String,
    /// The engine's word for it: `ready`, `down`, `disconnected` or `unknown`.
    pub state: String,
    /// The tasks that should run on it (every project's).
    pub tasks: u32,
    pub memory_bytes: u64,
    pub cpus: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeList {
    /// Sorted by name; empty when no `[cluster] engine` is configured.
    pub nodes: Vec<Node>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}
