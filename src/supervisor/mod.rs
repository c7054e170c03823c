//! Running apps: every process instance of a server-mode deployment (`web.1`, `web.2`,
//! `worker.1`, … — issue 32) is started through the runner on its own, in its own sandbox. A
//! `web` instance is healthy once it accepts connections on `PORT` (and answers
//! `healthCheckPath`) and is probed every `limits.health_interval_s`; any other type has no
//! port and is healthy while it keeps running ([`WORKER_GRACE`] after its start). Each
//! instance restarts with its own backoff (1 s doubling to 60 s) when it exits or stops
//! answering, and stops with SIGTERM, grace, SIGKILL.
//! The pipeline decides *when* a deployment's instances become live; the supervisor keeps
//! them running. The pipeline reaches an app's instances through the app-backend seam
//! (`backend.rs`), whose local implementation is `local.rs` (a type's instances, their
//! ports, the route of a scale, adoption); add-ons call the supervisor itself.
//!
//! Apps outlive the daemon (sandbox mode namespaces): every healthy app's adoption handle is
//! in the store; at shutdown the supervisor lets its apps go ([`Supervisor::leave_all`])
//! instead of stopping them, and the next daemon adopts them ([`Supervisor::start`] with a
//! handle) and watches them as if it had started them. `stop-apps` stops them for real.

use crate::error_code::ErrorCode;
use crate::formation::{instance_key, InstanceId};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

mod app_loop;
pub mod backend;
mod check;
mod health;
pub mod local;
mod ports;

use app_loop::{AppLoop, LoopControl};
pub use health::wait_healthy;
use health::FirstStart;

use crate::logs::LogHub;
use crate::notifications::Notifier;
use crate::router::Routes;
use crate::sandbox::{AppHandle, Runner};
use crate::store::Store;

/// The runner's step name of one instance of a deployment (its cgroups are named after it:
/// `slipway-dpl_…-app-worker_2-<n>`).
pub fn app_step_name(deployment_id: &str, instance: &InstanceId) -> String {
    format!("slipway-{deployment_id}-app-{instance}")
}

/// What every instance's step name of a deployment starts with (their usage summed).
pub fn app_step_prefix(deployment_id: &str) -> String {
    format!("slipway-{deployment_id}-app")
}

/// A type other than `web` counts as started once it has run this long without exiting.
pub const WORKER_GRACE: Duration = Duration::from_secs(2);

/// Everything needed to (re)start one instance.
#[derive(Debug, Clone)]
pub struct AppSpec {
    pub deployment_id: String,
    /// Which instance of which process type (`web.1`, `worker.2`).
    pub instance: InstanceId,
    /// The route key (`<slug>` or a preview's `<name>--<slug>`) a `web` instance is served
    /// under; its restarts move only its own upstream.
    pub slug: String,
    pub uid: u32,
    /// The built workspace (read-only for the app).
    pub root: PathBuf,
    /// The app's writable data dir (kept across deployments of the project; every instance
    /// of every type shares it).
    pub data_dir: PathBuf,
    pub command: String,
    /// The environment without `PORT` (the supervisor adds it for `web`).
    pub env: Vec<(String, String)>,
    /// `web`'s port; other types have none (not routed, healthy while running).
    pub port: Option<u16>,
    pub health_check_path: Option<String>,
    /// A type without a port: the command that says it is healthy (exit 0); `None`: healthy
    /// while it runs.
    pub health_command: Option<String>,
    pub memory_mb: u64,
    pub pids: u64,
    /// CPU quota in cores.
    pub cpus: f64,
    /// Add-ons (address and port) the instance may connect to: its project's links.
    pub reach: Vec<std::net::SocketAddrV4>,
    /// An add-on's port other sandboxes may connect to (subject to their `reach`); it has
    /// started once that port accepts a connection.
    pub serve_port: Option<u16>,
    /// An add-on's pinned link: the same address across restarts.
    pub link: Option<u32>,
}

impl AppSpec {
    /// Its key in the supervisor and the store's `app_processes` (`dpl_…:web.1`).
    pub fn key(&self) -> String {
        instance_key(&self.deployment_id, &self.instance)
    }
}

/// What an instance whose first start failed does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstFailure {
    /// It is gone (a deploy's instances must all come up, or the deploy fails).
    GiveUp,
    /// It is tried again with the backoff, and joins the route once healthy (the instances
    /// past a type's `minHealthy`).
    KeepTrying,
}

/// Why an app did not come up.
#[derive(Debug, Clone)]
pub struct StartFailure {
    /// `START_FAILED` or `HEALTHCHECK_FAILED`.
    pub code: ErrorCode,
    pub message: String,
}

/// What an instance is doing, as the formation shows it (and the API answers it).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum InstanceState {
    Starting,
    Running,
    // It ended and starts again after its backoff. (Plain comment: doc comments on
    // variants make the OpenAPI enum a `oneOf`.)
    Restarting,
}

/// One instance as the supervisor sees it now.
#[derive(Debug, Clone)]
pub struct InstanceStatus {
    pub state: InstanceState,
    /// The sandbox helper's pid (namespaces mode).
    pub pid: Option<i32>,
    pub address: Option<SocketAddr>,
    pub restarts: u32,
    pub started_ms: u64,
}

/// A running instance's public view.
#[derive(Debug, Clone)]
pub struct InstanceView {
    pub deployment_id: String,
    pub instance: InstanceId,
    pub memory_mb: u64,
    pub status: InstanceStatus,
    /// The cluster node it runs on (its name); `None`: this machine.
    pub node: Option<String>,
}

struct App {
    deployment_id: String,
    instance: InstanceId,
    memory_mb: u64,
    status: Arc<Mutex<InstanceStatus>>,
    cancel: CancellationToken,
    /// Set before `cancel` when the daemon stops: the app is let go, not stopped.
    leave: Arc<std::sync::atomic::AtomicBool>,
    /// Ends with whether the app was let go (still running for the next daemon).
    task: tokio::task::JoinHandle<bool>,
}

pub struct Supervisor {
    runner: Arc<dyn Runner>,
    hub: Arc<LogHub>,
    routes: Arc<Routes>,
    store: Store,
    /// Told when a live app crashes (`app.crashed`).
    notifier: Notifier,
    /// Instance key (`dpl_…:web.1`) → its loop.
    apps: Mutex<HashMap<String, App>>,
    pub stop_grace: Duration,
    /// How often live apps are probed (`limits.health_interval_s`).
    health_interval: Duration,
}

pub(crate) const BACKOFF_START: Duration = Duration::from_secs(1);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(60);

impl Supervisor {
    /// `stop_grace`: SIGTERM → SIGKILL when an app is stopped (`limits.app_stop_grace_s`).
    pub fn new(
        runner: Arc<dyn Runner>,
        hub: Arc<LogHub>,
        routes: Arc<Routes>,
        store: Store,
        notifier: Notifier,
        stop_grace: Duration,
        health_interval: Duration,
    ) -> Arc<Supervisor> {
        Arc::new(Supervisor {
            runner,
            hub,
            routes,
            store,
            notifier,
            apps: Mutex::new(HashMap::new()),
            stop_grace,
            health_interval,
        })
    }

    /// Starts one instance — or adopts it, when `adopt` names the sandbox an earlier daemon
    /// left running — and returns once it is healthy (a `web` instance's address), or why it
    /// is not. On success it keeps running (and restarting) until [`Supervisor::stop`].
    pub async fn start(
        self: &Arc<Self>,
        spec: AppSpec,
        health_timeout: Duration,
        adopt: Option<AppHandle>,
        after_failure: FirstFailure,
    ) -> Result<Option<SocketAddr>, StartFailure> {
        let cancel = CancellationToken::new();
        let leave = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (first_tx, first_rx) = tokio::sync::oneshot::channel();
        let key = spec.key();
        let status = Arc::new(Mutex::new(InstanceStatus {
            state: InstanceState::Starting,
            pid: None,
            address: None,
            restarts: 0,
            started_ms: crate::ids::now_ms(),
        }));
        let app = App {
            deployment_id: spec.deployment_id.clone(),
            instance: spec.instance.clone(),
            memory_mb: spec.memory_mb,
            status: status.clone(),
            cancel: cancel.clone(),
            leave: leave.clone(),
            task: tokio::spawn(
                AppLoop {
                    supervisor: self.clone(),
                    tag: Arc::from(spec.instance.to_string()),
                    spec,
                    health_timeout,
                    control: LoopControl { cancel, leave },
                    first: FirstStart {
                        answer: Some(first_tx),
                        after_failure,
                    },
                    status,
                }
                .run(adopt),
            ),
        };
        let previous = self.lock().insert(key.clone(), app);
        if let Some(previous) = previous {
            previous.cancel.cancel();
        }
        let result = first_rx.await.unwrap_or_else(|_| {
            Err(StartFailure {
                code: ErrorCode::StartFailed,
                message: "the app supervisor stopped".into(),
            })
        });
        if result.is_err() && after_failure == FirstFailure::GiveUp {
            self.lock().remove(&key);
        }
        result
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, App>> {
        self.apps.lock().expect("apps poisoned")
    }

    /// Whether any instance of the deployment runs.
    pub fn is_running(&self, deployment_id: &str) -> bool {
        self.lock()
            .values()
            .any(|a| a.deployment_id == deployment_id)
    }

    /// The deployment's instances, in type and number order.
    pub fn instances(&self, deployment_id: &str) -> Vec<InstanceView> {
        let mut views: Vec<InstanceView> = self
            .lock()
            .values()
            .filter(|a| a.deployment_id == deployment_id)
            .map(|a| InstanceView {
                deployment_id: a.deployment_id.clone(),
                instance: a.instance.clone(),
                memory_mb: a.memory_mb,
                status: a.status.lock().expect("status poisoned").clone(),
                node: None,
            })
            .collect();
        views.sort_by(|a, b| a.instance.cmp(&b.instance));
        views
    }

    /// The memory one instance uses now, bytes (from its cgroups; `None` in mode none).
    pub fn instance_memory_bytes(&self, deployment_id: &str, instance: &InstanceId) -> Option<u64> {
        self.runner
            .usage(&app_step_name(deployment_id, instance))?
            .memory_bytes
    }

    /// The memory limits of every instance running, in MiB, but those `skip` names.
    pub fn held_memory_mb(&self, skip: impl Fn(&str, &InstanceId) -> bool) -> u64 {
        self.lock()
            .values()
            .filter(|a| !skip(&a.deployment_id, &a.instance))
            .map(|a| a.memory_mb)
            .sum()
    }

    /// Stops one instance (SIGTERM, grace period, SIGKILL) and waits until it is gone.
    pub async fn stop(&self, deployment_id: &str, instance: &InstanceId) {
        let app = self.lock().remove(&instance_key(deployment_id, instance));
        if let Some(app) = app {
            app.cancel.cancel();
            let _ = app.task.await;
        }
    }

    /// Stops every instance of the deployment (of the type `process` only, when given), all
    /// at once, and waits until they are gone.
    pub async fn stop_deployment(&self, deployment_id: &str, process: Option<&str>) {
        let apps: Vec<App> = {
            let mut apps = self.lock();
            let keys: Vec<String> = apps
                .iter()
                .filter(|(_, a)| {
                    a.deployment_id == deployment_id
                        && process.is_none_or(|p| a.instance.process == p)
                })
                .map(|(key, _)| key.clone())
                .collect();
            keys.iter().filter_map(|key| apps.remove(key)).collect()
        };
        for app in &apps {
            app.cancel.cancel();
        }
        for app in apps {
            let _ = app.task.await;
        }
    }

    /// Stops every app (`slipway stop-apps`); returns how many there were.
    pub async fn stop_all(&self) -> usize {
        self.end_all(false).await.0
    }

    /// Lets every app go without stopping it (daemon shutdown): apps that can outlive the
    /// daemon keep running for the next one to adopt; the others stop.
    /// Returns how many apps run on.
    pub async fn leave_all(&self) -> usize {
        self.end_all(true).await.1
    }

    /// How many apps there were, and how many of them were let go.
    async fn end_all(&self, leave: bool) -> (usize, usize) {
        let apps: Vec<App> = self.lock().drain().map(|(_, app)| app).collect();
        for app in &apps {
            app.leave.store(leave, std::sync::atomic::Ordering::SeqCst);
            app.cancel.cancel();
        }
        let count = apps.len();
        let mut left_running = 0;
        for app in apps {
            if app.task.await.unwrap_or(false) {
                left_running += 1;
            }
        }
        (count, left_running)
    }

    /// Stops an instance an earlier daemon left running that is no longer live (e.g. one that
    /// was draining when that daemon died, or one a scale-down made surplus). `key` is its
    /// `app_processes` key.
    pub async fn stop_left_over(&self, key: &str, handle: &AppHandle) {
        match self.runner.adopt(handle) {
            Ok(mut running) => {
                let _ = running.stop(self.stop_grace).await;
                tracing::info!(instance = %key, "stopped an app that is no longer live");
            }
            Err(error) => {
                tracing::debug!(instance = %key, %error, "a left-over app is already gone")
            }
        }
        self.forget(key).await;
    }

    /// Records the running instance for the next daemon.
    async fn remember(&self, key: &str, handle: Option<AppHandle>) {
        let Some(handle) = handle else {
            return;
        };
        let id = key.to_owned();
        let json = serde_json::to_vec(&handle).expect("a handle serializes");
        if let Err(error) = self
            .store
            .call(move |s| s.put_app_process(&id, &json))
            .await
        {
            tracing::warn!(instance = %key, %error, "could not record the app for adoption; it will be started again after a restart");
        }
    }

    async fn forget(&self, key: &str) {
        let id = key.to_owned();
        if let Err(error) = self.store.call(move |s| s.remove_app_process(&id)).await {
            tracing::warn!(instance = %key, %error, "could not remove the app's adoption record");
        }
    }
}
