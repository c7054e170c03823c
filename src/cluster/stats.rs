//! Memory per task: every [`STATS_EVERY`], the engine's one-shot stats of each running task's
//! container (`/containers/{id}/stats?stream=0&one-shot=1`), less the page cache the kernel
//! can drop (as `docker stats` shows it). Only containers on the node whose engine the daemon
//! talks to (the manager) are seen; other nodes' tasks stay unmeasured (`null`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::docker::Docker;
use super::tasks::TaskView;

/// How often the running tasks' memory is read.
pub const STATS_EVERY: Duration = Duration::from_secs(5);

/// Memory in use per slot, as last read.
pub type Memory = Arc<Mutex<HashMap<u32, u64>>>;

/// Reads the memory of `tasks`' running containers into `memory` until cancelled.
pub(super) fn follow(
    docker: Docker,
    tasks: Arc<Mutex<Vec<TaskView>>>,
    memory: Memory,
    cancel: CancellationToken,
) {
    tokio::spawn(async move {
        loop {
            let running: Vec<(u32, String)> = tasks
                .lock()
                .expect("tasks poisoned")
                .iter()
                .filter(|t| t.running && !t.container.is_empty())
                .map(|t| (t.slot, t.container.clone()))
                .collect();
            let mut read = HashMap::new();
            for (slot, container) in running {
                let path = format!("/containers/{container}/stats?stream=0&one-shot=1");
                if let Some(bytes) = docker.get::<Value>(&path).await.ok().and_then(|s| used(&s)) {
                    read.insert(slot, bytes);
                }
            }
            *memory.lock().expect("memory poisoned") = read;
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(STATS_EVERY) => {}
            }
        }
    });
}

/// `usage` less the inactive page cache (cgroup v1 `total_inactive_file`, v2
/// `inactive_file`).
fn used(stats: &Value) -> Option<u64> {
    let memory = &stats["memory_stats"];
    let usage = memory["usage"].as_u64()?;
    let cache = ["total_inactive_file", "inactive_file"]
        .iter()
        .find_map(|key| memory["stats"][key].as_u64())
        .unwrap_or(0);
    Some(usage.saturating_sub(cache))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_page_cache_the_kernel_can_drop_is_not_counted() {
        let v1 = json!({"memory_stats": {"usage": 50_000_000u64, "stats": {"total_inactive_file": 8_000_000u64}}});
        assert_eq!(super::used(&v1), Some(42_000_000));
        let v2 = json!({"memory_stats": {"usage": 30_000_000u64, "stats": {"inactive_file": 1_000_000u64}}});
        assert_eq!(super::used(&v2), Some(29_000_000));
        // A stopped container's stats have no usage.
        assert_eq!(super::used(&json!({"memory_stats": {}})), None);
    }
}
