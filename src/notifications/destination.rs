//! Where a webhook may go (issue 31, item 12). Loopback, link-local (the cloud metadata
//! service at 169.254.169.254 included), private, unique-local, CGNAT, unspecified, multicast
//! and broadcast addresses — also written as IPv4-mapped IPv6 — are refused unless the
//! operator allows their block (`[notifications] allow_destinations`). A name is resolved
//! once per attempt and the connection goes to an address that was checked, so a DNS answer
//! that changes between the check and the connection cannot lead inside. Checked when a
//! subscription is made (`api/notifications.rs`) and before every attempt (`delivery.rs`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use crate::config::Cidr;

/// How long resolving a receiver's name may take.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a destination cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    /// An address in a refused block: the message names the block, never probes it.
    #[error("{host} is {what} ({ip}); notifications may not go to loopback, link-local or private addresses unless the operator allows them ([notifications] allow_destinations)")]
    Refused {
        host: String,
        ip: IpAddr,
        what: &'static str,
    },
    #[error("the receiver's name {0} does not resolve")]
    Unresolved(String),
}

/// The refused blocks and the operator's exceptions.
#[derive(Debug, Clone, Default)]
pub struct Destinations {
    allowed: Vec<Cidr>,
}

impl Destinations {
    pub fn new(allowed: Vec<Cidr>) -> Destinations {
        Destinations { allowed }
    }

    /// `Ok` when `ip` is public or in an allowed block; otherwise the refusal.
    pub fn check(&self, host: &str, ip: IpAddr) -> Result<(), DestinationError> {
        let ip = canonical(ip);
        let Some(what) = internal(ip) else {
            return Ok(());
        };
        if self.allowed.iter().any(|block| block.contains(ip)) {
            return Ok(());
        }
        Err(DestinationError::Refused {
            host: host.to_owned(),
            ip,
            what,
        })
    }

    /// Every address of `host` (an IP literal or a name, resolved once), all checked: one
    /// refused address refuses the name, so which one a connection would use never matters.
    pub async fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Vec<SocketAddr>, DestinationError> {
        let literal = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match literal.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => {
                let lookup = tokio::net::lookup_host((host, port));
                match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
                    Ok(Ok(found)) => found.collect(),
                    _ => Vec::new(),
                }
            }
        };
        if addrs.is_empty() {
            return Err(DestinationError::Unresolved(host.to_owned()));
        }
        for addr in &addrs {
            self.check(host, addr.ip())?;
        }
        Ok(addrs)
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it reaches.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// What kind of internal address `ip` is, or `None` for a public one.
fn internal(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

fn internal_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    Some(match () {
        _ if ip.is_loopback() => "a loopback address",
        _ if ip.is_link_local() => "a link-local address",
        _ if ip.is_private() => "a private address",
        _ if a == 0 => "an unspecified address",
        _ if a == 100 && (64..128).contains(&b) => "a shared (CGNAT) address",
        _ if ip.is_multicast() || ip.is_broadcast() || a >= 240 => {
            "a multicast or reserved address"
        }
        _ => return None,
    })
}

fn internal_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    Some(match () {
        _ if ip.is_loopback() => "a loopback address",
        _ if ip.is_unspecified() => "an unspecified address",
        _ if first & 0xffc0 == 0xfe80 => "a link-local address",
        _ if first & 0xffc0 == 0xfec0 => "a site-local address",
        _ if first & 0xfe00 == 0xfc00 => "a unique local (private) address",
        _ if ip.is_multicast() => "a multicast address",
        // IPv4-compatible (`::a.b.c.d`, deprecated) and NAT64 (`64:ff9b::/96`) forms reach
        // the IPv4 address they embed: judged by it.
        _ if ip.segments()[..6] == [0; 6] || ip.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] => {
            let [.., c, d] = ip.segments();
            let embedded = Ipv4Addr::from((u32::from(c) << 16) | u32::from(d));
            return internal_v4(embedded);
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(destinations: &Destinations, ip: &str) -> bool {
        destinations.check("h", ip.parse().unwrap()).is_err()
    }

    #[test]
    fn internal_blocks_are_refused_in_every_spelling() {
        let none = Destinations::default();
        for ip in [
            "127.0.0.1",
            "127.8.0.1",
            "169.254.169.254",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "fc00::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(refused(&none, ip), "{ip} was allowed");
        }
        for ip in [
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "2001:4860:4860::8888",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(!refused(&none, ip), "{ip} was refused");
        }
    }

    #[test]
    fn the_operator_allows_blocks_mapped_forms_included() {
        let loopback = Destinations::new(vec![Cidr::parse("127.0.0.0/8").unwrap()]);
        assert!(!refused(&loopback, "127.0.0.1"));
        assert!(!refused(&loopback, "::ffff:127.0.0.1"));
        assert!(refused(&loopback, "::1"));
        assert!(refused(&loopback, "169.254.169.254"));
        let message = loopback
            .check("metadata.internal", "169.254.169.254".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(message.contains("link-local"), "{message}");
    }

    #[tokio::test]
    async fn names_are_resolved_once_and_every_address_checked() {
        let none = Destinations::default();
        assert!(matches!(
            none.resolve("localhost", 80).await,
            Err(DestinationError::Refused { .. })
        ));
        assert!(matches!(
            none.resolve("[::1]", 80).await,
            Err(DestinationError::Refused { .. })
        ));
        let both = Destinations::new(vec![
            Cidr::parse("127.0.0.0/8").unwrap(),
            Cidr::parse("::1").unwrap(),
        ]);
        let addrs = both.resolve("localhost", 8080).await.unwrap();
        assert!(addrs
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 8080));
    }
}
