//! The Swarm backend: a deployment's process type is a Swarm service (`spec.rs`), its env
//! and build capability a Swarm secret, its tasks on the project's overlay network with the
//! port published in `host` mode on their node. A watcher per service (`tasks.rs`) polls
//! the task list every [`WATCH_EVERY`] and moves the route; `logs.rs` follows its output.
//! A daemon restarted finds its services by name and takes them over (same tasks).
//!
//! Every object carries the `slipway.deployment` label, so stopping (`cleanup.rs`) and the
//! start-up sweep find what an earlier daemon made too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http::Method;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::docker::{Docker, DockerError};
use super::failure;
use super::fetch::{Build, FetchServer};
use super::spec::{self, ServiceParts, DEPLOYMENT_LABEL, PROJECT_LABEL};
use super::tasks::{encode, wait_healthy, watch, Probe, TaskView, WATCH_EVERY};
use crate::formation::InstanceId;
use crate::router::Routes;
use crate::supervisor::backend::{AppBackend, Started, TypeSpec};
use crate::supervisor::{InstanceState, InstanceStatus, InstanceView, StartFailure};

struct Service {
    deployment_id: String,
    process: String,
    service_id: String,
    memory_mb: u64,
    tasks: Arc<Mutex<Vec<TaskView>>>,
    watcher: CancellationToken,
}

pub struct Swarm {
    docker: Docker,
    nodes: super::nodes::NodeBook,
    image: String,
    fetch: Arc<FetchServer>,
    routes: Arc<Routes>,
    hub: Arc<crate::logs::LogHub>,
    builds_dir: std::path::PathBuf,
    services: Mutex<HashMap<String, Service>>,
    /// Itself, for the watchers it spawns.
    me: std::sync::Weak<Swarm>,
}

impl Swarm {
    pub fn new(
        docker: Docker,
        nodes: super::nodes::NodeBook,
        image: String,
        fetch: Arc<FetchServer>,
        routes: Arc<Routes>,
        hub: Arc<crate::logs::LogHub>,
        builds_dir: std::path::PathBuf,
    ) -> Arc<Swarm> {
        Arc::new_cyclic(|me| Swarm {
            docker,
            nodes,
            image,
            fetch,
            routes,
            hub,
            builds_dir,
            services: Mutex::new(HashMap::new()),
            me: me.clone(),
        })
    }

    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Service>> {
        self.services.lock().expect("services poisoned")
    }

    /// The build tarball of the workspace and its SHA-256 (made once per deployment).
    async fn package(&self, spec: &TypeSpec) -> Result<Build, StartFailure> {
        let deployment_id = spec.template.deployment_id.clone();
        let (root, dir) = (spec.template.root.clone(), self.builds_dir.clone());
        let tarball = dir.join(format!("{deployment_id}.tar"));
        let path = tarball.clone();
        let sha256 = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
            std::fs::create_dir_all(&dir)?;
            let mut builder = tar::Builder::new(Vec::new());
            builder.follow_symlinks(false);
            builder.append_dir_all(".", &root)?;
            let bytes = builder.into_inner()?;
            std::fs::write(&path, &bytes)?;
            Ok(crate::ids::sha256_hex(&bytes))
        })
        .await
        .map_err(failure)?
        .map_err(|e| failure(format!("cannot package the build: {e}")))?;
        Ok(Build {
            deployment_id,
            tarball,
            sha256,
            reach: spec.template.reach.clone(),
        })
    }

    /// The deployment's service an earlier daemon made (re-attached: same tasks, same boot
    /// secret, its capability honoured again), else a new one; its id and whether it was
    /// re-attached.
    async fn attach_or_create(&self, spec: &TypeSpec) -> Result<(String, bool), StartFailure> {
        let template = &spec.template;
        let name = spec::service_name(&template.deployment_id, &template.instance.process);
        #[derive(Deserialize)]
        struct Id {
            #[serde(rename = "ID")]
            id: String,
        }
        match self.docker.get::<Id>(&format!("/services/{name}")).await {
            Ok(service) => {
                let build = match self.packaged(&template.deployment_id).await {
                    Some(build) => Build {
                        reach: template.reach.clone(),
                        ..build
                    },
                    None => self.package(spec).await?,
                };
                self.fetch.grant(build);
                return Ok((service.id, true));
            }
            Err(error) if !error.is_not_found() => return Err(failure(error)),
            Err(_) => {}
        }
        let build = self.package(spec).await?;
        self.create(spec, &build).await.map(|id| (id, false))
    }

    /// The build tarball already made for the deployment, with its SHA-256.
    async fn packaged(&self, deployment_id: &str) -> Option<Build> {
        let tarball = self.builds_dir.join(format!("{deployment_id}.tar"));
        let bytes = tokio::fs::read(&tarball).await.ok()?;
        let sha256 = tokio::task::spawn_blocking(move || crate::ids::sha256_hex(&bytes))
            .await
            .ok()?;
        Some(Build {
            deployment_id: deployment_id.to_owned(),
            tarball,
            sha256,
            reach: Vec::new(),
        })
    }

    /// The project's overlay network's id, made if missing.
    async fn network(&self, project_id: &str) -> Result<String, DockerError> {
        let name = spec::network_name(project_id);
        #[derive(Deserialize)]
        struct Id {
            #[serde(rename = "Id", alias = "ID")]
            id: String,
        }
        match self.docker.get::<Id>(&format!("/networks/{name}")).await {
            Ok(network) => return Ok(network.id),
            Err(error) if !error.is_not_found() => return Err(error),
            Err(_) => {}
        }
        let body = json!({"Name": name, "Driver": "overlay", "CheckDuplicate": true,
                          "Labels": {PROJECT_LABEL: project_id}});
        let made: Id = self
            .docker
            .send(Method::POST, "/networks/create", &body)
            .await?;
        Ok(made.id)
    }

    async fn create(&self, spec: &TypeSpec, build: &Build) -> Result<String, StartFailure> {
        let template = &spec.template;
        let mut env = template.env.clone();
        if let Some(port) = template.port {
            env.push(("PORT".to_owned(), port.to_string()));
        }
        // Each linked add-on through a tunnel, at a loopback address inside the task.
        let pairs: Vec<_> = template
            .reach
            .iter()
            .enumerate()
            .map(|(index, target)| (*target, super::tunnel::local_address(index, *target)))
            .collect();
        super::tunnel::rewrite(&mut env, &pairs);
        let tunnels = pairs
            .iter()
            .map(|(target, listen)| super::tunnel::Tunnel {
                listen: *listen,
                url: self.fetch.tunnel_url(&template.deployment_id, *target),
            })
            .collect();
        let document = super::boot::BootDocument {
            url: self.fetch.grant(build.clone()),
            sha256: build.sha256.clone(),
            cert_pem: self.fetch.cert_pem().to_owned(),
            command: template.command.clone(),
            env,
            tunnels,
        };
        let process = &template.instance.process;
        let data = serde_json::to_vec(&document).expect("the document serializes");
        let secret = json!({
            "Name": spec::secret_name(&template.deployment_id, process),
            "Labels": {DEPLOYMENT_LABEL: template.deployment_id, PROJECT_LABEL: spec.project_id},
            "Data": crate::ids::base64(&data),
        });
        #[derive(Deserialize)]
        struct Id {
            #[serde(rename = "ID", alias = "Id")]
            id: String,
        }
        let secret: Id = self
            .docker
            .send(Method::POST, "/secrets/create", &secret)
            .await
            .map_err(failure)?;
        let network = self.network(&spec.project_id).await.map_err(failure)?;
        let body = spec::service_spec(&ServiceParts {
            spec: template,
            project_id: &spec.project_id,
            image: &self.image,
            replicas: spec.instances,
            network_id: &network,
            secret_id: &secret.id,
            constraints: &spec.constraints,
        });
        let service: Id = self
            .docker
            .send(Method::POST, "/services/create", &body)
            .await
            .map_err(failure)?;
        Ok(service.id)
    }
}

impl AppBackend for Swarm {
    fn engine(&self) -> &'static str {
        "swarm"
    }

    fn start(
        &self,
        spec: TypeSpec,
    ) -> futures_util::future::BoxFuture<'_, Result<Started, StartFailure>> {
        Box::pin(async move {
            let template = &spec.template;
            let (service_id, adopted) = match self.attach_or_create(&spec).await {
                Ok(made) => made,
                Err(failure) => {
                    self.stop(&template.deployment_id, Some(&template.instance.process))
                        .await;
                    return Err(failure);
                }
            };
            let watcher = CancellationToken::new();
            let target = super::logs::Target {
                hub: self.hub.clone(),
                deployment_id: template.deployment_id.clone(),
                process: template.instance.process.clone(),
            };
            super::logs::follow(
                self.docker.clone(),
                service_id.clone(),
                target,
                watcher.clone(),
            );
            let healthy = match wait_healthy(
                &self.docker,
                &self.nodes,
                &service_id,
                spec.instances,
                template.port.map(|_| Probe::of(template)).as_ref(),
                spec.health_timeout,
            )
            .await
            {
                Ok(healthy) => healthy,
                Err(failure) if adopted => {
                    // What an earlier daemon left keeps running (the engine restarts its
                    // tasks); the pipeline tries again.
                    watcher.cancel();
                    return Err(failure);
                }
                Err(failure) => {
                    // The last lines of a failing task reach the log before it goes.
                    tokio::time::sleep(WATCH_EVERY).await;
                    watcher.cancel();
                    self.stop(&template.deployment_id, Some(&template.instance.process))
                        .await;
                    return Err(failure);
                }
            };
            let started: Started = healthy
                .iter()
                .filter_map(|t| Some((Arc::from(format!("web.{}", t.slot)), t.address?)))
                .collect();
            let tasks = Arc::new(Mutex::new(healthy));
            self.lock().insert(
                crate::formation::instance_key(&template.deployment_id, &template.instance),
                Service {
                    deployment_id: template.deployment_id.clone(),
                    process: template.instance.process.clone(),
                    service_id: service_id.clone(),
                    memory_mb: template.memory_mb,
                    tasks: tasks.clone(),
                    watcher: watcher.clone(),
                },
            );
            self.begin_watch(service_id, template, tasks, watcher);
            Ok(started)
        })
    }

    /// The service's replicas follow `spec.instances` (its limits stay as the deploy made
    /// them; the engine's tasks join the route through the watcher).
    fn scale(
        &self,
        spec: TypeSpec,
    ) -> futures_util::future::BoxFuture<'_, Result<(), StartFailure>> {
        Box::pin(async move {
            let (deployment_id, process) = (
                &spec.template.deployment_id,
                &spec.template.instance.process,
            );
            let instances = spec.instances;
            let service_id = self
                .lock()
                .values()
                .find(|s| &s.deployment_id == deployment_id && &s.process == process)
                .map(|s| s.service_id.clone())
                .ok_or_else(|| failure("the deployment runs no such service"))?;
            let service: Value = self
                .docker
                .get(&format!("/services/{service_id}"))
                .await
                .map_err(failure)?;
            let version = service["Version"]["Index"].as_u64().unwrap_or_default();
            let mut body = service["Spec"].clone();
            body["Mode"]["Replicated"]["Replicas"] = json!(instances);
            self.docker
                .send::<Value>(
                    Method::POST,
                    &format!("/services/{service_id}/update?version={version}"),
                    &body,
                )
                .await
                .map_err(failure)?;
            Ok(())
        })
    }

    fn stop<'a>(
        &'a self,
        deployment_id: &'a str,
        process: Option<&'a str>,
    ) -> futures_util::future::BoxFuture<'a, ()> {
        Box::pin(async move {
            self.lock().retain(|_, s| {
                let ends =
                    s.deployment_id == deployment_id && process.is_none_or(|p| s.process == p);
                if ends {
                    s.watcher.cancel();
                }
                !ends
            });
            super::cleanup::remove(&self.docker, deployment_id, process).await;
            if process.is_none() {
                self.fetch.revoke(deployment_id);
                let _ =
                    tokio::fs::remove_file(self.builds_dir.join(format!("{deployment_id}.tar")))
                        .await;
            }
        })
    }

    fn sweep<'a>(
        &'a self,
        live: &'a std::collections::HashSet<String>,
    ) -> futures_util::future::BoxFuture<'a, ()> {
        Box::pin(async move {
            let filters = encode(&json!({ "label": [DEPLOYMENT_LABEL] }).to_string());
            let services: Vec<Value> = self
                .docker
                .get(&format!("/services?filters={filters}"))
                .await
                .unwrap_or_default();
            let mut gone: Vec<String> = services
                .iter()
                .filter_map(|s| s["Spec"]["Labels"][DEPLOYMENT_LABEL].as_str())
                .filter(|deployment| !live.contains(*deployment))
                .map(str::to_owned)
                .collect();
            gone.dedup();
            for deployment_id in gone {
                tracing::info!(deployment = %deployment_id, "removing a swarm service an earlier daemon left");
                self.stop(&deployment_id, None).await;
            }
        })
    }

    fn memory_bytes(&self, deployment_id: &str, instance: &InstanceId) -> Option<u64> {
        self.fetch
            .readings()
            .usage(deployment_id, instance)?
            .memory_bytes
    }

    fn runs(&self, deployment_id: &str) -> bool {
        self.lock()
            .values()
            .any(|s| s.deployment_id == deployment_id)
    }

    fn instances(&self, deployment_id: &str) -> Vec<InstanceView> {
        let services = self.lock();
        let mut views = Vec::new();
        for service in services
            .values()
            .filter(|s| s.deployment_id == deployment_id)
        {
            for task in service.tasks.lock().expect("tasks poisoned").iter() {
                views.push(InstanceView {
                    deployment_id: deployment_id.to_owned(),
                    instance: InstanceId::new(&service.process, task.slot),
                    memory_mb: service.memory_mb,
                    node: (!task.node.is_empty()).then(|| task.node.clone()),
                    status: InstanceStatus {
                        state: match task.running {
                            true => InstanceState::Running,
                            false => InstanceState::Starting,
                        },
                        pid: None,
                        address: task.address,
                        restarts: 0,
                        started_ms: task.since_ms,
                    },
                });
            }
        }
        views.sort_by(|a, b| a.instance.cmp(&b.instance));
        views
    }
}

impl Swarm {
    fn begin_watch(
        &self,
        service_id: String,
        template: &crate::supervisor::AppSpec,
        tasks: Arc<Mutex<Vec<TaskView>>>,
        watcher: CancellationToken,
    ) {
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let route = template.port.map(|_| {
            (
                template.slug.clone(),
                template.deployment_id.clone(),
                Probe::of(template),
            )
        });
        watch(
            me.docker.clone(),
            me.nodes.clone(),
            me.routes.clone(),
            service_id,
            route,
            tasks,
            watcher,
        );
    }
}
