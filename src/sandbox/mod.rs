//! Running untrusted commands: install, build and start steps all go through a [`Runner`].
//!
//! The pipeline and the supervisor describe *what* to run with a [`StepSpec`]; the runner
//! decides *how*. `direct` runs the command as a plain child process in its own process group
//! (`sandbox.mode = "none"`); the namespaced runner (issue 4) execs the single-threaded
//! `slipway sandbox-exec` helper, which builds the namespaces, cgroups and network.
//! [`Sandbox::start`] picks one from `sandbox.mode`.
//!
//! Sandboxes are isolated from each other, except where a step's [`StepSpec::reach`] names
//! a TCP endpoint another step serves ([`StepSpec::serve_port`]); an add-on keeps a stable
//! address across restarts through a pinned link ([`StepSpec::link`],
//! [`Runner::allocate_link`]). Mode none isolates nothing, so these are no-ops there.
//!
//! A step can run under a pseudo-terminal ([`StepSpec::tty`], [`Running::tty`]; `tty`), in
//! both runners.
//!
//! Codemap of the namespaced runner: `ns` (daemon side: start/shutdown, spawn, exit
//! classification) → `launch` (one helper's start) → `spec` (what crosses the pipe) → `exec` (the helper process) → `init`
//! (PID 1 inside: credentials, capabilities, seccomp, signal forwarding) → `mounts` (the root
//! filesystem; `detached` clones the host trees) ; `cgroup`, `net`, `firewall` and `seccomp`
//! are used by both sides.
//! Architecture invariant: only `exec` and `init` create namespaces or change credentials,
//! and they run in the single-threaded helper, never in the daemon. The system calls without
//! a safe `nix` API (`clone`, `fork`, mounts, pidfds, capabilities) are `crate::sys`'s; this
//! module writes no `unsafe`.

mod adopt;
mod cgroup;
mod detached;
pub mod direct;
mod docker_user;
mod exec;
mod firewall;
mod init;
mod launch;
mod machine;
mod mounts;
mod net;
pub mod ns;
pub(crate) mod seccomp;
mod served;
mod shared;
mod spec;
mod step;
mod subid;
mod tty;

pub use adopt::{stop_outliving, AppHandle};
pub use cgroup::{CgroupError, CgroupUsage};

/// The cgroups this process can give its sandboxes, in words, or why it cannot: the reading
/// the runner makes at start (`proc_self_cgroup` is `/proc/self/cgroup`'s text, `root`
/// normally `/sys/fs/cgroup`), for `slipway doctor`.
pub fn cgroup_support(
    proc_self_cgroup: &str,
    root: &std::path::Path,
) -> Result<String, CgroupError> {
    cgroup::CgroupLayout::detect(&cgroup::HostCgroupFs, root, proc_self_cgroup)
        .map(|layout| layout.describe())
}
pub use exec::sandbox_exec_main;
pub use firewall::MAX_CONNECTIONS as MAX_SANDBOX_CONNECTIONS;
pub use mounts::{visible_to_sandboxes, ETC_ALLOWED};
pub use ns::{hand_over, NamespaceRunner, SandboxError};
pub use tty::{Terminal, TtySize};

use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;

use crate::config::{SandboxConfig, SandboxMode};
use std::time::Duration;

/// The read end of a step's stdout or stderr.
pub type LogPipe = tokio::net::unix::pipe::Receiver;

/// What a step is: which filesystem view it gets.
#[derive(Debug, Clone)]
pub enum StepKind {
    /// install/build: the workspace read-write at `/app` (cwd), and the project's build
    /// cache read-write at `/cache` when there is one.
    Build {
        workspace: PathBuf,
        cache: Option<PathBuf>,
    },
    /// start: the build output read-only at `/app` (cwd) plus a writable data dir at `/data`.
    /// An app outlives the daemon that started it (namespaces mode).
    App { output: PathBuf, data_dir: PathBuf },
    /// The app's view for a command that ends with the daemon: one-off and cron runs, the
    /// release command, health commands. May have a terminal.
    OneOff { output: PathBuf, data_dir: PathBuf },
}

/// Everything needed to run one command in one sandbox.
#[derive(Debug, Clone)]
pub struct StepSpec {
    /// A name unique among running sandboxes, e.g. `slipway-dpl_xxx-build`.
    pub name: String,
    pub kind: StepKind,
    /// The shell command; run as `sh -c <command>`.
    pub command: String,
    /// The complete environment (the runner adds nothing but PATH/HOME defaults if absent).
    pub env: Vec<(String, String)>,
    /// Host uid/gid the project's code runs as (namespaces mode).
    pub project_uid: u32,
    pub memory_mb: u64,
    pub pids: u64,
    /// CPU quota in whole-core units (e.g. 1.0 = one core).
    pub cpus: f64,
    /// Grace period between SIGTERM and SIGKILL on stop.
    pub stop_grace: Duration,
    /// The directories of the view that are disk-limited volumes: the step is refused
    /// rather than run on any other filesystem there.
    pub limited_dirs: Vec<LimitedDir>,
    /// Run the command under a terminal of this size (interactive one-off runs): its stdin,
    /// stdout, stderr and controlling terminal; [`Running::tty`] is the daemon's end. Never
    /// for an app (`StepKind::App` with a terminal is refused).
    pub tty: Option<TtySize>,
    /// TCP destinations inside `sandbox.subnet` (other sandboxes' addresses, e.g. a linked
    /// add-on's) this step may connect to; each must also be served (`serve_port`) by the
    /// sandbox there. Namespaces mode only: in mode none there is no isolation to open.
    pub reach: Vec<SocketAddrV4>,
    /// A TCP port of this step that other sandboxes may connect to, each only if its own
    /// `reach` names this step's address and port. Namespaces mode only.
    pub serve_port: Option<u16>,
    /// A link (a stable address) the step must use instead of a freshly allocated one: an
    /// index from [`Runner::allocate_link`] or [`Runner::claim_link`]. The link stays taken
    /// when the step ends (and when an outliving step is adopted) until
    /// [`Runner::release_link`]. Ignored in mode none.
    pub link: Option<u32>,
}

/// A directory a step sees that is a disk-limited volume (`disk.rs`), and the device
/// (`st_dev`) of the loop-mounted image that must be what the step gets there. The runner
/// checks the very tree it hands the step (the namespaced helper: the descriptor it clones),
/// so a mount the daemon sees but the step would not can never turn into a build writing
/// past its limit onto the data dir's disk.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LimitedDir {
    pub path: PathBuf,
    pub device: u64,
}

impl LimitedDir {
    /// Ok when `found` (the `st_dev` of what the step would get) is the limited filesystem.
    pub(crate) fn check(&self, found: u64) -> std::io::Result<()> {
        if found == self.device {
            return Ok(());
        }
        let show = |dev: u64| {
            let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
            format!("{major}:{minor}")
        };
        Err(std::io::Error::other(format!(
            "{} is not on its disk-limited filesystem (device {} expected, {} found); the \
             step is not run without its disk limit",
            self.path.display(),
            show(self.device),
            show(found)
        )))
    }
}

/// A running step. Dropping it kills the whole tree.
pub struct Running {
    /// The step's output; `None` when it runs under a terminal (its output is `tty`'s).
    pub stdout: Option<LogPipe>,
    pub stderr: Option<LogPipe>,
    /// The step's terminal when [`StepSpec::tty`] asked for one.
    pub tty: Option<Terminal>,
    /// Where the process can be reached (apps listen on `addr:PORT`).
    pub address: IpAddr,
    /// When `address` can be reached; taken by whoever probes it.
    pub reachable: Reachable,
    pub(crate) inner: Box<dyn RunningProcess>,
}

/// Tells when a step's address can be reached from the host. In namespaces mode `spawn`
/// returns as soon as the helper runs, while the helper still has to create the sandbox's
/// link, route and firewall: a connection opened before then leaves by the host's default
/// route (and keeps that source address, which the sandbox's table refuses), or waits for a
/// neighbour resolution the link cannot carry yet (retried after 1 s). The helper writes one
/// byte into a pipe once the link is up, its host end started by the kernel and the firewall
/// in place (`exec.rs`); a step of mode none, or an adopted app, is reachable at once (as is
/// the `Default`, which lets a prober take it out of a [`Running`]).
#[derive(Debug, Default)]
pub struct Reachable {
    /// The read end of the helper's pipe; `None` once known to be reachable.
    pipe: Option<LogPipe>,
}

impl Reachable {
    /// An address that is reachable already.
    pub fn now() -> Reachable {
        Reachable { pipe: None }
    }

    pub(crate) fn from_helper(pipe: LogPipe) -> Reachable {
        Reachable { pipe: Some(pipe) }
    }

    /// Returns once the address can be reached; an error when the helper exited before (the
    /// step's own exit says why).
    pub async fn wait(self) -> std::io::Result<()> {
        let Some(mut pipe) = self.pipe else {
            return Ok(());
        };
        let mut byte = [0u8; 1];
        match tokio::io::AsyncReadExt::read(&mut pipe, &mut byte).await? {
            1 => Ok(()),
            _ => Err(std::io::Error::other(
                "the sandbox helper exited before the step's network was up",
            )),
        }
    }
}

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    /// The memory limit was hit (the OOM killer ended a process of the step), whatever the
    /// main process's exit code.
    OutOfMemory,
    /// The pids limit was hit (a fork failed in the step), whatever the main process's exit
    /// code.
    PidsExhausted,
}

impl Exit {
    pub fn success(&self) -> bool {
        *self == Exit::Code(0)
    }

    pub fn describe(&self) -> String {
        match self {
            Exit::Code(code) => format!("exited with code {code}"),
            Exit::Signal(signal) => format!("was killed by signal {signal}"),
            Exit::OutOfMemory => "ran out of memory (the memory limit was reached)".into(),
            Exit::PidsExhausted => "hit the process limit (too many processes)".into(),
        }
    }
}

pub trait RunningProcess: Send {
    /// Waits for the step's main process to exit; then every other process of the step is
    /// killed too.
    fn wait(&mut self) -> futures_util::future::BoxFuture<'_, std::io::Result<Exit>>;
    /// SIGTERM, `grace`, then SIGKILL of the whole tree; returns once everything is gone.
    fn stop(
        &mut self,
        grace: Duration,
    ) -> futures_util::future::BoxFuture<'_, std::io::Result<Exit>>;
    /// SIGKILL of the whole tree, without waiting.
    fn kill(&mut self);
    /// What the next daemon needs to adopt this step (apps in namespaces mode only).
    fn handle(&self) -> Option<AppHandle> {
        None
    }
    /// Lets go of the step without stopping it, for the next daemon to adopt; false (and
    /// nothing changes) when this step cannot outlive the daemon.
    fn detach(&mut self) -> bool {
        false
    }
}

impl Running {
    pub async fn wait(&mut self) -> std::io::Result<Exit> {
        self.inner.wait().await
    }
    pub async fn stop(&mut self, grace: Duration) -> std::io::Result<Exit> {
        self.inner.stop(grace).await
    }
    pub fn kill(&mut self) {
        self.inner.kill()
    }
    pub fn handle(&self) -> Option<AppHandle> {
        self.inner.handle()
    }
    /// Lets the step run on after this daemon (see [`RunningProcess::detach`]). When it cannot,
    /// dropping `self` kills it as usual.
    pub fn detach(mut self) -> bool {
        self.inner.detach()
    }
}

/// Starts steps. One per daemon, chosen from `sandbox.mode`.
pub trait Runner: Send + Sync {
    fn spawn(&self, spec: StepSpec) -> std::io::Result<Running>;
    /// Takes over an app an earlier daemon left running (its logs continue on the pipes).
    fn adopt(&self, handle: &AppHandle) -> std::io::Result<Running> {
        let _ = handle;
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "apps outlive the daemon only in sandbox mode namespaces",
        ))
    }

    /// Memory and CPU of the running steps named `name` (`StepSpec::name`; an app restarted
    /// several times is summed), from their cgroups. `None` where there is no cgroup (mode
    /// `none`, or no such step).
    fn usage(&self, _name: &str) -> Option<CgroupUsage> {
        None
    }

    /// A free link, marked taken, and the address a step started with `link: Some(index)`
    /// will have: a stable address for a new add-on. `None` when `sandbox.subnet` is full.
    /// Mode none: always `(0, 127.0.0.1)` (every step shares the host's network there).
    fn allocate_link(&self) -> Option<(u32, Ipv4Addr)>;

    /// Marks the link `index` taken (at daemon start, for each add-on on record, so that no
    /// other step gets its address) and returns its sandbox address. Mode none: 127.0.0.1.
    fn claim_link(&self, index: u32) -> Ipv4Addr;

    /// Gives the link `index` back (the add-on was deleted). Call it once no step runs on the
    /// link any more. Mode none: nothing.
    fn release_link(&self, index: u32);
}

const UNSANDBOXED: &str = "builds and apps run WITHOUT ANY ISOLATION, as plain children of the \
     daemon with its privileges; only use this to try Slipway out, or on a machine where every \
     project is trusted";

/// The daemon's runner, as `sandbox.mode` chose it.
pub enum Sandbox {
    Namespaces(NamespaceRunner),
    /// `sandbox.mode = "none"`: no isolation at all (machines without root).
    Direct(direct::DirectRunner),
}

impl Sandbox {
    /// Starts the configured runner. `daemon_exe` is the binary that answers
    /// `slipway sandbox-exec` (`/proc/self/exe` in production).
    /// `auto` falls back to no isolation when the machine cannot give namespaces (not root, a
    /// missing kernel feature, `nft` or `ip` missing, no cgroups): the warning names what is
    /// missing and how to get it. A bad `sandbox.instance` is a config error in every mode.
    /// `run_dir` and `survivors`: see [`NamespaceRunner::start`].
    pub fn start(
        config: &SandboxConfig,
        daemon_exe: PathBuf,
        run_dir: PathBuf,
        survivors: &[AppHandle],
    ) -> Result<Sandbox, SandboxError> {
        let namespaces = move || NamespaceRunner::start(config, daemon_exe, run_dir, survivors);
        match config.mode {
            SandboxMode::Namespaces => namespaces().map(Sandbox::Namespaces),
            SandboxMode::None => {
                tracing::warn!("sandbox.mode = \"none\": {UNSANDBOXED}");
                Ok(Sandbox::Direct(direct::DirectRunner))
            }
            SandboxMode::Auto => match namespaces() {
                Ok(runner) => Ok(Sandbox::Namespaces(runner)),
                // Configuration mistakes are not the machine's: never fall back on them.
                Err(error @ (SandboxError::InvalidInstance(_) | SandboxError::UidOverlap(_))) => {
                    Err(error)
                }
                Err(error) => {
                    tracing::warn!(
                        "sandbox.mode = \"auto\": the namespaces sandbox cannot start on this \
                         machine ({error}), so it falls back to sandbox mode \"none\": {UNSANDBOXED}"
                    );
                    Ok(Sandbox::Direct(direct::DirectRunner))
                }
            },
        }
    }

    /// The mode in force: `Namespaces` or `None`, never `Auto`.
    pub fn mode(&self) -> SandboxMode {
        match self {
            Sandbox::Namespaces(_) => SandboxMode::Namespaces,
            Sandbox::Direct(_) => SandboxMode::None,
        }
    }

    /// Removes what the runner installed on the host (nftables table, interfaces, cgroups).
    pub fn shutdown(&self) {
        if let Sandbox::Namespaces(runner) = self {
            runner.shutdown();
        }
    }

    /// Stops spawning and leaves the host as it is, for apps that outlive this daemon.
    pub fn leave(&self) {
        if let Sandbox::Namespaces(runner) = self {
            runner.leave();
        }
    }
}

impl Runner for Sandbox {
    fn spawn(&self, spec: StepSpec) -> std::io::Result<Running> {
        match self {
            Sandbox::Namespaces(runner) => runner.spawn(spec),
            Sandbox::Direct(runner) => runner.spawn(spec),
        }
    }

    fn adopt(&self, handle: &AppHandle) -> std::io::Result<Running> {
        match self {
            Sandbox::Namespaces(runner) => runner.adopt(handle),
            Sandbox::Direct(runner) => runner.adopt(handle),
        }
    }

    fn usage(&self, name: &str) -> Option<CgroupUsage> {
        match self {
            Sandbox::Namespaces(runner) => runner.usage(name),
            Sandbox::Direct(_) => None,
        }
    }

    fn allocate_link(&self) -> Option<(u32, Ipv4Addr)> {
        match self {
            Sandbox::Namespaces(runner) => runner.allocate_link(),
            Sandbox::Direct(runner) => runner.allocate_link(),
        }
    }

    fn claim_link(&self, index: u32) -> Ipv4Addr {
        match self {
            Sandbox::Namespaces(runner) => runner.claim_link(index),
            Sandbox::Direct(runner) => runner.claim_link(index),
        }
    }

    fn release_link(&self, index: u32) {
        match self {
            Sandbox::Namespaces(runner) => runner.release_link(index),
            Sandbox::Direct(runner) => runner.release_link(index),
        }
    }
}
