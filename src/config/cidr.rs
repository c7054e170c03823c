//! An address block (`10.0.0.0/8`, `::1/128`, or one address) as the config names it: the
//! operator's allow-list of notification destinations (`[notifications] allow_destinations`).

use std::net::IpAddr;

/// An address and a prefix length; addresses match when their first `prefix` bits do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// `address/prefix`, or an address alone (all its bits).
    pub fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr.parse::<IpAddr>().ok()?, Some(prefix.parse().ok()?)),
            None => (text.parse::<IpAddr>().ok()?, None),
        };
        let bits = match addr {
            IpAddr::V4(_) => 32,
            IpAddr::V6(_) => 128,
        };
        let prefix = prefix.unwrap_or(bits);
        (prefix <= bits).then_some(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let keep = |bits: u32, value: u128| match self.prefix {
            0 => 0,
            prefix => value >> (bits - u32::from(prefix)),
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                keep(32, u32::from(net).into()) == keep(32, u32::from(ip).into())
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                keep(128, u128::from(net)) == keep(128, u128::from(ip))
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_match_their_addresses_only() {
        let loopback = Cidr::parse("127.0.0.0/8").unwrap();
        assert!(loopback.contains("127.9.9.9".parse().unwrap()));
        assert!(!loopback.contains("128.0.0.1".parse().unwrap()));
        assert!(!loopback.contains("::1".parse().unwrap()));
        let one = Cidr::parse("::1").unwrap();
        assert!(one.contains("::1".parse().unwrap()));
        assert!(!one.contains("::2".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        assert_eq!(Cidr::parse("10.0.0.0/33"), None);
        assert_eq!(Cidr::parse("10.0.0/8"), None);
        assert_eq!(Cidr::parse("fe80::/10").unwrap().to_string(), "fe80::/10");
    }
}
