//! `[domains]` and the custom-domain keys of `[tls]`: which names need no proof of ownership,
//! which DNS server is asked for the proofs, which names the `internal` custom-domains root may
//! sign, and how many new ACME orders an hour the daemon and each project may place.

use std::net::SocketAddr;

use serde::Deserialize;

use super::ConfigError;

/// `[domains]`, validated.
#[derive(Debug, Clone)]
pub struct DomainsConfig {
    /// `trusted_suffixes`: a custom domain equal to or under one of these needs no TXT proof
    /// (the operator vouches for every tenant who claims one). `--dev` default: `localhost`
    /// and `test`; otherwise none.
    pub trusted_suffixes: Vec<String>,
    /// `nameserver`: the DNS server (`ip:port`, UDP and TCP) asked for
    /// `_slipway-challenge.<name>` TXT records; `None`: the system's (`/etc/resolv.conf`).
    pub nameserver: Option<SocketAddr>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDomains {
    trusted_suffixes: Option<Vec<String>>,
    nameserver: Option<String>,
}

/// The suffixes `--dev` trusts without setup: names nobody can own on the public DNS
/// (RFC 6761 `localhost`, RFC 2606 `test`).
pub const DEV_SUFFIXES: [&str; 2] = ["localhost", "test"];

impl RawDomains {
    pub(super) fn validate(self, dev: bool) -> Result<DomainsConfig, ConfigError> {
        let trusted_suffixes = suffixes("domains.trusted_suffixes", self.trusted_suffixes, dev)?;
        let nameserver = match self.nameserver.filter(|text| !text.is_empty()) {
            None => None,
            Some(text) => Some(text.parse().map_err(|_| ConfigError::Invalid {
                key: "domains.nameserver".into(),
                message: format!("{text:?} is not an address like \"127.0.0.1:53\""),
            })?),
        };
        Ok(DomainsConfig {
            trusted_suffixes,
            nameserver,
        })
    }
}

/// A list of DNS suffixes as written (`key` names it in errors), lowercased without a
/// trailing dot; `None` takes the `--dev` default or nothing.
pub(super) fn suffixes(
    key: &'static str,
    written: Option<Vec<String>>,
    dev: bool,
) -> Result<Vec<String>, ConfigError> {
    let written = written.unwrap_or_else(|| match dev {
        true => DEV_SUFFIXES.map(String::from).to_vec(),
        false => Vec::new(),
    });
    let mut suffixes = Vec::with_capacity(written.len());
    for suffix in written {
        let lowered = suffix.trim_end_matches('.').to_ascii_lowercase();
        if !super::is_hostname(&lowered) {
            return Err(ConfigError::Invalid {
                key: key.into(),
                message: format!("{suffix:?} is not a DNS name (write \"example.com\", no \"*.\")"),
            });
        }
        suffixes.push(lowered);
    }
    Ok(suffixes)
}

/// True when `name` is `suffix` or a name under it.
pub fn under_suffix(name: &str, suffix: &str) -> bool {
    name == suffix
        || name
            .strip_suffix(suffix)
            .is_some_and(|rest| rest.ends_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suffix_covers_itself_and_names_under_it_only() {
        assert!(under_suffix("example.com", "example.com"));
        assert!(under_suffix("a.b.example.com", "example.com"));
        assert!(!under_suffix("badexample.com", "example.com"));
        assert!(!under_suffix("example.com.evil", "example.com"));
    }

    #[test]
    fn suffixes_are_checked_and_dev_trusts_reserved_names() {
        assert_eq!(suffixes("k", None, true).unwrap(), ["localhost", "test"]);
        assert!(suffixes("k", None, false).unwrap().is_empty());
        assert_eq!(
            suffixes("k", Some(vec!["Example.COM.".into()]), false).unwrap(),
            ["example.com"]
        );
        assert!(suffixes("k", Some(vec!["*.example.com".into()]), false).is_err());
    }
}
