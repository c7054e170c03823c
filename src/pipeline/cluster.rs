//! A server deployment on the cluster backend (issue 36): each process type becomes one of
//! the backend's services with the formation's instances and limits; the pipeline switches
//! the route to the `web` one as it does for local instances. A project pinned to
//! `placement: local` runs here even when a cluster is configured.

use std::sync::Arc;
use std::time::Duration;

use super::failure::Failure;
use super::instances::{Launch, WebInstance};
use super::Pipeline;
use crate::formation::{InstanceId, ProcessType};
use crate::store::records::{Placement, ProjectRecord};
use crate::supervisor::backend::{AppBackend, TypeSpec};

impl Pipeline {
    /// The cluster backend the project's app runs on: the configured one unless the project
    /// pins `placement: local`.
    pub(super) fn cluster_for(&self, project: &ProjectRecord) -> Option<Arc<dyn AppBackend>> {
        let cluster = self.supervisor.cluster()?;
        match project.settings.placement {
            Some(Placement::Local) => None,
            Some(Placement::Cluster) | None => Some(cluster.clone()),
        }
    }

    /// Starts every process type on `cluster` (one service each, a type at 0 instances too,
    /// so scaling it up later is the service's update) and waits until all their instances run (`web`'s accepting connections); the `web` instances'
    /// addresses, and the types that run. A type that fails stops the ones started before it.
    pub(super) async fn start_on_cluster(
        &self,
        cluster: &Arc<dyn AppBackend>,
        launch: &Launch,
        types: Vec<ProcessType>,
    ) -> Result<(Vec<WebInstance>, Vec<ProcessType>), Failure> {
        let mut web = Vec::new();
        let mut started: Vec<&str> = Vec::new();
        for ptype in &types {
            let port = ptype.is_web().then_some(launch.deployment.port).flatten();
            let template = self.instance_spec(launch, ptype, InstanceId::new(&ptype.name, 1), port);
            let spec = TypeSpec {
                template,
                project_id: launch.project.id.clone(),
                instances: ptype.instances.max(u32::from(ptype.is_web())),
                health_timeout: Duration::from_secs(self.config.limits.health_timeout_s),
            };
            self.hub.system(
                &launch.deployment.id,
                &format!(
                    "deploy: {} × {} on the {} cluster",
                    spec.instances,
                    ptype.name,
                    cluster.engine()
                ),
            );
            match cluster.start(spec).await {
                Ok(addresses) => web.extend(addresses),
                Err(failure) => {
                    for name in started {
                        cluster.stop(&launch.deployment.id, Some(name)).await;
                    }
                    return Err(Failure::new("deploy", failure.code, failure.message));
                }
            }
            started.push(&ptype.name);
        }
        Ok((web, types))
    }

    /// The live deployment's `web` type on the cluster runs `instances` from now on.
    pub(super) async fn scale_on_cluster(
        &self,
        deployment_id: &str,
        process: &str,
        instances: u32,
    ) -> Result<bool, String> {
        let Some(cluster) = self.supervisor.cluster() else {
            return Ok(false);
        };
        if !cluster.runs(deployment_id) {
            return Ok(false);
        }
        cluster
            .scale(deployment_id, process, instances)
            .await
            .map_err(|f| f.message)?;
        Ok(true)
    }
}
