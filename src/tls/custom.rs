//! Certificates for the projects' custom domains. `domains/` tells the manager which names
//! are custom domains ([`TlsManager::add_custom_name`], at start-up and when one is added);
//! from then on they are managed like slug hosts: issued at once in `internal` mode (by a
//! second root, see [`internal_ca::create_domains_ca`]), through ACME with the same backoff
//! and renewal, or looked up in the operator's files. [`TlsManager::certificate_state`] says
//! what is served for a name right now; [`TlsManager::forget`] drops a name again.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard};

use super::certs::LeafFacts;
use super::internal_ca::{self, InternalCa};
use super::store::{blocking, keys, CaRecord, CertRecord};
use super::{ServedCert, TlsError, TlsManager};
use crate::config::TlsMode;

/// What a name has right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateState {
    /// `tls.mode = "off"`: served over plain HTTP, no certificate.
    Plain,
    /// A valid certificate covering the name is served.
    Served {
        issuer: String,
        not_before: u64,
        not_after: u64,
    },
    /// Being issued.
    Pending,
    /// Not served, and why.
    Failed(String),
}

impl TlsManager {
    pub(super) fn custom_names(&self) -> MutexGuard<'_, HashMap<String, String>> {
        self.custom_names
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes `name` (already validated by `domains::name`, its ownership proven) a name this
    /// daemon holds a certificate for, on behalf of the project `project_id`: serves the stored
    /// one if there is one, then gets one as [`TlsManager::ensure_certificate`] does (`acme`:
    /// in the background, spending the project's order budget).
    pub async fn add_custom_name(
        self: &Arc<Self>,
        name: &str,
        project_id: &str,
    ) -> Result<(), TlsError> {
        if let Some(refusal) = self.custom_name_refusal(name) {
            return Err(TlsError::NameNotAllowed(refusal));
        }
        self.custom_names()
            .insert(name.to_owned(), project_id.to_owned());
        if self.resolver.exact(name).is_none() {
            if let Some(key) = self.cert_key(name) {
                if let Some(record) = blocking::read_json::<CertRecord>(&self.store, &key).await? {
                    match ServedCert::from_record(&record) {
                        Ok(served) => self.resolver.insert(name, Arc::new(served)),
                        Err(error) => {
                            tracing::warn!(%name, %error, "ignoring a stored certificate")
                        }
                    }
                }
            }
        }
        self.ensure_certificate(name).await
    }

    /// Stops holding certificates for a custom domain (deleted, or its project was).
    pub async fn remove_custom_name(&self, name: &str) -> Result<(), TlsError> {
        let result = self.forget(name).await;
        self.custom_names().remove(name);
        result
    }

    /// What is served for `name` right now. In `files` mode the operator's certificate must
    /// list the name (or a wildcard over it); the default certificate alone does not count.
    pub fn certificate_state(&self, name: &str) -> CertificateState {
        let now = self.clock.now();
        if self.mode == TlsMode::Off {
            return CertificateState::Plain;
        }
        let served = match self.mode {
            TlsMode::Files => self.resolver.lookup(name),
            _ => self.resolver.exact(name),
        };
        let facts = served
            .as_ref()
            .filter(|cert| !cert.expired(now))
            .and_then(|cert| LeafFacts::parse(cert.certified_key.cert.first()?).ok());
        if let Some(facts) = facts.filter(|facts| covers(&facts.dns_names, name)) {
            return CertificateState::Served {
                issuer: facts.issuer,
                not_before: facts.not_before,
                not_after: facts.not_after,
            };
        }
        match self.mode {
            TlsMode::Files => CertificateState::Failed(match served {
                Some(cert) if cert.expired(now) => {
                    "the certificate in tls.cert_file has expired".to_owned()
                }
                _ => format!(
                    "the certificate in tls.cert_file does not cover {name}; add the name to it (or use tls.mode acme)"
                ),
            }),
            _ => match self.issue_failure(name) {
                Some(error) => CertificateState::Failed(error),
                None => CertificateState::Pending,
            },
        }
    }

    /// Why this mode can never serve `name` as a custom domain (`internal`: the name is
    /// outside `tls.internal_domain_suffixes`), as a sentence; `None` when it can.
    pub fn custom_name_refusal(&self, name: &str) -> Option<String> {
        let suffixes = &self.internal_domain_suffixes;
        let signable = suffixes
            .iter()
            .any(|suffix| crate::config::under_suffix(name, suffix));
        match self.mode {
            TlsMode::Internal if !signable => Some(format!(
                "{name} is outside tls.internal_domain_suffixes ({}): the internal custom-domains \
                 root signs only names the operator listed there",
                match suffixes.is_empty() {
                    true => "empty".to_owned(),
                    false => suffixes.join(", "),
                }
            )),
            _ => None,
        }
    }

    /// The internal CA of custom domains, loaded from the store or made now; its root is
    /// name-constrained to `tls.internal_domain_suffixes`, and made anew when they change.
    pub(super) async fn domains_ca(&self) -> Result<&InternalCa, TlsError> {
        let permitted = &self.internal_domain_suffixes;
        if permitted.is_empty() {
            return Err(TlsError::Config(
                "tls.internal_domain_suffixes is empty: no custom domain may be signed".into(),
            ));
        }
        self.domains_ca
            .get_or_try_init(|| async {
                let stored: Option<CaRecord> =
                    blocking::read_json(&self.store, keys::DOMAINS_CA).await?;
                let record = match stored {
                    Some(record) if record.permitted == *permitted => record,
                    previous => {
                        if previous.is_some() {
                            tracing::warn!(?permitted, "tls.internal_domain_suffixes changed: making a new custom-domains root; export and trust it again");
                        }
                        let record = internal_ca::create_domains_ca(permitted, self.clock.now())?;
                        blocking::write_json(&self.store, keys::DOMAINS_CA, record.clone())
                            .await?;
                        tracing::info!("made the internal CA for custom domains; `slipway ca export --domains` prints its root");
                        record
                    }
                };
                InternalCa::from_record(&record)
            })
            .await
    }

    /// The root of the custom domains' internal CA (PEM), once one was made.
    pub fn domains_root_pem(&self) -> Option<String> {
        if let Some(ca) = self.domains_ca.get() {
            return Some(ca.root_pem().to_owned());
        }
        let record: Option<CaRecord> =
            super::store::read_json(&*self.store, keys::DOMAINS_CA).ok()?;
        record.map(|record| record.root_cert_pem)
    }
}

/// True when a certificate for `dns_names` is valid for `name` (exact, or a wildcard of
/// exactly one label).
fn covers(dns_names: &[String], name: &str) -> bool {
    let wildcard = super::certs::wildcard_of(name);
    dns_names
        .iter()
        .any(|listed| listed == name || Some(listed) == wildcard.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_covers_its_names_and_one_wildcard_level() {
        let names = vec!["example.com".to_owned(), "*.example.com".to_owned()];
        assert!(covers(&names, "example.com"));
        assert!(covers(&names, "www.example.com"));
        assert!(!covers(&names, "a.b.example.com"));
        assert!(!covers(&names, "example.org"));
    }
}
