//! Where the daemon's own cgroups are (`CgroupLayout`): v2 with the controllers it needs, or
//! the v1 hierarchies, found from `/proc/self/cgroup` and the mounts. A child of `cgroup.rs`.

use std::path::{Path, PathBuf};

use super::{CgroupError, CgroupFs};

/// Where the daemon's own cgroups are.
#[derive(Debug, Clone, PartialEq)]
pub enum CgroupLayout {
    V2 {
        own: PathBuf,
        cpu: bool,
    },
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpu: Option<PathBuf>,
        freezer: Option<PathBuf>,
    },
}

impl CgroupLayout {
    /// Finds the daemon's cgroups from `/proc/self/cgroup` and the mounts under `root`
    /// (normally `/sys/fs/cgroup`).
    pub fn detect(
        fs: &dyn CgroupFs,
        root: &Path,
        proc_self_cgroup: &str,
    ) -> Result<Self, CgroupError> {
        let mut unified_path = None;
        let mut v1_paths = Vec::new();
        for line in proc_self_cgroup.lines() {
            let mut fields = line.splitn(3, ':');
            let (Some(hierarchy), Some(controllers), Some(path)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            let relative = path.trim_start_matches('/');
            if hierarchy == "0" && controllers.is_empty() {
                unified_path = Some(relative.to_owned());
                continue;
            }
            for controller in controllers.split(',') {
                let combined = root.join(controllers).join(relative);
                let single = root.join(controller).join(relative);
                let dir = if fs.exists(&combined) {
                    combined
                } else {
                    single
                };
                v1_paths.push((controller.to_owned(), dir));
            }
        }
        if let Some(relative) = unified_path {
            let mount = [root.to_owned(), root.join("unified")]
                .into_iter()
                .find(|mount| fs.exists(&mount.join("cgroup.controllers")));
            if let Some(mount) = mount {
                let own = mount.join(relative);
                let controllers = fs.read(&own.join("cgroup.controllers")).unwrap_or_default();
                let has = |name: &str| controllers.split_whitespace().any(|c| c == name);
                if has("memory") && has("pids") {
                    return Ok(CgroupLayout::V2 {
                        own,
                        cpu: has("cpu"),
                    });
                }
            }
        }
        let find = |name: &str| {
            v1_paths
                .iter()
                .find(|(controller, dir)| controller == name && fs.exists(dir))
                .map(|(_, dir)| dir.clone())
        };
        match (find("memory"), find("pids")) {
            (Some(memory), Some(pids)) => Ok(CgroupLayout::V1 {
                memory,
                pids,
                cpu: find("cpu"),
                freezer: find("freezer"),
            }),
            _ => Err(CgroupError::Unavailable(
                proc_self_cgroup.trim().replace('\n', "; "),
            )),
        }
    }

    pub fn version(&self) -> u8 {
        match self {
            CgroupLayout::V2 { .. } => 2,
            CgroupLayout::V1 { .. } => 1,
        }
    }

    /// What sandboxes get here, in words (`slipway doctor`).
    pub fn describe(&self) -> String {
        let (version, cpu) = match self {
            CgroupLayout::V2 { cpu, .. } => (2, *cpu),
            CgroupLayout::V1 { cpu, .. } => (1, cpu.is_some()),
        };
        let cpu = if cpu {
            ", cpu"
        } else {
            " (no cpu controller: no CPU quotas)"
        };
        format!("cgroup v{version} memory, pids{cpu}")
    }
}
