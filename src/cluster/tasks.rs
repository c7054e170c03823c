//! A service's tasks as the backend sees them: the engine's task list with each task's
//! node address and published port ([`list`]), waiting until enough of them are up
//! ([`wait_healthy`], asked with a [`Probe`]), and the watcher that keeps the list and moves
//! the route with it ([`watch`]): a task that ended leaves the route, its replacement joins
//! it once it answers.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::docker::{Docker, DockerError};
use super::failure;
use super::nodes::{NodeAddr, NodeBook};
use crate::error_code::ErrorCode;
use crate::router::Routes;
use crate::supervisor::StartFailure;

/// How often a service's task list is read.
pub const WATCH_EVERY: Duration = Duration::from_millis(500);

/// One running task of a service, as the router needs it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TaskView {
    pub(super) slot: u32,
    /// The node's name (empty until the task is placed).
    pub(super) node: String,
    pub(super) address: Option<SocketAddr>,
    pub(super) running: bool,
    /// The engine's state and error (`rejected: no such image`), for messages.
    pub(super) state: String,
    /// When it reached that state (Unix ms; 0 when the engine did not say).
    pub(super) since_ms: u64,
    /// Its container's id (empty until it has one).
    pub(super) container: String,
}

/// The service's tasks that should run, with their addresses (node address + published
/// port) and whether they run.
pub(super) async fn list(
    docker: &Docker,
    nodes: &NodeBook,
    service_id: &str,
) -> Result<Vec<TaskView>, DockerError> {
    let filters = json!({"service": [service_id], "desired-state": ["running"]});
    let tasks: Vec<Task> = docker
        .get(&format!("/tasks?filters={}", encode(&filters.to_string())))
        .await?;
    let mut views = Vec::new();
    for task in tasks {
        // A task not yet placed has no node.
        let node = match task.node_id.is_empty() {
            true => NodeAddr::default(),
            false => nodes.get(docker, &task.node_id).await?,
        };
        let port = task.status.port_status.ports.first().map(|p| p.published);
        let (ip, node) = (node.ip, node.name);
        let address = match (ip, port) {
            (Some(ip), Some(port)) => Some(SocketAddr::new(ip, port)),
            _ => None,
        };
        views.push(TaskView {
            slot: task.slot,
            node,
            address,
            running: task.status.state == "running",
            since_ms: humantime::parse_rfc3339(&task.status.timestamp)
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as u64),
            container: task.status.container_status.container_id,
            state: match task.status.err.is_empty() {
                true => task.status.state,
                false => format!("{}: {}", task.status.state, task.status.err),
            },
        });
    }
    views.sort_by_key(|t| t.slot);
    Ok(views)
}

/// Waits until `count` tasks run and accept connections; their names and addresses.
/// A type without a port (a worker) is healthy once its tasks run.
pub(super) async fn wait_healthy(
    docker: &Docker,
    nodes: &NodeBook,
    service_id: &str,
    count: u32,
    probe: Option<&Probe>,
    timeout: Duration,
) -> Result<Vec<TaskView>, StartFailure> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let tasks = list(docker, nodes, service_id).await.map_err(failure)?;
        let mut healthy = Vec::new();
        for task in tasks.iter().filter(|t| t.running) {
            let up = match (probe, task.address) {
                (Some(probe), Some(address)) => probe.passes(address).await,
                (Some(_), None) => false,
                (None, _) => true,
            };
            if up {
                healthy.push(task.clone());
            }
        }
        if healthy.len() as u32 >= count {
            return Ok(healthy);
        }
        let states: Vec<String> = tasks
            .iter()
            .map(|t| format!("task {} {} at {:?}", t.slot, t.state, t.address))
            .collect();
        let last = format!(
            "{} of {count} tasks accept connections ({})",
            healthy.len(),
            states.join("; ")
        );
        if tokio::time::Instant::now() >= deadline {
            return Err(StartFailure {
                code: ErrorCode::HealthcheckFailed,
                message: format!("swarm: {last} after {}s", timeout.as_secs()),
            });
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}

/// The watcher of one service: its task list is kept, and the route (a `web` service's:
/// its key and deployment) follows it.
pub(super) fn watch(
    docker: Docker,
    nodes: NodeBook,
    routes: Arc<Routes>,
    service_id: String,
    route: Option<(String, String, Probe)>,
    tasks: Arc<Mutex<Vec<TaskView>>>,
    cancel: CancellationToken,
) {
    tokio::spawn(async move {
        let mut routed: BTreeMap<u32, Option<SocketAddr>> = tasks
            .lock()
            .expect("tasks poisoned")
            .iter()
            .map(|t| (t.slot, t.address))
            .collect();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(WATCH_EVERY) => {}
            }
            let Ok(now) = list(&docker, &nodes, &service_id).await else {
                continue;
            };
            let Some((key, deployment_id, probe)) = &route else {
                *tasks.lock().expect("tasks poisoned") = now;
                continue;
            };
            let mut next = BTreeMap::new();
            for task in &now {
                // A routed task stays routed while the engine says it runs (the router's
                // own retries cover a crash in between); a new one once it answers.
                let ready = match (task.running, task.address) {
                    (true, Some(address)) if routed.get(&task.slot) == Some(&Some(address)) => {
                        Some(address)
                    }
                    (true, Some(address)) => probe.passes(address).await.then_some(address),
                    _ => None,
                };
                next.insert(task.slot, ready);
            }
            for (slot, address) in &next {
                if routed.get(slot) != Some(address) {
                    let name = format!("web.{slot}");
                    routes.set_instance(key, deployment_id, &name, *address);
                }
            }
            for slot in routed.keys().filter(|s| !next.contains_key(s)) {
                routes.remove_instance(key, deployment_id, &format!("web.{slot}"));
            }
            routed = next;
            *tasks.lock().expect("tasks poisoned") = now;
        }
    });
}

/// How a task's app is asked whether it is up: a connection alone proves nothing here (the
/// engine's userland proxy accepts for a task whose app does not listen yet), so an HTTP
/// request — with a health check path, a 2xx/3xx answer to it; without, any HTTP answer
/// to `/`.
#[derive(Debug, Clone)]
pub(super) struct Probe {
    path: Option<String>,
    host: String,
}

impl Probe {
    pub(super) fn of(spec: &crate::supervisor::AppSpec) -> Probe {
        Probe {
            path: spec.health_check_path.clone(),
            host: spec.slug.clone(),
        }
    }

    pub(super) async fn passes(&self, address: SocketAddr) -> bool {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let asked = async {
            let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
            let request = format!(
                "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: slipway-health\r\nConnection: close\r\n\r\n",
                self.path.as_deref().unwrap_or("/"),
                self.host
            );
            stream.write_all(request.as_bytes()).await.ok()?;
            let mut head = [0u8; 12];
            stream.read_exact(&mut head).await.ok()?;
            let status = std::str::from_utf8(&head[9..12])
                .ok()?
                .parse::<u16>()
                .ok()?;
            Some((head.starts_with(b"HTTP/1."), status))
        };
        match tokio::time::timeout(Duration::from_secs(5), asked).await {
            Ok(Some((true, status))) => self.path.is_none() || (200..400).contains(&status),
            _ => false,
        }
    }
}

/// Percent-encodes a query value (the engine's `filters` JSON).
pub(super) fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[derive(Deserialize)]
struct Task {
    #[serde(rename = "Slot", default)]
    slot: u32,
    #[serde(rename = "NodeID", default)]
    node_id: String,
    #[serde(rename = "Status")]
    status: TaskStatus,
}

#[derive(Deserialize)]
struct TaskStatus {
    #[serde(rename = "State")]
    state: String,
    #[serde(rename = "PortStatus", default)]
    port_status: PortStatus,
    #[serde(rename = "Err", default)]
    err: String,
    /// When the task reached its state (RFC 3339, nanoseconds).
    #[serde(rename = "Timestamp", default)]
    timestamp: String,
    #[serde(rename = "ContainerStatus", default)]
    container_status: ContainerStatus,
}

#[derive(Deserialize, Default)]
struct ContainerStatus {
    #[serde(rename = "ContainerID", default)]
    container_id: String,
}

#[derive(Deserialize, Default)]
struct PortStatus {
    #[serde(rename = "Ports", default)]
    ports: Vec<PortBinding>,
}

#[derive(Deserialize)]
struct PortBinding {
    #[serde(rename = "PublishedPort")]
    published: u16,
}
