//! API tokens: creation, verification and revocation.
//!
//! Secrets are `slw_…` strings shown once; the store keeps only their SHA-256. Verification
//! never touches the store: an in-memory index (hash → token id) is loaded at start and changed
//! in the same call that changes the store, so a revoked token fails on the very next request.
//! Hashes are compared in constant time.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Mutex, RwLock};

use subtle::ConstantTimeEq;

use crate::store::records::TokenRecord;
use crate::store::{Store, StoreError};

pub struct Tokens {
    store: Store,
    /// SHA-256 of the secret → token id.
    by_hash: RwLock<HashMap<[u8; 32], String>>,
    /// Last-use times not yet written to the store (flushed periodically).
    pending_uses: Mutex<HashMap<String, u64>>,
}

/// A verified caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_id: String,
}

/// A freshly created token: the only moment its secret exists outside the client.
pub struct NewToken {
    pub record: TokenRecord,
    pub secret: String,
}

pub fn hash_secret(secret: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

impl Tokens {
    pub fn load(store: Store) -> Result<Tokens, StoreError> {
        let mut by_hash = HashMap::new();
        for record in store.list_tokens()? {
            let mut hash = [0u8; 32];
            match crate::ids::hex_decode(&record.hash) {
                Some(bytes) if bytes.len() == 32 => hash.copy_from_slice(&bytes),
                _ => tracing::warn!(token = %record.id, "a stored token hash is not 64 hex digits"),
            }
            by_hash.insert(hash, record.id);
        }
        Ok(Tokens {
            store,
            by_hash: RwLock::new(by_hash),
            pending_uses: Mutex::new(HashMap::new()),
        })
    }

    /// On first start (no token at all) creates the admin token and writes its secret to
    /// `path` (0600). Returns true when it did.
    pub fn bootstrap(&self, path: &Path, now_ms: u64) -> anyhow::Result<bool> {
        if self.store.token_hash_count()? > 0 {
            return Ok(false);
        }
        let token = self.create("initial-admin", now_ms)?;
        let _ = std::fs::remove_file(path);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        writeln!(file, "{}", token.secret)?;
        file.sync_all()?;
        Ok(true)
    }

    pub fn create(&self, name: &str, now_ms: u64) -> Result<NewToken, StoreError> {
        let secret = crate::ids::new_token_secret();
        let hash = hash_secret(&secret);
        let record = TokenRecord {
            v: 1,
            id: crate::ids::new_id("tok_"),
            name: name.to_owned(),
            hash: crate::ids::hex(&hash),
            created_ms: now_ms,
            last_used_ms: None,
        };
        self.store.insert_token(&record, &hash)?;
        self.by_hash
            .write()
            .expect("token index poisoned")
            .insert(hash, record.id.clone());
        Ok(NewToken { record, secret })
    }

    /// Revokes at once. Returns false when there was no such token.
    pub fn revoke(&self, id: &str) -> Result<bool, StoreError> {
        // Drop it from the index first: from this moment no request can use it.
        self.by_hash
            .write()
            .expect("token index poisoned")
            .retain(|_, token_id| token_id != id);
        Ok(self.store.delete_token(id)?.is_some())
    }

    pub fn list(&self) -> Result<Vec<TokenRecord>, StoreError> {
        let mut records = self.store.list_tokens()?;
        let pending = self.pending_uses.lock().expect("pending uses poisoned");
        for record in &mut records {
            if let Some(at) = pending.get(&record.id) {
                record.last_used_ms = Some(*at);
            }
        }
        Ok(records)
    }

    /// Checks an `Authorization` header value; `None` for missing, malformed or unknown tokens.
    pub fn verify(&self, authorization: Option<&str>, now_ms: u64) -> Option<Caller> {
        let secret = authorization?.strip_prefix("Bearer ")?.trim();
        if !secret.starts_with("slw_") || secret.len() > 128 {
            return None;
        }
        let hash = hash_secret(secret);
        let index = self.by_hash.read().expect("token index poisoned");
        // Constant-time comparison against every stored hash, so timing reveals nothing about
        // how close a guess was.
        let mut found: Option<&String> = None;
        for (stored, id) in index.iter() {
            if bool::from(stored.ct_eq(&hash)) {
                found = Some(id);
            }
        }
        let token_id = found?.clone();
        drop(index);
        self.pending_uses
            .lock()
            .expect("pending uses poisoned")
            .insert(token_id.clone(), now_ms);
        Some(Caller { token_id })
    }

    /// Writes batched last-use times to the store.
    pub fn flush_uses(&self) -> Result<(), StoreError> {
        let uses: Vec<(String, u64)> = self
            .pending_uses
            .lock()
            .expect("pending uses poisoned")
            .drain()
            .collect();
        if uses.is_empty() {
            return Ok(());
        }
        self.store.touch_tokens(&uses)
    }
}
