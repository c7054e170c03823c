//! What the sampler reads each minute, from what `usage` gathers at scrape time.

use super::{AppReading, InstanceReading, MachineReading, ProjectReading};
use crate::usage::Observatory;

impl Observatory {
    /// Every project's counters and live app, and the machine's figures.
    pub async fn readings(self: &std::sync::Arc<Self>) -> (Vec<ProjectReading>, MachineReading) {
        let figures = self.gather(None, false).await.unwrap_or_else(|error| {
            tracing::warn!(%error, "usage history: cannot list the projects");
            Vec::new()
        });
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let projects = figures
                .into_iter()
                .map(|figures| ProjectReading {
                    app: figures
                        .app_deployment
                        .map(|deployment_id| this.app_reading(deployment_id, &figures.instances)),
                    project_id: figures.record.id,
                    counts: figures.counts,
                })
                .collect();
            let load = &this.daemon.router_load;
            let connections = (0..load.threads()).map(|t| load.open(t) as u64).sum();
            (projects, MachineReading::read(&this.data_dir, connections))
        })
        .await
        .expect("reading the machine panicked")
    }

    fn app_reading(
        &self,
        deployment_id: String,
        measured: &[(crate::formation::InstanceId, crate::sandbox::CgroupUsage)],
    ) -> AppReading {
        let instances = self
            .supervisor
            .instances(&deployment_id)
            .into_iter()
            .map(|view| {
                let usage = measured
                    .iter()
                    .find(|(id, _)| *id == view.instance)
                    .map(|(_, usage)| *usage)
                    .unwrap_or_default();
                InstanceReading {
                    process: view.instance.process.clone(),
                    name: view.instance.to_string(),
                    key: crate::supervisor::app_step_name(&deployment_id, &view.instance),
                    memory_bytes: usage.memory_bytes,
                    cpu_seconds: usage.cpu_seconds,
                    memory_limit_mb: view.memory_mb,
                }
            })
            .collect();
        AppReading {
            deployment_id,
            instances,
        }
    }
}
