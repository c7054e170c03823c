//! A deployment's instances (issue 32): the process types it runs with the project's
//! formation, each instance started through the supervisor in its own sandbox. `web`
//! instances (and other `overlap` types) start before the switch and must all be healthy;
//! `replace` types start after it, once the previous deployment's instances of that type are
//! gone, so a singleton never runs twice. A preview runs one instance of each type.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::failure::Failure;
use super::Pipeline;
use crate::error_code::ErrorCode;
use crate::formation::{instance_key, Defaults, DeployStrategy, InstanceId, ProcessType};
use crate::store::records::{DeploymentRecord, Environment, ProjectRecord};
use crate::supervisor::{AppSpec, FirstFailure};

/// A started `web` instance: its name (`web.2`) and address.
pub(crate) type WebInstance = (Arc<str>, SocketAddr);

/// What a deployment needs to start its instances.
#[derive(Clone)]
pub(crate) struct Launch {
    pub(crate) project: ProjectRecord,
    pub(crate) deployment: DeploymentRecord,
    pub(crate) env: Vec<(String, String)>,
    /// The linked add-ons it may connect to.
    pub(crate) reach: Vec<std::net::SocketAddrV4>,
}

impl Pipeline {
    /// The defaults a type's unset limits take.
    pub(crate) fn formation_defaults(&self) -> Defaults {
        Defaults {
            memory_mb: self.config.limits.app_memory_mb,
            cpus: self.config.limits.app_cpus,
        }
    }

    /// The process types `deployment` runs with its project's formation (one instance each
    /// for a preview).
    pub(crate) async fn process_types(
        &self,
        deployment: &DeploymentRecord,
    ) -> Result<Vec<ProcessType>, Failure> {
        let project_id = deployment.project_id.clone();
        let stored = self
            .store
            .call(move |s| s.formation(&project_id))
            .await
            .map_err(|e| {
                Failure::new(
                    "deploy",
                    ErrorCode::InternalError,
                    format!("cannot read the formation: {e}"),
                )
            })?;
        let mut types = stored.resolve(&deployment.process_commands(), self.formation_defaults());
        if deployment.target.environment == Environment::Preview {
            for ptype in &mut types {
                ptype.instances = ptype.instances.min(1);
            }
        }
        Ok(types)
    }

    /// Starts instances `indexes` of `ptype` at once and waits until each is healthy or has
    /// failed; the healthy `web` ones' addresses, in order. At least `needed` must come up:
    /// then the others go on trying with the supervisor's backoff (said in the log) and join
    /// the route once healthy; else every one started here is stopped again and the first
    /// failure is returned.
    pub(crate) async fn start_instances(
        &self,
        launch: &Launch,
        ptype: &ProcessType,
        indexes: std::ops::RangeInclusive<u32>,
        needed: u32,
    ) -> Result<Vec<WebInstance>, Failure> {
        let health_timeout = Duration::from_secs(self.config.limits.health_timeout_s);
        let count = indexes.clone().count() as u32;
        let after_failure = match needed < count {
            true => FirstFailure::KeepTrying,
            false => FirstFailure::GiveUp,
        };
        let starts = indexes.clone().map(|index| {
            let instance = InstanceId::new(&ptype.name, index);
            let adopt = self.take_survivor(&instance_key(&launch.deployment.id, &instance));
            let port = self.instance_port(&launch.deployment, &instance, adopt.is_some());
            async move {
                let port = port?;
                let spec = self.instance_spec(launch, ptype, instance.clone(), port);
                let address = self
                    .supervisor
                    .start(spec, health_timeout, adopt, after_failure)
                    .await
                    .map_err(|f| {
                        Failure::new("deploy", f.code, format!("{instance}: {}", f.message))
                    })?;
                Ok::<_, Failure>((instance, address))
            }
        });
        let results = futures_util::future::join_all(starts).await;
        let (mut web, mut up, mut failures) = (Vec::new(), 0, Vec::new());
        for result in results {
            match result {
                Ok((instance, address)) => {
                    up += 1;
                    if let Some(address) = address {
                        web.push((Arc::from(instance.to_string()), address));
                    }
                }
                Err(error) => failures.push(error),
            }
        }
        if up >= needed {
            for failure in &failures {
                self.hub.system(
                    &launch.deployment.id,
                    &format!(
                        "deploy: {} ({up} of {count} `{}` instances are up, {needed} needed); \
                         it is tried again with backoff",
                        failure.message, ptype.name
                    ),
                );
            }
            return Ok(web);
        }
        for index in indexes {
            let instance = InstanceId::new(&ptype.name, index);
            self.supervisor.stop(&launch.deployment.id, &instance).await;
        }
        Err(failures.remove(0))
    }

    /// The types that start before the switch (`overlap`; `web` always): at least
    /// `minHealthy` of each type's instances healthy (all, by default), or the deploy fails
    /// with nothing of it left running.
    pub(crate) async fn start_overlapping(
        &self,
        launch: &Launch,
        types: &[ProcessType],
    ) -> Result<Vec<WebInstance>, Failure> {
        let mut web = Vec::new();
        for ptype in types.iter().filter(|t| starts_before_switch(t)) {
            if ptype.instances == 0 {
                continue;
            }
            let needed = ptype.min_healthy();
            match self
                .start_instances(launch, ptype, 1..=ptype.instances, needed)
                .await
            {
                Ok(started) => web.extend(started),
                Err(failure) => {
                    self.supervisor
                        .stop_deployment(&launch.deployment.id, None)
                        .await;
                    return Err(failure);
                }
            }
        }
        Ok(web)
    }

    /// After the switch: each `replace` type's previous instances stop, then its new ones
    /// start. A type that does not come up is said in the deployment's log; the deployment
    /// stays live (its web instances serve) and the formation shows the type short.
    pub(crate) async fn start_replacing(
        &self,
        launch: &Launch,
        types: &[ProcessType],
        previous: Option<&str>,
    ) {
        for ptype in types.iter().filter(|t| !starts_before_switch(t)) {
            if let Some(previous) = previous {
                self.supervisor
                    .stop_deployment(previous, Some(&ptype.name))
                    .await;
            }
            if ptype.instances == 0 {
                continue;
            }
            let all = ptype.instances;
            if let Err(failure) = self.start_instances(launch, ptype, 1..=all, all).await {
                self.hub.system(
                    &launch.deployment.id,
                    &format!(
                        "deploy: the `{}` process did not start ({}); the web process serves \
                         on. Fix it and deploy again, or scale it with PATCH …/formation",
                        ptype.name, failure.message
                    ),
                );
            }
        }
    }

    /// The port an instance listens on: with namespaces every instance has its own address
    /// and the deployment's port; without, each `web` instance needs a host port of its own
    /// (`web.1` keeps the deployment's). Other types have none.
    fn instance_port(
        &self,
        deployment: &DeploymentRecord,
        instance: &InstanceId,
        adopted: bool,
    ) -> Result<Option<u16>, Failure> {
        if instance.process != crate::formation::WEB {
            return Ok(None);
        }
        let port = deployment.port.unwrap_or_default();
        let shared_ports = self.config.sandbox.mode == crate::config::SandboxMode::None;
        if !shared_ports || instance.index == 1 || adopted {
            return Ok(Some(port));
        }
        super::ports::free_host_port().map(Some).map_err(|e| {
            Failure::new(
                "deploy",
                ErrorCode::StartFailed,
                format!("no free port: {e}"),
            )
        })
    }

    pub(crate) fn instance_spec(
        &self,
        launch: &Launch,
        ptype: &ProcessType,
        instance: InstanceId,
        port: Option<u16>,
    ) -> AppSpec {
        let (project, deployment) = (&launch.project, &launch.deployment);
        let data_dir = self.instance_data_dir(project, deployment);
        let mut env = launch.env.clone();
        env.push(("SLIPWAY_INSTANCE".to_owned(), instance.to_string()));
        AppSpec {
            deployment_id: deployment.id.clone(),
            instance,
            // The route key the supervisor repoints after a restart.
            slug: super::host_label(&project.slug, &deployment.target),
            uid: project.uid,
            root: self.workspaces.workspace(&deployment.id),
            data_dir,
            command: ptype.command.clone(),
            env,
            port,
            health_check_path: deployment.health_check_path.clone(),
            health_command: ptype.health_command.clone(),
            memory_mb: ptype.memory_mb,
            pids: self.config.limits.pids,
            cpus: ptype.cpus,
            reach: launch.reach.clone(),
            serve_port: None,
            link: None,
        }
    }
}

impl Pipeline {
    /// The deployment's `/data` volume, made (and mounted) if it is not yet.
    pub(super) async fn prepare_app_data(
        &self,
        project: &ProjectRecord,
        deployment: &DeploymentRecord,
    ) -> Result<(), Failure> {
        let data = crate::disk::Volume::app_data(
            &self.instance_data_dir(project, deployment),
            self.config.limits.app_disk_mb,
        );
        let (volumes, uid) = (self.workspaces.volumes().clone(), project.uid);
        super::failure::deploy_blocking("cannot prepare the app's data volume", move || {
            volumes.ensure_app_data(&data, uid)
        })
        .await
    }

    /// The `/data` every instance of the deployment shares: the project's, or for a preview
    /// one of its own (it never writes production's).
    pub(crate) fn instance_data_dir(
        &self,
        project: &ProjectRecord,
        deployment: &DeploymentRecord,
    ) -> std::path::PathBuf {
        match deployment.target.environment {
            Environment::Production => self.workspaces.app_data_dir(&project.id),
            Environment::Preview => self.workspaces.app_data_dir(&format!(
                "{}--{}",
                project.id,
                deployment.target.preview.as_deref().unwrap_or("preview")
            )),
        }
    }
}

/// `web` always overlaps (it is what visitors reach); another type when it is set to.
fn starts_before_switch(ptype: &ProcessType) -> bool {
    ptype.is_web() || ptype.deploy == DeployStrategy::Overlap
}
