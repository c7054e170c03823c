//! The SNI certificate resolver behind every HTTPS handshake.
//!
//! Order: an ACME TLS-ALPN-01 challenge certificate (only when the ClientHello offers
//! `acme-tls/1`), then the exact name, then the wildcard of its parent, then the default
//! certificate (`files` mode only). Certificates live in immutable maps swapped atomically
//! (arc-swap): a handshake never takes a lock, and a new certificate is served by the next
//! handshake without restarting any listener.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::certs::{wildcard_of, ServedCert};

/// The ALPN protocol of RFC 8737 (TLS-ALPN-01 validation).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

#[derive(Debug, Default)]
pub struct CertResolver {
    certs: ArcSwap<HashMap<String, Arc<ServedCert>>>,
    default_cert: ArcSwapOption<ServedCert>,
    challenges: ArcSwap<HashMap<String, Arc<CertifiedKey>>>,
}

impl CertResolver {
    pub fn new() -> CertResolver {
        CertResolver::default()
    }

    /// The certificate a client asking for `name` gets (exact, then wildcard, then default).
    pub fn lookup(&self, name: &str) -> Option<Arc<ServedCert>> {
        let certs = self.certs.load();
        if let Some(cert) = certs.get(name) {
            return Some(Arc::clone(cert));
        }
        if let Some(cert) = wildcard_of(name).and_then(|wildcard| certs.get(&wildcard).cloned()) {
            return Some(cert);
        }
        self.default_cert.load_full()
    }

    /// Every certificate by name with its `notAfter`, sorted by name; the default certificate
    /// (`files` mode) under the first DNS name it was loaded for when not listed already.
    pub fn expiries(&self) -> Vec<(String, u64)> {
        let mut expiries: Vec<(String, u64)> = self
            .certs
            .load()
            .iter()
            .map(|(name, cert)| (name.clone(), cert.not_after))
            .collect();
        expiries.sort();
        expiries
    }

    /// The certificate stored under exactly `name`.
    pub fn exact(&self, name: &str) -> Option<Arc<ServedCert>> {
        self.certs.load().get(name).cloned()
    }

    pub fn insert(&self, name: &str, cert: Arc<ServedCert>) {
        self.certs.rcu(|certs| {
            let mut certs = HashMap::clone(certs);
            certs.insert(name.to_owned(), Arc::clone(&cert));
            certs
        });
    }

    pub fn remove(&self, name: &str) {
        self.certs.rcu(|certs| {
            let mut certs = HashMap::clone(certs);
            certs.remove(name);
            certs
        });
    }

    /// Replaces every certificate at once (`files` mode reload).
    pub fn replace_all(
        &self,
        certs: HashMap<String, Arc<ServedCert>>,
        default_cert: Option<Arc<ServedCert>>,
    ) {
        self.certs.store(Arc::new(certs));
        self.default_cert.store(default_cert);
    }

    pub fn add_challenge(&self, name: &str, key: Arc<CertifiedKey>) {
        self.challenges.rcu(|challenges| {
            let mut challenges = HashMap::clone(challenges);
            challenges.insert(name.to_owned(), Arc::clone(&key));
            challenges
        });
    }

    pub fn remove_challenge(&self, name: &str) {
        self.challenges.rcu(|challenges| {
            let mut challenges = HashMap::clone(challenges);
            challenges.remove(name);
            challenges
        });
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = client_hello.server_name().map(str::to_ascii_lowercase);
        let offers_acme = client_hello
            .alpn()
            .is_some_and(|mut protocols| protocols.any(|protocol| protocol == ACME_TLS_ALPN));
        match (name, offers_acme) {
            (Some(name), true) => self.challenges.load().get(&name).cloned(),
            (Some(name), false) => self
                .lookup(&name)
                .map(|cert| Arc::clone(&cert.certified_key)),
            (None, _) => self
                .default_cert
                .load()
                .as_ref()
                .map(|cert| Arc::clone(&cert.certified_key)),
        }
    }
}
