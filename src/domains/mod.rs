//! Custom domains: a project answers on names of its owner's, with certificates in every TLS
//! mode and optional redirects (the contract's "Custom domains").
//!
//! [`Domains`] is the one place a domain is added or removed: it validates the name
//! ([`name`]), writes the store (one transaction: the `domains` table and the project
//! record), then tells the route snapshot (`router`) and the TLS manager (`tls::custom`). A
//! domain's status is not stored: it is read from what the TLS manager serves at that moment,
//! so `active` means the certificate really is in the resolver. `app.rs` calls
//! [`Domains::restore`] at start-up, before the daemon is ready; project deletion calls
//! [`Domains::project_deleted`] after the store dropped the rows.
//!
//! Architecture invariant: a domain whose ownership is not proven ([`proof`]) is neither
//! routed nor given a certificate; [`Domains::go_live`] is the one place both happen, and only
//! for a proven record. Pending proofs are re-checked by [`Domains::verify`] and in the
//! background with backoff ([`recheck`]).

pub mod name;
pub mod proof;
mod recheck;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::notifications::Notifier;
use crate::router::{CustomHost, Routes};
use crate::store::domains::{AddDomain, DomainRecord, RemoveDomain};
use crate::store::records::ProjectRecord;
use crate::store::{Store, StoreError};
use crate::tls::{CertificateState, TlsManager};

pub use name::NameError;
pub use proof::{Challenge, Proofs};

/// At most this many custom domains per project.
pub const MAX_PER_PROJECT: usize = 50;
/// How long a new domain's watcher waits for its ACME certificate before it stops watching
/// (the issuance itself goes on, with its backoff and renewals).
const ACTIVE_WATCH: Duration = Duration::from_secs(6 * 60);

/// Why a domain was not added or removed; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    #[error(transparent)]
    Name(#[from] NameError),
    #[error("{domain} is already a domain of another project")]
    Taken { domain: String },
    #[error("{domain} is under {parent}, a domain of another project")]
    Under { domain: String, parent: String },
    #[error("{0}")]
    NotSignable(String),
    #[error("{domain} is already a domain of this project")]
    AlreadyHere { domain: String },
    #[error("the project has {max} domains already, the most allowed; delete one first")]
    TooMany { max: usize },
    #[error(
        "redirectTo {target:?} must be another domain of this project or its slug host {slug_host}"
    )]
    BadRedirect { target: String, slug_host: String },
    #[error("no domain {domain:?} in this project")]
    NotFound { domain: String },
    #[error("{from} redirects to {domain}; delete it or add it again without redirectTo first", from = from.join(", "))]
    RedirectedTo { domain: String, from: Vec<String> },
    #[error("the project was deleted meanwhile")]
    NoProject,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A domain with what is served for it now.
#[derive(Debug, Clone)]
pub struct DomainView {
    pub record: DomainRecord,
    pub certificate: CertificateState,
    pub verification: Verification,
}

/// Where a domain's proof of ownership stands.
#[derive(Debug, Clone)]
pub struct Verification {
    /// The TXT record that proves it for its project.
    pub challenge: Challenge,
    /// While not proven: why the last check failed, and when the next one runs (Unix ms).
    pub last_error: Option<String>,
    pub next_check_ms: Option<u64>,
}

/// The daemon's names, which no custom domain may take.
#[derive(Debug, Clone)]
pub struct OwnNames {
    pub apps_domain: String,
    pub control_host: String,
}

/// What [`Domains::new`] is built from.
pub struct DomainsParts {
    pub store: Store,
    pub routes: Arc<Routes>,
    pub tls: Option<Arc<TlsManager>>,
    pub notifier: Notifier,
    pub names: OwnNames,
    /// The HTTPS listener, where a new certificate is checked before `domain.active`.
    pub https_addr: Option<SocketAddr>,
    pub proofs: Proofs,
}

pub struct Domains {
    store: Store,
    routes: Arc<Routes>,
    tls: Option<Arc<TlsManager>>,
    notifier: Notifier,
    names: OwnNames,
    https_addr: Option<SocketAddr>,
    proofs: Proofs,
    /// The pending proofs, by name: when each is checked next ([`recheck`]).
    pending: Mutex<HashMap<String, recheck::Pending>>,
}

impl Domains {
    pub fn new(parts: DomainsParts) -> Arc<Domains> {
        Arc::new(Domains {
            store: parts.store,
            routes: parts.routes,
            tls: parts.tls,
            notifier: parts.notifier,
            names: parts.names,
            https_addr: parts.https_addr,
            proofs: parts.proofs,
            pending: Mutex::new(HashMap::new()),
        })
    }

    fn slug_host(&self, slug: &str) -> String {
        format!("{slug}.{}", self.names.apps_domain)
    }

    /// Every stored proven domain is routed and its certificate served (or requested) again;
    /// pending ones go back to being re-checked.
    pub async fn restore(self: &Arc<Self>) -> Result<usize, StoreError> {
        let records = self.store.call(|store| store.all_domains()).await?;
        let projects = self.store.call(|store| store.list_projects()).await?;
        let mut hosts = Vec::with_capacity(records.len());
        for record in &records {
            let Some(project) = projects.iter().find(|p| p.id == record.project_id) else {
                continue;
            };
            match record.verified_ms {
                Some(_) => hosts.push((record, self.custom_host(project, record))),
                None => self.schedule_check(record, None),
            }
        }
        let routed: Vec<_> = hosts
            .iter()
            .map(|(record, host)| (record.domain.clone(), host.clone()))
            .collect();
        self.routes.add_domains(&routed);
        if let Some(tls) = &self.tls {
            for (record, host) in &hosts {
                let name = &record.domain;
                if let Err(error) = tls.add_custom_name(name, &record.project_id).await {
                    tracing::warn!(domain = %name, %error, "no certificate for a custom domain yet");
                }
                if !matches!(tls.certificate_state(name), CertificateState::Served { .. }) {
                    self.watch_until_active(&host.slug, name);
                }
            }
        }
        Ok(hosts.len())
    }

    fn custom_host(&self, project: &ProjectRecord, record: &DomainRecord) -> CustomHost {
        CustomHost {
            slug: project.slug.clone(),
            redirect_to: record.redirect_to.clone(),
        }
    }

    /// Adds `input` to `project`: stored, routed, and its certificate issued (`internal`),
    /// requested (`acme`) or looked up (`files`).
    pub async fn add(
        self: &Arc<Self>,
        project: &ProjectRecord,
        input: &str,
        redirect_to: Option<&str>,
    ) -> Result<DomainView, DomainError> {
        let domain = name::normalize(input, &self.names.apps_domain, &self.names.control_host)?;
        let slug_host = self.slug_host(&project.slug);
        let redirect_to = self.redirect_target(redirect_to, &slug_host)?;
        self.check_signable(&domain)?;
        let outcome = self.proofs.check(&project.id, &domain).await;
        let record = new_record(project, domain, redirect_to, &outcome);
        self.store_new(project, &record, slug_host).await?;
        tracing::info!(domain = %record.domain, project = %project.slug, ?outcome, "custom domain added");
        match outcome {
            proof::Outcome::Missing(why) => self.schedule_check(&record, Some(why)),
            proof::Outcome::Txt | proof::Outcome::Trusted(_) => {
                self.go_live(project, &record).await
            }
        }
        Ok(self.view(record))
    }

    /// `redirectTo`, normalized: the project's slug host or a name a domain could have
    /// (whether the project holds it is checked by the store, in `store_new`).
    fn redirect_target(
        &self,
        redirect_to: Option<&str>,
        slug_host: &str,
    ) -> Result<Option<String>, DomainError> {
        let Some(target) = redirect_to else {
            return Ok(None);
        };
        let lowered = target.trim().trim_end_matches('.').to_ascii_lowercase();
        if lowered == slug_host {
            return Ok(Some(lowered));
        }
        name::normalize(target, &self.names.apps_domain, &self.names.control_host)
            .map(Some)
            .map_err(|_| DomainError::BadRedirect {
                target: target.to_owned(),
                slug_host: slug_host.to_owned(),
            })
    }

    /// Refuses a name the TLS mode could never give a certificate.
    fn check_signable(&self, domain: &str) -> Result<(), DomainError> {
        match self
            .tls
            .as_ref()
            .and_then(|tls| tls.custom_name_refusal(domain))
        {
            Some(refusal) => Err(DomainError::NotSignable(refusal)),
            None => Ok(()),
        }
    }

    /// Writes the new record (the `domains` table and the project record, one transaction),
    /// or says why the store refused it.
    async fn store_new(
        &self,
        project: &ProjectRecord,
        record: &DomainRecord,
        slug_host: String,
    ) -> Result<(), DomainError> {
        let stored = record.clone();
        let apps_domain = self.names.apps_domain.clone();
        let added = self
            .store
            .call(move |store| {
                store.add_domain(
                    &stored,
                    |slug| format!("{slug}.{apps_domain}"),
                    MAX_PER_PROJECT,
                )
            })
            .await?;
        let domain = record.domain.clone();
        match added {
            AddDomain::Added(_) => Ok(()),
            AddDomain::NoProject => Err(DomainError::NoProject),
            AddDomain::Taken { project_id } if project_id == project.id => {
                Err(DomainError::AlreadyHere { domain })
            }
            AddDomain::Taken { .. } => Err(DomainError::Taken { domain }),
            AddDomain::Under { parent } => Err(DomainError::Under { domain, parent }),
            AddDomain::TooMany { max } => Err(DomainError::TooMany { max }),
            AddDomain::BadRedirect => Err(DomainError::BadRedirect {
                target: record.redirect_to.clone().unwrap_or_default(),
                slug_host,
            }),
        }
    }

    /// Routes a proven domain and gets its certificate: the one place both happen.
    async fn go_live(self: &Arc<Self>, project: &ProjectRecord, record: &DomainRecord) {
        if record.verified_ms.is_none() {
            return;
        }
        let domain = &record.domain;
        self.routes
            .add_domains(&[(domain.clone(), self.custom_host(project, record))]);
        let certificate = match &self.tls {
            None => CertificateState::Plain,
            Some(tls) => {
                if let Err(error) = tls.add_custom_name(domain, &project.id).await {
                    tracing::warn!(%domain, %error, "no certificate for the custom domain");
                }
                tls.certificate_state(domain)
            }
        };
        match &certificate {
            CertificateState::Plain | CertificateState::Served { .. } => {
                self.notifier.domain_active(&project.slug, domain)
            }
            CertificateState::Pending => self.watch_until_active(&project.slug, domain),
            CertificateState::Failed(_) => {}
        }
    }

    /// Waits (in the background) for the ACME certificate of `domain`, checks it is served on
    /// the HTTPS listener, and sends `domain.active`.
    fn watch_until_active(self: &Arc<Self>, slug: &str, domain: &str) {
        let (Some(tls), Some(https_addr)) = (self.tls.clone(), self.https_addr) else {
            return;
        };
        let domains = Arc::clone(self);
        let (slug, domain) = (slug.to_owned(), domain.to_owned());
        tokio::spawn(async move {
            if tls.wait_ready(&domain, ACTIVE_WATCH).await.is_err() {
                return;
            }
            let still_ours = matches!(
                domains.routes.snapshot().domains.get(&domain),
                Some(host) if host.slug == slug
            );
            if still_ours && tls.verify(&domain, https_addr).await.is_ok() {
                tracing::info!(%domain, "custom domain active");
                domains.notifier.domain_active(&slug, &domain);
            }
        });
    }

    /// The domains of `project` with what each is served with now.
    pub async fn list(&self, project: &ProjectRecord) -> Result<Vec<DomainView>, StoreError> {
        let id = project.id.clone();
        let records = self.store.call(move |store| store.domains_of(&id)).await?;
        Ok(records
            .into_iter()
            .map(|record| self.view(record))
            .collect())
    }

    /// One domain of `project`.
    pub async fn get(
        &self,
        project: &ProjectRecord,
        domain: &str,
    ) -> Result<DomainView, DomainError> {
        let name = domain.trim_end_matches('.').to_ascii_lowercase();
        let key = name.clone();
        let record = self.store.call(move |store| store.domain(&key)).await?;
        match record.filter(|record| record.project_id == project.id) {
            Some(record) => Ok(self.view(record)),
            None => Err(DomainError::NotFound {
                domain: domain.to_owned(),
            }),
        }
    }

    fn view(&self, record: DomainRecord) -> DomainView {
        let certificate = match (&self.tls, record.verified_ms) {
            (_, None) => CertificateState::Pending,
            (None, Some(_)) => CertificateState::Plain,
            (Some(tls), Some(_)) => tls.certificate_state(&record.domain),
        };
        let (last_error, next_check_ms) = match record.verified_ms {
            Some(_) => (None, None),
            None => self.pending_state(&record.domain),
        };
        DomainView {
            verification: Verification {
                challenge: self.proofs.challenge(&record.project_id, &record.domain),
                last_error,
                next_check_ms,
            },
            record,
            certificate,
        }
    }

    /// Removes a domain: not served from the next request on, its certificate dropped.
    pub async fn remove(
        &self,
        project: &ProjectRecord,
        domain: &str,
    ) -> Result<DomainRecord, DomainError> {
        let name = domain.trim_end_matches('.').to_ascii_lowercase();
        let (id, key) = (project.id.clone(), name.clone());
        let outcome = self
            .store
            .call(move |store| store.remove_domain(&id, &key))
            .await?;
        let record = match outcome {
            RemoveDomain::Removed(record) => record,
            RemoveDomain::NotFound => {
                return Err(DomainError::NotFound {
                    domain: domain.to_owned(),
                })
            }
            RemoveDomain::RedirectedTo(from) => {
                return Err(DomainError::RedirectedTo { domain: name, from })
            }
        };
        self.unschedule(&name);
        self.routes.remove_domain(&name);
        self.forget_certificate(&name).await;
        tracing::info!(domain = %name, project = %project.slug, "custom domain deleted");
        Ok(record)
    }

    /// A deleted project's domains (already gone from the store and the route table).
    pub async fn project_deleted(&self, names: &[String]) {
        for name in names {
            self.unschedule(name);
            self.routes.remove_domain(name);
            self.forget_certificate(name).await;
        }
    }

    async fn forget_certificate(&self, name: &str) {
        if let Some(tls) = &self.tls {
            if let Err(error) = tls.remove_custom_name(name).await {
                tracing::warn!(domain = %name, %error, "could not drop a custom domain's certificate");
            }
        }
    }
}

/// A new domain of `project`, proven now unless the proof is missing.
fn new_record(
    project: &ProjectRecord,
    domain: String,
    redirect_to: Option<String>,
    outcome: &proof::Outcome,
) -> DomainRecord {
    let now = crate::ids::now_ms();
    DomainRecord {
        v: 1,
        domain,
        project_id: project.id.clone(),
        redirect_to,
        created_ms: now,
        verified_ms: match outcome {
            proof::Outcome::Missing(_) => None,
            proof::Outcome::Txt | proof::Outcome::Trusted(_) => Some(now),
        },
    }
}
