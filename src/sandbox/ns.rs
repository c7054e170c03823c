//! `sandbox.mode = "namespaces"`: the daemon side of the namespaced runner.
//!
//! [`NamespaceRunner::start`] checks the machine (root, namespaces, cgroups, `ip`, `nft`),
//! sweeps what a crashed daemon left (step cgroups, veths, the nftables table) and installs
//! the host table, which it puts back if the host's ruleset lost it (checked before every
//! spawn and every [`firewall::HOST_TABLE_CHECK`]); [`NamespaceRunner::shutdown`] removes it
//! all. Each [`Runner::spawn`] takes a /30 link and a step cgroup, then execs
//! `slipway sandbox-exec` with the spec on its stdin pipe (see [`super::exec`]), which carries
//! what the sandbox's own firewall needs; the step's stdout/stderr are the helper's. When the helper exits the
//! cgroup's counters say whether memory or pids ran out, and the link and cgroup are freed.
//! Called by the daemon's wiring (`app`), which hands the runner to the pipeline and supervisor.

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::cgroup::{
    CgroupError, CgroupLayout, CgroupLimits, Cgroups, HostCgroupFs, StepCgroup, CPU_PERIOD_US,
};
use super::firewall::{self, FirewallSpec};
use super::machine::check_machine;
pub use super::machine::{MissingTool, SandboxError};
use super::net::{self, AddressPool, Link};
use super::spec::{self, FilesystemView, HelperSpec, NetworkSpec};
use super::{Exit, Runner, Running, RunningProcess, StepKind, StepSpec};
use crate::config::SandboxConfig;

/// Runs every step in its own namespaces, cgroup and network.
pub struct NamespaceRunner {
    shared: Arc<Shared>,
}

struct Shared {
    daemon_exe: PathBuf,
    table: String,
    /// The host table's full script, to put it back when it went missing.
    host_rules: String,
    subnet: (Ipv4Addr, u8),
    allow_smtp: bool,
    interface_prefix: String,
    addresses: AddressPool,
    cgroups: Cgroups,
    nameservers: Vec<Ipv4Addr>,
    next_step: AtomicU64,
    stopped: AtomicBool,
}

impl NamespaceRunner {
    /// The daemon's runner, named after `sandbox.instance` (default `slipway`: nftables table
    /// `inet slipway`, cgroups under `<daemon cgroup>/slipway`).
    pub fn start(
        config: &SandboxConfig,
        daemon_exe: PathBuf,
    ) -> Result<NamespaceRunner, SandboxError> {
        NamespaceRunner::start_instance(&config.instance, config, daemon_exe)
    }

    /// A runner whose table, interfaces and cgroups are named after `instance`, so that
    /// several can coexist (tests).
    pub fn start_instance(
        instance: &str,
        config: &SandboxConfig,
        daemon_exe: PathBuf,
    ) -> Result<NamespaceRunner, SandboxError> {
        if !crate::config::valid_instance(instance) {
            return Err(SandboxError::InvalidInstance(instance.to_owned()));
        }
        check_machine(&daemon_exe)?;
        super::subid::check_host(config.uid_base, crate::config::PROJECT_UID_RANGE)
            .map_err(SandboxError::UidOverlap)?;
        let proc_self_cgroup =
            std::fs::read_to_string("/proc/self/cgroup").map_err(|source| CgroupError::Io {
                path: "/proc/self/cgroup".into(),
                source,
            })?;
        let layout = CgroupLayout::detect(
            &HostCgroupFs,
            Path::new("/sys/fs/cgroup"),
            &proc_self_cgroup,
        )?;
        let cgroups = Cgroups::prepare(Box::new(HostCgroupFs), layout, instance)?;

        let interface_prefix = net::interface_prefix(instance);
        let nameservers = net::host_nameservers();
        net::sweep_interfaces(&interface_prefix).map_err(SandboxError::Network)?;
        if net::enable_forwarding().map_err(SandboxError::Network)? {
            tracing::info!("turned IPv4 forwarding on (net.ipv4.ip_forward) for sandbox egress");
        }
        let host_rules =
            firewall::host_ruleset(instance, &interface_prefix, config.subnet, &nameservers);
        firewall::nft_apply(&host_rules, None).map_err(SandboxError::Network)?;
        let shared = Arc::new(Shared {
            daemon_exe,
            table: instance.to_owned(),
            host_rules,
            subnet: config.subnet,
            allow_smtp: config.allow_smtp,
            interface_prefix,
            addresses: AddressPool::new(config.subnet.0, config.subnet.1),
            cgroups,
            nameservers,
            next_step: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        });
        watch_host_table(Arc::downgrade(&shared));
        Ok(NamespaceRunner { shared })
    }

    /// Removes the nftables table, leftover interfaces and the instance's cgroups (killing
    /// whatever still runs in them). Call it after the supervisor has stopped the apps.
    pub fn shutdown(&self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        if let Err(error) = firewall::nft_delete_table(&self.shared.table) {
            tracing::warn!(%error, "could not remove the sandbox nftables table");
        }
        let _ = net::sweep_interfaces(&self.shared.interface_prefix);
        self.shared.cgroups.remove_instance();
    }

    /// Memory and CPU of the steps named `name` (their cgroups are `<name>-<n>`).
    pub fn usage(&self, name: &str) -> Option<super::CgroupUsage> {
        self.shared
            .cgroups
            .usage(&format!("{}-", cgroup_safe(name)))
    }

    /// 1 or 2.
    pub fn cgroup_version(&self) -> u8 {
        self.shared.cgroups.layout().version()
    }

    /// The `inet` nftables table this runner owns.
    pub fn nft_table(&self) -> &str {
        &self.shared.table
    }

    /// Every host-side veth of this runner starts with this.
    pub fn interface_prefix(&self) -> &str {
        &self.shared.interface_prefix
    }
}

impl Shared {
    /// Puts the host table back if the host's ruleset lost it (`nft flush ruleset`, a reload
    /// of the host's firewall). Only egress (NAT) depends on it: each sandbox's own table
    /// keeps isolating it meanwhile.
    fn restore_host_table(&self) {
        if self.stopped.load(Ordering::SeqCst) || firewall::nft_table_exists(&self.table) {
            return;
        }
        match firewall::nft_apply(&self.host_rules, None) {
            Ok(()) => tracing::warn!(
                table = %self.table,
                "the sandbox nftables table was gone from the host (flushed?); put it back"
            ),
            Err(error) => tracing::warn!(%error, "could not put the sandbox nftables table back"),
        }
    }
}

/// Checks the host table every [`firewall::HOST_TABLE_CHECK`] until the runner is shut down
/// or dropped, so that live apps get their egress back after a flush without a new spawn.
fn watch_host_table(shared: std::sync::Weak<Shared>) {
    let spawned = std::thread::Builder::new()
        .name("sandbox-nft".into())
        .spawn(move || loop {
            std::thread::sleep(firewall::HOST_TABLE_CHECK);
            match shared.upgrade() {
                Some(shared) if !shared.stopped.load(Ordering::SeqCst) => {
                    shared.restore_host_table()
                }
                _ => return,
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "could not start the sandbox nftables watch");
    }
}

impl Runner for NamespaceRunner {
    fn spawn(&self, spec: StepSpec) -> io::Result<Running> {
        let shared = &self.shared;
        if shared.stopped.load(Ordering::SeqCst) {
            return Err(io::Error::other("the sandbox runner is shut down"));
        }
        shared.restore_host_table();
        let link = shared
            .addresses
            .allocate()
            .ok_or_else(|| io::Error::other("no free sandbox address left in sandbox.subnet"))?;
        let step_name = format!(
            "{}-{}",
            cgroup_safe(&spec.name),
            shared.next_step.fetch_add(1, Ordering::Relaxed)
        );
        let limits = CgroupLimits {
            memory_bytes: spec.memory_mb.saturating_mul(1 << 20),
            pids: spec.pids,
            cpu_quota_us: (spec.cpus > 0.0)
                .then(|| (spec.cpus * CPU_PERIOD_US as f64).round().max(1000.0) as u64),
        };
        let cgroup = match shared.cgroups.create(&step_name, &limits) {
            Ok(cgroup) => cgroup,
            Err(error) => {
                shared.addresses.release(&link);
                return Err(io::Error::other(error.to_string()));
            }
        };
        let resources = StepResources { link, cgroup };
        match launch(shared, &spec, &resources) {
            Ok((child, lifeline)) => {
                let mut child = child;
                Ok(Running {
                    stdout: child.stdout.take(),
                    stderr: child.stderr.take(),
                    address: IpAddr::V4(link.sandbox),
                    inner: Box::new(NamespaceProcess {
                        helper: child.id().map(|id| Pid::from_raw(id as i32)),
                        child: Some(child),
                        lifeline: Some(lifeline),
                        resources: Some(resources),
                        shared: Arc::clone(shared),
                        exited: None,
                    }),
                })
            }
            Err(error) => {
                let _ = shared.cgroups.remove(&resources.cgroup);
                shared.addresses.release(&resources.link);
                Err(error)
            }
        }
    }
}

struct StepResources {
    link: Link,
    cgroup: StepCgroup,
}

/// Writes the spec into a pipe and execs the helper with that pipe as its stdin. The write
/// end is kept: closing it (drop, or the daemon's death) makes the helper kill the sandbox.
fn launch(
    shared: &Shared,
    spec: &StepSpec,
    resources: &StepResources,
) -> io::Result<(tokio::process::Child, OwnedFd)> {
    let view = match &spec.kind {
        StepKind::Build { workspace } => FilesystemView::Build {
            workspace: workspace.clone(),
        },
        StepKind::App { output, data_dir } => {
            std::fs::create_dir_all(data_dir)?;
            // lchown: a symlink is not followed here, and is refused when the tree is cloned.
            std::os::unix::fs::lchown(data_dir, Some(spec.project_uid), Some(spec.project_uid))?;
            FilesystemView::App {
                output: output.clone(),
                data_dir: data_dir.clone(),
            }
        }
    };
    let helper_spec = HelperSpec {
        command: spec.command.clone(),
        env: spec.env.clone(),
        host_id: spec.project_uid,
        view,
        cgroup_procs: resources.cgroup.procs_files.clone(),
        network: NetworkSpec {
            host_interface: net::interface_name(&shared.interface_prefix, &resources.link),
            host_address: resources.link.host,
            sandbox_address: resources.link.sandbox,
            firewall: FirewallSpec {
                // Read at every spawn: the host's addresses can change while the daemon runs.
                host_addresses: net::host_addresses(shared.subnet)?,
                subnet: shared.subnet,
                allow_smtp: shared.allow_smtp,
            },
        },
        hostname: "sandbox".into(),
        nameservers: shared.nameservers.clone(),
    };
    let framed = spec::encode(&helper_spec)?;
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    if framed.len() > 60 * 1024 {
        // SAFETY: F_SETPIPE_SZ on a pipe we own.
        if unsafe {
            libc::fcntl(
                write_end.as_raw_fd(),
                libc::F_SETPIPE_SZ,
                framed.len() as libc::c_int,
            )
        } < 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    std::fs::File::from(write_end.try_clone()?).write_all(&framed)?;
    let child = tokio::process::Command::new(&shared.daemon_exe)
        .arg("sandbox-exec")
        .env_clear()
        .stdin(Stdio::from(read_end))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    Ok((child, write_end))
}

fn cgroup_safe(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "step".into()
    } else {
        cleaned
    }
}

struct NamespaceProcess {
    child: Option<tokio::process::Child>,
    helper: Option<Pid>,
    lifeline: Option<OwnedFd>,
    resources: Option<StepResources>,
    shared: Arc<Shared>,
    exited: Option<Exit>,
}

impl NamespaceProcess {
    fn signal_helper(&self, signal: Signal) {
        if let (Some(pid), None) = (self.helper, &self.exited) {
            let _ = kill(pid, signal);
        }
    }

    async fn wait_main(&mut self) -> io::Result<Exit> {
        if let Some(exit) = &self.exited {
            return Ok(exit.clone());
        }
        let child = self
            .child
            .as_mut()
            .ok_or_else(|| io::Error::other("the step was already reaped"))?;
        let status = child.wait().await?;
        let events = self
            .resources
            .as_ref()
            .map(|resources| self.shared.cgroups.events(&resources.cgroup));
        // A step that hit a limit failed even if its main process exited 0: a classic fork
        // bomb's shell returns at once while the bomb fills the pids limit, and a process the
        // OOM killer ended was part of the step's work.
        let exit = match (status.code(), status.signal()) {
            _ if events.is_some_and(|events| events.oom_kills > 0) => Exit::OutOfMemory,
            _ if events.is_some_and(|events| events.pids_limit_hits > 0) => Exit::PidsExhausted,
            (Some(code), _) => Exit::Code(code),
            (None, Some(signal)) => Exit::Signal(signal),
            (None, None) => Exit::Code(-1),
        };
        self.exited = Some(exit.clone());
        self.lifeline = None;
        if let Some(resources) = &self.resources {
            // A task of its own, so that a caller's timeout cannot cancel the cleanup halfway.
            // The address stays taken until this process is dropped: a route may still point
            // at it (the supervisor lets go of the route first).
            let cgroup = resources.cgroup.clone();
            let _ = tokio::spawn(remove_cgroup(Arc::clone(&self.shared), cgroup)).await;
        }
        Ok(exit)
    }
}

/// Removes a finished step's cgroup (already gone counts as removed), retrying while the
/// kernel finishes the last exits.
async fn remove_cgroup(shared: Arc<Shared>, cgroup: StepCgroup) {
    for _ in 0..200 {
        if shared.cgroups.remove(&cgroup).is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Frees a step's cgroup (if still there) and its address.
async fn release(shared: Arc<Shared>, resources: StepResources) {
    remove_cgroup(Arc::clone(&shared), resources.cgroup).await;
    shared.addresses.release(&resources.link);
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
}

impl Drop for NamespaceProcess {
    fn drop(&mut self) {
        let Some(resources) = self.resources.take() else {
            return;
        };
        self.signal_helper(Signal::SIGKILL);
        self.lifeline = None;
        let mut child = self.child.take();
        let shared = Arc::clone(&self.shared);
        let finish = async move {
            if let Some(child) = child.as_mut() {
                let _ = child.wait().await;
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

/// Gives a directory tree to a project's uid (files unpacked by the daemon as root must be
/// writable by the build). Symlinks are changed themselves, never followed. Call it only while
/// no step of the project runs: a running build could swap directories for symlinks.
pub fn hand_over(path: &Path, project_uid: u32) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(project_uid), Some(project_uid))?;
    if std::fs::symlink_metadata(path)?.is_dir() {
        for entry in std::fs::read_dir(path)? {
            hand_over(&entry?.path(), project_uid)?;
        }
    }
    Ok(())
}
