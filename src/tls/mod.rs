//! HTTPS for every app: certificates per name, the SNI resolver, and the `ssl_verification`
//! check. [`TlsManager`] is the one entry point; `app` builds it at start, `server` takes its
//! [`TlsManager::server_config`] for the HTTPS listener and asks [`TlsManager::http01_response`]
//! on the plain one, the pipeline calls [`TlsManager::ensure_certificate`] (at
//! `domain_binding`), [`TlsManager::wait_ready`] and [`TlsManager::verify`] (at
//! `ssl_verification`), and project deletion calls [`TlsManager::forget`].
//!
//! Modes (`tls.mode`): `internal` ([`internal_ca`]), `acme` ([`acme`]), `files` ([`files`]) and
//! `off` (the manager answers but serves nothing). Parts: [`resolver`] (handshakes),
//! [`store`] (what survives a restart), [`policy`] (pure rules: names, renewal, backoff),
//! [`certs`] (PEM and leaf facts), [`verify`] (the client side check), [`clock`].
//!
//! Architecture invariants: a handshake never waits for an issuance or touches the store (the
//! resolver reads immutable snapshots); certificates are made only for the control host,
//! `<label>.<apps_domain>` and the custom domains projects hold ([`custom`]); nothing here
//! writes to the file system.

pub mod acme;
pub mod budget;
pub mod certs;
pub mod clock;
mod custom;
pub mod files;
pub mod internal_ca;
mod issuance;
pub mod policy;
pub mod resolver;
pub mod store;
pub mod verify;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use rustls::crypto::ring as ring_provider;
use rustls::pki_types::CertificateDer;

pub use clock::{Clock, ManualClock, SystemClock};
pub use custom::CertificateState;
pub use resolver::ACME_TLS_ALPN;
pub use store::{MemoryTlsStore, TlsStore};

use crate::config::{TlsConfig, TlsMode};
use acme::AcmeIssuer;
use certs::ServedCert;
use files::FilesSource;
use internal_ca::InternalCa;
use issuance::Issuance;
use resolver::CertResolver;
use store::{keys, CaRecord, CertRecord};

/// Errors of the TLS manager; the pipeline reports them as `CERTIFICATE_FAILED`.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS configuration: {0}")]
    Config(String),
    #[error("certificate store: {0}")]
    Store(String),
    #[error(
        "{0} is neither the control host nor <name>.<apps_domain>; no certificate is made for it"
    )]
    NameNotAllowed(String),
    #[error("{0}")]
    Certificate(String),
    #[error("ACME: {0}")]
    Acme(String),
    #[error("no certificate for {name}: {message}")]
    Issuance { name: String, message: String },
    #[error("no certificate for {0}")]
    NoCertificate(String),
    #[error("timed out waiting for the certificate of {0}")]
    Timeout(String),
    #[error("TLS verification of {name} failed: {message}")]
    Verification { name: String, message: String },
}

/// Owns every certificate the daemon serves.
pub struct TlsManager {
    mode: TlsMode,
    apps_domain: String,
    control_host: String,
    store: Arc<dyn TlsStore>,
    clock: Arc<dyn Clock>,
    resolver: Arc<CertResolver>,
    server_config: Arc<rustls::ServerConfig>,
    /// `tls.acme_ca_file`: trusted for the ACME API and by `ssl_verification`.
    extra_roots: Vec<CertificateDer<'static>>,
    internal: Option<InternalCa>,
    acme: Option<AcmeIssuer>,
    files: Option<FilesSource>,
    issuances: Mutex<HashMap<String, Issuance>>,
    next_generation: AtomicU64,
    /// Told of every failed issuance or renewal (name, error): `certificate.failed`.
    on_failure: std::sync::OnceLock<FailureHook>,
    /// The custom domains of the projects: names this daemon may hold certificates for, each
    /// with the id of the project that holds it (whose order budget it spends).
    custom_names: Mutex<HashMap<String, String>>,
    /// `internal` mode: the CA that signs custom domains' leaves, made on first use.
    domains_ca: tokio::sync::OnceCell<InternalCa>,
    /// `tls.internal_domain_suffixes`: what `domains_ca` may sign (its name constraints).
    internal_domain_suffixes: Vec<String>,
    order_budget: budget::OrderBudget,
    /// Held while the stored order log is read, decided on and written.
    order_log_lock: tokio::sync::Mutex<()>,
}

/// What [`TlsManager::on_failure`] is given: the certificate's name and the error.
pub type FailureHook = Box<dyn Fn(&str, &str) + Send + Sync>;

impl std::fmt::Debug for TlsManager {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("TlsManager")
            .field("mode", &self.mode)
            .field("apps_domain", &self.apps_domain)
            .finish_non_exhaustive()
    }
}

impl TlsManager {
    /// Sets the mode up: makes or loads the internal CA (and the control host's leaf), loads
    /// stored ACME certificates, or loads the operator's files. Blocking (store calls); run it
    /// at start-up, before the listeners.
    pub fn new(
        config: &TlsConfig,
        apps_domain: &str,
        control_host: &str,
        store: Arc<dyn TlsStore>,
        clock: Arc<dyn Clock>,
    ) -> Result<Arc<TlsManager>, TlsError> {
        let extra_roots = read_extra_roots(config)?;
        let resolver = Arc::new(CertResolver::new());
        let server_config = https_server_config(config.mode, &resolver)?;
        let mut manager = TlsManager {
            mode: config.mode,
            apps_domain: apps_domain.to_owned(),
            control_host: control_host.to_owned(),
            store,
            clock,
            resolver,
            server_config: Arc::new(server_config),
            extra_roots,
            internal: None,
            acme: None,
            files: None,
            issuances: Mutex::new(HashMap::new()),
            next_generation: AtomicU64::new(1),
            on_failure: std::sync::OnceLock::new(),
            custom_names: Mutex::new(HashMap::new()),
            domains_ca: tokio::sync::OnceCell::new(),
            internal_domain_suffixes: config.internal_domain_suffixes.clone(),
            order_budget: budget::OrderBudget {
                per_hour: config.acme_orders_per_hour,
                per_owner_per_hour: config.acme_orders_per_project_per_hour,
            },
            order_log_lock: tokio::sync::Mutex::new(()),
        };
        manager.start_mode(config)?;
        Ok(Arc::new(manager))
    }

    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// Sets the one hook told of every failed issuance or renewal (the first call wins).
    pub fn on_failure(&self, hook: FailureHook) {
        let _ = self.on_failure.set(hook);
    }

    pub(crate) fn report_failure(&self, name: &str, error: &str) {
        if let Some(hook) = self.on_failure.get() {
            hook(name, error);
        }
    }

    /// Every certificate served, by name, with its `notAfter` (Unix seconds).
    pub fn certificate_expiries(&self) -> Vec<(String, u64)> {
        self.resolver.expiries()
    }

    /// The rustls configuration of the HTTPS listener (ALPN `h2`, `http/1.1`, plus `acme-tls/1`
    /// in acme mode). Certificates change behind it without rebuilding it. A connection that
    /// negotiated [`ACME_TLS_ALPN`] is a validation probe: close it after the handshake.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        Arc::clone(&self.server_config)
    }

    /// The key authorization to answer `GET /.well-known/acme-challenge/<token>` with.
    pub fn http01_response(&self, token: &str) -> Option<String> {
        self.acme.as_ref()?.http01_response(token)
    }

    /// The internal CA's root certificate (PEM), for `slipway ca export`.
    pub fn root_pem(&self) -> Option<String> {
        self.internal.as_ref().map(|ca| ca.root_pem().to_owned())
    }

    /// The SHA-256 (hex) of the leaf served for `name`, if any.
    pub fn served_leaf_sha256(&self, name: &str) -> Option<String> {
        self.resolver
            .lookup(name)
            .map(|cert| cert.leaf_sha256.clone())
    }

    /// True for the names this daemon may hold a certificate for.
    pub fn name_allowed(&self, name: &str) -> bool {
        policy::name_allowed(name, &self.apps_domain, &self.control_host)
            || self.custom_names().contains_key(name)
    }

    fn checked_name(&self, name: &str) -> Result<String, TlsError> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        match self.name_allowed(&name) {
            true => Ok(name),
            false => Err(TlsError::NameNotAllowed(name)),
        }
    }

    fn cert_key(&self, name: &str) -> Option<String> {
        match self.mode {
            TlsMode::Internal => Some(format!("{}{name}", keys::INTERNAL_CERT_PREFIX)),
            TlsMode::Acme => Some(format!("{}{name}", keys::ACME_CERT_PREFIX)),
            TlsMode::Files | TlsMode::Off => None,
        }
    }

    /// The trust anchors `ssl_verification` uses in this mode.
    fn verification_roots(&self) -> Result<rustls::RootCertStore, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        let mut anchors = self.extra_roots.clone();
        match (&self.internal, &self.files) {
            (Some(ca), _) => {
                anchors.extend(certs::parse_chain(ca.root_pem())?);
                if let Some(domains) = self.domains_ca.get() {
                    anchors.extend(certs::parse_chain(domains.root_pem())?);
                }
            }
            (None, files) => {
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                anchors.extend(files.iter().flat_map(FilesSource::chain_roots));
            }
        }
        for anchor in anchors {
            roots
                .add(anchor)
                .map_err(|error| TlsError::Config(format!("unusable trust anchor: {error}")))?;
        }
        Ok(roots)
    }

    /// What each mode needs before the listeners start; `off` needs nothing.
    fn start_mode(&mut self, config: &TlsConfig) -> Result<(), TlsError> {
        match config.mode {
            TlsMode::Off => Ok(()),
            TlsMode::Internal => self.start_internal(),
            TlsMode::Acme => self.start_acme_mode(config),
            TlsMode::Files => self.start_files_mode(config),
        }
    }

    /// The ACME account's directory and contact, and the certificates stored by earlier runs.
    fn start_acme_mode(&mut self, config: &TlsConfig) -> Result<(), TlsError> {
        self.acme = Some(AcmeIssuer::new(
            &config.acme_directory,
            &config.acme_email,
            &self.extra_roots,
        )?);
        self.load_stored(keys::ACME_CERT_PREFIX)
    }

    /// The operator's certificate and key, loaded into the resolver now.
    fn start_files_mode(&mut self, config: &TlsConfig) -> Result<(), TlsError> {
        let (Some(cert_file), Some(key_file)) = (&config.cert_file, &config.key_file) else {
            return Err(TlsError::Config(
                "tls.mode = \"files\" needs tls.cert_file and tls.key_file".into(),
            ));
        };
        let files = FilesSource::new(cert_file.clone(), key_file.clone());
        files.reload_if_changed(&self.resolver)?;
        self.files = Some(files);
        Ok(())
    }

    /// Internal mode at start: the CA (made or renewed when needed), stored leaves, and the
    /// control host's leaf.
    fn start_internal(&mut self) -> Result<(), TlsError> {
        let now = self.clock.now();
        let mut permitted = vec![self.apps_domain.clone()];
        let under_apps_domain = self.control_host == self.apps_domain
            || self
                .control_host
                .ends_with(&format!(".{}", self.apps_domain));
        if !under_apps_domain {
            permitted.push(self.control_host.clone());
        }
        let stored: Option<CaRecord> = store::read_json(&*self.store, keys::CA)?;
        let record = match stored {
            Some(record) if record.permitted == permitted => {
                let mut record = record;
                if policy::renewal_due(
                    record.intermediate_not_before,
                    record.intermediate_not_after,
                    now,
                ) {
                    internal_ca::renew_intermediate(&mut record, now)?;
                    store::write_json(&*self.store, keys::CA, &record)?;
                    tracing::info!("renewed the internal intermediate CA");
                }
                record
            }
            previous => {
                if previous.is_some() {
                    tracing::warn!(?permitted, "apps_domain changed: making a new internal CA; export and trust its root again");
                }
                let record = internal_ca::create_ca(&permitted, now)?;
                store::write_json(&*self.store, keys::CA, &record)?;
                tracing::info!("made the internal CA; `slipway ca export` prints its root");
                record
            }
        };
        let ca = InternalCa::from_record(&record)?;
        self.internal = Some(ca);
        self.load_stored(keys::INTERNAL_CERT_PREFIX)?;
        let mut names: Vec<String> = self.store.list(keys::INTERNAL_CERT_PREFIX)?;
        names.retain(|key| key.len() > keys::INTERNAL_CERT_PREFIX.len());
        let mut names: Vec<String> = names
            .iter()
            .map(|key| key[keys::INTERNAL_CERT_PREFIX.len()..].to_owned())
            .collect();
        names.push(self.control_host.clone());
        for name in names {
            let current = self.resolver.exact(&name);
            let fresh = current.is_some_and(|cert| {
                !policy::renewal_due(cert.not_before, cert.not_after, now)
                    && record_chain_contains(&cert, &record.intermediate_cert_pem)
            });
            if !fresh && self.name_allowed(&name) {
                let record = self
                    .internal
                    .as_ref()
                    .map(|ca| ca.issue_leaf(&name, now))
                    .transpose()?;
                if let Some(record) = record {
                    self.install_blocking(&record)?;
                }
            }
        }
        Ok(())
    }

    /// Puts every stored certificate under `prefix` into the resolver (names no longer allowed,
    /// e.g. after an `apps_domain` change, stay out).
    fn load_stored(&self, prefix: &str) -> Result<(), TlsError> {
        for key in self.store.list(prefix)? {
            let Some(record) = store::read_json::<CertRecord>(&*self.store, &key)? else {
                continue;
            };
            if !self.name_allowed(&record.name) {
                continue;
            }
            match ServedCert::from_record(&record) {
                Ok(served) => self.resolver.insert(&record.name, Arc::new(served)),
                Err(error) => {
                    tracing::warn!(name = %record.name, %error, "ignoring a stored certificate")
                }
            }
        }
        Ok(())
    }

    fn install_blocking(&self, record: &CertRecord) -> Result<(), TlsError> {
        let served = ServedCert::from_record(record)?;
        if let Some(key) = self.cert_key(&record.name) {
            store::write_json(&*self.store, &key, record)?;
        }
        self.resolver.insert(&record.name, Arc::new(served));
        Ok(())
    }
}

/// `tls.acme_ca_file`, parsed; empty when it is not set.
fn read_extra_roots(config: &TlsConfig) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let Some(path) = &config.acme_ca_file else {
        return Ok(Vec::new());
    };
    let pem = std::fs::read_to_string(path).map_err(|error| {
        TlsError::Config(format!("tls.acme_ca_file {}: {error}", path.display()))
    })?;
    certs::parse_chain(&pem)
        .map_err(|error| TlsError::Config(format!("tls.acme_ca_file {}: {error}", path.display())))
}

/// The HTTPS listener's configuration: certificates from `resolver`, ALPN `h2` and
/// `http/1.1`, plus `acme-tls/1` in acme mode.
fn https_server_config(
    mode: TlsMode,
    resolver: &Arc<CertResolver>,
) -> Result<rustls::ServerConfig, TlsError> {
    let mut alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    if mode == TlsMode::Acme {
        alpn_protocols.push(ACME_TLS_ALPN.to_vec());
    }
    let mut server_config = rustls::ServerConfig::builder_with_provider(Arc::new(
        ring_provider::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|error| TlsError::Config(format!("TLS server setup failed: {error}")))?
    .with_no_client_auth()
    .with_cert_resolver(Arc::clone(resolver) as Arc<dyn rustls::server::ResolvesServerCert>);
    server_config.alpn_protocols = alpn_protocols;
    Ok(server_config)
}

/// True when the served chain was signed by the current intermediate (the CA may be new).
fn record_chain_contains(cert: &ServedCert, intermediate_pem: &str) -> bool {
    let Ok(intermediate) = certs::parse_chain(intermediate_pem) else {
        return false;
    };
    cert.certified_key
        .cert
        .iter()
        .skip(1)
        .any(|certificate| intermediate.contains(certificate))
}
