//! Running apps: starts a server-mode deployment's start command through the runner, waits
//! until it accepts connections on `PORT` (and answers `healthCheckPath`), probes it every
//! `limits.health_interval_s`, restarts it with backoff (1 s doubling to 60 s) when it exits
//! or stops answering, and stops it (SIGTERM, grace, SIGKILL).
//! The pipeline decides *when* an app becomes live; the supervisor keeps it running.
//!
//! Apps outlive the daemon (sandbox mode namespaces): every healthy app's adoption handle is
//! in the store; at shutdown the supervisor lets its apps go ([`Supervisor::leave_all`])
//! instead of stopping them, and the next daemon adopts them ([`Supervisor::start`] with a
//! handle) and watches them as if it had started them. `stop-apps` stops them for real.

use crate::error_code::ErrorCode;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

mod app_loop;
mod health;

use app_loop::{AppLoop, LoopControl};
pub use health::wait_healthy;
use health::FirstStart;

use crate::logs::LogHub;
use crate::notifications::Notifier;
use crate::router::Routes;
use crate::sandbox::{AppHandle, Runner};
use crate::store::Store;

/// The runner's step name of a deployment's app (its cgroups are named after it).
pub fn app_step_name(deployment_id: &str) -> String {
    format!("slipway-{deployment_id}-app")
}

/// Everything needed to (re)start one app.
#[derive(Debug, Clone)]
pub struct AppSpec {
    pub deployment_id: String,
    pub slug: String,
    pub uid: u32,
    /// The built workspace (read-only for the app).
    pub root: PathBuf,
    /// The app's writable data dir (kept across deployments of the project).
    pub data_dir: PathBuf,
    pub command: String,
    /// The environment without `PORT` (the supervisor adds it).
    pub env: Vec<(String, String)>,
    pub port: u16,
    pub health_check_path: Option<String>,
    pub memory_mb: u64,
    pub pids: u64,
    /// CPU quota in cores (`limits.app_cpus`).
    pub cpus: f64,
}

/// Why an app did not come up.
#[derive(Debug, Clone)]
pub struct StartFailure {
    /// `START_FAILED` or `HEALTHCHECK_FAILED`.
    pub code: ErrorCode,
    pub message: String,
}

struct App {
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

    /// Starts the app — or adopts it, when `adopt` names the sandbox an earlier daemon left
    /// running — and returns once it is healthy (its address), or why it is not.
    /// On success the app keeps running (and restarting) until [`Supervisor::stop`].
    pub async fn start(
        self: &Arc<Self>,
        spec: AppSpec,
        health_timeout: Duration,
        adopt: Option<AppHandle>,
    ) -> Result<SocketAddr, StartFailure> {
        let cancel = CancellationToken::new();
        let leave = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (first_tx, first_rx) = tokio::sync::oneshot::channel();
        let deployment_id = spec.deployment_id.clone();
        let app_loop = AppLoop {
            supervisor: self.clone(),
            spec,
            health_timeout,
            control: LoopControl {
                cancel: cancel.clone(),
                leave: leave.clone(),
            },
            first: FirstStart(Some(first_tx)),
        };
        let task = tokio::spawn(app_loop.run(adopt));
        let previous = self.apps.lock().expect("apps poisoned").insert(
            deployment_id.clone(),
            App {
                cancel,
                leave,
                task,
            },
        );
        if let Some(previous) = previous {
            previous.cancel.cancel();
        }
        let result = first_rx.await.unwrap_or_else(|_| {
            Err(StartFailure {
                code: ErrorCode::StartFailed,
                message: "the app supervisor stopped".into(),
            })
        });
        if result.is_err() {
            self.apps
                .lock()
                .expect("apps poisoned")
                .remove(&deployment_id);
        }
        result
    }

    pub fn is_running(&self, deployment_id: &str) -> bool {
        self.apps
            .lock()
            .expect("apps poisoned")
            .contains_key(deployment_id)
    }

    /// Stops an app (SIGTERM, grace period, SIGKILL) and waits until it is gone.
    pub async fn stop(&self, deployment_id: &str) {
        let app = self
            .apps
            .lock()
            .expect("apps poisoned")
            .remove(deployment_id);
        if let Some(app) = app {
            app.cancel.cancel();
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
        let apps: Vec<App> = self
            .apps
            .lock()
            .expect("apps poisoned")
            .drain()
            .map(|(_, app)| app)
            .collect();
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

    /// Stops an app an earlier daemon left running that is no longer live (e.g. one that was
    /// draining when that daemon died).
    pub async fn stop_left_over(&self, deployment_id: &str, handle: &AppHandle) {
        match self.runner.adopt(handle) {
            Ok(mut running) => {
                let _ = running.stop(self.stop_grace).await;
                tracing::info!(deployment = %deployment_id, "stopped an app that is no longer live");
            }
            Err(error) => {
                tracing::debug!(deployment = %deployment_id, %error, "a left-over app is already gone")
            }
        }
        self.forget(deployment_id).await;
    }

    /// Records the running app for the next daemon.
    async fn remember(&self, deployment_id: &str, handle: Option<AppHandle>) {
        let Some(handle) = handle else {
            return;
        };
        let id = deployment_id.to_owned();
        let json = serde_json::to_vec(&handle).expect("a handle serializes");
        if let Err(error) = self
            .store
            .call(move |s| s.put_app_process(&id, &json))
            .await
        {
            tracing::warn!(deployment = %deployment_id, %error, "could not record the app for adoption; it will be started again after a restart");
        }
    }

    async fn forget(&self, deployment_id: &str) {
        let id = deployment_id.to_owned();
        if let Err(error) = self.store.call(move |s| s.remove_app_process(&id)).await {
            tracing::warn!(deployment = %deployment_id, %error, "could not remove the app's adoption record");
        }
    }
}
