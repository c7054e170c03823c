//! A server deployment on the cluster backend (issue 36): its `web` type becomes the
//! backend's service with the formation's instances and limits; the pipeline switches the
//! route to it as it does for local instances. Other process types are not run on a
//! cluster yet (said in the deployment's log).

use std::sync::Arc;
use std::time::Duration;

use super::failure::Failure;
use super::instances::{Launch, WebInstance};
use super::Pipeline;
use crate::formation::{InstanceId, ProcessType};
use crate::supervisor::backend::{AppBackend, TypeSpec};

impl Pipeline {
    /// Starts the `web` type on `cluster` and waits until all its instances accept
    /// connections; their addresses, and the types that run (`web` only).
    pub(super) async fn start_on_cluster(
        &self,
        cluster: &Arc<dyn AppBackend>,
        launch: &Launch,
        types: Vec<ProcessType>,
    ) -> Result<(Vec<WebInstance>, Vec<ProcessType>), Failure> {
        let (web, others): (Vec<ProcessType>, Vec<ProcessType>) =
            types.into_iter().partition(|t| t.is_web());
        for other in &others {
            self.hub.system(
                &launch.deployment.id,
                &format!(
                    "deploy: the `{}` process is not run on the {} cluster yet",
                    other.name,
                    cluster.engine()
                ),
            );
        }
        let Some(ptype) = web.first() else {
            return Ok((Vec::new(), web));
        };
        let port = launch.deployment.port;
        let template = self.instance_spec(launch, ptype, InstanceId::new(&ptype.name, 1), port);
        let spec = TypeSpec {
            template,
            project_id: launch.project.id.clone(),
            instances: ptype.instances.max(1),
            health_timeout: Duration::from_secs(self.config.limits.health_timeout_s),
        };
        self.hub.system(
            &launch.deployment.id,
            &format!(
                "deploy: {} × web on the {} cluster",
                spec.instances,
                cluster.engine()
            ),
        );
        let started = cluster
            .start(spec)
            .await
            .map_err(|f| Failure::new("deploy", f.code, f.message))?;
        Ok((started, web))
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
