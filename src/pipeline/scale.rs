//! Changing a live deployment's formation (`PATCH …/formation`, `slipway scale`): only the
//! named types change, with no rebuild and no restart of the others. More instances start
//! (a `web` one joins the route once healthy), surplus ones leave the route and stop, new
//! limits or a new health command restart the type's instances one at a time. All or nothing: when an instance does
//! not come up, the type goes back to how it ran and the stored formation is not changed.
//! Under the project's deploy lock, so a scale and a switch never interleave.

use std::collections::BTreeMap;

use super::instances::Launch;
use super::Pipeline;
use crate::formation::{
    check_change, host_memory_mb, Admission, ChangeError, InstanceId, ProcessType, StoredType,
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
    /// The deployment's running instances, each with the memory it uses now (bytes; `None`
    /// where not measured).
    pub fn running_instances(
        &self,
        deployment_id: &str,
    ) -> Vec<(crate::supervisor::InstanceView, Option<u64>)> {
        self.supervisor
            .instances(deployment_id)
            .into_iter()
            .map(|view| {
                let memory = self
                    .supervisor
                    .instance_memory_bytes(deployment_id, &view.instance);
                (view, memory)
            })
            .collect()
    }

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
        self.admit(&deployment, &before, &after, &change)?;
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
        for name in change.keys() {
            let (Some(old), Some(new)) = (find(&before, name), find(&after, name)) else {
                continue;
            };
            match self
                .scale_on_cluster(&deployment.id, name, new.instances)
                .await
            {
                Ok(true) => continue,
                Ok(false) => {}
                Err(message) => return Err(ScaleError::Conflict(message)),
            }
            if let Err(message) = self.change_type(&launch, old, new).await {
                // Back to how it ran: nothing of the change is kept.
                let _ = self.change_type(&launch, new, old).await;
                return Err(ScaleError::Conflict(format!(
                    "{message}; the formation was not changed"
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
        let held_mb = self.supervisor.held_memory_mb(|dpl, instance| {
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

    /// Moves one type from `old` to `new`: new limits restart its instances one at a time,
    /// then instances are added or removed. Says which instance did not come up.
    async fn change_type(
        &self,
        launch: &Launch,
        old: &ProcessType,
        new: &ProcessType,
    ) -> Result<(), String> {
        let dpl = &launch.deployment.id;
        if new.is_web() && old.affinity != new.affinity {
            let label = super::host_label(&launch.project.slug, &launch.deployment.target);
            self.routes.set_affinity(&label, dpl, new.affinity);
        }
        let restart = old.memory_mb != new.memory_mb
            || old.cpus != new.cpus
            || old.health_command != new.health_command;
        if restart {
            for index in 1..=old.instances.min(new.instances) {
                self.leave_route(launch, &InstanceId::new(&new.name, index));
                self.supervisor
                    .stop(dpl, &InstanceId::new(&new.name, index))
                    .await;
                self.start_and_route(launch, new, index..=index, 1).await?;
            }
        }
        if new.instances > old.instances {
            // The instances kept count towards `minHealthy`; past it, new ones that do not
            // come up keep trying.
            let needed = new.min_healthy().saturating_sub(old.instances);
            let count = new.instances - old.instances;
            self.start_and_route(
                launch,
                new,
                old.instances + 1..=new.instances,
                needed.min(count),
            )
            .await?;
        }
        for index in new.instances + 1..=old.instances {
            let instance = InstanceId::new(&new.name, index);
            self.leave_route(launch, &instance);
            self.supervisor.stop(dpl, &instance).await;
            if new.is_web() {
                let label = super::host_label(&launch.project.slug, &launch.deployment.target);
                self.routes
                    .remove_instance(&label, dpl, &instance.to_string());
            }
        }
        Ok(())
    }

    /// Starts instances `indexes` of `ptype`, `needed` of them healthy; a `web` one joins
    /// the route once healthy.
    async fn start_and_route(
        &self,
        launch: &Launch,
        ptype: &ProcessType,
        indexes: std::ops::RangeInclusive<u32>,
        needed: u32,
    ) -> Result<(), String> {
        let started = self
            .start_instances(launch, ptype, indexes, needed)
            .await
            .map_err(|f| f.message)?;
        let label = super::host_label(&launch.project.slug, &launch.deployment.target);
        for (name, address) in started {
            self.routes
                .set_instance(&label, &launch.deployment.id, &name, Some(address));
        }
        Ok(())
    }

    /// A `web` instance about to stop leaves the route first (the others serve on).
    fn leave_route(&self, launch: &Launch, instance: &InstanceId) {
        if instance.process == crate::formation::WEB {
            let label = super::host_label(&launch.project.slug, &launch.deployment.target);
            self.routes
                .set_instance(&label, &launch.deployment.id, &instance.to_string(), None);
        }
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
