//! A deployment's instances (issue 32): the process types it runs with the project's
//! formation, each type started on the project's backend (`backends.rs`: the local sandbox
//! or the cluster) the same way. `web` instances (and other `overlap` types) start before
//! the switch and must be healthy (`minHealthy` of them); `replace` types start after it,
//! once the previous deployment's instances of that type are gone, so a singleton never runs
//! twice. A preview runs one instance of each type.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::failure::Failure;
use super::Pipeline;
use crate::error_code::ErrorCode;
use crate::formation::{Defaults, DeployStrategy, InstanceId, ProcessType};
use crate::store::records::{DeploymentRecord, Environment, ProjectRecord};
use crate::supervisor::backend::{AppBackend, TypeSpec, INSTANCE_VAR};
use crate::supervisor::AppSpec;

/// The local sandbox's [`AppBackend::engine`].
const LOCAL_ENGINE: &str = "local";

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

    /// The types that start before the switch (`overlap`; `web` always), one after the
    /// other on `backend`: at least `minHealthy` of each type's instances healthy (all, by
    /// default), or the deploy fails with nothing of it left running.
    pub(crate) async fn start_overlapping(
        &self,
        backend: &Arc<dyn AppBackend>,
        launch: &Launch,
        types: &[ProcessType],
    ) -> Result<Vec<WebInstance>, Failure> {
        let mut web = Vec::new();
        let mut started: Vec<&str> = Vec::new();
        for ptype in types.iter().filter(|t| starts_before_switch(t)) {
            match self
                .start_type(backend, launch, ptype, ptype.min_healthy())
                .await
            {
                Ok(addresses) => web.extend(addresses),
                Err(failure) => {
                    for name in started {
                        backend.stop(&launch.deployment.id, Some(name)).await;
                    }
                    return Err(failure);
                }
            }
            started.push(&ptype.name);
        }
        Ok(web)
    }

    /// After the switch: each `replace` type's previous instances stop (wherever they run),
    /// then its new ones start on `backend`, all of them healthy, so a singleton never runs
    /// twice. A type that does not come up is said in the deployment's log; the deployment
    /// stays live (its web instances serve) and the formation shows the type short.
    pub(crate) async fn start_replacing(
        &self,
        backend: &Arc<dyn AppBackend>,
        launch: &Launch,
        types: &[ProcessType],
        previous: Option<&str>,
    ) {
        for ptype in types.iter().filter(|t| !starts_before_switch(t)) {
            if let Some(previous) = previous {
                self.stop_app(previous, Some(&ptype.name)).await;
            }
            let all = ptype.instances;
            if let Err(failure) = self.start_type(backend, launch, ptype, all).await {
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

    /// Starts `ptype`'s instances on `backend`, `needed` of them healthy; the `web` ones'
    /// addresses.
    async fn start_type(
        &self,
        backend: &Arc<dyn AppBackend>,
        launch: &Launch,
        ptype: &ProcessType,
        needed: u32,
    ) -> Result<Vec<WebInstance>, Failure> {
        let spec = self.type_spec(launch, ptype, needed);
        if backend.engine() != LOCAL_ENGINE {
            self.hub.system(
                &launch.deployment.id,
                &format!(
                    "deploy: {} × {} on the {} cluster",
                    spec.instances,
                    ptype.name,
                    backend.engine()
                ),
            );
        }
        backend
            .start(spec)
            .await
            .map_err(|f| Failure::new("deploy", f.code, f.message))
    }

    /// What a backend runs of `ptype` for `launch`: its instances, `needed` of them healthy.
    pub(crate) fn type_spec(&self, launch: &Launch, ptype: &ProcessType, needed: u32) -> TypeSpec {
        let port = ptype.is_web().then_some(launch.deployment.port).flatten();
        TypeSpec {
            template: self.instance_spec(launch, ptype, InstanceId::new(&ptype.name, 1), port),
            project_id: launch.project.id.clone(),
            instances: ptype.instances,
            needed,
            health_timeout: Duration::from_secs(self.config.limits.health_timeout_s),
            constraints: (launch.project.settings.placement_constraints.iter())
                .map(|constraint| constraint.as_str().to_owned())
                .collect(),
        }
    }

    fn instance_spec(
        &self,
        launch: &Launch,
        ptype: &ProcessType,
        instance: InstanceId,
        port: Option<u16>,
    ) -> AppSpec {
        let (project, deployment) = (&launch.project, &launch.deployment);
        let data_dir = self.instance_data_dir(project, deployment);
        let mut env = launch.env.clone();
        env.push((INSTANCE_VAR.to_owned(), instance.to_string()));
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
