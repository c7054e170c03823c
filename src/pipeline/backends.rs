//! Which backend runs a project's app (issue 36), and the pipeline's one way to each: the
//! project's backend ([`Pipeline::backend_for`]) starts its types (`instances.rs`: the
//! `overlap` ones before the switch, the `replace` ones after it) and scales them
//! (`scale.rs`); a deployment stops on every backend ([`Pipeline::stop_app`]: the project's
//! placement may have changed since it started), and its instances are listed from all.

use std::sync::Arc;

use super::Pipeline;
use crate::store::records::{Placement, ProjectRecord};
use crate::supervisor::backend::AppBackend;
use crate::supervisor::InstanceView;

impl Pipeline {
    /// The backend the project's app runs on: the configured cluster unless the project pins
    /// `placement: local`, else the local sandbox.
    pub(super) fn backend_for(&self, project: &ProjectRecord) -> Arc<dyn AppBackend> {
        match self.cluster_for(project) {
            Some(cluster) => cluster.clone(),
            None => self.local.clone(),
        }
    }

    /// Whether the project's app runs on this machine (its memory is this machine's).
    pub(super) fn runs_locally(&self, project: &ProjectRecord) -> bool {
        self.cluster_for(project).is_none()
    }

    fn cluster_for(&self, project: &ProjectRecord) -> Option<&Arc<dyn AppBackend>> {
        match project.settings.placement {
            Some(Placement::Local) => None,
            Some(Placement::Cluster) | None => self.cluster.as_ref(),
        }
    }

    /// Every backend: the local sandbox, then the cluster when one is configured.
    pub fn backends(&self) -> Vec<Arc<dyn AppBackend>> {
        let local: Arc<dyn AppBackend> = self.local.clone();
        std::iter::once(local).chain(self.cluster.clone()).collect()
    }

    /// Stops the deployment's instances (of type `process` only, when given) wherever they
    /// run, and waits until they are gone.
    pub(super) async fn stop_app(&self, deployment_id: &str, process: Option<&str>) {
        stop_everywhere(&self.backends(), deployment_id, process).await;
    }

    /// Whether any instance of the deployment runs, on any backend.
    pub(super) fn app_runs(&self, deployment_id: &str) -> bool {
        self.backends().iter().any(|b| b.runs(deployment_id))
    }

    /// The deployment's running instances, in type and number order, each with the memory it
    /// uses now (bytes; `None` where not measured).
    pub fn running_instances(&self, deployment_id: &str) -> Vec<(InstanceView, Option<u64>)> {
        let mut running: Vec<(InstanceView, Option<u64>)> = Vec::new();
        for backend in self.backends() {
            running.extend(backend.instances(deployment_id).into_iter().map(|view| {
                let memory = backend.memory_bytes(deployment_id, &view.instance);
                (view, memory)
            }));
        }
        running.sort_by(|(a, _), (b, _)| a.instance.cmp(&b.instance));
        running
    }
}

/// [`Pipeline::stop_app`] for a task of its own (a retired deployment's, after its drain).
pub(super) async fn stop_everywhere(
    backends: &[Arc<dyn AppBackend>],
    deployment_id: &str,
    process: Option<&str>,
) {
    for backend in backends {
        backend.stop(deployment_id, process).await;
    }
}
