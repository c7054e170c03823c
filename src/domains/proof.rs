//! Proof that whoever adds a custom domain controls it, before it is routed or given a
//! certificate: a TXT record `_slipway-challenge.<name>` holding the project's token
//! (`slipway-verify=<32 hex>`, an HMAC of the project id under the daemon's key, so it is
//! the same for every name of the project and no other project has it), or the name is under
//! one of the operator's `domains.trusted_suffixes`. Names under `localhost` (RFC 6761: always
//! loopback, owned by nobody) need no proof either.
//!
//! The DNS server asked is `domains.nameserver` (default: the system's), through
//! hickory-resolver with no cache, so a re-check sees a record the moment it is published.

use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::TokioResolver;

use crate::config::{under_suffix, DomainsConfig};
use crate::secrets::SecretBox;

/// The label the TXT record is published under.
pub const CHALLENGE_LABEL: &str = "_slipway-challenge";
/// What the record's text starts with.
pub const CHALLENGE_PREFIX: &str = "slipway-verify=";

/// The record a project's owner publishes to prove `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// `_slipway-challenge.<name>`.
    pub record_name: String,
    /// `slipway-verify=<token>`.
    pub value: String,
}

/// How a name was proven, or why it is not (yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The TXT record holds the project's token.
    Txt,
    /// The name is under this operator-trusted suffix.
    Trusted(String),
    /// Not proven, and why (a sentence for `lastError`).
    Missing(String),
}

pub struct Proofs {
    /// `None` when the system's resolver configuration could not be read (the reason).
    resolver: Result<TokioResolver, String>,
    trusted_suffixes: Vec<String>,
    secrets: Arc<SecretBox>,
}

impl Proofs {
    pub fn new(config: &DomainsConfig, secrets: Arc<SecretBox>) -> Proofs {
        let mut options = ResolverOpts::default();
        options.cache_size = 0;
        options.timeout = Duration::from_secs(3);
        options.attempts = 2;
        let builder = match config.nameserver {
            Some(address) => Ok(TokioResolver::builder_with_config(
                ResolverConfig::from_parts(
                    None,
                    Vec::new(),
                    NameServerConfigGroup::from_ips_clear(&[address.ip()], address.port(), true),
                ),
                TokioConnectionProvider::default(),
            )),
            None => TokioResolver::builder_tokio().map_err(|error| {
                tracing::warn!(%error, "no system DNS resolver: custom domains can be proven only by domains.trusted_suffixes until domains.nameserver is set");
                format!("the daemon has no DNS resolver ({error}); set domains.nameserver")
            }),
        };
        Proofs {
            resolver: builder.map(|builder| builder.with_options(options).build()),
            trusted_suffixes: config.trusted_suffixes.clone(),
            secrets,
        }
    }

    /// The record that proves `name` for the project `project_id`.
    pub fn challenge(&self, project_id: &str, name: &str) -> Challenge {
        let tag = self.secrets.tag(&format!("domain-challenge:{project_id}"));
        Challenge {
            record_name: format!("{CHALLENGE_LABEL}.{name}"),
            value: format!("{CHALLENGE_PREFIX}{}", crate::ids::hex(&tag[..16])),
        }
    }

    /// The suffix that vouches for `name` without a record, if any.
    pub fn trusted_suffix(&self, name: &str) -> Option<String> {
        if under_suffix(name, "localhost") {
            return Some("localhost".to_owned());
        }
        self.trusted_suffixes
            .iter()
            .find(|suffix| under_suffix(name, suffix))
            .cloned()
    }

    /// Checks `name` for the project `project_id` now: a trusted suffix, or the TXT record.
    pub async fn check(&self, project_id: &str, name: &str) -> Outcome {
        if let Some(suffix) = self.trusted_suffix(name) {
            return Outcome::Trusted(suffix);
        }
        let challenge = self.challenge(project_id, name);
        let resolver = match &self.resolver {
            Ok(resolver) => resolver,
            Err(reason) => return Outcome::Missing(reason.clone()),
        };
        let fqdn = format!("{}.", challenge.record_name);
        let texts: Vec<String> = match resolver.txt_lookup(fqdn).await {
            Ok(lookup) => lookup
                .iter()
                .map(|txt| {
                    txt.txt_data()
                        .iter()
                        .map(|part| String::from_utf8_lossy(part))
                        .collect()
                })
                .collect(),
            Err(error) if error.is_no_records_found() => Vec::new(),
            Err(error) => {
                return Outcome::Missing(format!(
                    "looking up TXT {} failed: {error}",
                    challenge.record_name
                ))
            }
        };
        match texts.iter().any(|text| text.trim() == challenge.value) {
            true => Outcome::Txt,
            false if texts.is_empty() => Outcome::Missing(format!(
                "no TXT record {} yet; create it with the value {}",
                challenge.record_name, challenge.value
            )),
            false => Outcome::Missing(format!(
                "TXT {} holds {} record(s), none of them {} (the value of this project)",
                challenge.record_name,
                texts.len(),
                challenge.value
            )),
        }
    }
}
