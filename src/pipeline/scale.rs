//! Changing a live deployment's formation (`PATCH …/formation`, `slipway scale`): only the
//! named types change, with no rebuild and no restart of the others, through the project's
//! backend's [`scale`](crate::supervisor::backend::AppBackend::scale) (more instances start
//! and join the route once healthy, surplus ones leave it and stop, new limits or a new
//! health command restart the type's instances one at a time where the backend can). All or
//! nothing: when an instance does not come up, the type goes back to how it ran and the
//! stored formation is not changed. A local app is admitted by this machine's memory first.
//! Under the project's deploy lock, so a scale and a switch never interleave.

use std::collections::BTreeMap;

use super::instances::Launch;
use super::Pipeline;
use crate::formation::{
    check_change, host_memory_mb, Admission, ChangeError, ProcessType, StoredType,
};
use crate::store::records::{DeploymentMode, DeploymentRecord, ProjectRecord};

/// Why a formation change was refused; nothing changed.
#[derive(Debug)]
pub enum ScaleError {
    /// A value out of range (400).
    Invalid(String),
    /// The state refuses it: nothing live, an unknown type, no memory, an instance that did
    /// not start (409).
    Conflict(String),
    Internal(String),
}

impl From<crate::store::StoreError> for ScaleError {
    fn from(error: crate::store::StoreError) -> Self {
        ScaleError::Internal(error.to_string())
    }
}

impl Pipeline {
    /// The disk-limited volumes (add-ons keep their data on one of their own).
    pub fn volumes(&self) -> &crate::disk::Volumes {
        self.workspaces.volumes()
    }

    /// The log hub (an add-on's server output is a channel of it, `adn_…`).
    pub fn hub(&self) -> &std::sync::Arc<crate::logs::LogHub> {
        &self.hub
    }

    /// Where events for notifications go (add-ons send theirs too).
    pub fn notifier(&self) -> &crate::notifications::Notifier {
        &self.notifier
    }

    /// The project's live server deployment, if any.
    pub async fn live_server(
        &self,
        project: &ProjectRecord,
    ) -> Result<Option<DeploymentRecord>, crate::store::StoreError> {
        let Some(id) = project.live_deployment_id.clone() else {
            return Ok(None);
        };
        let deployment = self.store.call(move |s| s.deployment(&id)).await?;
        Ok(deployment.filter(|d| d.mode == Some(DeploymentMode::Server)))
    }

    /// The live deployment's types as they run now (with the stored formation).
    pub async fn live_types(
        &self,
        deployment: &DeploymentRecord,
    ) -> Result<Vec<ProcessType>, ScaleError> {
        self.process_types(deployment)
            .await
            .map_err(|f| ScaleError::Internal(f.message))
    }

    /// Applies `change` to the project's live deployment and stores it.
    pub async fn scale(
        &self,
        project: &ProjectRecord,
        change: BTreeMap<String, StoredType>,
    ) -> Result<(), ScaleError> {
        let lock = self.deploy_locks.of(&project.id);
        let _guard = lock.lock().await;
        let project_id = project.id.clone();
        let project = self
            .store
            .call(move |s| s.find_project(&project_id))
            .await?
            .ok_or_else(|| ScaleError::Conflict("the project was deleted".into()))?;
        let deployment = self.live_server(&project).await?.ok_or_else(|| {
            ScaleError::Conflict(
                "the project has no live server deployment to scale; deploy it first (a \
                 static site has no processes)"
                    .into(),
            )
        })?;
        check_change(&change, &deployment.process_commands()).map_err(|error| match error {
            ChangeError::Invalid(message) => ScaleError::Invalid(message),
            ChangeError::UnknownType(message) => ScaleError::Conflict(message),
        })?;
        let id = project.id.clone();
        let stored = self.store.call(move |s| s.formation(&id)).await?;
        let next = stored.with(&change);
        let commands = deployment.process_commands();
        let defaults = self.formation_defaults();
        let before = stored.resolve(&commands, defaults);
        let after = next.resolve(&commands, defaults);
        if self.runs_locally(&project) {
            self.admit(&deployment, &before, &after, &change)?;
        }
        let (env, _) = self
            .environment(&project.id, &deployment.target)
            .await
            .map_err(ScaleError::Internal)?;
        let launch = Launch {
            project: project.clone(),
            deployment: deployment.clone(),
            env,
            reach: self.addon_reach(&project.id, &deployment.target).await,
        };
        let backend = self.backend_for(&project);
        // An app asleep (or not running) takes the new formation when it starts.
        let running = backend.runs(&deployment.id);
        for name in change.keys().filter(|_| running) {
            let (Some(old), Some(new)) = (find(&before, name), find(&after, name)) else {
                continue;
            };
            if new.is_web() && old.affinity != new.affinity {
                let label = super::host_label(&project.slug, &deployment.target);
                self.routes
                    .set_affinity(&label, &deployment.id, new.affinity);
            }
            let spec = |ptype: &ProcessType| self.type_spec(&launch, ptype, ptype.min_healthy());
            if let Err(failure) = backend.scale(spec(new)).await {
                // Back to how it ran: nothing of the change is kept.
                let _ = backend.scale(spec(old)).await;
                return Err(ScaleError::Conflict(format!(
                    "{}; the formation was not changed",
                    failure.message
                )));
            }
        }
        let id = project.id.clone();
        self.store
            .call(move |s| s.put_formation(&id, &next))
            .await?;
        self.hub.system(
            &deployment.id,
            &format!("formation: {}", describe(&after, &change)),
        );
        Ok(())
    }

    /// Refuses a change whose memory limits, with every other instance of the machine,
    /// would exceed its memory minus `limits.memory_reserve_mb`.
    fn admit(
        &self,
        deployment: &DeploymentRecord,
        before: &[ProcessType],
        after: &[ProcessType],
        change: &BTreeMap<String, StoredType>,
    ) -> Result<(), ScaleError> {
        let Some(total_mb) = host_memory_mb() else {
            return Ok(());
        };
        let held_mb = self.local.held_memory_mb(|dpl, instance| {
            dpl == deployment.id && change.contains_key(&instance.process)
        });
        let asked: Vec<&ProcessType> = after
            .iter()
            .filter(|t| change.contains_key(&t.name))
            .collect();
        let asked_mb: u64 = asked.iter().map(|t| t.memory_total_mb()).sum();
        let before_mb: u64 = before
            .iter()
            .filter(|t| change.contains_key(&t.name))
            .map(|t| t.memory_total_mb())
            .sum();
        // Scaling down (or keeping) never needs more room.
        if asked_mb <= before_mb {
            return Ok(());
        }
        let what = asked
            .iter()
            .map(|t| format!("{}={} × {} MiB", t.name, t.instances, t.memory_mb))
            .collect::<Vec<_>>()
            .join(", ");
        Admission {
            total_mb,
            reserve_mb: self.config.limits.memory_reserve_mb,
            held_mb,
        }
        .admit(asked_mb, &what)
        .map_err(ScaleError::Conflict)
    }
}

fn find<'t>(types: &'t [ProcessType], name: &str) -> Option<&'t ProcessType> {
    types.iter().find(|t| t.name == name)
}

/// `web=2 (512 MiB, 1 CPU), worker=1 (256 MiB, 0.5 CPU)` for the changed types.
fn describe(types: &[ProcessType], change: &BTreeMap<String, StoredType>) -> String {
    types
        .iter()
        .filter(|t| change.contains_key(&t.name))
        .map(|t| {
            format!(
                "{}={} ({} MiB, {} CPU)",
                t.name, t.instances, t.memory_mb, t.cpus
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}
