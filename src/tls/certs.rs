//! Certificate plumbing shared by every mode: PEM → rustls `CertifiedKey`, the facts kept about
//! a leaf (SHA-256, validity, names) and the [`ServedCert`] the resolver hands out.

use std::sync::Arc;
use std::time::SystemTime;

use rustls::crypto::ring as ring_provider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use x509_parser::extensions::GeneralName;

use super::clock::unix_seconds;
use super::store::CertRecord;
use super::TlsError;

/// A certificate ready to be served, with the facts the manager checks.
#[derive(Debug)]
pub struct ServedCert {
    pub certified_key: Arc<CertifiedKey>,
    pub leaf_sha256: String,
    pub not_before: u64,
    pub not_after: u64,
}

impl ServedCert {
    pub fn from_record(record: &CertRecord) -> Result<ServedCert, TlsError> {
        let served = ServedCert::from_pem(&record.chain_pem, &record.key_pem)?;
        if served.leaf_sha256 != record.leaf_sha256 {
            return Err(TlsError::Certificate(format!(
                "stored certificate for {} does not match its fingerprint",
                record.name
            )));
        }
        Ok(served)
    }

    pub fn from_pem(chain_pem: &str, key_pem: &str) -> Result<ServedCert, TlsError> {
        let chain = parse_chain(chain_pem)?;
        let key = parse_key(key_pem)?;
        let facts = LeafFacts::parse(&chain[0])?;
        let signing_key = ring_provider::default_provider()
            .key_provider
            .load_private_key(key)
            .map_err(|error| TlsError::Certificate(format!("unusable private key: {error}")))?;
        let certified_key = CertifiedKey::new(chain, signing_key);
        certified_key.keys_match().map_err(|error| {
            TlsError::Certificate(format!(
                "the private key does not belong to the certificate: {error}"
            ))
        })?;
        Ok(ServedCert {
            certified_key: Arc::new(certified_key),
            leaf_sha256: facts.sha256,
            not_before: facts.not_before,
            not_after: facts.not_after,
        })
    }

    pub fn expired(&self, now: SystemTime) -> bool {
        unix_seconds(now) >= self.not_after
    }
}

/// What the manager needs to know about a leaf certificate.
#[derive(Debug, Clone)]
pub struct LeafFacts {
    pub sha256: String,
    pub not_before: u64,
    pub not_after: u64,
    /// DNS names from the subject alternative names, wildcards included (`*.example.com`).
    pub dns_names: Vec<String>,
    pub self_signed: bool,
    /// The issuer's distinguished name (`CN=…, O=…`).
    pub issuer: String,
}

impl LeafFacts {
    pub fn parse(der: &CertificateDer<'_>) -> Result<LeafFacts, TlsError> {
        let (_, certificate) = x509_parser::parse_x509_certificate(der)
            .map_err(|error| TlsError::Certificate(format!("cannot parse certificate: {error}")))?;
        let validity = certificate.validity();
        let dns_names = match certificate.subject_alternative_name() {
            Ok(Some(extension)) => extension
                .value
                .general_names
                .iter()
                .filter_map(|name| match name {
                    GeneralName::DNSName(dns) => Some(dns.to_ascii_lowercase()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        Ok(LeafFacts {
            sha256: sha256_hex(der),
            not_before: u64::try_from(validity.not_before.timestamp()).unwrap_or(0),
            not_after: u64::try_from(validity.not_after.timestamp()).unwrap_or(0),
            dns_names,
            self_signed: certificate.subject() == certificate.issuer(),
            issuer: certificate.issuer().to_string(),
        })
    }
}

/// Builds the store record for a freshly issued chain.
pub fn cert_record(
    name: &str,
    chain_pem: String,
    key_pem: String,
    now: SystemTime,
) -> Result<CertRecord, TlsError> {
    let served = ServedCert::from_pem(&chain_pem, &key_pem)?;
    Ok(CertRecord {
        name: name.to_owned(),
        chain_pem,
        key_pem,
        leaf_sha256: served.leaf_sha256,
        not_before: served.not_before,
        not_after: served.not_after,
        issued_at: unix_seconds(now),
    })
}

pub fn parse_chain(pem: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::Certificate(format!("cannot read PEM certificates: {error}")))?;
    if chain.is_empty() {
        return Err(TlsError::Certificate("no certificate in PEM data".into()));
    }
    Ok(chain)
}

pub fn parse_key(pem: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    rustls_pemfile::private_key(&mut pem.as_bytes())
        .map_err(|error| TlsError::Certificate(format!("cannot read PEM private key: {error}")))?
        .ok_or_else(|| TlsError::Certificate("no private key in PEM data".into()))
}

use crate::ids::sha256_hex;

/// The name a wildcard certificate would be stored under for `name` (`a.b.c` → `*.b.c`).
pub fn wildcard_of(name: &str) -> Option<String> {
    let (_, parent) = name.split_once('.')?;
    (!parent.is_empty()).then(|| format!("*.{parent}"))
}
