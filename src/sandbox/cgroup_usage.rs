//! What the step cgroups of an app use right now (memory, CPU), read for the metrics
//! (`usage/` through `Runner::usage`). A child of `cgroup.rs`, kept apart so that file stays
//! about creating and removing cgroups.

use std::path::Path;

use super::{CgroupFs, CgroupLayout, Cgroups};

/// What a group of step cgroups uses right now; a figure the kernel does not give is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CgroupUsage {
    pub memory_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
}

impl Cgroups {
    /// Memory (`memory.current`, v1 `memory.usage_in_bytes`) and CPU time (`cpu.stat`
    /// `usage_usec`, v1 `cpuacct.usage` when the cpu hierarchy has it, else the `/proc` stat
    /// of the step's processes and their reaped children) of the step cgroups whose
    /// names start with `prefix` (each start of an app gets its own), summed; `None` when
    /// there is no such cgroup.
    pub fn usage(&self, prefix: &str) -> Option<CgroupUsage> {
        let dirs = self.instance_dirs();
        let (memory_root, cpu_root, memory_file, cpu_file) = match &self.layout {
            CgroupLayout::V2 { .. } => (&dirs[0], Some(&dirs[0]), "memory.current", "cpu.stat"),
            CgroupLayout::V1 { cpu, .. } => (
                &dirs[0],
                cpu.as_ref().map(|_| &dirs[2]),
                "memory.usage_in_bytes",
                "cpuacct.usage",
            ),
        };
        let names: Vec<std::ffi::OsString> = self
            .fs
            .child_dirs(memory_root)
            .ok()?
            .into_iter()
            .filter_map(|dir| dir.file_name().map(|name| name.to_owned()))
            .filter(|name| name.to_string_lossy().starts_with(prefix))
            .collect();
        if names.is_empty() {
            return None;
        }
        let sum = |values: Vec<Option<f64>>| -> Option<f64> {
            values.into_iter().try_fold(0.0, |sum, v| Some(sum + v?))
        };
        let memory = sum(names
            .iter()
            .map(|name| {
                let text = self
                    .fs
                    .read(&memory_root.join(name).join(memory_file))
                    .ok()?;
                text.trim().parse::<u64>().ok().map(|v| v as f64)
            })
            .collect());
        let cpu = match cpu_root {
            Some(root) if self.fs.exists(&root.join(&names[0]).join(cpu_file)) => Some(root),
            _ => None,
        };
        let cpu = cpu.and_then(|root| {
            sum(names
                .iter()
                .map(|name| {
                    let text = self.fs.read(&root.join(name).join(cpu_file)).ok()?;
                    match &self.layout {
                        CgroupLayout::V2 { .. } => text.lines().find_map(|line| {
                            let value = line.strip_prefix("usage_usec ")?;
                            value.trim().parse::<u64>().ok().map(|us| us as f64 / 1e6)
                        }),
                        CgroupLayout::V1 { .. } => {
                            text.trim().parse::<u64>().ok().map(|ns| ns as f64 / 1e9)
                        }
                    }
                })
                .collect())
        });
        // v1 without a cpuacct file in the step's cpu cgroup (cpuacct mounted apart): the CPU
        // time of the processes in the step's memory cgroup, their reaped children included.
        let cpu = cpu.or_else(|| {
            let procs: Vec<String> = names
                .iter()
                .filter_map(|name| {
                    self.fs
                        .read(&memory_root.join(name).join("cgroup.procs"))
                        .ok()
                })
                .collect();
            processes_cpu_seconds(self.fs.as_ref(), &procs.join("\n"))
        });
        Some(CgroupUsage {
            memory_bytes: memory.map(|m| m as u64),
            cpu_seconds: cpu,
        })
    }
}

/// User + system CPU seconds of the pids listed in `procs` (a `cgroup.procs` text), with
/// their waited-for children, from `/proc/<pid>/stat`; `None` with no readable process.
fn processes_cpu_seconds(fs: &dyn CgroupFs, procs: &str) -> Option<f64> {
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)
        .unwrap_or(100) as f64;
    let mut total = None;
    for pid in procs.split_whitespace() {
        let Ok(stat) = fs.read(&Path::new("/proc").join(pid).join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        // After the name: state is field 3; utime, stime, cutime, cstime are fields 14-17.
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let ticks_used: u64 = (11..15)
            .filter_map(|i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
            .sum();
        *total.get_or_insert(0.0) += ticks_used as f64 / ticks;
    }
    total
}
