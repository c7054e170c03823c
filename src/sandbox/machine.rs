//! What the namespaced runner needs of the machine, checked once at start by
//! [`super::ns::NamespaceRunner::start`]: root, the kernel's namespaces, the `ip` and `nft`
//! commands and the helper executable; and [`SandboxError`], why it cannot start, each
//! message saying what to change.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::cgroup::CgroupError;

/// Why the namespaced runner cannot start; each message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "sandbox.mode = \"namespaces\" needs the daemon to run as root; start it as root, or set \
         sandbox.mode = \"none\" to run builds and apps without isolation"
    )]
    NotRoot,
    #[error(
        "this kernel does not offer {0}; enable it (e.g. sysctl user.max_user_namespaces), or set \
         sandbox.mode = \"none\""
    )]
    MissingKernelFeature(&'static str),
    #[error(
        "{} missing: install {} (apt-get install {}), or set sandbox.mode = \"none\"",
        MissingTool::commands(.0), MissingTool::packages(.0), MissingTool::package_list(.0)
    )]
    MissingTools(Vec<MissingTool>),
    #[error("{0}; or set sandbox.mode = \"none\"")]
    Cgroups(#[from] CgroupError),
    #[error("network setup failed: {0}")]
    Network(io::Error),
    #[error("invalid sandbox instance name {0:?} (lowercase letters, digits and _; at most 24)")]
    InvalidInstance(String),
    #[error("{0}")]
    UidOverlap(String),
    #[error("the helper executable {0} does not exist")]
    MissingHelper(PathBuf),
}

/// A command the namespaced runner drives, and the Debian package that brings it.
#[derive(Debug)]
pub struct MissingTool {
    pub tool: &'static str,
    pub package: &'static str,
}

impl MissingTool {
    /// "the `ip` command is" / "the `ip` and `nft` commands are"
    fn commands(missing: &[MissingTool]) -> String {
        let names: Vec<String> = missing.iter().map(|m| format!("`{}`", m.tool)).collect();
        match names.len() {
            1 => format!("the {} command is", names[0]),
            _ => format!("the {} commands are", names.join(" and ")),
        }
    }

    fn packages(missing: &[MissingTool]) -> String {
        let names: Vec<&str> = missing.iter().map(|m| m.package).collect();
        match names.len() {
            1 => format!("the {} package", names[0]),
            _ => format!("the {} packages", names.join(" and ")),
        }
    }

    fn package_list(missing: &[MissingTool]) -> String {
        let names: Vec<&str> = missing.iter().map(|m| m.package).collect();
        names.join(" ")
    }
}

pub(super) fn check_machine(daemon_exe: &Path) -> Result<(), SandboxError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(SandboxError::NotRoot);
    }
    for (name, feature) in [
        ("user", "user namespaces"),
        ("mnt", "mount namespaces"),
        ("pid", "pid namespaces"),
        ("net", "network namespaces"),
        ("ipc", "ipc namespaces"),
        ("uts", "uts namespaces"),
        ("cgroup", "cgroup namespaces"),
    ] {
        if !Path::new("/proc/self/ns").join(name).exists() {
            return Err(SandboxError::MissingKernelFeature(feature));
        }
    }
    let max_user_namespaces =
        std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap_or_default();
    if max_user_namespaces.trim() == "0" {
        return Err(SandboxError::MissingKernelFeature(
            "user namespaces (user.max_user_namespaces is 0)",
        ));
    }
    let mut missing = Vec::new();
    for (tool, argument, package) in [("ip", "-V", "iproute2"), ("nft", "--version", "nftables")] {
        let found = std::process::Command::new(tool)
            .arg(argument)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !found {
            missing.push(MissingTool { tool, package });
        }
    }
    if !missing.is_empty() {
        return Err(SandboxError::MissingTools(missing));
    }
    if !daemon_exe.exists() {
        return Err(SandboxError::MissingHelper(daemon_exe.to_owned()));
    }
    Ok(())
}
