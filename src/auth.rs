//! API tokens: creation, verification and revocation.
//!
//! Secrets are `slw_…` strings shown once; the store keeps only their SHA-256. Verification
//! never touches the store: an in-memory index (hash → token id) is loaded at start and changed
//! in the same call that changes the store, so a revoked token fails on the very next request.
//! Hashes are compared in constant time.
//!
//! Each token has a [`Scope`] (`admin` ⊇ `deploy` ⊇ `read`), optionally a list of the projects
//! it is limited to, and optionally an expiry; the API checks them in one place
//! (`api::authorize`) against each route's needs.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use subtle::ConstantTimeEq;

use crate::store::records::TokenRecord;
use crate::store::{Store, StoreError};

pub use crate::store::records::Scope;

/// What a new token may do.
#[derive(Debug, Clone, Default)]
pub struct Grant {
    pub scope: Scope,
    pub projects: Option<Vec<String>>,
    pub expires_ms: Option<u64>,
}

pub struct Tokens {
    store: Store,
    /// SHA-256 of the secret → what the token is.
    by_hash: RwLock<HashMap<[u8; 32], Arc<Caller>>>,
    /// Last-use times not yet written to the store (flushed periodically).
    pending_uses: Mutex<HashMap<String, u64>>,
}

/// A verified caller: its token and what the token may do.
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_id: String,
    pub token_name: String,
    pub scope: Scope,
    /// The project slugs the token is limited to; `None`: all.
    pub projects: Option<Vec<String>>,
    pub expires_ms: Option<u64>,
}

impl Caller {
    fn of(record: &TokenRecord) -> Caller {
        Caller {
            token_id: record.id.clone(),
            token_name: record.name.clone(),
            scope: record.scope,
            projects: record.projects.clone(),
            expires_ms: record.expires_ms,
        }
    }

    /// Whether the token may touch the project with this slug.
    pub fn may_see(&self, slug: &str) -> bool {
        self.projects
            .as_ref()
            .is_none_or(|projects| projects.iter().any(|p| p == slug))
    }
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
            by_hash.insert(hash, Arc::new(Caller::of(&record)));
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
        let token = self.create("initial-admin", Grant::default(), now_ms)?;
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

    pub fn create(&self, name: &str, grant: Grant, now_ms: u64) -> Result<NewToken, StoreError> {
        self.create_in(&self.store.clone(), name, grant, now_ms)
    }

    /// [`Tokens::create`] through `store` (an API request's audited handle).
    pub fn create_in(
        &self,
        store: &Store,
        name: &str,
        grant: Grant,
        now_ms: u64,
    ) -> Result<NewToken, StoreError> {
        let secret = crate::ids::new_token_secret();
        let hash = hash_secret(&secret);
        let record = TokenRecord {
            v: 1,
            id: crate::ids::new_id("tok_"),
            name: name.to_owned(),
            hash: crate::ids::hex(&hash),
            created_ms: now_ms,
            last_used_ms: None,
            scope: grant.scope,
            projects: grant.projects,
            expires_ms: grant.expires_ms,
        };
        store.insert_token(&record, &hash)?;
        self.by_hash
            .write()
            .expect("token index poisoned")
            .insert(hash, Arc::new(Caller::of(&record)));
        Ok(NewToken { record, secret })
    }

    /// Revokes at once. Returns false when there was no such token.
    pub fn revoke(&self, id: &str) -> Result<bool, StoreError> {
        self.revoke_in(&self.store.clone(), id)
    }

    /// [`Tokens::revoke`] through `store` (an API request's audited handle).
    pub fn revoke_in(&self, store: &Store, id: &str) -> Result<bool, StoreError> {
        // Drop it from the index first: from this moment no request can use it.
        self.by_hash
            .write()
            .expect("token index poisoned")
            .retain(|_, caller| caller.token_id != id);
        Ok(store.delete_token(id)?.is_some())
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

    /// Checks an `Authorization` header value; `None` for missing, malformed, unknown or
    /// expired tokens.
    pub fn verify(&self, authorization: Option<&str>, now_ms: u64) -> Option<Arc<Caller>> {
        let secret = authorization?.strip_prefix("Bearer ")?.trim();
        if !secret.starts_with("slw_") || secret.len() > 128 {
            return None;
        }
        let hash = hash_secret(secret);
        let index = self.by_hash.read().expect("token index poisoned");
        // Constant-time comparison against every stored hash, so timing reveals nothing about
        // how close a guess was.
        let mut found: Option<&Arc<Caller>> = None;
        for (stored, caller) in index.iter() {
            if bool::from(stored.ct_eq(&hash)) {
                found = Some(caller);
            }
        }
        let caller = found?.clone();
        drop(index);
        if caller.expires_ms.is_some_and(|expires| now_ms >= expires) {
            return None;
        }
        self.pending_uses
            .lock()
            .expect("pending uses poisoned")
            .insert(caller.token_id.clone(), now_ms);
        Some(caller)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_tokens_are_refused_and_scopes_nest() {
        let dir = tempfile::tempdir().unwrap();
        let tokens = Tokens::load(Store::open(dir.path()).unwrap()).unwrap();
        let grant = Grant {
            scope: Scope::Deploy,
            projects: Some(vec!["web".into()]),
            expires_ms: Some(2_000),
        };
        let token = tokens.create("ci", grant, 1_000).unwrap();
        let header = format!("Bearer {}", token.secret);
        let caller = tokens
            .verify(Some(&header), 1_999)
            .expect("valid before expiry");
        assert_eq!(caller.scope, Scope::Deploy);
        assert!(caller.may_see("web") && !caller.may_see("other"));
        assert!(tokens.verify(Some(&header), 2_000).is_none(), "expired");
        // The grant survives a restart (the index is rebuilt from the store).
        let reloaded = Tokens::load(tokens.store.clone()).unwrap();
        assert_eq!(
            reloaded.verify(Some(&header), 1_500).unwrap().scope,
            Scope::Deploy
        );
        assert!(Scope::Admin.covers(Scope::Deploy) && Scope::Deploy.covers(Scope::Read));
        assert!(!Scope::Read.covers(Scope::Deploy) && !Scope::Deploy.covers(Scope::Admin));
    }
}
