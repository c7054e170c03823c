//! `slipway doctor`: checks the machine against the config — kernel namespaces, cgroup
//! controllers, nftables, the listen ports, that `*.<apps_domain>` and the control host
//! resolve to this machine, free disk under `data_dir`, the add-ons' packages, and
//! `Config::advice()` — and says
//! what to fix. `main.rs` runs it and exits 1 when a check fails (it blocks Slipway), 0 when
//! there are only warnings. The evaluations are pure functions of what was read, so the unit
//! tests feed them machines this one is not.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::Path;

use crate::config::{Config, SandboxMode, TlsMode};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Works, but weaker or riskier than it should be.
    Warn,
    /// Blocks Slipway (or a part of it) from working.
    Fail,
}

#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    /// What was found, and for Warn/Fail what to do about it.
    pub message: String,
}

impl Check {
    fn new(name: &'static str, status: Status, message: impl Into<String>) -> Check {
        Check {
            name,
            status,
            message: message.into(),
        }
    }
}

/// Every check, in the order they are printed.
pub fn run(config: &Config) -> Vec<Check> {
    let sandboxed = config.sandbox.mode != SandboxMode::None;
    let mut checks = vec![
        user_namespaces(
            read("/proc/sys/user/max_user_namespaces").as_deref(),
            sandboxed,
        ),
        cgroups(
            &read("/proc/self/cgroup").unwrap_or_default(),
            Path::new("/sys/fs/cgroup"),
            sandboxed,
        ),
        nftables(sandboxed),
    ];
    let mut ports = vec![("http_listen", config.http_listen)];
    if config.tls.mode != TlsMode::Off {
        ports.push(("https_listen", config.https_listen));
    }
    if let Some(api) = config.api_listen {
        ports.push(("api_listen", api));
    }
    let daemon_running =
        std::os::unix::net::UnixStream::connect(crate::admin::socket_path(&config.data_dir))
            .is_ok();
    for (key, addr) in ports {
        checks.push(port(
            key,
            addr,
            std::net::TcpListener::bind(addr),
            daemon_running,
        ));
    }
    let local = local_addresses();
    let probe = format!("doctor-check.{}", config.apps_domain);
    for (name, host) in [
        ("apps_domain", probe.as_str()),
        ("control_host", config.control_host.as_str()),
    ] {
        // `*.localhost` is loopback by RFC 6761 in curl and browsers, whatever libc says.
        let resolved = if host == "localhost" || host.ends_with(".localhost") {
            Ok(vec![IpAddr::from([127, 0, 0, 1])])
        } else {
            (host, 80)
                .to_socket_addrs()
                .map(|addrs| addrs.map(|a| a.ip()).collect::<Vec<_>>())
                .map_err(|error| error.to_string())
        };
        checks.push(resolves_here(name, host, resolved, &local));
    }
    checks.push(disk(&config.data_dir, free_bytes(&config.data_dir)));
    if config.sandbox.mode == SandboxMode::None {
        checks.push(Check::new(
            "sandbox",
            Status::Warn,
            "sandbox.mode is \"none\": builds and apps run as plain processes of the daemon; set \
             sandbox.mode = \"namespaces\" on a production host",
        ));
    }
    for advice in config.advice() {
        checks.push(Check::new("config", Status::Warn, advice));
    }
    checks.push(addon_packages(Path::new("/")));
    checks
}

/// Whether the add-on services' packages are installed under `root` (a warning when not:
/// everything else works, creating that kind of add-on is refused with the same advice).
pub fn addon_packages(root: &Path) -> Check {
    use crate::addons::AddonKind;
    let missing: Vec<String> = [AddonKind::Postgres, AddonKind::Redis]
        .into_iter()
        .filter_map(|kind| kind.check_installed(root).err())
        .collect();
    match missing.is_empty() {
        true => Check::new(
            "addons",
            Status::Ok,
            "postgresql-15 and redis-server are installed: add-ons can be created",
        ),
        false => Check::new("addons", Status::Warn, missing.join("; ")),
    }
}

/// 1 when any check failed, else 0.
pub fn exit_code(checks: &[Check]) -> u8 {
    u8::from(checks.iter().any(|check| check.status == Status::Fail))
}

/// One line per check: `ok`, `WARN` or `FAIL`, the check's name, the message.
pub fn render(checks: &[Check]) -> String {
    let mut out = String::new();
    for check in checks {
        let label = match check.status {
            Status::Ok => "ok  ",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        };
        out.push_str(&format!("{label}  {:<13} {}\n", check.name, check.message));
    }
    let failed = checks.iter().filter(|c| c.status == Status::Fail).count();
    let warned = checks.iter().filter(|c| c.status == Status::Warn).count();
    out.push_str(&match (failed, warned) {
        (0, 0) => "everything Slipway needs is in place\n".to_owned(),
        (0, _) => format!("{warned} warning(s); Slipway can run\n"),
        _ => format!("{failed} problem(s) block Slipway; fix the FAIL lines above\n"),
    });
    out
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// `user.max_user_namespaces` must be above 0 for the sandbox.
pub fn user_namespaces(max_user_namespaces: Option<&str>, sandboxed: bool) -> Check {
    let name = "namespaces";
    match max_user_namespaces.map(|text| text.trim().parse::<u64>()) {
        Some(Ok(max)) if max > 0 => Check::new(name, Status::Ok, format!("user namespaces available (max {max})")),
        _ if !sandboxed => Check::new(name, Status::Warn, "user namespaces are off (sandbox.mode is \"none\", so nothing needs them now)"),
        _ => Check::new(
            name,
            Status::Fail,
            "user namespaces are off: run `sysctl -w user.max_user_namespaces=15000` (and set it in \
             /etc/sysctl.d), or use a kernel built with CONFIG_USER_NS",
        ),
    }
}

/// The memory and pids controllers, v2 (in the unified hierarchy's `cgroup.controllers`) or
/// v1 (their own hierarchies).
pub fn cgroups(proc_self_cgroup: &str, root: &Path, sandboxed: bool) -> Check {
    let name = "cgroups";
    if let Ok(support) = crate::sandbox::cgroup_support(proc_self_cgroup, root) {
        return Check::new(name, Status::Ok, support);
    }
    Check::new(
        name,
        if sandboxed {
            Status::Fail
        } else {
            Status::Warn
        },
        "no memory and pids cgroup controllers for this process: under systemd use Delegate=yes \
         (the shipped unit does); elsewhere enable them (cgroup v2: add +memory +pids to the \
         parent's cgroup.subtree_control)",
    )
}

fn nftables(sandboxed: bool) -> Check {
    let name = "nftables";
    let output = std::process::Command::new("nft")
        .args(["list", "tables"])
        .stdin(std::process::Stdio::null())
        .output();
    match output {
        Ok(output) if output.status.success() => Check::new(name, Status::Ok, "nft works"),
        _ if !sandboxed => Check::new(
            name,
            Status::Warn,
            "nft is missing or fails (sandbox.mode is \"none\", so nothing needs it now)",
        ),
        Ok(output) => Check::new(
            name,
            Status::Fail,
            format!(
                "`nft list tables` fails: {}; the kernel needs nf_tables (modprobe nf_tables)",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        ),
        Err(_) => Check::new(
            name,
            Status::Fail,
            "the nft command is missing: apt-get install nftables",
        ),
    }
}

/// A listen address is fine when it can be bound now, or when the running daemon holds it.
pub fn port(
    key: &'static str,
    addr: SocketAddr,
    bound: std::io::Result<std::net::TcpListener>,
    daemon_running: bool,
) -> Check {
    match bound {
        Ok(_) => Check::new("ports", Status::Ok, format!("{key} {addr} is free")),
        Err(error) if error.kind() == std::io::ErrorKind::AddrInUse && daemon_running => {
            Check::new(
                "ports",
                Status::Ok,
                format!("{key} {addr} is in use, by the running daemon (its admin socket answers)"),
            )
        }
        Err(error) => Check::new(
            "ports",
            Status::Fail,
            format!(
                "{key} {addr} cannot be bound ({error}): stop what listens there (ss -ltnp), or \
                 change {key}"
            ),
        ),
    }
}

/// A name resolves to this machine when one of its addresses is local (loopback included).
pub fn resolves_here(
    key: &'static str,
    host: &str,
    resolved: Result<Vec<IpAddr>, String>,
    local: &[IpAddr],
) -> Check {
    let fix = match key {
        "apps_domain" => "add a wildcard DNS record (*.<apps_domain>) pointing at this machine",
        _ => "add a DNS record for the control host pointing at this machine",
    };
    match resolved {
        Err(error) => Check::new(
            "dns",
            Status::Fail,
            format!("{host} does not resolve ({error}): {fix}"),
        ),
        Ok(addrs) if addrs.iter().any(|a| a.is_loopback() || local.contains(a)) => Check::new(
            "dns",
            Status::Ok,
            format!("{host} resolves to this machine ({})", list(&addrs)),
        ),
        Ok(addrs) => Check::new(
            "dns",
            // Behind a NAT or a load balancer the public address is not local: not certain.
            Status::Warn,
            format!(
                "{host} resolves to {}, which is not an address of this machine: {fix} (fine if \
                 a NAT or load balancer forwards that address here)",
                list(&addrs)
            ),
        ),
    }
}

fn list(addrs: &[IpAddr]) -> String {
    addrs
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn local_addresses() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    addrs
        .filter_map(|ifaddr| ifaddr.address)
        .filter_map(|addr| {
            if let Some(v4) = addr.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                addr.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
            }
        })
        .collect()
}

/// Free bytes on the filesystem of `path` (or its nearest existing parent).
fn free_bytes(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let stat = nix::sys::statvfs::statvfs(existing).ok()?;
    Some(stat.blocks_available() as u64 * stat.fragment_size() as u64)
}

const GIB: u64 = 1024 * 1024 * 1024;

pub fn disk(data_dir: &Path, free: Option<u64>) -> Check {
    let name = "disk";
    match free {
        None => Check::new(
            name,
            Status::Warn,
            format!("cannot tell the free space under {}", data_dir.display()),
        ),
        Some(free) if free < GIB => Check::new(
            name,
            Status::Fail,
            format!(
                "{} MiB free under {}: builds will fail; free space or move data_dir",
                free / (1024 * 1024),
                data_dir.display()
            ),
        ),
        Some(free) if free < 5 * GIB => Check::new(
            name,
            Status::Warn,
            format!(
                "{:.1} GiB free under {}: a few builds will fill it",
                free as f64 / GIB as f64,
                data_dir.display()
            ),
        ),
        Some(free) => Check::new(
            name,
            Status::Ok,
            format!(
                "{:.1} GiB free under {}",
                free as f64 / GIB as f64,
                data_dir.display()
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_namespaces_off_blocks_only_a_sandboxing_daemon() {
        assert_eq!(user_namespaces(Some("15000\n"), true).status, Status::Ok);
        assert_eq!(user_namespaces(Some("0\n"), true).status, Status::Fail);
        assert!(user_namespaces(Some("0"), true).message.contains("sysctl"));
        assert_eq!(user_namespaces(None, false).status, Status::Warn);
    }

    #[test]
    fn cgroup_v2_controllers_are_read_from_the_processes_own_cgroup() {
        let root = tempfile::tempdir().unwrap();
        let own = root.path().join("system.slice/slipway.service");
        std::fs::create_dir_all(&own).unwrap();
        // The v2 mount's root, as on a host.
        std::fs::write(
            root.path().join("cgroup.controllers"),
            "cpu io memory pids\n",
        )
        .unwrap();
        std::fs::write(own.join("cgroup.controllers"), "cpu io memory pids\n").unwrap();
        let check = cgroups("0::/system.slice/slipway.service\n", root.path(), true);
        assert_eq!(check.status, Status::Ok, "{check:?}");
        std::fs::write(own.join("cgroup.controllers"), "cpu io\n").unwrap();
        let check = cgroups("0::/system.slice/slipway.service\n", root.path(), true);
        assert_eq!(check.status, Status::Fail);
        assert!(check.message.contains("Delegate=yes"));
    }

    #[test]
    fn names_resolving_elsewhere_or_nowhere_are_reported_with_the_fix() {
        let local: Vec<IpAddr> = vec!["192.0.2.7".parse().unwrap()];
        let here = resolves_here(
            "apps_domain",
            "x.apps.example",
            Ok(vec!["192.0.2.7".parse().unwrap()]),
            &local,
        );
        assert_eq!(here.status, Status::Ok);
        let loopback = resolves_here(
            "control_host",
            "slipway.localhost",
            Ok(vec!["127.0.0.1".parse().unwrap()]),
            &[],
        );
        assert_eq!(loopback.status, Status::Ok);
        let elsewhere = resolves_here(
            "apps_domain",
            "x.apps.example",
            Ok(vec!["198.51.100.1".parse().unwrap()]),
            &local,
        );
        assert_eq!(elsewhere.status, Status::Warn);
        let nowhere = resolves_here(
            "apps_domain",
            "x.apps.example",
            Err("no such host".into()),
            &local,
        );
        assert_eq!(nowhere.status, Status::Fail);
        assert!(nowhere.message.contains("wildcard DNS record"));
    }

    #[test]
    fn a_port_in_use_is_fine_only_when_the_daemon_holds_it() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let again = || std::net::TcpListener::bind(addr);
        assert_eq!(port("http_listen", addr, again(), true).status, Status::Ok);
        let blocked = port("http_listen", addr, again(), false);
        assert_eq!(blocked.status, Status::Fail);
        assert!(blocked.message.contains("change http_listen"));
    }

    #[test]
    fn missing_addon_packages_are_a_warning_that_names_them() {
        let empty = tempfile::tempdir().unwrap();
        let check = addon_packages(empty.path());
        assert_eq!(check.status, Status::Warn);
        assert!(
            check.message.contains("apt-get install postgresql-15"),
            "{}",
            check.message
        );
        assert!(
            check.message.contains("apt-get install redis-server"),
            "{}",
            check.message
        );
    }

    #[test]
    fn little_disk_fails_and_the_exit_code_follows_the_worst_check() {
        let dir = Path::new("/var/lib/slipway");
        assert_eq!(disk(dir, Some(GIB / 2)).status, Status::Fail);
        assert_eq!(disk(dir, Some(2 * GIB)).status, Status::Warn);
        assert_eq!(disk(dir, Some(50 * GIB)).status, Status::Ok);
        let warn = Check::new("x", Status::Warn, "w");
        let fail = Check::new("y", Status::Fail, "f");
        assert_eq!(exit_code(std::slice::from_ref(&warn)), 0);
        assert_eq!(exit_code(&[warn, fail]), 1);
    }
}
