//! The Swarm backend: a deployment's process type is a Swarm service (`spec.rs`), its env
//! and build capability a Swarm secret, its tasks on the project's overlay network with the
//! port published in `host` mode on their node. A watcher per service polls the task list
//! every [`WATCH_EVERY`] and moves the route: a task that ended leaves it, its replacement
//! joins it once it accepts connections.
//!
//! Every object carries the `slipway.deployment` label, so stopping finds what an earlier
//! daemon made too.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Method;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::docker::{Docker, DockerError};
use super::fetch::{Build, FetchServer};
use super::spec::{self, ServiceParts, DEPLOYMENT_LABEL, PROJECT_LABEL};
use crate::error_code::ErrorCode;
use crate::formation::InstanceId;
use crate::router::Routes;
use crate::supervisor::backend::{AppBackend, Started, TypeSpec};
use crate::supervisor::{InstanceState, InstanceStatus, InstanceView, StartFailure};

/// How often a service's task list is read.
pub const WATCH_EVERY: Duration = Duration::from_millis(500);

/// One running task of a service, as the router needs it.
#[derive(Debug, Clone, PartialEq)]
struct TaskView {
    slot: u32,
    /// The node's name (empty until the task is placed).
    node: String,
    address: Option<SocketAddr>,
    running: bool,
    /// The engine's state and error (`rejected: no such image`), for messages.
    state: String,
    /// When it reached that state (Unix ms; 0 when the engine did not say).
    since_ms: u64,
}

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
    image: String,
    fetch: Arc<FetchServer>,
    routes: Arc<Routes>,
    hub: Arc<crate::logs::LogHub>,
    builds_dir: std::path::PathBuf,
    services: Mutex<HashMap<String, Service>>,
    /// Itself, for the watchers it spawns.
    me: std::sync::Weak<Swarm>,
}

fn failure(message: impl std::fmt::Display) -> StartFailure {
    StartFailure {
        code: ErrorCode::StartFailed,
        message: format!("swarm: {message}"),
    }
}

impl Swarm {
    pub fn new(
        docker: Docker,
        image: String,
        fetch: Arc<FetchServer>,
        routes: Arc<Routes>,
        hub: Arc<crate::logs::LogHub>,
        builds_dir: std::path::PathBuf,
    ) -> Arc<Swarm> {
        Arc::new_cyclic(|me| Swarm {
            docker,
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
                    Some(build) => build,
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
        let document = super::boot::BootDocument {
            url: self.fetch.grant(build.clone()),
            sha256: build.sha256.clone(),
            cert_pem: self.fetch.cert_pem().to_owned(),
            command: template.command.clone(),
            env,
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
        });
        let service: Id = self
            .docker
            .send(Method::POST, "/services/create", &body)
            .await
            .map_err(failure)?;
        Ok(service.id)
    }

    /// The service's tasks that should run, with their addresses (node address + published
    /// port) and whether they run.
    async fn tasks(&self, service_id: &str) -> Result<Vec<TaskView>, DockerError> {
        let filters = json!({"service": [service_id], "desired-state": ["running"]});
        let tasks: Vec<Task> = self
            .docker
            .get(&format!("/tasks?filters={}", encode(&filters.to_string())))
            .await?;
        // node id → (address, name)
        let mut nodes: BTreeMap<String, (Option<std::net::IpAddr>, String)> = BTreeMap::new();
        let mut views = Vec::new();
        for task in tasks {
            // A task not yet placed has no node.
            if !task.node_id.is_empty() && !nodes.contains_key(&task.node_id) {
                let node: Value = self.docker.get(&format!("/nodes/{}", task.node_id)).await?;
                let ip = node["Status"]["Addr"].as_str().and_then(|a| a.parse().ok());
                let name = node["Description"]["Hostname"].as_str().unwrap_or_default();
                nodes.insert(task.node_id.clone(), (ip, name.to_owned()));
            }
            let port = task.status.port_status.ports.first().map(|p| p.published);
            let (ip, node) = nodes.get(&task.node_id).cloned().unwrap_or_default();
            let address = match (ip, port) {
                (Some(ip), Some(port)) => Some(SocketAddr::new(ip, port)),
                _ => None,
            };
            views.push(TaskView {
                slot: task.slot,
                node,
                address,
                running: task.status.state == "running",
                since_ms: humantime::parse_rfc3339(&task.status.timestamp)
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_millis() as u64),
                state: match task.status.err.is_empty() {
                    true => task.status.state,
                    false => format!("{}: {}", task.status.state, task.status.err),
                },
            });
        }
        views.sort_by_key(|t| t.slot);
        Ok(views)
    }

    /// Waits until `count` tasks run and accept connections; their names and addresses.
    /// A type without a port (a worker) is healthy once its tasks run.
    async fn wait_healthy(
        &self,
        service_id: &str,
        count: u32,
        probe: Option<&Probe>,
        timeout: Duration,
    ) -> Result<Vec<TaskView>, StartFailure> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let tasks = self.tasks(service_id).await.map_err(failure)?;
            let mut healthy = Vec::new();
            for task in tasks.iter().filter(|t| t.running) {
                let up = match (probe, task.address) {
                    (Some(probe), Some(address)) => probe.passes(address).await,
                    (Some(_), None) => false,
                    (None, _) => true,
                };
                if up {
                    healthy.push(task.clone());
                }
            }
            if healthy.len() as u32 >= count {
                return Ok(healthy);
            }
            let states: Vec<String> = tasks
                .iter()
                .map(|t| format!("task {} {} at {:?}", t.slot, t.state, t.address))
                .collect();
            let last = format!(
                "{} of {count} tasks accept connections ({})",
                healthy.len(),
                states.join("; ")
            );
            if tokio::time::Instant::now() >= deadline {
                return Err(StartFailure {
                    code: ErrorCode::HealthcheckFailed,
                    message: format!("swarm: {last} after {}s", timeout.as_secs()),
                });
            }
            tokio::time::sleep(WATCH_EVERY).await;
        }
    }

    /// Removes every service and secret labelled with the deployment (of type `process`
    /// only, when given), then the project's network once nothing uses it.
    async fn remove(&self, deployment_id: &str, process: Option<&str>) {
        let mut labels = vec![format!("{DEPLOYMENT_LABEL}={deployment_id}")];
        if let Some(process) = process {
            labels.push(format!("{}={process}", spec::PROCESS_LABEL));
        }
        let filters = encode(&json!({ "label": labels }).to_string());
        let services: Vec<Value> = self
            .docker
            .get(&format!("/services?filters={filters}"))
            .await
            .unwrap_or_default();
        let mut projects = Vec::new();
        for service in &services {
            let id = service["ID"].as_str().unwrap_or_default();
            if let Some(project) = service["Spec"]["Labels"][PROJECT_LABEL].as_str() {
                projects.push(project.to_owned());
            }
            if let Err(error) = self.docker.delete(&format!("/services/{id}")).await {
                tracing::warn!(%error, service = id, "could not remove a swarm service");
            }
        }
        let secrets: Vec<Value> = self
            .docker
            .get(&format!(
                "/secrets?filters={}",
                encode(&json!({ "label": [&labels[0]] }).to_string())
            ))
            .await
            .unwrap_or_default();
        for secret in secrets {
            let name = secret["Spec"]["Name"].as_str().unwrap_or_default();
            let id = secret["ID"].as_str().unwrap_or_default();
            if process.is_none_or(|p| name.ends_with(&format!("-{p}-boot"))) {
                self.remove_retrying(&format!("/secrets/{id}")).await;
            }
        }
        for project in projects {
            self.remove_network_if_unused(&project).await;
        }
    }

    async fn remove_network_if_unused(&self, project_id: &str) {
        let filters =
            encode(&json!({ "label": [format!("{PROJECT_LABEL}={project_id}")] }).to_string());
        let left: Vec<Value> = self
            .docker
            .get(&format!("/services?filters={filters}"))
            .await
            .unwrap_or_default();
        if left.is_empty() {
            self.remove_retrying(&format!("/networks/{}", spec::network_name(project_id)))
                .await;
        }
    }

    /// A secret or network is in use until the removed service's tasks are gone.
    async fn remove_retrying(&self, path: &str) {
        for _ in 0..60 {
            match self.docker.delete(path).await {
                Ok(()) => return,
                Err(error) if error.is_not_found() => return,
                Err(_) => tokio::time::sleep(WATCH_EVERY).await,
            }
        }
        tracing::warn!(path, "a swarm object is still in use after 30 s; left");
    }
}

/// The watcher of one service: its task list is kept, and the route (a `web` service's:
/// its key and deployment) follows it.
fn watch(
    swarm: Arc<Swarm>,
    service_id: String,
    route: Option<(String, String, Probe)>,
    tasks: Arc<Mutex<Vec<TaskView>>>,
    cancel: CancellationToken,
) {
    tokio::spawn(async move {
        let mut routed: BTreeMap<u32, Option<SocketAddr>> = tasks
            .lock()
            .expect("tasks poisoned")
            .iter()
            .map(|t| (t.slot, t.address))
            .collect();
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(WATCH_EVERY) => {}
            }
            let Ok(now) = swarm.tasks(&service_id).await else {
                continue;
            };
            let Some((key, deployment_id, probe)) = &route else {
                *tasks.lock().expect("tasks poisoned") = now;
                continue;
            };
            let mut next = BTreeMap::new();
            for task in &now {
                // A routed task stays routed while the engine says it runs (the router's
                // own retries cover a crash in between); a new one once it answers.
                let ready = match (task.running, task.address) {
                    (true, Some(address)) if routed.get(&task.slot) == Some(&Some(address)) => {
                        Some(address)
                    }
                    (true, Some(address)) => probe.passes(address).await.then_some(address),
                    _ => None,
                };
                next.insert(task.slot, ready);
            }
            for (slot, address) in &next {
                if routed.get(slot) != Some(address) {
                    let name = format!("web.{slot}");
                    swarm
                        .routes
                        .set_instance(key, deployment_id, &name, *address);
                }
            }
            for slot in routed.keys().filter(|s| !next.contains_key(s)) {
                swarm
                    .routes
                    .remove_instance(key, deployment_id, &format!("web.{slot}"));
            }
            routed = next;
            *tasks.lock().expect("tasks poisoned") = now;
        }
    });
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
            let healthy = match self
                .wait_healthy(
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

    fn scale<'a>(
        &'a self,
        deployment_id: &'a str,
        process: &'a str,
        instances: u32,
    ) -> futures_util::future::BoxFuture<'a, Result<(), StartFailure>> {
        Box::pin(async move {
            let service_id = self
                .lock()
                .values()
                .find(|s| s.deployment_id == deployment_id && s.process == process)
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
            self.remove(deployment_id, process).await;
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
        watch(me, service_id, route, tasks, watcher);
    }
}

/// How a task's app is asked whether it is up: a connection alone proves nothing here (the
/// engine's userland proxy accepts for a task whose app does not listen yet), so an HTTP
/// request — with a health check path, a 2xx/3xx answer to it; without, any HTTP answer
/// to `/`.
#[derive(Debug, Clone)]
struct Probe {
    path: Option<String>,
    host: String,
}

impl Probe {
    fn of(spec: &crate::supervisor::AppSpec) -> Probe {
        Probe {
            path: spec.health_check_path.clone(),
            host: spec.slug.clone(),
        }
    }

    async fn passes(&self, address: SocketAddr) -> bool {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let asked = async {
            let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
            let request = format!(
                "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: slipway-health\r\nConnection: close\r\n\r\n",
                self.path.as_deref().unwrap_or("/"),
                self.host
            );
            stream.write_all(request.as_bytes()).await.ok()?;
            let mut head = [0u8; 12];
            stream.read_exact(&mut head).await.ok()?;
            let status = std::str::from_utf8(&head[9..12])
                .ok()?
                .parse::<u16>()
                .ok()?;
            Some((head.starts_with(b"HTTP/1."), status))
        };
        match tokio::time::timeout(Duration::from_secs(5), asked).await {
            Ok(Some((true, status))) => self.path.is_none() || (200..400).contains(&status),
            _ => false,
        }
    }
}

/// Percent-encodes a query value (the engine's `filters` JSON).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[derive(Deserialize)]
struct Task {
    #[serde(rename = "Slot", default)]
    slot: u32,
    #[serde(rename = "NodeID", default)]
    node_id: String,
    #[serde(rename = "Status")]
    status: TaskStatus,
}

#[derive(Deserialize)]
struct TaskStatus {
    #[serde(rename = "State")]
    state: String,
    #[serde(rename = "PortStatus", default)]
    port_status: PortStatus,
    #[serde(rename = "Err", default)]
    err: String,
    /// When the task reached its state (RFC 3339, nanoseconds).
    #[serde(rename = "Timestamp", default)]
    timestamp: String,
}

#[derive(Deserialize, Default)]
struct PortStatus {
    #[serde(rename = "Ports", default)]
    ports: Vec<PortBinding>,
}

#[derive(Deserialize)]
struct PortBinding {
    #[serde(rename = "PublishedPort")]
    published: u16,
}
