//! `tls.mode = "files"`: the operator's certificate and key (e.g. a wildcard), reloaded when
//! the files change.
//!
//! The manager's background loop calls [`FilesSource::reload_if_changed`] every few seconds.
//! It reads both files and compares a digest of their contents with the last one loaded, so a
//! replacement is picked up whatever the file system's timestamp resolution. A pair that does
//! not load (say, the certificate was replaced but not yet the key) keeps the previous
//! certificate in service, is logged once, and is retried at the next poll.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustls::pki_types::CertificateDer;

use super::certs::{parse_chain, LeafFacts, ServedCert};
use super::resolver::CertResolver;
use super::TlsError;
use crate::ids::sha256_hex;

#[derive(Debug)]
pub struct FilesSource {
    cert_file: PathBuf,
    key_file: PathBuf,
    state: Mutex<FilesState>,
}

#[derive(Debug, Default)]
struct FilesState {
    loaded_digest: Option<String>,
    failed_digest: Option<String>,
    /// Self-signed certificates of the loaded chain, trusted by `ssl_verification`.
    chain_roots: Vec<CertificateDer<'static>>,
}

impl FilesSource {
    pub fn new(cert_file: PathBuf, key_file: PathBuf) -> FilesSource {
        FilesSource {
            cert_file,
            key_file,
            state: Mutex::new(FilesState::default()),
        }
    }

    /// Loads the files into `resolver` when their contents changed; true when it swapped.
    pub fn reload_if_changed(&self, resolver: &CertResolver) -> Result<bool, TlsError> {
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path).map_err(|error| {
                TlsError::Config(format!("cannot read {}: {error}", path.display()))
            })
        };
        let chain_pem = read(&self.cert_file)?;
        refuse_shared_key(&self.key_file)?;
        let key_pem = read(&self.key_file)?;
        let digest = sha256_hex(format!("{chain_pem}\0{key_pem}").as_bytes());
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.loaded_digest.as_deref() == Some(digest.as_str()) {
            return Ok(false);
        }
        let loaded = ServedCert::from_pem(&chain_pem, &key_pem).and_then(|served| {
            let chain = parse_chain(&chain_pem)?;
            let facts = LeafFacts::parse(&chain[0])?;
            Ok((served, chain, facts))
        });
        let (served, chain, facts) = match loaded {
            Ok(loaded) => loaded,
            Err(error) => {
                if state.failed_digest.as_deref() != Some(digest.as_str()) {
                    tracing::warn!(cert_file = %self.cert_file.display(), %error, "the certificate files do not load; keeping the previous certificate");
                    state.failed_digest = Some(digest);
                }
                return Err(error);
            }
        };
        let served = Arc::new(served);
        let by_name: HashMap<String, Arc<ServedCert>> = facts
            .dns_names
            .iter()
            .map(|name| (name.clone(), Arc::clone(&served)))
            .collect();
        resolver.replace_all(by_name, Some(served));
        state.chain_roots = chain
            .into_iter()
            .filter(|certificate| {
                LeafFacts::parse(certificate).is_ok_and(|facts| facts.self_signed)
            })
            .collect();
        state.loaded_digest = Some(digest);
        state.failed_digest = None;
        tracing::info!(cert_file = %self.cert_file.display(), names = ?facts.dns_names, "loaded the certificate files");
        Ok(true)
    }

    pub fn chain_roots(&self) -> Vec<CertificateDer<'static>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .chain_roots
            .clone()
    }
}
/// A private key that other users can read is one every sandbox could read too (they see
/// `/etc`): refuse it, and say how to fix it.
fn refuse_shared_key(path: &std::path::Path) -> Result<(), TlsError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|error| TlsError::Config(format!("cannot read {}: {error}", path.display())))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(TlsError::Config(format!(
            "the private key {} is readable by other users (mode {:o}); make it private: \
             chmod 600 {}",
            path.display(),
            mode & 0o777,
            path.display()
        )));
    }
    Ok(())
}
