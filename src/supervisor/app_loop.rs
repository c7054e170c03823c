//! One instance's loop, spawned by [`Supervisor::start`]: start it (or adopt the sandbox an
//! earlier daemon left running), wait until it answers (`web`) or has kept running for
//! [`WORKER_GRACE`] (other types), watch it, and restart it with backoff when it ends, until
//! its [`LoopControl`] says to stop it or let it go. Its log lines are tagged with the
//! instance (`web.2`); a `web` instance's restarts move only its own upstream in the route.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::check;
use super::health::{not_healthy, unresponsive, wait_healthy, FirstStart, UNRESPONSIVE_PROBES};
use super::{
    app_step_name, AppSpec, InstanceState, InstanceStatus, Supervisor, BACKOFF_MAX, BACKOFF_START,
    WORKER_GRACE,
};
use crate::error_code::ErrorCode;
use crate::logs::{pump_lines, LogStream};
use crate::notifications::{Event, EventKind};
use crate::sandbox::{AppHandle, Running, StepKind, StepSpec};

/// How an app's loop is told to end: stop the app, or (daemon shutdown) let it go.
pub(super) struct LoopControl {
    pub(super) cancel: CancellationToken,
    pub(super) leave: Arc<std::sync::atomic::AtomicBool>,
}

/// One app's loop and what it keeps between starts.
pub(super) struct AppLoop {
    pub(super) supervisor: Arc<Supervisor>,
    pub(super) spec: AppSpec,
    /// `web.1`: what its log lines and route upstream are tagged with.
    pub(super) tag: Arc<str>,
    /// What the formation shows of it.
    pub(super) status: Arc<std::sync::Mutex<InstanceStatus>>,
    pub(super) health_timeout: Duration,
    pub(super) control: LoopControl,
    pub(super) first: FirstStart,
}

/// What came of waiting for a started app to answer.
enum Arrival {
    /// Healthy, or failed after its first start: watched until it ends.
    Watch,
    /// An adopted app that died while no daemon watched it: started again at once.
    StartAgain,
    /// Its first start failed (and [`Supervisor::start`] was told).
    GiveUp,
    /// The loop was told to end.
    Canceled,
}

impl AppLoop {
    /// Runs the app until the loop is told to end or its first start fails; returns whether
    /// the app was let go (it runs on for the next daemon).
    pub(super) async fn run(mut self, mut adopt: Option<AppHandle>) -> bool {
        let mut backoff = BACKOFF_START;
        loop {
            let (spawned, adopted) = self.launch(adopt.take()).await;
            let mut running = match spawned {
                Ok(running) => running,
                Err(error) => {
                    let message = format!("could not start the app: {error}");
                    self.log(&message);
                    if self.first.fail(ErrorCode::StartFailed, message)
                        || sleep_or_cancel(backoff, &self.control.cancel).await
                    {
                        return false;
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    continue;
                }
            };
            let address = self
                .spec
                .port
                .map(|port| SocketAddr::new(running.address, port));
            let started = tokio::time::Instant::now();
            self.set_status(InstanceState::Starting, running.handle().as_ref(), None);
            match self.arrive(&mut running, address, adopted).await {
                Arrival::Watch => {}
                Arrival::StartAgain => {
                    drop(running);
                    continue;
                }
                Arrival::GiveUp => return false,
                Arrival::Canceled => return self.end(running).await,
            }
            let Some(exit) = self.watch(&mut running, address).await else {
                return self.end(running).await;
            };
            // Ran for a while healthily: start the backoff again from the beginning.
            if started.elapsed() > BACKOFF_MAX {
                backoff = BACKOFF_START;
            }
            self.gone(&exit, backoff).await;
            // The app is gone; its sandbox address is given back here, after the route let go.
            self.set_status(InstanceState::Restarting, None, None);
            self.status.lock().expect("status poisoned").restarts += 1;
            drop(running);
            if sleep_or_cancel(backoff, &self.control.cancel).await {
                return false;
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Whether a started instance became healthy: it answers on `address`; with no port, it
    /// accepts a connection on its `serve_port` at `own_address` (add-ons), passes its health
    /// command, or has kept running for [`WORKER_GRACE`].
    async fn first_health(
        &self,
        address: Option<SocketAddr>,
        own_address: std::net::IpAddr,
        adopted: bool,
        reachable: crate::sandbox::Reachable,
    ) -> bool {
        let spec = &self.spec;
        let timeout = self.health_timeout;
        match (address, spec.serve_port) {
            (Some(address), _) => {
                let path = spec.health_check_path.as_deref();
                wait_healthy(address, path, &spec.slug, timeout, reachable).await
            }
            // Adopted: it has run for longer than the grace already.
            (None, _) if adopted => true,
            (None, Some(port)) => {
                let served = SocketAddr::new(own_address, port);
                wait_healthy(served, None, &spec.slug, timeout, reachable).await
            }
            (None, None) => match &spec.health_command {
                Some(command) => {
                    check::passes_within(&self.supervisor, spec, command, timeout).await
                }
                None => {
                    tokio::time::sleep(WORKER_GRACE).await;
                    true
                }
            },
        }
    }

    /// Waits until the started instance is healthy ([`Self::first_health`]), exits, or the
    /// loop is told to end; says so in its log and, on its first start, to
    /// [`Supervisor::start`].
    async fn arrive(
        &mut self,
        running: &mut Running,
        address: Option<SocketAddr>,
        adopted: bool,
    ) -> Arrival {
        let spec = &self.spec;
        let reachable = std::mem::take(&mut running.reachable);
        let own_address = running.address;
        let healthy = tokio::select! {
            _ = self.control.cancel.cancelled() => return Arrival::Canceled,
            exit = running.wait() => Err(exit),
            healthy = self.first_health(address, own_address, adopted, reachable) => Ok(healthy),
        };
        match healthy {
            Ok(true) => {
                self.healthy(running.handle(), address).await;
                Arrival::Watch
            }
            Ok(false) => {
                let message = match (spec.port, &spec.health_command) {
                    (Some(port), _) => not_healthy(port, spec, self.health_timeout),
                    (None, command) => format!(
                        "the `{}` health command `{}` did not exit 0 within {} s",
                        spec.instance.process,
                        command.as_deref().unwrap_or_default(),
                        self.health_timeout.as_secs()
                    ),
                };
                self.log(&message);
                let _ = running.stop(self.supervisor.stop_grace).await;
                if self.first.fail(ErrorCode::HealthcheckFailed, message) {
                    return Arrival::GiveUp;
                }
                Arrival::Watch
            }
            Err(exit) => {
                let description = describe(&exit);
                if adopted {
                    // It died while no daemon watched it (killed, or the machine's OOM
                    // killer): a start like any other, from the same build, at once.
                    self.log(&format!(
                        "the app left running by the previous daemon {description}; starting it again"
                    ));
                    return Arrival::StartAgain;
                }
                let message = match spec.port {
                    Some(port) => format!(
                        "the start command {description} before accepting connections on port {port}"
                    ),
                    None => format!(
                        "the `{}` command {description} within {} s of its start",
                        spec.instance.process,
                        WORKER_GRACE.as_secs()
                    ),
                };
                self.log(&message);
                if self.first.fail(ErrorCode::StartFailed, message) {
                    return Arrival::GiveUp;
                }
                Arrival::Watch
            }
        }
    }

    /// A started instance is healthy: recorded for adoption, said in its log, and (after a
    /// restart) its upstream moved to where it runs now.
    async fn healthy(&mut self, handle: Option<AppHandle>, address: Option<SocketAddr>) {
        let supervisor = self.supervisor.clone();
        let spec = &self.spec;
        self.set_status(InstanceState::Running, handle.as_ref(), address);
        supervisor.remember(&spec.key(), handle).await;
        if self.first.succeed(address) {
            self.log(&match (address, spec.port) {
                (Some(address), Some(port)) => {
                    format!("app is accepting connections on port {port} ({address})")
                }
                _ => format!("`{}` is running", spec.instance.process),
            });
        } else {
            self.log("app restarted and is accepting connections again");
            // After a restart the instance may have a new address: move its upstream if the
            // deployment is still the live one.
            if let Some(address) = address {
                supervisor.routes.set_instance(
                    &spec.slug,
                    &spec.deployment_id,
                    &self.tag,
                    Some(address),
                );
            }
        }
    }

    /// Watches a started app until it exits or stops answering (stopped, then); returns how
    /// it ended, or `None` when the loop was told to end.
    async fn watch(&self, running: &mut Running, address: Option<SocketAddr>) -> Option<String> {
        let Some(address) = address else {
            let failing = async {
                match &self.spec.health_command {
                    Some(command) => check::failing(&self.supervisor, &self.spec, command).await,
                    None => std::future::pending().await,
                }
            };
            let exit = tokio::select! {
                _ = self.control.cancel.cancelled() => return None,
                exit = running.wait() => describe(&exit),
                () = failing => {
                    self.log(&format!(
                        "the health command failed {UNRESPONSIVE_PROBES} times in a row; restarting the app"
                    ));
                    let _ = running.stop(self.supervisor.stop_grace).await;
                    "failed its health command".to_owned()
                }
            };
            self.log(&format!("the app {exit}"));
            return Some(exit);
        };
        let port = address.port();
        let exit = tokio::select! {
            _ = self.control.cancel.cancelled() => return None,
            exit = running.wait() => {
                let description = describe(&exit);
                self.log(&format!("the app {description}"));
                description
            }
            () = unresponsive(address, &self.spec, self.supervisor.health_interval) => {
                self.log(&format!(
                    "the app stopped accepting connections on port {port} ({UNRESPONSIVE_PROBES} \
                     probes in a row failed); restarting it"
                ));
                let _ = running.stop(self.supervisor.stop_grace).await;
                format!("stopped accepting connections on port {port}")
            }
        };
        Some(exit)
    }

    /// Adopts the sandbox an earlier daemon left running, else (or when that fails) starts
    /// the app. Also says whether the app is an adopted one.
    async fn launch(&self, adopt: Option<AppHandle>) -> (std::io::Result<Running>, bool) {
        let Some(handle) = adopt else {
            return (self.spawn(), false);
        };
        match self.adopt(&handle) {
            Ok(running) => (Ok(running), true),
            Err(error) => {
                self.log(&format!(
                    "the app's sandbox could not be adopted ({error}); starting it again"
                ));
                // Still running but not ours to watch: it must not hold the port, the
                // address or a second copy of the app.
                let grace = self.supervisor.stop_grace;
                let _ = tokio::task::spawn_blocking(move || {
                    crate::sandbox::stop_outliving(&[handle], grace)
                })
                .await;
                (self.spawn(), false)
            }
        }
    }

    /// A live app ended (`exit` says how): its record and route let go, the crash counted and
    /// announced, the restart in `backoff` said.
    async fn gone(&self, exit: &str, backoff: Duration) {
        let spec = &self.spec;
        let dpl = &spec.deployment_id;
        let supervisor = &self.supervisor;
        supervisor.forget(&spec.key()).await;
        // Its sandbox address may go to another project's sandbox next: the route lets go
        // of this instance (the others keep serving) before the caller drops the app.
        if spec.port.is_some() {
            supervisor
                .routes
                .set_instance(&spec.slug, dpl, &self.tag, None);
        }
        if let Some(metrics) = supervisor.routes.metrics(&spec.slug) {
            metrics.app_restarted();
        }
        supervisor.notifier.emit(
            Event::new(EventKind::AppCrashed)
                .project(&spec.slug)
                .deployment(dpl)
                .error(&format!(
                    "the app ({}) {exit}; restarting it in {} s",
                    self.tag,
                    backoff.as_secs()
                )),
        );
        self.log(&format!("restarting the app in {} s", backoff.as_secs()));
    }

    /// Ends the loop: lets the app go when the daemon stops and it can outlive it, else
    /// stops it and forgets its record.
    /// Returns whether the app was let go (it runs on).
    async fn end(&self, mut running: Running) -> bool {
        let leave = self.control.leave.load(std::sync::atomic::Ordering::SeqCst);
        let can_outlive = running.handle().is_some();
        if leave && can_outlive {
            // `detach` only fails for a step that cannot outlive us; it is dropped (killed).
            if running.detach() {
                return true;
            }
        } else {
            let _ = running.stop(self.supervisor.stop_grace).await;
        }
        self.supervisor.forget(&self.spec.key()).await;
        false
    }

    /// Takes over the app an earlier daemon left running; its output goes on to the logs.
    fn adopt(&self, handle: &AppHandle) -> std::io::Result<Running> {
        let mut running = self.supervisor.runner.adopt(handle)?;
        self.log(&format!(
            "daemon restarted: adopted the running app (sandbox pid {})",
            handle.helper_pid
        ));
        self.pump(&mut running);
        Ok(running)
    }

    fn spawn(&self) -> std::io::Result<Running> {
        let spec = &self.spec;
        let mut env = spec.env.clone();
        if let Some(port) = spec.port {
            env.push(("PORT".into(), port.to_string()));
        }
        let step = StepSpec {
            name: app_step_name(&spec.deployment_id, &spec.instance),
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
            stop_grace: self.supervisor.stop_grace,
            // Not checked for apps yet: `/data` may be a directory kept from before disk
            // limits were on (`Volumes::ensure_app_data`).
            limited_dirs: Vec::new(),
            tty: None,
            reach: spec.reach.clone(),
            serve_port: spec.serve_port,
            link: spec.link,
        };
        let mut running = self.supervisor.runner.spawn(step)?;
        self.pump(&mut running);
        Ok(running)
    }

    fn pump(&self, running: &mut Running) {
        let hub = &self.supervisor.hub;
        let dpl = &self.spec.deployment_id;
        if let Some(stdout) = running.stdout.take() {
            tokio::spawn(pump_lines(
                stdout,
                hub.clone(),
                dpl.clone(),
                LogStream::Stdout,
                Some(self.tag.clone()),
            ));
        }
        if let Some(stderr) = running.stderr.take() {
            tokio::spawn(pump_lines(
                stderr,
                hub.clone(),
                dpl.clone(),
                LogStream::Stderr,
                Some(self.tag.clone()),
            ));
        }
    }

    /// A line of the app's log from Slipway, tagged with the instance.
    fn log(&self, message: &str) {
        self.supervisor
            .hub
            .system_from(&self.spec.deployment_id, &self.tag, message);
    }

    fn set_status(
        &self,
        state: InstanceState,
        handle: Option<&AppHandle>,
        address: Option<SocketAddr>,
    ) {
        let mut status = self.status.lock().expect("status poisoned");
        status.state = state;
        status.address = address;
        if state == InstanceState::Starting {
            status.pid = handle.map(|h| h.helper_pid);
            status.started_ms = crate::ids::now_ms();
        }
    }
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
