//! Sandbox networking: /30 links carved from `sandbox.subnet`, veth pairs, IPv4 forwarding,
//! and what the sandboxes learn of the host's addresses and resolvers. What a sandbox may
//! reach is [`super::firewall`]'s.
//!
//! The daemon side ([`super::ns`]) allocates links and sweeps stale interfaces; the helper
//! side ([`super::exec`]) creates the veth pair once the sandbox's network namespace exists,
//! with the `ip` command.

use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::firewall::run_with_stdin;
use super::spec::NetworkSpec;

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
                return Some(self.link(index));
            }
        }
        None
    }

    /// The link at `index`, marked taken (an adopted app's).
    pub fn claim(&self, index: u32) -> Link {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(slot) = state.used.get_mut(index as usize) {
            *slot = true;
        }
        self.link(index)
    }

    /// Whether `index` is a link of the subnet.
    pub fn contains(&self, index: u32) -> bool {
        index < self.slots
    }

    /// The index of the link whose sandbox end is `address`, if it is one.
    pub fn sandbox_index(&self, address: Ipv4Addr) -> Option<u32> {
        let offset = u32::from(address).checked_sub(self.network)?;
        (offset % 4 == 2 && offset / 4 < self.slots).then_some(offset / 4)
    }

    /// The addresses of the link at `index`.
    pub fn link(&self, index: u32) -> Link {
        let base = self.network + index * 4;
        Link {
            index,
            host: Ipv4Addr::from(base + 1),
            sandbox: Ipv4Addr::from(base + 2),
        }
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

/// Deletes leftover host ends of veth pairs with this prefix (their peers go with them),
/// except those of adopted apps (`keep`).
pub fn sweep_interfaces(prefix: &str, keep: &std::collections::HashSet<String>) -> io::Result<()> {
    let output = Command::new("ip")
        .args(["-o", "link", "show"])
        .stderr(Stdio::null())
        .output()?;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name);
        if name.starts_with(prefix) && !keep.contains(name) {
            let _ = Command::new("ip")
                .args(["link", "del", name])
                .stderr(Stdio::null())
                .status();
        }
    }
    Ok(())
}

/// Turns on IPv4 forwarding, which NAT egress needs, if it is off (returns whether it was).
/// It is left on at shutdown, as other services on the machine may rely on it by then.
/// IPv6 forwarding is never touched: sandboxes have no IPv6 beyond their loopback.
pub fn enable_forwarding() -> io::Result<bool> {
    const PATH: &str = "/proc/sys/net/ipv4/ip_forward";
    if std::fs::read_to_string(PATH)?.trim() == "1" {
        return Ok(false);
    }
    std::fs::write(PATH, "1")?;
    Ok(true)
}

/// The host's IPv4 addresses a sandbox could otherwise reach through its link: every
/// interface's, except loopback and the links of `subnet` (sandboxes' own links are blocked
/// as a range).
pub fn host_addresses(subnet: (Ipv4Addr, u8)) -> io::Result<Vec<Ipv4Addr>> {
    let mut addresses: Vec<Ipv4Addr> = nix::ifaddrs::getifaddrs()?
        .filter_map(|interface| {
            let address = interface.address?;
            Some(address.as_sockaddr_in()?.ip())
        })
        .filter(|address| !address.is_loopback() && !in_subnet(*address, subnet))
        .collect();
    addresses.sort();
    addresses.dedup();
    Ok(addresses)
}

fn in_subnet(address: Ipv4Addr, (network, prefix): (Ipv4Addr, u8)) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
    u32::from(address) & mask == u32::from(network) & mask
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
/// (`netns` is an open `/proc/<pid>/ns/net`), configures both ends and waits until the kernel
/// has put the host end to work.
pub fn setup_veth(network: &NetworkSpec, sandbox_pid: i32, netns: impl AsFd) -> io::Result<()> {
    let host = &network.host_interface;
    wait_gone(host)?;
    ip_batch(
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
    // No IPv6 address on `eth0` either (not even link-local): the sandbox's only IPv6 is its
    // loopback, and its own table drops any other.
    ip_batch(
        &format!(
            "link set lo up\n\
             addr add {}/30 dev eth0\n\
             link set eth0 addrgenmode none\n\
             link set eth0 up\n\
             route add default via {}\n",
            network.sandbox_address, network.host_address
        ),
        Some(netns.as_fd()),
    )?;
    wait_operational(host);
    Ok(())
}

/// How long the helper waits for the interface of a link's previous step to go.
const PREVIOUS_GONE_WITHIN: Duration = Duration::from_secs(10);

/// Waits until no interface is named `interface`, then removes it if it stayed. A pinned link
/// (`StepSpec::link`) belongs to one add-on, whose previous server the supervisor stopped
/// before starting this one; the kernel tears its network namespace down later, and under
/// load (CI's parallel add-on tests) the old veth outlived the wait — 30 s once — and the
/// restart failed with "still in use". Its pair is removed with it; nothing else uses a link
/// pinned to this step's add-on.
fn wait_gone(interface: &str) -> io::Result<()> {
    let path = format!("/sys/class/net/{interface}");
    let deadline = Instant::now() + PREVIOUS_GONE_WITHIN;
    while std::path::Path::new(&path).exists() {
        if Instant::now() >= deadline {
            eprintln!(
                "slipway sandbox: the link's interface {interface} outlived its previous step \
                 by {} s; removing it",
                PREVIOUS_GONE_WITHIN.as_secs()
            );
            return match ip_batch(&format!("link del {interface}\n"), None) {
                Ok(()) => Ok(()),
                // Gone meanwhile.
                Err(_) if !std::path::Path::new(&path).exists() => Ok(()),
                Err(error) => Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("the link's interface {interface} is still in use: {error}"),
                )),
            };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// How long the helper waits for the kernel to put the host end of a new link to work.
const LINK_UP_WITHIN: Duration = Duration::from_secs(2);

/// Waits until the host end `interface` is operational. `eth0` came up second, so the kernel
/// started its queue at once; the host end got its carrier from `eth0` and is started later by
/// the kernel's link watcher, which needs the RTNL lock that every namespace and link being
/// made on the machine takes too. Until then whatever the host sends on the link is dropped
/// unseen, a neighbour request included, and the first connection to the sandbox waits a
/// second for the next one (issue 29 §4). The link watcher sets `operstate` just before it
/// starts the queue, and the sandbox's firewall is installed after this, so by the time the
/// daemon hears the sandbox is reachable the queue runs. A link still down after
/// [`LINK_UP_WITHIN`] is said on stderr (the step's log) and left to TCP's retransmissions.
fn wait_operational(interface: &str) {
    let path = format!("/sys/class/net/{interface}/operstate");
    let deadline = Instant::now() + LINK_UP_WITHIN;
    loop {
        let state = std::fs::read_to_string(&path).unwrap_or_default();
        if state.trim() == "up" {
            return;
        }
        if Instant::now() >= deadline {
            let _ = writeln!(
                io::stderr(),
                "slipway sandbox: the sandbox's link is not up after {} s (operstate {:?})",
                LINK_UP_WITHIN.as_secs(),
                state.trim()
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn ip_batch(batch: &str, netns: Option<std::os::fd::BorrowedFd<'_>>) -> io::Result<()> {
    let mut command = Command::new("ip");
    command.args(["-batch", "-"]);
    run_with_stdin(command, batch, netns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnet_membership_follows_the_prefix() {
        let subnet = (Ipv4Addr::new(10, 213, 0, 0), 16);
        assert!(in_subnet(Ipv4Addr::new(10, 213, 7, 1), subnet));
        assert!(!in_subnet(Ipv4Addr::new(10, 214, 0, 1), subnet));
        assert!(in_subnet(
            Ipv4Addr::new(1, 2, 3, 4),
            (Ipv4Addr::UNSPECIFIED, 0)
        ));
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
    fn a_sandbox_address_names_its_link() {
        let pool = AddressPool::new(Ipv4Addr::new(10, 213, 0, 0), 24);
        assert_eq!(pool.sandbox_index(Ipv4Addr::new(10, 213, 0, 6)), Some(1));
        assert_eq!(pool.link(1).sandbox, Ipv4Addr::new(10, 213, 0, 6));
        for other in [
            [10, 213, 0, 5],
            [10, 213, 0, 7],
            [10, 213, 1, 2],
            [10, 212, 0, 2],
        ] {
            assert_eq!(pool.sandbox_index(Ipv4Addr::from(other)), None, "{other:?}");
        }
        assert!(pool.contains(63) && !pool.contains(64));
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
}
