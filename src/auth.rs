//! API tokens: creation, verification and revocation.
//!
//! Secrets are `slw_…` strings shown once; the store keeps only their SHA-256. Verification
//! never touches the store: an in-memory index (hash → token id) is loaded at start and changed
//! in the same call that changes the store, so a revoked token fails on the very next request.
//! Hashes are compared in constant time.
//!
//! Each token has a [`Scope`] (`admin` ⊇ `deploy` ⊇ `read`), optionally a list of the projects
//! it is limited to, and optionally an expiry; the API checks them in one place
//! (`api::authorize`) against each route's needs. A limit names projects that exist when the
//! token is made and is bound to their ids then: a project made later under one of the slugs
//! (ids are never reused) is not covered.

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

/// Why a token was not made.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A limit named a project that does not exist (yet).
    #[error("no project {0:?}: a token is limited to projects that exist")]
    UnknownProject(String),
}

/// A verified caller: its token and what the token may do.
#[derive(Debug, Clone)]
pub struct Caller {
    pub token_id: String,
    pub token_name: String,
    pub scope: Scope,
    /// The ids of the projects the token is limited to; `None`: all.
    pub project_ids: Option<Vec<String>>,
    pub expires_ms: Option<u64>,
}

impl Caller {
    fn of(record: &TokenRecord) -> Caller {
        // A limit whose ids are not bound (yet) covers nothing.
        let project_ids = record
            .projects
            .as_ref()
            .map(|_| record.project_ids.clone().unwrap_or_default());
        Caller {
            token_id: record.id.clone(),
            token_name: record.name.clone(),
            scope: record.scope,
            project_ids,
            expires_ms: record.expires_ms,
        }
    }

    /// Whether the token may touch the project with this id.
    pub fn may_see(&self, project_id: &str) -> bool {
        self.project_ids
            .as_ref()
            .is_none_or(|ids| ids.iter().any(|id| id == project_id))
    }

    /// Whether the token covers every project (an unlimited token of any scope).
    pub fn sees_all(&self) -> bool {
        self.project_ids.is_none()
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
        let bound = store.bind_token_grants()?;
        if bound > 0 {
            tracing::info!(bound, "token grants bound to the ids of their projects");
        }
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

    pub fn create(&self, name: &str, grant: Grant, now_ms: u64) -> Result<NewToken, TokenError> {
        self.create_in(&self.store.clone(), name, grant, now_ms)
    }

    /// [`Tokens::create`] through `store` (an API request's audited handle).
    pub fn create_in(
        &self,
        store: &Store,
        name: &str,
        grant: Grant,
        now_ms: u64,
    ) -> Result<NewToken, TokenError> {
        let project_ids = match &grant.projects {
            None => None,
            Some(names) => Some(
                store
                    .project_ids_of(names)?
                    .map_err(TokenError::UnknownProject)?,
            ),
        };
        let secret = crate::ids::new_token_secret();
        let hash = hash_secret(&secret);
        let record = TokenRecord {
            v: 2,
            id: crate::ids::new_id("tok_"),
            name: name.to_owned(),
            hash: crate::ids::hex(&hash),
            created_ms: now_ms,
            last_used_ms: None,
            scope: grant.scope,
            projects: grant.projects,
            project_ids,
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
        tokens.store.create_project("web", 0, 1).unwrap();
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
        let web_id = tokens.store.find_project("web").unwrap().unwrap().id;
        assert!(caller.may_see(&web_id) && !caller.may_see("prj_other"));
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

    #[test]
    fn version_1_slug_grants_are_bound_to_the_projects_that_hold_them_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.create_project("web", 0, 1).unwrap();
        let web_id = store.find_project("web").unwrap().unwrap().id;
        let secret = "slw_version1";
        let record = TokenRecord {
            v: 1,
            id: "tok_v1".into(),
            name: "old".into(),
            hash: crate::ids::hex(&hash_secret(secret)),
            created_ms: 1,
            last_used_ms: None,
            scope: Scope::Deploy,
            projects: Some(vec!["web".into(), "later".into()]),
            project_ids: None,
            expires_ms: None,
        };
        store.insert_token(&record, &hash_secret(secret)).unwrap();
        let tokens = Tokens::load(store.clone()).unwrap();
        let caller = tokens.verify(Some("Bearer slw_version1"), 2).unwrap();
        assert_eq!(caller.project_ids, Some(vec![web_id]));
        // `later` named no project at load: a project made now under it is not covered.
        store.create_project("later", 1, 3).unwrap();
        let later_id = store.find_project("later").unwrap().unwrap().id;
        let reloaded = Tokens::load(store).unwrap();
        assert!(!reloaded
            .verify(Some("Bearer slw_version1"), 4)
            .unwrap()
            .may_see(&later_id));
    }
}
