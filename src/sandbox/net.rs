//! Sandbox networking: /30 links carved from `sandbox.subnet`, veth pairs, and the daemon's
//! own nftables table (NAT egress; no traffic from sandboxes to the host, to each other or to
//! private and link-local ranges except the host's DNS servers).
//!
//! The daemon side ([`super::ns`]) allocates links, installs and removes the table and sweeps
//! stale interfaces; the helper side ([`super::exec`]) creates the veth pair once the sandbox's
//! network namespace exists. Both drive the `ip` and `nft` commands.

use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use super::spec::NetworkSpec;

/// Destinations a sandbox may not reach (besides the host and other sandboxes).
const BLOCKED_RANGES: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
    // Azure's wireserver (instance metadata and VM agent), outside the private ranges.
    "168.63.129.16/32",
];

/// Hands out /30 links from the subnet. In memory: a link is free again once its step has
/// exited; allocation goes round-robin so a link is not reused while the kernel is still
/// tearing down the previous namespace.
pub struct AddressPool {
    network: u32,
    slots: u32,
    state: Mutex<PoolState>,
}

struct PoolState {
    next: u32,
    used: Vec<bool>,
}

/// One allocated /30: `host` is the host end of the veth, `sandbox` the sandbox's `eth0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub host: Ipv4Addr,
    pub sandbox: Ipv4Addr,
}

impl AddressPool {
    pub fn new(network: Ipv4Addr, prefix: u8) -> AddressPool {
        let slots = 1u32 << (30 - u32::from(prefix.min(30)));
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix))
        };
        AddressPool {
            network: u32::from(network) & mask,
            slots,
            state: Mutex::new(PoolState {
                next: 0,
                used: vec![false; slots as usize],
            }),
        }
    }

    pub fn allocate(&self) -> Option<Link> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        for offset in 0..self.slots {
            let index = (state.next + offset) % self.slots;
            if !state.used[index as usize] {
                state.used[index as usize] = true;
                state.next = (index + 1) % self.slots;
                let base = self.network + index * 4;
                return Some(Link {
                    index,
                    host: Ipv4Addr::from(base + 1),
                    sandbox: Ipv4Addr::from(base + 2),
                });
            }
        }
        None
    }

    pub fn release(&self, link: &Link) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(slot) = state.used.get_mut(link.index as usize) {
            *slot = false;
        }
    }
}

/// A short interface-name prefix unique to a runner instance (interface names have at most
/// 15 bytes: 6 for the prefix, the rest for the link index in hex).
pub fn interface_prefix(instance: &str) -> String {
    let hash = instance.bytes().fold(0x811c_9dc5u32, |hash, byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    format!("sw{:04x}", hash & 0xffff)
}

pub fn interface_name(prefix: &str, link: &Link) -> String {
    format!("{prefix}{:x}", link.index)
}

/// The complete nftables table, as one `nft -f` transaction that replaces any older copy.
pub fn ruleset(
    table: &str,
    prefix: &str,
    subnet: (Ipv4Addr, u8),
    nameservers: &[Ipv4Addr],
) -> String {
    let sandboxes = format!("\"{prefix}*\"");
    let blocked = BLOCKED_RANGES.join(", ");
    let mut dns = String::new();
    if !nameservers.is_empty() {
        let servers = nameservers
            .iter()
            .map(|ns| ns.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        dns = format!(
            "    iifname {sandboxes} ip daddr {{ {servers} }} udp dport 53 accept\n    \
             iifname {sandboxes} ip daddr {{ {servers} }} tcp dport 53 accept\n"
        );
    }
    format!(
        "table inet {table} {{}}\n\
         delete table inet {table}\n\
         table inet {table} {{\n\
         \x20 chain input {{\n\
         \x20   type filter hook input priority filter; policy accept;\n\
         \x20   iifname {sandboxes} ct state established,related accept\n\
         \x20   iifname {sandboxes} drop\n\
         \x20 }}\n\
         \x20 chain forward {{\n\
         \x20   type filter hook forward priority filter; policy accept;\n\
         \x20   iifname {sandboxes} oifname {sandboxes} drop\n\
         \x20   oifname {sandboxes} ct state established,related accept\n\
         \x20   oifname {sandboxes} drop\n\
         \x20   iifname {sandboxes} meta nfproto ipv6 drop\n\
         {dns}\
         \x20   iifname {sandboxes} ip daddr {{ {blocked} }} drop\n\
         \x20 }}\n\
         \x20 chain postrouting {{\n\
         \x20   type nat hook postrouting priority srcnat; policy accept;\n\
         \x20   ip saddr {}/{} oifname != {sandboxes} masquerade\n\
         \x20 }}\n\
         }}\n",
        subnet.0, subnet.1
    )
}

/// Runs `nft -f -` with `script` on stdin.
pub fn nft_apply(script: &str) -> io::Result<()> {
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(script.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "nft -f - failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

pub fn nft_delete_table(table: &str) -> io::Result<()> {
    nft_apply(&format!(
        "table inet {table} {{}}\ndelete table inet {table}\n"
    ))
}

/// Deletes leftover host ends of veth pairs with this prefix (their peers go with them).
pub fn sweep_interfaces(prefix: &str) -> io::Result<()> {
    let output = Command::new("ip")
        .args(["-o", "link", "show"])
        .stderr(Stdio::null())
        .output()?;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name);
        if name.starts_with(prefix) {
            let _ = Command::new("ip")
                .args(["link", "del", name])
                .stderr(Stdio::null())
                .status();
        }
    }
    Ok(())
}

/// Turns on IPv4 forwarding, which NAT egress needs. It is left on at shutdown, as other
/// services on the machine may rely on it by then.
pub fn enable_forwarding() -> io::Result<()> {
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
}

/// Reads the IPv4 DNS servers sandboxes should use: the host's, skipping loopback resolvers
/// (a sandbox cannot reach the host's loopback); systemd-resolved's upstream list otherwise.
pub fn host_nameservers() -> Vec<Ipv4Addr> {
    let parse = |text: &str| -> Vec<Ipv4Addr> {
        text.lines()
            .filter_map(|line| line.trim().strip_prefix("nameserver"))
            .filter_map(|address| address.trim().parse::<Ipv4Addr>().ok())
            .filter(|address| !address.is_loopback() && !address.is_unspecified())
            .collect()
    };
    let primary = parse(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default());
    if !primary.is_empty() {
        return primary;
    }
    parse(&std::fs::read_to_string("/run/systemd/resolve/resolv.conf").unwrap_or_default())
}

/// Helper side: creates the veth pair with `eth0` inside the sandbox's network namespace
/// (`netns` is an open `/proc/<pid>/ns/net`) and configures both ends.
pub fn setup_veth(network: &NetworkSpec, sandbox_pid: i32, netns: impl AsFd) -> io::Result<()> {
    let host = &network.host_interface;
    run_ip_batch(
        &format!(
            "link add {host} type veth peer name eth0 netns {sandbox_pid}\n\
             addr add {}/30 dev {host}\n\
             link set {host} up\n",
            network.host_address
        ),
        None,
    )?;
    // Without an IPv6 link-local address on the host end, the sandbox cannot reach the host
    // over IPv6 at all (the nftables table drops it too).
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{host}/disable_ipv6"), "1");
    run_ip_batch(
        &format!(
            "link set lo up\n\
             addr add {}/30 dev eth0\n\
             link set eth0 up\n\
             route add default via {}\n",
            network.sandbox_address, network.host_address
        ),
        Some(netns.as_fd()),
    )
}

fn run_ip_batch(batch: &str, netns: Option<std::os::fd::BorrowedFd<'_>>) -> io::Result<()> {
    let mut command = Command::new("ip");
    command
        .args(["-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(netns) = netns {
        let raw = std::os::fd::AsRawFd::as_raw_fd(&netns);
        // SAFETY: setns is async-signal-safe and touches only the child's own namespaces.
        unsafe {
            command.pre_exec(move || {
                if libc::setns(raw, libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = command.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(batch.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "ip -batch failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloud_metadata_addresses_are_blocked() {
        let rules = ruleset("t", "swabcd", ("10.213.0.0".parse().unwrap(), 16), &[]);
        for address in ["169.254.0.0/16", "168.63.129.16/32", "100.64.0.0/10"] {
            assert!(rules.contains(address), "{address} not blocked:\n{rules}");
        }
    }

    #[test]
    fn links_are_carved_round_robin_and_reused_after_release() {
        let pool = AddressPool::new(Ipv4Addr::new(10, 213, 0, 0), 29);
        let first = pool.allocate().unwrap();
        assert_eq!(
            (first.host, first.sandbox),
            (Ipv4Addr::new(10, 213, 0, 1), Ipv4Addr::new(10, 213, 0, 2))
        );
        let second = pool.allocate().unwrap();
        assert_eq!(second.sandbox, Ipv4Addr::new(10, 213, 0, 6));
        assert_eq!(pool.allocate(), None);
        pool.release(&first);
        assert_eq!(pool.allocate(), Some(first));
    }

    #[test]
    fn interface_names_fit_the_kernel_limit() {
        let prefix = interface_prefix("slipway");
        let link = Link {
            index: 16383,
            host: Ipv4Addr::LOCALHOST,
            sandbox: Ipv4Addr::LOCALHOST,
        };
        assert!(interface_name(&prefix, &link).len() <= 15);
        assert_ne!(interface_prefix("a"), interface_prefix("b"));
    }

    #[test]
    fn the_ruleset_blocks_the_host_and_allows_dns() {
        let rules = ruleset(
            "slipway",
            "sw1234",
            (Ipv4Addr::new(10, 213, 0, 0), 16),
            &[Ipv4Addr::new(10, 0, 0, 53)],
        );
        assert!(rules.contains("iifname \"sw1234*\" drop"));
        assert!(rules.contains("ip daddr { 10.0.0.53 } udp dport 53 accept"));
        assert!(rules.contains("ip saddr 10.213.0.0/16 oifname != \"sw1234*\" masquerade"));
        let dns = rules.find("dport 53").unwrap();
        let private = rules.find("10.0.0.0/8").unwrap();
        assert!(
            dns < private,
            "DNS must be allowed before private ranges are dropped"
        );
    }
}
