//! `sandbox.mode = "namespaces"`: the daemon side of the namespaced runner.
//!
//! [`NamespaceRunner::start`] checks the machine (root, namespaces, cgroups, `ip`, `nft`),
//! sweeps what a crashed daemon left (step cgroups, veths, the nftables table) and installs
//! the host table, which it puts back if the host's ruleset lost it (checked before every
//! spawn and every [`firewall::HOST_TABLE_CHECK`]), and, next to dockerd, its rules in
//! `DOCKER-USER` ([`super::docker_user`]); [`NamespaceRunner::shutdown`] removes it
//! all. Each [`Runner::spawn`] takes a /30 link and a step cgroup, then execs
//! `slipway sandbox-exec` with the spec on its stdin pipe (see [`super::exec`] and
//! `launch`), which carries what the sandbox's own firewall needs; the step's
//! stdout/stderr are the helper's (or the step's terminal, see `tty`). When the
//! helper exits the cgroup's counters say whether memory or pids ran out, and the link and
//! cgroup are freed.
//! A step with a pinned link (`StepSpec::link`) keeps it after it ends, and an adopted one
//! too (`AppHandle::pinned_link`): only [`Runner::release_link`] frees it. A step that
//! serves a port (`StepSpec::serve_port`) is in the host table's served set while it runs;
//! the set starts empty but for the survivors' endpoints at every start (leftovers swept)
//! and is refilled when the table is put back.
//! Called by the daemon's wiring (`app`), which hands the runner to the pipeline and supervisor.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::adopt::{self, AppHandle};

use super::cgroup::{
    CgroupError, CgroupLayout, CgroupLimits, Cgroups, HostCgroupFs, CPU_PERIOD_US,
};
use super::docker_user;
use super::firewall;
use super::launch::{launch, Launched};
use super::machine::check_machine;
pub use super::machine::{MissingTool, SandboxError};
use super::net::{self, AddressPool, Link};
use super::served::Served;
use super::shared::Shared;
use super::step::{NamespaceProcess, StepResources};
use super::{LogPipe, Reachable, Runner, Running, StepSpec};
use crate::config::SandboxConfig;

/// Runs every step in its own namespaces, cgroup and network.
pub struct NamespaceRunner {
    shared: Arc<Shared>,
}

impl NamespaceRunner {
    /// The daemon's runner, named after `sandbox.instance` (default `slipway`: nftables table
    /// `inet slipway`, cgroups under `<daemon cgroup>/slipway`).
    /// `survivors`: apps an earlier daemon left running, whose cgroups, links and interfaces
    /// the start-up sweep keeps for [`Runner::adopt`]; `run_dir` holds apps' exit files.
    pub fn start(
        config: &SandboxConfig,
        daemon_exe: PathBuf,
        run_dir: PathBuf,
        survivors: &[AppHandle],
    ) -> Result<NamespaceRunner, SandboxError> {
        NamespaceRunner::start_instance(&config.instance, config, daemon_exe, run_dir, survivors)
    }

    /// A runner whose table, interfaces and cgroups are named after `instance`, so that
    /// several can coexist (tests).
    pub fn start_instance(
        instance: &str,
        config: &SandboxConfig,
        daemon_exe: PathBuf,
        run_dir: PathBuf,
        survivors: &[AppHandle],
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
        let survivors: Vec<&AppHandle> = survivors.iter().filter(|h| h.is_alive()).collect();
        let kept_cgroups: HashSet<String> = survivors.iter().map(|h| h.cgroup.clone()).collect();
        let cgroups = Cgroups::prepare(Box::new(HostCgroupFs), layout, instance, &kept_cgroups)?;

        let interface_prefix = net::interface_prefix(instance);
        let nameservers = net::host_nameservers();
        let addresses = AddressPool::new(config.subnet.0, config.subnet.1);
        let mut kept_interfaces = HashSet::new();
        for survivor in &survivors {
            let link = addresses.claim(survivor.link_index);
            kept_interfaces.insert(net::interface_name(&interface_prefix, &link));
        }
        net::sweep_interfaces(&interface_prefix, &kept_interfaces)
            .map_err(SandboxError::Network)?;
        sweep_exit_files(&run_dir, &survivors);
        if net::enable_forwarding().map_err(SandboxError::Network)? {
            tracing::info!("turned IPv4 forwarding on (net.ipv4.ip_forward) for sandbox egress");
        }
        let host_rules =
            firewall::host_ruleset(instance, &interface_prefix, config.subnet, &nameservers);
        // A new table, so a new served set: only the survivors' endpoints are in it.
        let survivors_served: Vec<SocketAddrV4> = survivors
            .iter()
            .filter_map(|survivor| {
                let port = survivor.serve_port?;
                Some(SocketAddrV4::new(
                    addresses.link(survivor.link_index).sandbox,
                    port,
                ))
            })
            .collect();
        let survivors_served = firewall::served_elements(instance, true, &survivors_served);
        firewall::nft_apply(&format!("{host_rules}{survivors_served}"), None)
            .map_err(SandboxError::Network)?;
        let shared = Arc::new(Shared {
            daemon_exe,
            table: instance.to_owned(),
            host_rules,
            subnet: config.subnet,
            allow_smtp: config.allow_smtp,
            interface_prefix,
            addresses,
            served: Served::new(instance),
            cgroups,
            nameservers,
            // Step names stay unique across daemons: adopted apps keep theirs.
            next_step: AtomicU64::new(crate::ids::now_ms()),
            run_dir,
            stopped: AtomicBool::new(false),
            docker_user_failing: AtomicBool::new(false),
        });
        shared.ensure_docker_user();
        watch_host_table(Arc::downgrade(&shared));
        Ok(NamespaceRunner { shared })
    }

    /// Stops spawning and leaves everything in place for apps that outlive this daemon.
    pub fn leave(&self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
    }

    /// Removes the nftables table, leftover interfaces and the instance's cgroups (killing
    /// whatever still runs in them). Call it after the supervisor has stopped the apps.
    pub fn shutdown(&self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        if let Err(error) = firewall::nft_delete_table(&self.shared.table) {
            tracing::warn!(%error, "could not remove the sandbox nftables table");
        }
        if let Err(error) = docker_user::remove(&self.shared.interface_prefix) {
            tracing::warn!(%error, "could not remove the sandbox rules from DOCKER-USER");
        }
        let _ = net::sweep_interfaces(&self.shared.interface_prefix, &HashSet::new());
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
        let rules = format!("{}{}", self.host_rules, self.served.script());
        match firewall::nft_apply(&rules, None) {
            Ok(()) => tracing::warn!(
                table = %self.table,
                "the sandbox nftables table was gone from the host (flushed?); put it back"
            ),
            Err(error) => tracing::warn!(%error, "could not put the sandbox nftables table back"),
        }
    }
}

/// Checks the host table every [`firewall::HOST_TABLE_CHECK`] and dockerd's `DOCKER-USER`
/// every [`docker_user::CHECK`] until the runner is shut down or dropped, so that live apps
/// get their egress back after a flush, or a dockerd started later, without a new spawn.
fn watch_host_table(shared: std::sync::Weak<Shared>) {
    let spawned = std::thread::Builder::new()
        .name("sandbox-nft".into())
        .spawn(move || {
            let mut table_checked = std::time::Instant::now();
            loop {
                std::thread::sleep(docker_user::CHECK);
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                if shared.stopped.load(Ordering::SeqCst) {
                    return;
                }
                if table_checked.elapsed() >= firewall::HOST_TABLE_CHECK {
                    shared.restore_host_table();
                    table_checked = std::time::Instant::now();
                }
                shared.ensure_docker_user();
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
        shared.ensure_docker_user();
        check_reach(shared, &spec)?;
        let (link, pinned) = take_link(shared, &spec)?;
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
                if !pinned {
                    shared.addresses.release(&link);
                }
                return Err(io::Error::other(error.to_string()));
            }
        };
        let mut resources = StepResources {
            link,
            pinned,
            cgroup,
            cgroup_name: step_name,
            serve_port: spec.serve_port,
            serving: false,
        };
        // In the host's set before the helper brings the link up (nothing routes to the
        // address before), so a client may connect as soon as the step is reachable.
        if let Some(endpoint) = resources.endpoint() {
            if let Err(error) = shared.served.add(endpoint) {
                resources.abandon(shared);
                return Err(error);
            }
            resources.serving = true;
        }
        match launch(shared, &spec, &resources) {
            Ok(launched) => running(shared, launched, resources),
            Err(error) => {
                resources.abandon(shared);
                Err(error)
            }
        }
    }

    fn adopt(&self, handle: &AppHandle) -> io::Result<Running> {
        let shared = &self.shared;
        let pidfd = adopt::open_identified(handle)?;
        let stdout = adopt::open_fifo(&adopt::fifo_path(&handle.exit_file, "stdout"))?;
        let stderr = adopt::open_fifo(&adopt::fifo_path(&handle.exit_file, "stderr"))?;
        let (stdout, stderr) = (
            LogPipe::from_owned_fd(stdout)?,
            LogPipe::from_owned_fd(stderr)?,
        );
        let pidfd = crate::sys::fd::async_fd(pidfd)?;
        // Claimed at start already for the survivors this runner was given.
        let link = shared.addresses.claim(handle.link_index);
        let mut resources = StepResources {
            link,
            pinned: handle.pinned_link,
            cgroup: shared.cgroups.existing(&handle.cgroup),
            cgroup_name: handle.cgroup.clone(),
            serve_port: handle.serve_port,
            serving: false,
        };
        if let Some(endpoint) = resources.endpoint() {
            shared.served.add(endpoint)?;
            resources.serving = true;
        }
        Ok(Running {
            stdout: Some(stdout),
            stderr: Some(stderr),
            tty: None,
            address: IpAddr::V4(link.sandbox),
            // Its link came up long ago, under the daemon that started it.
            reachable: Reachable::now(),
            inner: Box::new(NamespaceProcess {
                child: None,
                pidfd,
                helper_pid: handle.helper_pid,
                lifeline: None,
                resources: Some(resources),
                exit_file: Some(handle.exit_file.clone()),
                shared: Arc::clone(shared),
                exited: None,
            }),
        })
    }

    fn allocate_link(&self) -> Option<(u32, Ipv4Addr)> {
        let link = self.shared.addresses.allocate()?;
        Some((link.index, link.sandbox))
    }

    fn claim_link(&self, index: u32) -> Ipv4Addr {
        if !self.shared.addresses.contains(index) {
            // `sandbox.subnet` shrank since the link was given: a step asking for it is refused.
            tracing::warn!(index, "a claimed sandbox link is outside sandbox.subnet");
        }
        self.shared.addresses.claim(index).sandbox
    }

    fn release_link(&self, index: u32) {
        let addresses = &self.shared.addresses;
        if addresses.contains(index) {
            addresses.release(&addresses.link(index));
        }
    }
}

/// The link a step gets: its pinned one (marked taken, in case it was not claimed), or a
/// fresh one; and whether it is pinned.
fn take_link(shared: &Shared, spec: &StepSpec) -> io::Result<(Link, bool)> {
    match spec.link {
        Some(index) if shared.addresses.contains(index) => {
            Ok((shared.addresses.claim(index), true))
        }
        Some(index) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("sandbox link {index} is outside sandbox.subnet"),
        )),
        None => shared
            .addresses
            .allocate()
            .map(|link| (link, false))
            .ok_or_else(|| io::Error::other("no free sandbox address left in sandbox.subnet")),
    }
}

/// A step may reach only other sandboxes' own addresses (never a link's host end, nor
/// anything outside the subnet, which the firewall's other rules decide), on a real port.
fn check_reach(shared: &Shared, spec: &StepSpec) -> io::Result<()> {
    for to in &spec.reach {
        if to.port() == 0 || shared.addresses.sandbox_index(*to.ip()).is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{to} is not a sandbox's address and port in sandbox.subnet"),
            ));
        }
    }
    if spec.serve_port == Some(0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "port 0 cannot be served",
        ));
    }
    Ok(())
}

/// The daemon's hold on a helper it just started.
fn running(
    shared: &Arc<Shared>,
    launched: Launched,
    resources: StepResources,
) -> io::Result<Running> {
    let Launched {
        child,
        reachable,
        lifeline,
        logs,
        tty,
        exit_file,
    } = launched;
    let address = IpAddr::V4(resources.link.sandbox);
    let helper_pid = child.id().map_or(-1, |id| id as i32);
    let pidfd = crate::sys::process::pidfd_open(helper_pid).and_then(crate::sys::fd::async_fd)?;
    let (stdout, stderr) = match logs {
        Some([stdout, stderr]) => (
            Some(LogPipe::from_owned_fd(stdout)?),
            Some(LogPipe::from_owned_fd(stderr)?),
        ),
        None => (None, None),
    };
    Ok(Running {
        stdout,
        stderr,
        tty,
        address,
        reachable: Reachable::from_helper(LogPipe::from_owned_fd(reachable)?),
        inner: Box::new(NamespaceProcess {
            child: Some(child),
            pidfd,
            helper_pid,
            lifeline: Some(lifeline),
            resources: Some(resources),
            exit_file,
            shared: Arc::clone(shared),
            exited: None,
        }),
    })
}

/// Removes exit files no surviving app will write or be read for.
fn sweep_exit_files(run_dir: &Path, survivors: &[&AppHandle]) {
    let Ok(entries) = std::fs::read_dir(run_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let of_survivor = survivors
            .iter()
            .any(|s| path.with_extension("exit") == s.exit_file);
        if !of_survivor {
            let _ = std::fs::remove_file(path);
        }
    }
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
