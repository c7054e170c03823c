//! The cluster's nodes as `GET /api/nodes` shows them: the engine's node list with the
//! tasks that should run on each; the [`NodeBook`] of their addresses the task lists use,
//! kept by [`watch_down`]'s reads.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use serde::Deserialize;

use super::docker::{Docker, DockerError};

/// One node as the engine reports it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The engine's id (the API shows `nod_<id>`).
    pub engine_id: String,
    pub name: String,
    pub address: String,
    /// `ready`, `down`, `disconnected` or `unknown`.
    pub state: String,
    pub tasks: u32,
    pub memory_bytes: u64,
    pub cpus: f64,
}

#[derive(Deserialize)]
struct Node {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "Description", default)]
    description: Description,
    #[serde(rename = "Status", default)]
    status: Status,
}

#[derive(Deserialize, Default)]
struct Description {
    #[serde(rename = "Hostname", default)]
    hostname: String,
    #[serde(rename = "Resources", default)]
    resources: Resources,
}

#[derive(Deserialize, Default)]
struct Resources {
    #[serde(rename = "NanoCPUs", default)]
    nano_cpus: u64,
    #[serde(rename = "MemoryBytes", default)]
    memory_bytes: u64,
}

#[derive(Deserialize, Default)]
struct Status {
    #[serde(rename = "State", default)]
    state: String,
    #[serde(rename = "Addr", default)]
    addr: String,
}

#[derive(Deserialize)]
struct Task {
    #[serde(rename = "NodeID", default)]
    node_id: String,
}

/// Where a node is reached, and its name.
#[derive(Debug, Clone, Default)]
pub(super) struct NodeAddr {
    pub(super) ip: Option<IpAddr>,
    pub(super) name: String,
}

impl From<&Node> for NodeAddr {
    fn from(node: &Node) -> NodeAddr {
        NodeAddr {
            ip: node.status.addr.parse().ok(),
            name: node.description.hostname.clone(),
        }
    }
}

/// The nodes' addresses by engine id: refreshed with every read of the node list, and a
/// node not yet in it is read alone when a task names it (the task lists, read every
/// 500 ms, do not read the nodes again).
#[derive(Clone, Default)]
pub struct NodeBook(Arc<Mutex<HashMap<String, NodeAddr>>>);

impl NodeBook {
    pub(super) async fn get(&self, docker: &Docker, id: &str) -> Result<NodeAddr, DockerError> {
        if let Some(known) = self.0.lock().expect("node book poisoned").get(id) {
            return Ok(known.clone());
        }
        let node: Node = docker.get(&format!("/nodes/{id}")).await?;
        let address = NodeAddr::from(&node);
        self.0
            .lock()
            .expect("node book poisoned")
            .insert(node.id, address.clone());
        Ok(address)
    }

    fn keep(&self, nodes: &[Node]) {
        *self.0.lock().expect("node book poisoned") = nodes
            .iter()
            .map(|node| (node.id.clone(), NodeAddr::from(node)))
            .collect();
    }
}

/// Every node, sorted by name, with its count of tasks that should run.
pub async fn list(docker: &Docker) -> Result<Vec<NodeInfo>, DockerError> {
    let nodes: Vec<Node> = docker.get("/nodes").await?;
    let tasks: Vec<Task> = docker
        .get("/tasks?filters=%7B%22desired-state%22%3A%5B%22running%22%5D%7D")
        .await?;
    let mut per_node: HashMap<String, u32> = HashMap::new();
    for task in tasks {
        *per_node.entry(task.node_id).or_default() += 1;
    }
    let mut infos: Vec<NodeInfo> = nodes
        .into_iter()
        .map(|node| NodeInfo {
            tasks: per_node.get(&node.id).copied().unwrap_or_default(),
            name: node.description.hostname,
            address: node.status.addr,
            state: node.status.state,
            memory_bytes: node.description.resources.memory_bytes,
            cpus: node.description.resources.nano_cpus as f64 / 1e9,
            engine_id: node.id,
        })
        .collect();
    infos.sort_by(|a, b| a.name.cmp(&b.name).then(a.engine_id.cmp(&b.engine_id)));
    Ok(infos)
}

/// How often the nodes' states are read for `node.down`.
pub const WATCH_NODES_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a node's state change is one to tell the operator about: it was `ready` and is
/// no longer answering its manager.
fn went_down(before: &str, now: &str) -> bool {
    before == "ready" && matches!(now, "down" | "disconnected")
}

/// Reads the nodes every [`WATCH_NODES_EVERY`] until `shutdown` and sends `node.down` for
/// each node that went from `ready` to `down` or `disconnected` (once per fall).
/// Keeps `book` with what it reads.
pub fn watch_down(
    docker: Docker,
    book: NodeBook,
    notifier: crate::notifications::Notifier,
    shutdown: tokio_util::sync::CancellationToken,
) {
    tokio::spawn(async move {
        let mut states: HashMap<String, String> = HashMap::new();
        loop {
            if let Ok(nodes) = docker.get::<Vec<Node>>("/nodes").await {
                book.keep(&nodes);
                for node in nodes {
                    let (name, address, state) = (
                        node.description.hostname,
                        node.status.addr,
                        node.status.state,
                    );
                    let before = states.insert(node.id.clone(), state.clone());
                    if before.is_some_and(|before| went_down(&before, &state)) {
                        tracing::warn!(node = %name, %address, %state, "a cluster node is down");
                        notifier.emit(
                            crate::notifications::Event::new(
                                crate::notifications::EventKind::NodeDown,
                            )
                            .error(&format!(
                                "node {} ({}, nod_{}) is {}: the engine starts its tasks on \
                                 the other nodes",
                                name,
                                address,
                                node.id.to_ascii_lowercase(),
                                state
                            )),
                        );
                    }
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(WATCH_NODES_EVERY) => {}
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_ready_node_that_stops_answering_is_down() {
        assert!(super::went_down("ready", "down"));
        assert!(super::went_down("ready", "disconnected"));
        assert!(!super::went_down("down", "down"));
        assert!(!super::went_down("unknown", "down"));
        assert!(!super::went_down("ready", "ready"));
    }
}
