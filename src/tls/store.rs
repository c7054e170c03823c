//! Persistence seam of the TLS manager: the [`TlsStore`] trait, its in-memory implementation,
//! the key layout and the records kept under those keys.
//!
//! The daemon implements [`TlsStore`] over a redb table; tests use [`MemoryTlsStore`]. Everything
//! that must survive a restart (the internal CA, leaves, the ACME account, pending orders,
//! per-name backoff) goes through it as JSON. Private keys are stored as PEM: the store file is
//! 0600 in a 0700 directory. Calls are blocking; the manager makes them from `spawn_blocking`
//! (or from `TlsManager::new`, which runs once at start-up).

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::TlsError;

/// A key-value table owned by the TLS manager. Keys are `/`-separated paths (see [`keys`]).
pub trait TlsStore: Send + Sync {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, TlsError>;
    fn put(&self, key: &str, value: &[u8]) -> Result<(), TlsError>;
    fn delete(&self, key: &str) -> Result<(), TlsError>;
    /// Every key that starts with `prefix`, in ascending order.
    fn list(&self, prefix: &str) -> Result<Vec<String>, TlsError>;
}

/// A [`TlsStore`] in memory; shared between two managers it plays "the same store after a
/// restart" in tests.
#[derive(Debug, Default)]
pub struct MemoryTlsStore {
    entries: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemoryTlsStore {
    pub fn new() -> MemoryTlsStore {
        MemoryTlsStore::default()
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl TlsStore for MemoryTlsStore {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, TlsError> {
        Ok(self.entries().get(key).cloned())
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), TlsError> {
        self.entries().insert(key.to_owned(), value.to_vec());
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<(), TlsError> {
        self.entries().remove(key);
        Ok(())
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, TlsError> {
        Ok(self
            .entries()
            .range(prefix.to_owned()..)
            .take_while(|(key, _)| key.starts_with(prefix))
            .map(|(key, _)| key.clone())
            .collect())
    }
}

/// The key layout. Certificates are kept per mode, so switching `tls.mode` never serves a
/// certificate made by another mode.
pub mod keys {
    pub const CA: &str = "internal/ca";
    /// The internal root and intermediate for custom domains (constrained to
    /// `tls.internal_domain_suffixes`).
    pub const DOMAINS_CA: &str = "internal/domains-ca";
    pub const INTERNAL_CERT_PREFIX: &str = "internal/cert/";
    pub const ACME_CERT_PREFIX: &str = "acme/cert/";
    pub const ACME_ACCOUNT: &str = "acme/account";
    pub const ACME_ORDER_PREFIX: &str = "acme/order/";
    pub const ACME_BACKOFF_PREFIX: &str = "acme/backoff/";
    /// The backoff of a forgotten name (a deleted domain or project), kept for a day after
    /// it ends so that adding the name again waits for it.
    pub const ACME_KEPT_BACKOFF_PREFIX: &str = "acme/kept-backoff/";
    /// The new orders of the last hour (`budget::OrderLog`).
    pub const ACME_ORDER_LOG: &str = "acme/order-log";
    pub const ACME_PREFERRED_CHALLENGE: &str = "acme/preferred-challenge";
}

/// A certificate chain with its key, as issued for one name.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CertRecord {
    pub name: String,
    /// Leaf first, then intermediates.
    pub chain_pem: String,
    pub key_pem: String,
    /// Lowercase hex SHA-256 of the leaf's DER.
    pub leaf_sha256: String,
    pub not_before: u64,
    pub not_after: u64,
    pub issued_at: u64,
}

/// The internal CA: a root and the intermediate that signs leaves.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaRecord {
    /// The names the root is constrained to; a different `apps_domain` needs a new CA.
    pub permitted: Vec<String>,
    pub root_cert_pem: String,
    pub root_key_pem: String,
    pub intermediate_cert_pem: String,
    pub intermediate_key_pem: String,
    pub intermediate_not_before: u64,
    pub intermediate_not_after: u64,
}

/// The ACME account for one directory URL.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccountRecord {
    pub directory: String,
    /// instant-acme's `AccountCredentials`, opaque JSON.
    pub credentials: serde_json::Value,
}

/// An order that was created but has not produced a stored certificate yet.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PendingOrder {
    pub url: String,
    /// The key whose CSR finalized the order; set before finalizing so a restart can still
    /// download the certificate.
    pub key_pem: Option<String>,
    pub created_at: u64,
}

/// Failed attempts for one name and when the next one may start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackoffRecord {
    pub failures: u32,
    pub next_attempt_at: u64,
    pub last_error: String,
}

pub fn read_json<T: DeserializeOwned>(
    store: &dyn TlsStore,
    key: &str,
) -> Result<Option<T>, TlsError> {
    let Some(bytes) = store.get(key)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|error| TlsError::Store(format!("record {key} is not valid: {error}")))
}

pub fn write_json<T: Serialize>(
    store: &dyn TlsStore,
    key: &str,
    value: &T,
) -> Result<(), TlsError> {
    let bytes = serde_json::to_vec(value)
        .map_err(|error| TlsError::Store(format!("cannot encode {key}: {error}")))?;
    store.put(key, &bytes)
}

/// The same operations for async callers: each runs on the blocking pool.
pub mod blocking {
    use std::sync::Arc;

    use serde::de::DeserializeOwned;
    use serde::Serialize;

    use super::{TlsError, TlsStore};

    async fn run<T: Send + 'static>(
        store: &Arc<dyn TlsStore>,
        call: impl FnOnce(&dyn TlsStore) -> Result<T, TlsError> + Send + 'static,
    ) -> Result<T, TlsError> {
        let store = Arc::clone(store);
        tokio::task::spawn_blocking(move || call(&*store))
            .await
            .map_err(|error| TlsError::Store(format!("store task failed: {error}")))?
    }

    pub async fn read_json<T: DeserializeOwned + Send + 'static>(
        store: &Arc<dyn TlsStore>,
        key: &str,
    ) -> Result<Option<T>, TlsError> {
        let key = key.to_owned();
        run(store, move |store| super::read_json(store, &key)).await
    }

    pub async fn write_json<T: Serialize + Send + 'static>(
        store: &Arc<dyn TlsStore>,
        key: &str,
        value: T,
    ) -> Result<(), TlsError> {
        let key = key.to_owned();
        run(store, move |store| super::write_json(store, &key, &value)).await
    }

    pub async fn delete(store: &Arc<dyn TlsStore>, keys: Vec<String>) -> Result<(), TlsError> {
        run(store, move |store| {
            keys.iter().try_for_each(|key| store.delete(key))
        })
        .await
    }

    pub async fn list(store: &Arc<dyn TlsStore>, prefix: &str) -> Result<Vec<String>, TlsError> {
        let prefix = prefix.to_owned();
        run(store, move |store| store.list(&prefix)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_returns_only_the_prefix() {
        let store = MemoryTlsStore::new();
        for key in [
            "acme/cert/a",
            "acme/cert/b",
            "acme/certx",
            "acme/order/a",
            "internal/cert/a",
        ] {
            store.put(key, b"1").unwrap();
        }
        assert_eq!(
            store.list("acme/cert/").unwrap(),
            ["acme/cert/a", "acme/cert/b"]
        );
        store.delete("acme/cert/a").unwrap();
        assert_eq!(store.list("acme/cert/").unwrap(), ["acme/cert/b"]);
        assert_eq!(store.get("acme/cert/a").unwrap(), None);
    }
}
