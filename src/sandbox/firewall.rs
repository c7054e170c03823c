//! Sandbox packet filtering, in two layers that do not depend on each other.
//!
//! - [`sandbox_ruleset`]: a table inside each sandbox's own network namespace, installed by
//!   the helper ([`super::exec`]) before the sandbox starts. It decides what the sandbox may
//!   reach. The sandbox holds no capability in its namespaces, so it cannot change the table,
//!   and the host's ruleset (`nft flush ruleset`, `systemctl reload nftables`) cannot remove
//!   it: isolation does not depend on the host's firewall.
//! - [`host_ruleset`]: the daemon's own table on the host ([`super::ns`]): NAT for egress, and
//!   a second copy of the isolation rules. If the host's ruleset is flushed, egress stops
//!   until the runner puts the table back (before every spawn and every
//!   [`HOST_TABLE_CHECK`]); isolation holds meanwhile.
//!
//! Policy for a sandbox: TCP to public addresses; DNS (UDP and TCP 53) to the host's resolvers
//! only; no other UDP; no IPv6 beyond its own loopback; nothing to the host (any of its
//! addresses), other sandboxes, private, link-local and metadata ranges; no SMTP
//! (25, 465, 587) unless `sandbox.allow_smtp`; at most [`MAX_CONNECTIONS`] tracked connections
//! at once. Inbound, only the host's end of the link (the router, health checks) may open
//! connections.

use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::os::fd::BorrowedFd;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

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

/// Outbound mail ports, refused unless `sandbox.allow_smtp`: a tenant sending spam gets the
/// operator's addresses blocklisted.
const SMTP_PORTS: &str = "25, 465, 587";

/// Connections a sandbox may have tracked at once (its own conntrack table; each of them
/// costs an entry in the host's too). Closed TCP connections do not count.
pub const MAX_CONNECTIONS: u32 = 1024;

/// How often the runner checks that its host table is still installed.
pub const HOST_TABLE_CHECK: Duration = Duration::from_secs(30);

/// The name of the table inside every sandbox's network namespace.
const SANDBOX_TABLE: &str = "sandbox";

/// What the per-sandbox table needs to know about the host (sent to the helper in the spec).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FirewallSpec {
    /// The IPv4 addresses the host had when the step was spawned (all interfaces).
    pub host_addresses: Vec<Ipv4Addr>,
    /// `sandbox.subnet`: every other sandbox.
    pub subnet: (Ipv4Addr, u8),
    pub allow_smtp: bool,
}

/// The table inside one sandbox's network namespace (`host_end` is the host's end of its
/// link, the only address that may connect in).
pub(crate) fn sandbox_ruleset(
    firewall: &FirewallSpec,
    host_end: Ipv4Addr,
    nameservers: &[Ipv4Addr],
) -> String {
    let mut host: Vec<Ipv4Addr> = firewall.host_addresses.clone();
    host.push(host_end);
    host.sort();
    host.dedup();
    let host = join(&host);
    let mut dns = String::new();
    if !nameservers.is_empty() {
        let servers = join(nameservers);
        dns = format!(
            "    ip daddr {{ {servers} }} udp dport 53 accept\n    \
             ip daddr {{ {servers} }} tcp dport 53 accept\n"
        );
    }
    let smtp = if firewall.allow_smtp {
        String::new()
    } else {
        format!("    tcp dport {{ {SMTP_PORTS} }} reject with tcp reset\n")
    };
    let (network, prefix) = firewall.subnet;
    let blocked = BLOCKED_RANGES.join(", ");
    format!(
        "table inet {SANDBOX_TABLE} {{\n\
         \x20 chain output {{\n\
         \x20   type filter hook output priority filter; policy drop;\n\
         \x20   oifname \"lo\" accept\n\
         \x20   ct state established,related accept\n\
         \x20   meta nfproto ipv6 drop\n\
         \x20   ct state new ct count over {MAX_CONNECTIONS} reject with icmpx admin-prohibited\n\
         \x20   ip daddr {{ {host} }} reject with icmpx admin-prohibited\n\
         {dns}\
         \x20   ip daddr {network}/{prefix} reject with icmpx admin-prohibited\n\
         \x20   ip daddr {{ {blocked} }} reject with icmpx admin-prohibited\n\
         {smtp}\
         \x20   meta l4proto tcp accept\n\
         \x20   reject with icmpx admin-prohibited\n\
         \x20 }}\n\
         \x20 chain input {{\n\
         \x20   type filter hook input priority filter; policy drop;\n\
         \x20   iifname \"lo\" accept\n\
         \x20   ct state established,related accept\n\
         \x20   ip saddr {host_end} accept\n\
         \x20 }}\n\
         }}\n"
    )
}

/// The daemon's table on the host, as one `nft -f` transaction that replaces any older copy.
pub fn host_ruleset(
    table: &str,
    prefix: &str,
    subnet: (Ipv4Addr, u8),
    nameservers: &[Ipv4Addr],
) -> String {
    let sandboxes = format!("\"{prefix}*\"");
    let blocked = BLOCKED_RANGES.join(", ");
    let mut dns = String::new();
    if !nameservers.is_empty() {
        let servers = join(nameservers);
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

fn join(addresses: &[Ipv4Addr]) -> String {
    addresses
        .iter()
        .map(|address| address.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `nft -f -` with `script` on stdin, in the network namespace `netns` if given (the
/// helper's way into a sandbox), else in the caller's.
pub fn nft_apply(script: &str, netns: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let mut command = Command::new("nft");
    command.args(["-f", "-"]);
    run_with_stdin(command, script, netns)
}

/// Whether the host table `inet <table>` is installed.
pub fn nft_table_exists(table: &str) -> bool {
    Command::new("nft")
        .args(["list", "table", "inet", table])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

pub fn nft_delete_table(table: &str) -> io::Result<()> {
    nft_apply(
        &format!("table inet {table} {{}}\ndelete table inet {table}\n"),
        None,
    )
}

/// Runs `command` with `input` on its stdin, inside `netns` if given; an unsuccessful exit is
/// an error carrying the command's stderr.
pub(crate) fn run_with_stdin(
    mut command: Command,
    input: &str,
    netns: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    // The helper's environment is empty: name where `ip` and `nft` live.
    command
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(netns) = netns {
        crate::sys::process::enter_netns_at_exec(&mut command, netns);
    }
    let name = command.get_program().to_string_lossy().into_owned();
    let mut child = command.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes())?;
    }
    let output = child.wait_with_output()?;
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "{name} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn firewall(allow_smtp: bool) -> FirewallSpec {
        FirewallSpec {
            host_addresses: vec![Ipv4Addr::new(203, 0, 113, 7), Ipv4Addr::new(10, 0, 0, 4)],
            subnet: (Ipv4Addr::new(10, 213, 0, 0), 16),
            allow_smtp,
        }
    }

    #[test]
    fn cloud_metadata_addresses_are_blocked() {
        let host = host_ruleset("t", "swabcd", ("10.213.0.0".parse().unwrap(), 16), &[]);
        let sandbox = sandbox_ruleset(&firewall(false), Ipv4Addr::new(10, 213, 0, 1), &[]);
        for rules in [host, sandbox] {
            for address in ["169.254.0.0/16", "168.63.129.16/32", "100.64.0.0/10"] {
                assert!(rules.contains(address), "{address} not blocked:\n{rules}");
            }
        }
    }

    #[test]
    fn the_host_ruleset_blocks_the_host_and_allows_dns() {
        let rules = host_ruleset(
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

    /// The order of the sandbox's output rules is the policy: each line is checked to come
    /// after the ones it must not shadow.
    #[test]
    fn the_sandbox_ruleset_allows_dns_and_tcp_but_not_the_host_smtp_or_other_udp() {
        let rules = sandbox_ruleset(
            &firewall(false),
            Ipv4Addr::new(10, 213, 0, 1),
            &[Ipv4Addr::new(10, 255, 255, 53)],
        );
        let position = |needle: &str| {
            rules
                .find(needle)
                .unwrap_or_else(|| panic!("{needle:?} missing:\n{rules}"))
        };
        let in_order = [
            "policy drop",
            "oifname \"lo\" accept",
            "ct state established,related accept",
            "meta nfproto ipv6 drop",
            "ct count over 1024",
            "ip daddr { 10.0.0.4, 10.213.0.1, 203.0.113.7 } reject",
            "ip daddr { 10.255.255.53 } udp dport 53 accept",
            "ip daddr 10.213.0.0/16 reject",
            "ip daddr { 0.0.0.0/8, 10.0.0.0/8",
            "tcp dport { 25, 465, 587 } reject",
            "meta l4proto tcp accept",
            "    reject with icmpx admin-prohibited\n  }",
            "ip saddr 10.213.0.1 accept",
        ];
        for pair in in_order.windows(2) {
            assert!(
                position(pair[0]) < position(pair[1]),
                "{:?} must come before {:?}:\n{rules}",
                pair[0],
                pair[1]
            );
        }
        assert!(!rules.contains("udp accept"), "{rules}");
    }

    #[test]
    fn smtp_is_allowed_only_when_configured() {
        let host_end = Ipv4Addr::new(10, 213, 0, 1);
        assert!(!sandbox_ruleset(&firewall(true), host_end, &[]).contains("dport { 25"));
        assert!(sandbox_ruleset(&firewall(false), host_end, &[]).contains("dport { 25"));
    }

    #[test]
    fn without_resolvers_no_dns_is_allowed() {
        let rules = sandbox_ruleset(&firewall(false), Ipv4Addr::new(10, 213, 0, 1), &[]);
        assert!(!rules.contains("dport 53"), "{rules}");
    }
}
