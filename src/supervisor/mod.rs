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

mod health;

pub use health::wait_healthy;
use health::{not_healthy, unresponsive, FirstStart, UNRESPONSIVE_PROBES};

use crate::logs::{pump_lines, LogHub, LogStream};
use crate::notifications::{Event, EventKind, Notifier};
use crate::router::Routes;
use crate::sandbox::{AppHandle, Runner, Running, StepKind, StepSpec};
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
        let this = self.clone();
        let loop_cancel = cancel.clone();
        let loop_leave = leave.clone();
        let deployment_id = spec.deployment_id.clone();
        let task = tokio::spawn(async move {
            let control = LoopControl {
                cancel: loop_cancel,
                leave: loop_leave,
            };
            this.app_loop(spec, health_timeout, control, first_tx, adopt)
                .await
        });
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

    async fn app_loop(
        self: Arc<Self>,
        spec: AppSpec,
        health_timeout: Duration,
        control: LoopControl,
        first: tokio::sync::oneshot::Sender<Result<SocketAddr, StartFailure>>,
        mut adopt: Option<AppHandle>,
    ) -> bool {
        let mut first = FirstStart(Some(first));
        let mut backoff = BACKOFF_START;
        let dpl = spec.deployment_id.clone();
        let cancel = control.cancel.clone();
        loop {
            let (spawned, adopted) = self.launch(&spec, adopt.take()).await;
            let mut running = match spawned {
                Ok(running) => running,
                Err(error) => {
                    let message = format!("could not start the app: {error}");
                    self.hub.system(&dpl, &message);
                    if first.fail(ErrorCode::StartFailed, message)
                        || sleep_or_cancel(backoff, &cancel).await
                    {
                        return false;
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            };
            let address = SocketAddr::new(running.address, spec.port);
            let reachable = std::mem::take(&mut running.reachable);
            let started = tokio::time::Instant::now();
            // Wait for health, the process exiting, or cancellation.
            let healthy = tokio::select! {
                _ = cancel.cancelled() => {
                    return self.end(running, &dpl, &control).await;
                }
                exit = running.wait() => Err(exit),
                healthy = wait_healthy(address, spec.health_check_path.as_deref(), &spec.slug, health_timeout, reachable) => Ok(healthy),
            };
            match healthy {
                Ok(true) => {
                    self.remember(&dpl, running.handle()).await;
                    if first.succeed(address) {
                        self.hub.system(
                            &dpl,
                            &format!(
                                "app is accepting connections on port {} ({address})",
                                spec.port
                            ),
                        );
                    } else {
                        self.hub
                            .system(&dpl, "app restarted and is accepting connections again");
                        self.repoint_route(&spec, address);
                    }
                }
                Ok(false) => {
                    let message = not_healthy(&spec, health_timeout);
                    self.hub.system(&dpl, &message);
                    let _ = running.stop(self.stop_grace).await;
                    if first.fail(ErrorCode::HealthcheckFailed, message) {
                        return false;
                    }
                }
                Err(exit) => {
                    let description = describe(&exit);
                    if adopted {
                        // It died while no daemon watched it (killed, or the machine's OOM
                        // killer): a start like any other, from the same build, at once.
                        self.hub.system(
                            &dpl,
                            &format!("the app left running by the previous daemon {description}; starting it again"),
                        );
                        drop(running);
                        continue;
                    }
                    let message = format!(
                        "the start command {description} before accepting connections on port {}",
                        spec.port
                    );
                    self.hub.system(&dpl, &message);
                    if first.fail(ErrorCode::StartFailed, message) {
                        return false;
                    }
                }
            }
            let exit = tokio::select! {
                _ = cancel.cancelled() => {
                    return self.end(running, &dpl, &control).await;
                }
                exit = running.wait() => {
                    let description = describe(&exit);
                    self.hub.system(&dpl, &format!("the app {description}"));
                    description
                }
                () = unresponsive(address, &spec, self.health_interval) => {
                    self.hub.system(&dpl, &format!(
                        "the app stopped accepting connections on port {} ({UNRESPONSIVE_PROBES} \
                         probes in a row failed); restarting it",
                        spec.port
                    ));
                    let _ = running.stop(self.stop_grace).await;
                    format!("stopped accepting connections on port {}", spec.port)
                }
            };
            // Ran for a while healthily: start the backoff again from the beginning.
            if started.elapsed() > BACKOFF_MAX {
                backoff = BACKOFF_START;
            }
            self.gone(&spec, &exit, backoff).await;
            // The app is gone; its sandbox address is given back here, after the route let go.
            drop(running);
            if sleep_or_cancel(backoff, &cancel).await {
                return false;
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Adopts the sandbox an earlier daemon left running, else (or when that fails) starts
    /// the app. Also says whether the app is an adopted one.
    async fn launch(
        &self,
        spec: &AppSpec,
        adopt: Option<AppHandle>,
    ) -> (std::io::Result<Running>, bool) {
        let Some(handle) = adopt else {
            return (self.spawn(spec), false);
        };
        match self.adopt(spec, &handle) {
            Ok(running) => (Ok(running), true),
            Err(error) => {
                self.hub.system(
                    &spec.deployment_id,
                    &format!("the app's sandbox could not be adopted ({error}); starting it again"),
                );
                // Still running but not ours to watch: it must not hold the port, the
                // address or a second copy of the app.
                let grace = self.stop_grace;
                let _ = tokio::task::spawn_blocking(move || {
                    crate::sandbox::stop_outliving(&[handle], grace)
                })
                .await;
                (self.spawn(spec), false)
            }
        }
    }

    /// A live app ended (`exit` says how): its record and route let go, the crash counted and
    /// announced, the restart in `backoff` said.
    async fn gone(&self, spec: &AppSpec, exit: &str, backoff: Duration) {
        let dpl = &spec.deployment_id;
        self.forget(dpl).await;
        // Its sandbox address may go to another project's sandbox next: the route lets go
        // before the caller drops the app.
        self.routes.unpoint(&spec.slug, dpl);
        if let Some(metrics) = self.routes.metrics(&spec.slug) {
            metrics.app_restarted();
        }
        self.notifier.emit(
            Event::new(EventKind::AppCrashed)
                .project(&spec.slug)
                .deployment(dpl)
                .error(&format!(
                    "the app {exit}; restarting it in {} s",
                    backoff.as_secs()
                )),
        );
        self.hub.system(
            dpl,
            &format!("restarting the app in {} s", backoff.as_secs()),
        );
    }

    /// Ends an app's loop: lets the app go when the daemon stops and it can outlive it, else
    /// stops it and forgets its record.
    /// Returns whether the app was let go (it runs on).
    async fn end(&self, mut running: Running, dpl: &str, control: &LoopControl) -> bool {
        let leave = control.leave.load(std::sync::atomic::Ordering::SeqCst);
        let can_outlive = running.handle().is_some();
        if leave && can_outlive {
            // `detach` only fails for a step that cannot outlive us; it is dropped (killed).
            if running.detach() {
                return true;
            }
        } else {
            let _ = running.stop(self.stop_grace).await;
        }
        self.forget(dpl).await;
        false
    }

    /// Takes over the app an earlier daemon left running; its output goes on to the logs.
    fn adopt(&self, spec: &AppSpec, handle: &AppHandle) -> std::io::Result<Running> {
        let mut running = self.runner.adopt(handle)?;
        self.hub.system(
            &spec.deployment_id,
            &format!(
                "daemon restarted: adopted the running app (sandbox pid {})",
                handle.helper_pid
            ),
        );
        self.pump(&mut running, spec);
        Ok(running)
    }

    fn pump(&self, running: &mut Running, spec: &AppSpec) {
        if let Some(stdout) = running.stdout.take() {
            tokio::spawn(pump_lines(
                stdout,
                self.hub.clone(),
                spec.deployment_id.clone(),
                LogStream::Stdout,
            ));
        }
        if let Some(stderr) = running.stderr.take() {
            tokio::spawn(pump_lines(
                stderr,
                self.hub.clone(),
                spec.deployment_id.clone(),
                LogStream::Stderr,
            ));
        }
    }

    fn spawn(&self, spec: &AppSpec) -> std::io::Result<Running> {
        let mut env = spec.env.clone();
        env.push(("PORT".into(), spec.port.to_string()));
        let step = StepSpec {
            name: app_step_name(&spec.deployment_id),
            kind: StepKind::App {
                output: spec.root.clone(),
                data_dir: spec.data_dir.clone(),
            },
            command: spec.command.clone(),
            env,
            project_uid: spec.uid,
            memory_mb: spec.memory_mb,
            pids: spec.pids,
            cpus: spec.cpus,
            stop_grace: self.stop_grace,
            // Not checked for apps yet: `/data` may be a directory kept from before disk
            // limits were on (`Volumes::ensure_app_data`).
            limited_dirs: Vec::new(),
        };
        let mut running = self.runner.spawn(step)?;
        self.pump(&mut running, spec);
        Ok(running)
    }

    /// After a restart the app may have a new address: move the route if it still points here.
    fn repoint_route(&self, spec: &AppSpec, address: SocketAddr) {
        self.routes
            .repoint(&spec.slug, &spec.deployment_id, address);
    }
}

/// How an app's loop is told to end: stop the app, or (daemon shutdown) let it go.
struct LoopControl {
    cancel: CancellationToken,
    leave: Arc<std::sync::atomic::AtomicBool>,
}

fn describe(exit: &std::io::Result<crate::sandbox::Exit>) -> String {
    match exit {
        Ok(exit) => exit.describe(),
        Err(error) => format!("could not be waited for ({error})"),
    }
}

async fn sleep_or_cancel(duration: Duration, cancel: &CancellationToken) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => true,
        _ = tokio::time::sleep(duration) => false,
    }
}
