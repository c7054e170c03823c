//! One namespaced step as the daemon holds it: the `sandbox-exec` helper (a child of this
//! daemon, or an app's helper adopted from an earlier daemon), its link and cgroup. Waiting,
//! stopping and killing go through the helper (by pidfd, which cannot hit a reused pid); when
//! the helper exits, the cgroup's counters say whether memory or pids ran out, and the cgroup
//! and (on drop) the link are freed (a pinned link stays taken). A step that serves a port
//! leaves the host's served set when it ends. An app can be let go ([`RunningProcess::detach`]) and
//! keeps running for the next daemon. Built by [`super::ns`].

use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use nix::sys::signal::Signal;
use tokio::io::unix::AsyncFd;

use super::adopt::{self, AppHandle};
use super::cgroup::StepCgroup;
use super::net::Link;
use super::shared::Shared;
use super::{Exit, RunningProcess};

/// What a step holds on the host until it is gone.
pub(super) struct StepResources {
    pub link: Link,
    /// The step's pinned link (`StepSpec::link`): never given back by the step.
    pub pinned: bool,
    pub cgroup: StepCgroup,
    /// The cgroup's name in the instance (recorded for adoption).
    pub cgroup_name: String,
    pub serve_port: Option<u16>,
    /// Whether the step's endpoint is counted in the host's served set (until it ends).
    pub serving: bool,
}

impl StepResources {
    /// The endpoint other sandboxes may connect to, if the step serves one.
    pub fn endpoint(&self) -> Option<SocketAddrV4> {
        Some(SocketAddrV4::new(self.link.sandbox, self.serve_port?))
    }

    /// Takes the step's endpoint out of the host's served set (once).
    pub fn stop_serving(&mut self, shared: &Shared) {
        if let (true, Some(endpoint)) = (self.serving, self.endpoint()) {
            self.serving = false;
            shared.served.remove(endpoint);
        }
    }

    /// Gives back what a step that never started holds on the host (cgroup, endpoint, its
    /// link unless pinned).
    pub fn abandon(mut self, shared: &Shared) {
        let _ = shared.cgroups.remove(&self.cgroup);
        self.stop_serving(shared);
        if !self.pinned {
            shared.addresses.release(&self.link);
        }
    }
}

pub(super) struct NamespaceProcess {
    /// The helper when this daemon started it; `None` once reaped or when adopted.
    pub child: Option<tokio::process::Child>,
    /// The helper's pidfd: signals and (when adopted) the wait go through it.
    pub pidfd: AsyncFd<OwnedFd>,
    pub helper_pid: i32,
    /// The spec pipe's write end: dropping it tells a build's helper to kill the sandbox.
    pub lifeline: Option<OwnedFd>,
    pub resources: Option<StepResources>,
    /// Apps only: where the helper records the command's exit.
    pub exit_file: Option<PathBuf>,
    pub shared: Arc<Shared>,
    pub exited: Option<Exit>,
}

impl NamespaceProcess {
    fn signal_helper(&self, signal: Signal) {
        if self.exited.is_none() {
            let _ = crate::sys::process::pidfd_send_signal(self.pidfd.get_ref().as_fd(), signal);
        }
    }

    async fn wait_helper(&mut self) -> io::Result<Exit> {
        if let Some(child) = self.child.as_mut() {
            let status = child.wait().await?;
            return Ok(match (status.code(), status.signal()) {
                (Some(code), _) => Exit::Code(code),
                (None, Some(signal)) => Exit::Signal(signal),
                (None, None) => Exit::Code(-1),
            });
        }
        // Adopted: not our child. The pidfd turns readable when the helper exits, and the
        // helper wrote how the command ended first.
        let _ready = self.pidfd.readable().await?;
        let exit_file = self
            .exit_file
            .as_ref()
            .ok_or_else(|| io::Error::other("an adopted step without an exit file"))?;
        Ok(adopt::take_exit(exit_file))
    }

    async fn wait_main(&mut self) -> io::Result<Exit> {
        if let Some(exit) = &self.exited {
            return Ok(exit.clone());
        }
        let status = self.wait_helper().await?;
        if let Some(path) = &self.exit_file {
            remove_run_files(path);
        }
        let events = self
            .resources
            .as_ref()
            .map(|resources| self.shared.cgroups.events(&resources.cgroup));
        // A step that hit a limit failed even if its main process exited 0: a classic fork
        // bomb's shell returns at once while the bomb fills the pids limit, and a process the
        // OOM killer ended was part of the step's work.
        let exit = match status {
            _ if events.is_some_and(|events| events.oom_kills > 0) => Exit::OutOfMemory,
            _ if events.is_some_and(|events| events.pids_limit_hits > 0) => Exit::PidsExhausted,
            status => status,
        };
        self.exited = Some(exit.clone());
        self.lifeline = None;
        if let Some(resources) = self.resources.as_mut() {
            // Other sandboxes lose the way to its address now; the link is freed on drop.
            resources.stop_serving(&self.shared);
            // A task of its own, so that a caller's timeout cannot cancel the cleanup halfway.
            // The address stays taken until this process is dropped: a route may still point
            // at it (the supervisor lets go of the route first).
            let cgroup = resources.cgroup.clone();
            let _ = tokio::spawn(remove_cgroup(Arc::clone(&self.shared), cgroup)).await;
        }
        Ok(exit)
    }
}

/// Removes an app's exit file and named pipes.
fn remove_run_files(exit_file: &std::path::Path) {
    let _ = std::fs::remove_file(exit_file);
    for stream in ["stdout", "stderr"] {
        let _ = std::fs::remove_file(adopt::fifo_path(exit_file, stream));
    }
}

/// Removes a finished step's cgroup (already gone counts as removed), retrying while the
/// kernel finishes the last exits.
pub(super) async fn remove_cgroup(shared: Arc<Shared>, cgroup: StepCgroup) {
    for _ in 0..200 {
        if shared.cgroups.remove(&cgroup).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Frees a step's cgroup (if still there), its served endpoint and its address (a pinned
/// link stays taken: only `Runner::release_link` frees it).
async fn release(shared: Arc<Shared>, mut resources: StepResources) {
    resources.stop_serving(&shared);
    remove_cgroup(Arc::clone(&shared), resources.cgroup.clone()).await;
    if !resources.pinned {
        shared.addresses.release(&resources.link);
    }
}

impl RunningProcess for NamespaceProcess {
    fn wait(&mut self) -> BoxFuture<'_, io::Result<Exit>> {
        // The helper exits only once the sandbox init, and so the whole tree, is gone.
        Box::pin(self.wait_main())
    }

    fn stop(&mut self, grace: Duration) -> BoxFuture<'_, io::Result<Exit>> {
        Box::pin(async move {
            self.signal_helper(Signal::SIGTERM);
            if let Ok(result) = tokio::time::timeout(grace, self.wait_main()).await {
                return result;
            }
            // SIGUSR1 asks the helper to SIGKILL the sandbox init and report the exit.
            self.signal_helper(Signal::SIGUSR1);
            if let Ok(result) = tokio::time::timeout(Duration::from_secs(5), self.wait_main()).await
            {
                return result;
            }
            self.signal_helper(Signal::SIGKILL);
            self.wait_main().await
        })
    }

    fn kill(&mut self) {
        // The init's parent-death signal takes the whole sandbox down with the helper.
        self.signal_helper(Signal::SIGKILL);
    }

    fn handle(&self) -> Option<AppHandle> {
        let resources = self.resources.as_ref()?;
        Some(AppHandle {
            helper_pid: self.helper_pid,
            start_time: adopt::start_time(self.helper_pid)?,
            cgroup: resources.cgroup_name.clone(),
            link_index: resources.link.index,
            exit_file: self.exit_file.clone()?,
            pinned_link: resources.pinned,
            serve_port: resources.serve_port,
        })
    }

    fn detach(&mut self) -> bool {
        if self.exit_file.is_none() || self.exited.is_some() {
            return false;
        }
        // The helper ignores the lifeline's hang-up for apps; its link, cgroup and exit file
        // stay for the next daemon. A helper that is our child is reaped by whoever adopts
        // orphans once it exits.
        self.resources = None;
        self.lifeline = None;
        self.child = None;
        true
    }
}

impl Drop for NamespaceProcess {
    fn drop(&mut self) {
        let Some(resources) = self.resources.take() else {
            return;
        };
        self.signal_helper(Signal::SIGKILL);
        self.lifeline = None;
        let mut child = self.child.take();
        let adopted = child.is_none() && self.exited.is_none();
        let pidfd = self.pidfd.get_ref().try_clone().ok();
        let exit_file = self.exit_file.take();
        let shared = Arc::clone(&self.shared);
        let finish = async move {
            if let Some(child) = child.as_mut() {
                let _ = child.wait().await;
            } else if let (true, Some(pidfd)) = (adopted, pidfd) {
                if let Ok(fd) = crate::sys::fd::async_fd(pidfd) {
                    let _ = fd.readable().await;
                }
            }
            if let Some(path) = exit_file {
                remove_run_files(&path);
            }
            release(shared, resources).await;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(finish);
            }
            Err(_) => {
                // Outside a runtime: a short-lived one finishes the cleanup on its own thread.
                std::thread::spawn(move || {
                    if let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        runtime.block_on(finish);
                    }
                });
            }
        }
    }
}
