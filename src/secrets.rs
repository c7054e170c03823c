//! Encryption at rest for env var values: ChaCha20-Poly1305 (ring) with a 256-bit key kept in
//! `<data_dir>/secret.key` (mode 0600, created on first start). Each value is sealed with a
//! fresh random nonce and bound to its project and name as associated data, so a sealed value
//! cannot be moved to another variable. The API's kept answers (`Idempotency-Key`) are sealed
//! the same way, bound to their token and key, and their request fingerprints are HMACs under
//! a key derived from the same file, so the store holds no hash of a request's secrets either.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::hmac;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("cannot read or create the secret key {path}: {source}")]
    KeyFile {
        path: String,
        source: std::io::Error,
    },
    #[error("the secret key file {0} is not 32 bytes")]
    KeyLength(String),
    #[error("a stored secret failed authentication (wrong key or corrupted store)")]
    Open,
}

pub struct SecretBox {
    key: LessSafeKey,
    /// HMAC-SHA256 under a key derived from the same file, for [`SecretBox::tag`].
    tag_key: hmac::Key,
    /// HMAC-SHA256 key for fingerprints, derived from the sealing key (never the same key for
    /// two algorithms).
    fingerprint_key: hmac::Key,
}

impl SecretBox {
    /// Loads the key file, creating it (0600) with a random key if it does not exist.
    pub fn open_or_create(path: &Path) -> Result<SecretBox, SecretError> {
        let key_error = |source| SecretError::KeyFile {
            path: path.display().to_string(),
            source,
        };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let key = crate::ids::random_bytes::<32>();
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(key_error)?;
                file.write_all(&key)
                    .and_then(|_| file.sync_all())
                    .map_err(key_error)?;
                key.to_vec()
            }
            Err(error) => return Err(key_error(error)),
        };
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, &bytes)
            .map_err(|_| SecretError::KeyLength(path.display().to_string()))?;
        let derive = |purpose: &[u8]| {
            let derived = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &bytes), purpose);
            hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref())
        };
        Ok(SecretBox {
            key: LessSafeKey::new(unbound),
            tag_key: derive(b"slipway tags"),
            fingerprint_key: derive(b"slipway fingerprint key v1"),
        })
    }

    /// A value only this daemon can compute for `context`, the same on every start (e.g. a
    /// project's domain-ownership token): HMAC-SHA256 under a key derived from the key file.
    pub fn tag(&self, context: &str) -> [u8; 32] {
        let mut out = [0; 32];
        out.copy_from_slice(ring::hmac::sign(&self.tag_key, context.as_bytes()).as_ref());
        out
    }

    /// nonce ‖ ciphertext ‖ tag.
    pub fn seal(&self, context: &str, plaintext: &[u8]) -> Vec<u8> {
        let nonce_bytes = crate::ids::random_bytes::<NONCE_LEN>();
        let mut buffer = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce_bytes),
                Aad::from(context.as_bytes()),
                &mut buffer,
            )
            .expect("sealing with a valid key cannot fail");
        let mut out = nonce_bytes.to_vec();
        out.extend_from_slice(&buffer);
        out
    }

    /// Seals one env var value, bound to its project and name so that a value cannot be moved
    /// to another variable or project in the store.
    pub fn seal_env(&self, project_id: &str, key: &str, value: &str) -> Vec<u8> {
        self.seal(&env_context(project_id, key), value.as_bytes())
    }

    /// Opens what `seal_env` sealed for the same project and name.
    pub fn open_env(
        &self,
        project_id: &str,
        key: &str,
        sealed: &[u8],
    ) -> Result<String, SecretError> {
        let plain = self.open(&env_context(project_id, key), sealed)?;
        String::from_utf8(plain).map_err(|_| SecretError::Open)
    }

    /// Opens a project's env vars as the store keeps them (name, sealed value), in order: the
    /// one decryption that the API's listing and the pipeline's step environment share.
    pub fn open_env_vars(
        &self,
        project_id: &str,
        sealed: Vec<(String, Vec<u8>)>,
    ) -> Result<Vec<(String, String)>, SecretError> {
        sealed
            .into_iter()
            .map(|(key, value)| {
                let plain = self.open_env(project_id, &key, &value)?;
                Ok((key, plain))
            })
            .collect()
    }

    /// Seals an answer kept for an `Idempotency-Key`, bound to the token and the key.
    pub fn seal_answer(&self, token_id: &str, idempotency_key: &str, body: &[u8]) -> Vec<u8> {
        self.seal(&answer_context(token_id, idempotency_key), body)
    }

    /// Opens what `seal_answer` sealed for the same token and key.
    pub fn open_answer(
        &self,
        token_id: &str,
        idempotency_key: &str,
        sealed: &[u8],
    ) -> Result<Vec<u8>, SecretError> {
        self.open(&answer_context(token_id, idempotency_key), sealed)
    }

    /// HMAC-SHA256 (hex) of `bytes` under the derived fingerprint key: equal inputs give equal
    /// fingerprints, and without `secret.key` a fingerprint tells nothing of its input.
    pub fn fingerprint(&self, bytes: &[u8]) -> String {
        crate::ids::hex(hmac::sign(&self.fingerprint_key, bytes).as_ref())
    }

    pub fn open(&self, context: &str, sealed: &[u8]) -> Result<Vec<u8>, SecretError> {
        if sealed.len() < NONCE_LEN {
            return Err(SecretError::Open);
        }
        let (nonce, ciphertext) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SecretError::Open)?;
        let mut buffer = ciphertext.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(context.as_bytes()), &mut buffer)
            .map_err(|_| SecretError::Open)?;
        Ok(plain.to_vec())
    }
}

/// Associated data binding a kept answer to its token and `Idempotency-Key` (a token id has no
/// `/`, so the pair is unambiguous).
fn answer_context(token_id: &str, idempotency_key: &str) -> String {
    format!("idempotency/{token_id}/{idempotency_key}")
}

/// Associated data binding a sealed env var value to its project and name.
fn env_context(project_id: &str, key: &str) -> String {
    format!("env/{project_id}/{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_binding() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret.key");
        let sealed = {
            let secrets = SecretBox::open_or_create(&path).unwrap();
            secrets.seal("prj_a/KEY", b"hunter2")
        };
        let secrets = SecretBox::open_or_create(&path).unwrap();
        assert_eq!(secrets.open("prj_a/KEY", &sealed).unwrap(), b"hunter2");
        assert!(secrets.open("prj_a/OTHER", &sealed).is_err());
        assert!(!sealed.windows(7).any(|w| w == b"hunter2"));
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn answers_are_bound_to_token_and_key_and_fingerprints_are_keyed() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = SecretBox::open_or_create(&dir.path().join("secret.key")).unwrap();
        let sealed = secrets.seal_answer("tok_a", "key-1", b"{\"token\":\"slw_x\"}");
        assert_eq!(
            secrets.open_answer("tok_a", "key-1", &sealed).unwrap(),
            b"{\"token\":\"slw_x\"}"
        );
        assert!(secrets.open_answer("tok_b", "key-1", &sealed).is_err());
        assert!(secrets.open_answer("tok_a", "key-2", &sealed).is_err());
        assert_eq!(secrets.fingerprint(b"body"), secrets.fingerprint(b"body"));
        assert_ne!(
            secrets.fingerprint(b"body"),
            crate::ids::sha256_hex(b"body")
        );
        let other = SecretBox::open_or_create(&dir.path().join("other.key")).unwrap();
        assert_ne!(secrets.fingerprint(b"body"), other.fingerprint(b"body"));
    }
}
