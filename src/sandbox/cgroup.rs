//! Resource limits: one cgroup per sandboxed step, under the daemon's own cgroup.
//!
//! Cgroup v2 is used when the daemon's cgroup offers the `memory` and `pids` controllers,
//! otherwise the v1 hierarchies (`memory`, `pids`, and `cpu`/`freezer` when mounted). Every
//! step cgroup lives in `<own cgroup>/<instance>/`, so a sweep at start-up finds what a crashed
//! daemon left behind without touching anyone else's. The filesystem is reached only through
//! [`CgroupFs`], so the v2 logic is tested against a fake tree on machines that only have v1.
//! Called by [`super::ns::NamespaceRunner`].

use std::io;
use std::path::{Path, PathBuf};

/// The few filesystem operations cgroup management needs.
pub trait CgroupFs: Send + Sync {
    fn read(&self, path: &Path) -> io::Result<String>;
    fn write(&self, path: &Path, contents: &str) -> io::Result<()>;
    /// Creates one directory; an existing one is fine.
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    fn child_dirs(&self, path: &Path) -> io::Result<Vec<PathBuf>>;
    fn exists(&self, path: &Path) -> bool;
    /// Sends SIGKILL to a host pid.
    fn kill(&self, pid: i32);
}

/// The real cgroup filesystem.
pub struct HostCgroupFs;

impl CgroupFs for HostCgroupFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn write(&self, path: &Path, contents: &str) -> io::Result<()> {
        std::fs::write(path, contents)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        match std::fs::create_dir(path) {
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            other => other,
        }
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }

    fn child_dirs(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let mut dirs = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                dirs.push(entry.path());
            }
        }
        Ok(dirs)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn kill(&self, pid: i32) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error(
        "no usable cgroups: neither v2 with the memory and pids controllers nor the v1 memory \
         and pids hierarchies were found for this process ({0})"
    )]
    Unavailable(String),
    #[error("cgroup {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The limits of one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CgroupLimits {
    pub memory_bytes: u64,
    pub pids: u64,
    /// CPU quota per 100 ms period, in microseconds; `None` = unlimited.
    pub cpu_quota_us: Option<u64>,
}

pub const CPU_PERIOD_US: u64 = 100_000;

#[path = "cgroup_layout.rs"]
mod layout;
pub use layout::CgroupLayout;

/// The step cgroups of one runner instance.
pub struct Cgroups {
    fs: Box<dyn CgroupFs>,
    layout: CgroupLayout,
    instance: String,
}

/// One step's cgroup (a directory per v1 hierarchy, or one v2 directory).
#[derive(Debug, Clone)]
pub struct StepCgroup {
    /// The `cgroup.procs` files the sandbox init is written into.
    pub procs_files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
    memory_events: PathBuf,
    pids_events: PathBuf,
}

/// What the kernel counted while a step ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepEvents {
    pub oom_kills: u64,
    pub pids_limit_hits: u64,
}

#[path = "cgroup_usage.rs"]
mod usage;
pub use usage::CgroupUsage;

impl Cgroups {
    /// Prepares `<own>/<instance>` (delegating v2 controllers, moving the daemon into a leaf
    /// if its own cgroup must stay free of processes) and sweeps stale step cgroups in it.
    /// `keep`: step cgroups of adopted apps, which the sweep leaves alone.
    pub fn prepare(
        fs: Box<dyn CgroupFs>,
        layout: CgroupLayout,
        instance: &str,
        keep: &std::collections::HashSet<String>,
    ) -> Result<Self, CgroupError> {
        let cgroups = Cgroups {
            fs,
            layout,
            instance: instance.to_owned(),
        };
        if let CgroupLayout::V2 { own, .. } = &cgroups.layout {
            cgroups.delegate_v2(own)?;
        }
        for dir in cgroups.instance_dirs() {
            cgroups.fs.create_dir(&dir).map_err(io_at(&dir))?;
        }
        if let CgroupLayout::V2 { .. } = &cgroups.layout {
            let dir = cgroups.instance_dirs().remove(0);
            let control = dir.join("cgroup.subtree_control");
            cgroups
                .fs
                .write(&control, &cgroups.v2_controllers())
                .map_err(io_at(&control))?;
        }
        cgroups.sweep(keep);
        Ok(cgroups)
    }

    pub fn layout(&self) -> &CgroupLayout {
        &self.layout
    }

    /// The step cgroup `name` as it already exists (an adopted app's).
    pub fn existing(&self, name: &str) -> StepCgroup {
        let dirs: Vec<PathBuf> = self
            .instance_dirs()
            .iter()
            .map(|dir| dir.join(name))
            .collect();
        let (memory_events, pids_events) = match &self.layout {
            CgroupLayout::V2 { .. } => (dirs[0].join("memory.events"), dirs[0].join("pids.events")),
            CgroupLayout::V1 { .. } => (
                dirs[0].join("memory.oom_control"),
                dirs[1].join("pids.events"),
            ),
        };
        StepCgroup {
            procs_files: dirs.iter().map(|dir| dir.join("cgroup.procs")).collect(),
            memory_events,
            pids_events,
            dirs,
        }
    }

    /// Puts the instance directories back if something removed them behind our back (another
    /// daemon's clean-up, an operator): never a reason for every later step to fail.
    fn ensure_instance(&self) -> Result<(), CgroupError> {
        let dirs = self.instance_dirs();
        let missing = dirs.iter().any(|dir| !self.fs.exists(dir));
        if !missing {
            return Ok(());
        }
        for dir in &dirs {
            self.fs.create_dir(dir).map_err(io_at(dir))?;
        }
        if let CgroupLayout::V2 { .. } = &self.layout {
            let control = dirs[0].join("cgroup.subtree_control");
            self.fs
                .write(&control, &self.v2_controllers())
                .map_err(io_at(&control))?;
        }
        tracing::warn!(cgroup = %dirs[0].display(), "the sandbox cgroup was gone; made it again");
        Ok(())
    }

    /// Creates a step cgroup with its limits.
    pub fn create(&self, name: &str, limits: &CgroupLimits) -> Result<StepCgroup, CgroupError> {
        self.ensure_instance()?;
        let dirs: Vec<PathBuf> = self
            .instance_dirs()
            .iter()
            .map(|dir| dir.join(name))
            .collect();
        for dir in &dirs {
            self.fs.create_dir(dir).map_err(io_at(dir))?;
        }
        let step = match &self.layout {
            CgroupLayout::V2 { cpu, .. } => {
                let dir = &dirs[0];
                self.set(&dir.join("memory.max"), &limits.memory_bytes.to_string())?;
                if self.fs.exists(&dir.join("memory.swap.max")) {
                    self.set(&dir.join("memory.swap.max"), "0")?;
                }
                self.set(&dir.join("pids.max"), &limits.pids.to_string())?;
                if let (true, Some(quota)) = (cpu, limits.cpu_quota_us) {
                    self.set(&dir.join("cpu.max"), &format!("{quota} {CPU_PERIOD_US}"))?;
                }
                StepCgroup {
                    procs_files: vec![dir.join("cgroup.procs")],
                    memory_events: dir.join("memory.events"),
                    pids_events: dir.join("pids.events"),
                    dirs,
                }
            }
            CgroupLayout::V1 { cpu, .. } => {
                // instance_dirs() lists memory, pids, then cpu and freezer when present.
                let (memory, pids) = (&dirs[0], &dirs[1]);
                self.set(
                    &memory.join("memory.limit_in_bytes"),
                    &limits.memory_bytes.to_string(),
                )?;
                let memsw = memory.join("memory.memsw.limit_in_bytes");
                if self.fs.exists(&memsw) {
                    self.set(&memsw, &limits.memory_bytes.to_string())?;
                }
                self.set(&pids.join("pids.max"), &limits.pids.to_string())?;
                if let (Some(_), Some(quota)) = (cpu, limits.cpu_quota_us) {
                    let cpu_dir = &dirs[2];
                    self.set(
                        &cpu_dir.join("cpu.cfs_period_us"),
                        &CPU_PERIOD_US.to_string(),
                    )?;
                    self.set(&cpu_dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
                }
                StepCgroup {
                    procs_files: dirs.iter().map(|dir| dir.join("cgroup.procs")).collect(),
                    memory_events: memory.join("memory.oom_control"),
                    pids_events: pids.join("pids.events"),
                    dirs,
                }
            }
        };
        Ok(step)
    }

    /// Reads the OOM-kill and pids-limit counters of a step.
    pub fn events(&self, step: &StepCgroup) -> StepEvents {
        let counter = |path: &Path, key: &str| {
            self.fs
                .read(path)
                .ok()
                .and_then(|text| {
                    text.lines().find_map(|line| {
                        let (name, value) = line.split_once(' ')?;
                        (name == key)
                            .then(|| value.trim().parse::<u64>().ok())
                            .flatten()
                    })
                })
                .unwrap_or(0)
        };
        StepEvents {
            oom_kills: counter(&step.memory_events, "oom_kill"),
            pids_limit_hits: counter(&step.pids_events, "max"),
        }
    }

    /// Kills whatever is left in the step cgroup and removes it. Fails while processes are
    /// still dying; the caller retries.
    pub fn remove(&self, step: &StepCgroup) -> io::Result<()> {
        self.kill_all(&step.dirs);
        let mut result = Ok(());
        for dir in &step.dirs {
            match self.fs.remove_dir(dir) {
                Err(error) if error.kind() != io::ErrorKind::NotFound => result = Err(error),
                _ => {}
            }
        }
        result
    }

    /// Removes every step cgroup of this instance but `keep` (stale ones from a crash, at
    /// start-up).
    pub fn sweep(&self, keep: &std::collections::HashSet<String>) {
        let instance_dirs = self.instance_dirs();
        let mut names = std::collections::BTreeSet::new();
        for dir in &instance_dirs {
            for child in self.fs.child_dirs(dir).unwrap_or_default() {
                names.extend(
                    child
                        .file_name()
                        .and_then(|name| name.to_str())
                        .filter(|name| !keep.contains(*name))
                        .map(str::to_owned),
                );
            }
        }
        for name in names {
            let step = StepCgroup {
                procs_files: Vec::new(),
                memory_events: PathBuf::new(),
                pids_events: PathBuf::new(),
                dirs: instance_dirs.iter().map(|dir| dir.join(&name)).collect(),
            };
            for _ in 0..50 {
                if self.remove(&step).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }

    /// Removes the instance directories (at shutdown, once every step is gone).
    pub fn remove_instance(&self) {
        self.sweep(&std::collections::HashSet::new());
        for dir in self.instance_dirs() {
            let _ = self.fs.remove_dir(&dir);
        }
    }

    fn instance_dirs(&self) -> Vec<PathBuf> {
        match &self.layout {
            CgroupLayout::V2 { own, .. } => vec![own.join(&self.instance)],
            CgroupLayout::V1 {
                memory,
                pids,
                cpu,
                freezer,
            } => [Some(memory), Some(pids), cpu.as_ref(), freezer.as_ref()]
                .into_iter()
                .flatten()
                .map(|dir| dir.join(&self.instance))
                .collect(),
        }
    }

    fn v2_controllers(&self) -> String {
        match &self.layout {
            CgroupLayout::V2 { cpu: true, .. } => "+memory +pids +cpu".into(),
            _ => "+memory +pids".into(),
        }
    }

    /// Enables the controllers below the daemon's own v2 cgroup. The kernel refuses that while
    /// the cgroup holds processes, so the daemon first moves itself into a leaf beside ours.
    fn delegate_v2(&self, own: &Path) -> Result<(), CgroupError> {
        let control = own.join("cgroup.subtree_control");
        let controllers = self.v2_controllers();
        if self.fs.write(&control, &controllers).is_ok() {
            return Ok(());
        }
        let leaf = own.join("slipway-daemon");
        self.fs.create_dir(&leaf).map_err(io_at(&leaf))?;
        let procs = own.join("cgroup.procs");
        let pids = self.fs.read(&procs).map_err(io_at(&procs))?;
        let leaf_procs = leaf.join("cgroup.procs");
        for pid in pids.split_whitespace() {
            // A process may exit meanwhile; only the final write decides.
            let _ = self.fs.write(&leaf_procs, pid);
        }
        self.fs
            .write(&control, &controllers)
            .map_err(io_at(&control))
    }

    fn kill_all(&self, dirs: &[PathBuf]) {
        let freezer = match &self.layout {
            CgroupLayout::V1 {
                freezer: Some(_), ..
            } => dirs.last().map(|dir| dir.join("freezer.state")),
            _ => None,
        };
        if let CgroupLayout::V2 { .. } = &self.layout {
            let kill = dirs[0].join("cgroup.kill");
            if self.fs.exists(&kill) && self.fs.write(&kill, "1").is_ok() {
                return;
            }
        }
        // Frozen processes cannot fork while they are being killed one by one.
        if let Some(state) = &freezer {
            let _ = self.fs.write(state, "FROZEN");
        }
        for dir in dirs {
            let pids = self.fs.read(&dir.join("cgroup.procs")).unwrap_or_default();
            for pid in pids.split_whitespace().filter_map(|pid| pid.parse().ok()) {
                self.fs.kill(pid);
            }
        }
        if let Some(state) = &freezer {
            let _ = self.fs.write(state, "THAWED");
        }
    }

    fn set(&self, path: &Path, value: &str) -> Result<(), CgroupError> {
        self.fs.write(path, value).map_err(io_at(path))
    }
}

#[cfg(test)]
#[path = "cgroup_tests.rs"]
mod tests;
