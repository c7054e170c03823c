//! The machine's own figures for the operator's history: CPU time (`/proc/stat`), memory
//! (`/proc/meminfo`), the data dir's filesystem (`statvfs`), router connections.

use std::path::Path;

/// The machine at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MachineReading {
    /// (busy, all) CPU seconds since boot, over every CPU.
    pub cpu: Option<(f64, f64)>,
    pub memory_used: Option<u64>,
    pub memory_total: u64,
    pub disk_used: u64,
    pub disk_total: u64,
    pub connections: u64,
}

impl MachineReading {
    pub fn read(data_dir: &Path, connections: u64) -> MachineReading {
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|t| *t > 0)
            .unwrap_or(100) as f64;
        let cpu = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|text| parse_cpu(&text))
            .map(|(busy, all)| (busy as f64 / ticks, all as f64 / ticks));
        let (memory_used, memory_total) = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| parse_meminfo(&text))
            .map_or((None, 0), |(used, total)| (Some(used), total));
        let (disk_used, disk_total) = nix::sys::statvfs::statvfs(data_dir)
            .map(|fs| {
                let unit = fs.fragment_size();
                let total = fs.blocks() * unit;
                (total.saturating_sub(fs.blocks_free() * unit), total)
            })
            .unwrap_or((0, 0));
        MachineReading {
            cpu,
            memory_used,
            memory_total,
            disk_used,
            disk_total,
            connections,
        }
    }
}

/// The `cpu` line of `/proc/stat`: (busy, all) ticks; idle and iowait are not busy.
fn parse_cpu(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|line| line.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is inside user already).
    let all: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
    Some((all - idle, all))
}

/// (used, total) bytes: total less what is available.
fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| {
                rest.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map(|kib| kib * 1024)
    };
    let total = field("MemTotal:")?;
    let available = field("MemAvailable:")?;
    Some((total.saturating_sub(available), total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_and_memory() {
        let stat = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 1 2 3 4\n";
        assert_eq!(parse_cpu(stat), Some((160, 1000)));
        let meminfo = "MemTotal:  1000 kB\nMemFree: 100 kB\nMemAvailable:  400 kB\n";
        assert_eq!(parse_meminfo(meminfo), Some((600 * 1024, 1000 * 1024)));
        let now = MachineReading::read(Path::new("/"), 3);
        assert!(now.memory_total > 0 && now.disk_total > 0 && now.cpu.is_some());
    }
}
