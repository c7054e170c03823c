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
//!
//! The one opening between sandboxes (add-ons, issue 34): a step's `reach` entries (TCP
//! address and port inside the subnet) are accepted in its own output chain before the
//! subnet is refused; a step with `serve_port` accepts new TCP connections to that port from
//! the subnet in its input chain; and the host forwards sandbox→sandbox only to an element
//! of its [`SERVED_SET`] (address . port of each running step that serves). A connection
//! needs both: the client's own allowance, which it cannot change (its table is in a network
//! namespace where it holds no capability), and a served destination.

use std::io::{self, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
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

/// The host table's set of served endpoints (`ipv4_addr . inet_service`): the only
/// sandbox→sandbox destinations the host forwards to.
pub const SERVED_SET: &str = "served";

/// What the per-sandbox table needs to know about the host (sent to the helper in the spec).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FirewallSpec {
    /// The IPv4 addresses the host had when the step was spawned (all interfaces).
    pub host_addresses: Vec<Ipv4Addr>,
    /// `sandbox.subnet`: every other sandbox.
    pub subnet: (Ipv4Addr, u8),
    pub allow_smtp: bool,
    /// Other sandboxes' TCP endpoints this one may connect to (`StepSpec::reach`).
    #[serde(default)]
    pub reach: Vec<SocketAddrV4>,
    /// The TCP port other sandboxes may connect to (`StepSpec::serve_port`).
    #[serde(default)]
    pub serve_port: Option<u16>,
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
    let reach: String = firewall
        .reach
        .iter()
        .map(|to| format!("    ip daddr {} tcp dport {} accept\n", to.ip(), to.port()))
        .collect();
    let served = firewall.serve_port.map_or(String::new(), |port| {
        format!("    ip saddr {network}/{prefix} tcp dport {port} ct state new accept\n")
    });
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
         {reach}\
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
         {served}\
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
         \x20 set {SERVED_SET} {{\n\
         \x20   type ipv4_addr . inet_service\n\
         \x20 }}\n\
         \x20 chain input {{\n\
         \x20   type filter hook input priority filter; policy accept;\n\
         \x20   iifname {sandboxes} ct state established,related accept\n\
         \x20   iifname {sandboxes} drop\n\
         \x20 }}\n\
         \x20 chain forward {{\n\
         \x20   type filter hook forward priority filter; policy accept;\n\
         \x20   iifname {sandboxes} oifname {sandboxes} ct state established,related accept\n\
         \x20   iifname {sandboxes} oifname {sandboxes} ip daddr . tcp dport @{SERVED_SET} accept\n\
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

/// Adds (`add: true`) or deletes endpoints of the host table's [`SERVED_SET`], as an
/// `nft -f` script; empty when there are none.
pub(crate) fn served_elements(table: &str, add: bool, endpoints: &[SocketAddrV4]) -> String {
    if endpoints.is_empty() {
        return String::new();
    }
    let verb = if add { "add" } else { "delete" };
    let elements = endpoints
        .iter()
        .map(|endpoint| format!("{} . {}", endpoint.ip(), endpoint.port()))
        .collect::<Vec<_>>()
        .join(", ");
    format!("{verb} element inet {table} {SERVED_SET} {{ {elements} }}\n")
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
            reach: Vec::new(),
            serve_port: None,
        }
    }

    fn position(rules: &str, needle: &str) -> usize {
        rules
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} missing:\n{rules}"))
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
        let position = |needle: &str| position(&rules, needle);
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

    #[test]
    fn reach_entries_are_accepted_before_the_subnet_is_refused() {
        let mut spec = firewall(false);
        spec.reach = vec![
            "10.213.0.6:5432".parse().unwrap(),
            "10.213.0.10:6379".parse().unwrap(),
        ];
        let rules = sandbox_ruleset(&spec, Ipv4Addr::new(10, 213, 0, 1), &[]);
        let subnet = position(&rules, "ip daddr 10.213.0.0/16 reject");
        for allowed in [
            "    ip daddr 10.213.0.6 tcp dport 5432 accept\n",
            "    ip daddr 10.213.0.10 tcp dport 6379 accept\n",
        ] {
            let at = position(&rules, allowed);
            assert!(at < subnet, "{allowed:?} after the subnet reject:\n{rules}");
            assert!(position(&rules, "ip daddr { 10.0.0.4, 10.213.0.1") < at);
            assert!(at < position(&rules, "chain input"), "{rules}");
        }
        // Nothing else opens: no input rule from the subnet without `serve_port`.
        assert!(!rules.contains("ip saddr 10.213.0.0/16"), "{rules}");
        let closed = sandbox_ruleset(&firewall(false), Ipv4Addr::new(10, 213, 0, 1), &[]);
        assert!(!closed.contains("tcp dport 5432"), "{closed}");
    }

    #[test]
    fn a_served_port_takes_new_connections_from_the_subnet_on_that_port_only() {
        let mut spec = firewall(false);
        spec.serve_port = Some(5432);
        let rules = sandbox_ruleset(&spec, Ipv4Addr::new(10, 213, 0, 5), &[]);
        let input = position(&rules, "chain input");
        let served = position(
            &rules,
            "    ip saddr 10.213.0.0/16 tcp dport 5432 ct state new accept\n",
        );
        assert!(input < served, "{rules}");
        assert_eq!(rules.matches("ip saddr").count(), 2, "{rules}");
        // Serving opens nothing outbound.
        assert!(!rules[..input].contains("5432"), "{rules}");
    }

    #[test]
    fn the_host_forwards_between_sandboxes_only_to_served_endpoints() {
        let rules = host_ruleset("t", "sw1234", (Ipv4Addr::new(10, 213, 0, 0), 16), &[]);
        let set = position(
            &rules,
            "set served {\n    type ipv4_addr . inet_service\n  }",
        );
        let between = "iifname \"sw1234*\" oifname \"sw1234*\"";
        let replies = position(
            &rules,
            &format!("{between} ct state established,related accept"),
        );
        let served = position(
            &rules,
            &format!("{between} ip daddr . tcp dport @served accept"),
        );
        let drop = position(&rules, &format!("{between} drop"));
        assert!(set < position(&rules, "chain forward"), "{rules}");
        assert!(replies < drop && served < drop, "{rules}");
        // The table starts with an empty set: leftovers of an earlier daemon are swept.
        assert!(!rules.contains("elements"), "{rules}");
    }

    #[test]
    fn served_elements_are_added_and_deleted_by_address_and_port() {
        let endpoints: Vec<SocketAddrV4> = vec![
            "10.213.0.6:5432".parse().unwrap(),
            "10.213.0.10:6379".parse().unwrap(),
        ];
        assert_eq!(
            served_elements("slipway", true, &endpoints),
            "add element inet slipway served { 10.213.0.6 . 5432, 10.213.0.10 . 6379 }\n"
        );
        assert_eq!(
            served_elements("slipway", false, &endpoints[..1]),
            "delete element inet slipway served { 10.213.0.6 . 5432 }\n"
        );
        assert_eq!(served_elements("slipway", true, &[]), "");
    }
}
