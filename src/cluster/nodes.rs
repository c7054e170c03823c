//! The cluster's nodes as `GET /api/nodes` shows them: the engine's node list with the
//! tasks that should run on each.

use std::collections::HashMap;

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
pub fn watch_down(
    docker: Docker,
    notifier: crate::notifications::Notifier,
    shutdown: tokio_util::sync::CancellationToken,
) {
    tokio::spawn(async move {
        let mut states: HashMap<String, String> = HashMap::new();
        loop {
            if let Ok(nodes) = list(&docker).await {
                for node in nodes {
                    let before = states.insert(node.engine_id.clone(), node.state.clone());
                    if before.is_some_and(|before| went_down(&before, &node.state)) {
                        tracing::warn!(node = %node.name, address = %node.address, state = %node.state, "a cluster node is down");
                        notifier.emit(
                            crate::notifications::Event::new(
                                crate::notifications::EventKind::NodeDown,
                            )
                            .error(&format!(
                                "node {} ({}, nod_{}) is {}: the engine starts its tasks on \
                                 the other nodes",
                                node.name,
                                node.address,
                                node.engine_id.to_ascii_lowercase(),
                                node.state
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
