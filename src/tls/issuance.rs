//! The asynchronous half of [`TlsManager`]: getting a certificate for a name, waiting for it,
//! verifying it is served, renewing, forgetting.
//!
//! ACME issuance runs in a background task per name, started at `domain_binding`, so it
//! overlaps the install and build steps; its progress is a `watch` channel that
//! [`TlsManager::wait_ready`] awaits. A failure records a per-name backoff in the store
//! (1 min doubling to 6 h, see [`policy`]); no attempt starts before it ends, across restarts
//! and deletes. Every new order is taken from the order budget ([`super::budget`]) first.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::acme::IssueContext;
use super::certs::ServedCert;
use super::clock::from_unix_seconds;
use super::policy;
use super::store::{blocking, keys, BackoffRecord, CertRecord};
use super::{TlsError, TlsManager};
use crate::config::TlsMode;

/// How often certificates are checked for renewal (decisions use wall-clock time).
pub const RENEWAL_CHECK_INTERVAL: Duration = Duration::from_secs(10 * 60);
/// How often `files` mode looks at the operator's files.
pub const FILES_POLL_INTERVAL: Duration = Duration::from_secs(2);
/// The longest one ACME issuance may take, all steps included.
const ISSUANCE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The issuance state of one name.
pub(super) struct Issuance {
    generation: u64,
    state: watch::Sender<IssueState>,
}

#[derive(Debug, Clone)]
enum IssueState {
    Pending,
    Ready,
    Failed(String),
}

impl TlsManager {
    /// Called at `domain_binding`. `internal`: issues the leaf now (unless a fresh one exists).
    /// `acme`: starts issuance in the background (unless a fresh certificate exists, one is
    /// running, or the name is backing off). `files`: checks the files cover the name.
    /// Names outside `apps_domain` (other than the control host) are refused.
    pub async fn ensure_certificate(self: &Arc<Self>, name: &str) -> Result<(), TlsError> {
        let name = self.checked_name(name)?;
        let now = self.clock.now();
        let fresh = self
            .resolver
            .exact(&name)
            .is_some_and(|cert| !policy::renewal_due(cert.not_before, cert.not_after, now));
        match self.mode {
            TlsMode::Off => Ok(()),
            TlsMode::Files => match self.resolver.lookup(&name) {
                Some(cert) if !cert.expired(now) => Ok(()),
                Some(_) => Err(TlsError::Issuance {
                    name,
                    message: "the certificate in tls.cert_file has expired".into(),
                }),
                None => Err(TlsError::NoCertificate(name)),
            },
            TlsMode::Internal if fresh => Ok(()),
            TlsMode::Internal => self.issue_internal(&name).await,
            TlsMode::Acme if fresh => {
                self.set_state(&name, IssueState::Ready);
                Ok(())
            }
            TlsMode::Acme => self.start_acme(&name).await,
        }
    }

    /// Called at `ssl_verification`: waits up to `deadline` for the certificate of `name`.
    /// A name that still has a valid certificate is ready even while its renewal runs or
    /// backs off: the app keeps being served with the current one.
    pub async fn wait_ready(&self, name: &str, deadline: Duration) -> Result<(), TlsError> {
        let name = self.checked_name(name)?;
        let now = self.clock.now();
        if self
            .resolver
            .lookup(&name)
            .is_some_and(|cert| !cert.expired(now))
        {
            return Ok(());
        }
        let receiver = match self.mode {
            TlsMode::Off => return Ok(()),
            TlsMode::Acme => self
                .issuances()
                .get(&name)
                .map(|issuance| issuance.state.subscribe()),
            TlsMode::Internal | TlsMode::Files => None,
        };
        let Some(mut receiver) = receiver else {
            return match self.resolver.lookup(&name) {
                Some(_) => Ok(()),
                None => Err(TlsError::NoCertificate(name)),
            };
        };
        let state = match tokio::time::timeout(
            deadline,
            receiver.wait_for(|state| !matches!(state, IssueState::Pending)),
        )
        .await
        {
            Ok(Ok(state)) => state.clone(),
            Ok(Err(_)) => {
                return Err(TlsError::Issuance {
                    name,
                    message: "the certificate was dropped".into(),
                })
            }
            Err(_) => return Err(TlsError::Timeout(name)),
        };
        match state {
            IssueState::Ready => Ok(()),
            IssueState::Failed(message) => Err(TlsError::Issuance { name, message }),
            IssueState::Pending => Err(TlsError::Timeout(name)),
        }
    }

    /// The `ssl_verification` step: a real handshake to `https_addr` with SNI `name`, trusting
    /// only this mode's anchors; the served leaf must be the stored one, and one HTTP request
    /// over that connection must get a response. `off` mode: nothing to check.
    /// In `acme` mode it first waits (up to 5 minutes) for an issuance still running.
    pub async fn verify(&self, name: &str, https_addr: SocketAddr) -> Result<(), TlsError> {
        let name = self.checked_name(name)?;
        if self.mode == TlsMode::Acme {
            self.wait_ready(&name, ISSUANCE_TIMEOUT).await?;
        }
        let expected_sha256 = match self.cert_key(&name) {
            Some(key) => blocking::read_json::<CertRecord>(&self.store, &key)
                .await?
                .map(|record| record.leaf_sha256),
            None if self.mode == TlsMode::Off => return Ok(()),
            None => self
                .resolver
                .lookup(&name)
                .map(|cert| cert.leaf_sha256.clone()),
        };
        let Some(expected_sha256) = expected_sha256 else {
            return Err(TlsError::NoCertificate(name));
        };
        super::verify::verify_served(
            &name,
            https_addr,
            self.verification_roots()?,
            &expected_sha256,
        )
        .await
    }

    /// Stops managing `name` (its project was deleted): the certificate stops being served and
    /// its certificate and pending order leave the store. Its backoff is kept aside (as is the
    /// order log, see [`super::budget`]): adding the name again starts no order before the
    /// backoff ends, while renewals no longer see it; [`TlsManager::check_renewals`] drops it a
    /// day after it ended.
    pub async fn forget(&self, name: &str) -> Result<(), TlsError> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.issuances().remove(&name);
        let backoff_key = format!("{}{name}", keys::ACME_BACKOFF_PREFIX);
        if let Some(backoff) =
            blocking::read_json::<BackoffRecord>(&self.store, &backoff_key).await?
        {
            let kept_key = format!("{}{name}", keys::ACME_KEPT_BACKOFF_PREFIX);
            blocking::write_json(&self.store, &kept_key, backoff).await?;
        }
        if self.mode != TlsMode::Files {
            self.resolver.remove(&name);
        }
        let stored = [
            keys::INTERNAL_CERT_PREFIX,
            keys::ACME_CERT_PREFIX,
            keys::ACME_ORDER_PREFIX,
            keys::ACME_BACKOFF_PREFIX,
        ];
        blocking::delete(
            &self.store,
            stored
                .iter()
                .map(|prefix| format!("{prefix}{name}"))
                .collect(),
        )
        .await
    }

    /// The background loop: a renewal pass at start and every 10 minutes, and in `files` mode a
    /// look at the files every 2 seconds. Ends when `shutdown` is cancelled.
    pub async fn run_renewals(self: Arc<Self>, shutdown: CancellationToken) {
        let mut renewal_tick = tokio::time::interval(RENEWAL_CHECK_INTERVAL);
        let mut files_tick = tokio::time::interval(FILES_POLL_INTERVAL);
        renewal_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        files_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = renewal_tick.tick() => {
                    if let Err(error) = self.check_renewals().await {
                        tracing::warn!(%error, "certificate renewal pass failed");
                    }
                }
                _ = files_tick.tick(), if self.mode == TlsMode::Files => {
                    // Failures are logged by the files source, once per content.
                    let _ = self.reload_files();
                }
            }
        }
    }

    /// One renewal pass: internal leaves past two thirds of their life are re-issued now; ACME
    /// names that are due, missing, or whose backoff ended get an issuance started.
    pub async fn check_renewals(self: &Arc<Self>) -> Result<(), TlsError> {
        let prefix = match self.mode {
            TlsMode::Off => return Ok(()),
            TlsMode::Files => return self.reload_files().map(|_| ()),
            TlsMode::Internal => keys::INTERNAL_CERT_PREFIX,
            TlsMode::Acme => keys::ACME_CERT_PREFIX,
        };
        let mut names = vec![self.control_host.clone()];
        let mut prefixes = vec![prefix];
        if self.mode == TlsMode::Acme {
            prefixes.extend([keys::ACME_ORDER_PREFIX, keys::ACME_BACKOFF_PREFIX]);
        }
        for prefix in prefixes {
            names.extend(
                blocking::list(&self.store, prefix)
                    .await?
                    .iter()
                    .map(|key| key[prefix.len()..].to_owned()),
            );
        }
        names.sort();
        names.dedup();
        let now = self.clock.now();
        self.drop_old_backoffs().await?;
        for name in names.into_iter().filter(|name| self.name_allowed(name)) {
            let due = self
                .resolver
                .exact(&name)
                .is_none_or(|cert| policy::renewal_due(cert.not_before, cert.not_after, now));
            if !due {
                continue;
            }
            tracing::info!(%name, "certificate due for renewal");
            let result = match self.mode {
                TlsMode::Internal => self.issue_internal(&name).await,
                _ => self.start_acme(&name).await,
            };
            if let Err(error) = result {
                tracing::warn!(%name, %error, "certificate renewal failed");
                self.report_failure(&name, &error.to_string());
            }
        }
        Ok(())
    }

    /// Drops the backoffs kept for forgotten names once a day has passed since they ended.
    async fn drop_old_backoffs(&self) -> Result<(), TlsError> {
        let now = super::clock::unix_seconds(self.clock.now());
        let mut old = Vec::new();
        for key in blocking::list(&self.store, keys::ACME_KEPT_BACKOFF_PREFIX).await? {
            let record: Option<BackoffRecord> = blocking::read_json(&self.store, &key).await?;
            if record.is_some_and(|record| record.next_attempt_at + 86_400 < now) {
                old.push(key);
            }
        }
        match old.is_empty() {
            true => Ok(()),
            false => blocking::delete(&self.store, old).await,
        }
    }

    /// `files` mode: loads the operator's files again if they changed; true when swapped.
    pub fn reload_files(&self) -> Result<bool, TlsError> {
        match &self.files {
            Some(files) => files.reload_if_changed(&self.resolver),
            None => Ok(false),
        }
    }

    /// The stored backoff of `name` (ACME), for status displays and tests.
    pub async fn backoff(&self, name: &str) -> Result<Option<BackoffRecord>, TlsError> {
        blocking::read_json(&self.store, &format!("{}{name}", keys::ACME_BACKOFF_PREFIX)).await
    }

    async fn issue_internal(&self, name: &str) -> Result<(), TlsError> {
        let Some(ca) = &self.internal else {
            return Err(TlsError::Config("no internal CA".into()));
        };
        let ca = match policy::name_allowed(name, &self.apps_domain, &self.control_host) {
            true => ca,
            false => {
                if let Some(refusal) = self.custom_name_refusal(name) {
                    return Err(TlsError::NameNotAllowed(refusal));
                }
                self.domains_ca().await?
            }
        };
        let record = ca.issue_leaf(name, self.clock.now())?;
        self.install(record).await
    }

    /// Stores a new certificate and serves it from the next handshake on.
    pub(super) async fn install(&self, record: CertRecord) -> Result<(), TlsError> {
        let served = Arc::new(ServedCert::from_record(&record)?);
        let name = record.name.clone();
        if let Some(key) = self.cert_key(&name) {
            blocking::write_json(&self.store, &key, record).await?;
        }
        self.resolver.insert(&name, served);
        Ok(())
    }

    async fn start_acme(self: &Arc<Self>, name: &str) -> Result<(), TlsError> {
        let backoff_key = format!("{}{name}", keys::ACME_BACKOFF_PREFIX);
        let mut backoff: Option<BackoffRecord> =
            blocking::read_json(&self.store, &backoff_key).await?;
        if backoff.is_none() {
            let kept_key = format!("{}{name}", keys::ACME_KEPT_BACKOFF_PREFIX);
            backoff = blocking::read_json(&self.store, &kept_key).await?;
        }
        if let Some(until) = backoff
            .as_ref()
            .and_then(|record| policy::backing_off_until(record, self.clock.now()))
        {
            let until = httpdate::fmt_http_date(until);
            let last_error = backoff.map(|record| record.last_error).unwrap_or_default();
            self.set_state(
                name,
                IssueState::Failed(format!("{last_error} (next attempt after {until})")),
            );
            return Ok(());
        }
        let running = self
            .issuances()
            .get(name)
            .is_some_and(|issuance| matches!(*issuance.state.borrow(), IssueState::Pending));
        if running {
            return Ok(());
        }
        if let Err(spent) = self.take_order(name).await? {
            return self.defer_over_budget(name, backoff, spent).await;
        }
        let generation = {
            let mut issuances = self.issuances();
            if let Some(issuance) = issuances.get(name) {
                if matches!(*issuance.state.borrow(), IssueState::Pending) {
                    return Ok(());
                }
                issuance.state.send_replace(IssueState::Pending);
                issuance.generation
            } else {
                let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
                let (state, _) = watch::channel(IssueState::Pending);
                issuances.insert(name.to_owned(), Issuance { generation, state });
                generation
            }
        };
        let manager = Arc::clone(self);
        let name = name.to_owned();
        tokio::spawn(async move { manager.run_acme_issuance(name, generation, backoff).await });
        Ok(())
    }

    /// No order is left in the budget: `name` waits until one is, as a backoff that counts no
    /// failure (stored, so a restart or a delete and add waits too).
    async fn defer_over_budget(
        &self,
        name: &str,
        backoff: Option<BackoffRecord>,
        spent: super::budget::Spent,
    ) -> Result<(), TlsError> {
        let until = httpdate::fmt_http_date(from_unix_seconds(spent.until));
        let message = format!(
            "ACME order budget spent: {}; next attempt after {until}",
            spent.reason
        );
        tracing::warn!(%name, %message, "ACME order deferred");
        let record = BackoffRecord {
            failures: backoff.map_or(0, |record| record.failures),
            next_attempt_at: spent.until,
            last_error: format!("ACME order budget spent: {}", spent.reason),
        };
        let key = format!("{}{name}", keys::ACME_BACKOFF_PREFIX);
        blocking::write_json(&self.store, &key, record).await?;
        self.set_state(name, IssueState::Failed(message));
        Ok(())
    }

    async fn run_acme_issuance(
        self: Arc<Self>,
        name: String,
        generation: u64,
        backoff: Option<BackoffRecord>,
    ) {
        let Some(issuer) = &self.acme else { return };
        tracing::info!(%name, "requesting a certificate over ACME");
        let context = IssueContext {
            store: &self.store,
            resolver: &self.resolver,
            clock: &*self.clock,
        };
        let result =
            match tokio::time::timeout(ISSUANCE_TIMEOUT, issuer.issue(&name, &context)).await {
                Ok(result) => result,
                Err(_) => Err(TlsError::Acme(format!(
                    "issuance did not finish within {}s",
                    ISSUANCE_TIMEOUT.as_secs()
                ))),
            };
        if !self.is_current(&name, generation) {
            return;
        }
        let outcome = match result {
            Ok(record) => self.install(record).await,
            Err(error) => Err(error),
        };
        let settled = match outcome {
            Ok(()) => {
                tracing::info!(%name, "ACME certificate issued");
                let done = [
                    keys::ACME_ORDER_PREFIX,
                    keys::ACME_BACKOFF_PREFIX,
                    keys::ACME_KEPT_BACKOFF_PREFIX,
                ]
                .map(|prefix| format!("{prefix}{name}"));
                blocking::delete(&self.store, done.to_vec())
                    .await
                    .map(|()| IssueState::Ready)
            }
            Err(error) => {
                let next =
                    policy::next_backoff(backoff.as_ref(), &error.to_string(), self.clock.now());
                let until = httpdate::fmt_http_date(from_unix_seconds(next.next_attempt_at));
                tracing::warn!(%name, %error, failures = next.failures, %until, "ACME issuance failed; backing off");
                let message = format!("{error} (next attempt after {until})");
                self.report_failure(&name, &message);
                let key = format!("{}{name}", keys::ACME_BACKOFF_PREFIX);
                blocking::write_json(&self.store, &key, next)
                    .await
                    .map(|()| IssueState::Failed(message))
            }
        };
        let state = settled.unwrap_or_else(|error| IssueState::Failed(error.to_string()));
        if self.is_current(&name, generation) {
            self.set_state(&name, state);
        } else {
            // Forgotten while the result was being stored: drop what was just written.
            let _ = self.forget(&name).await;
        }
    }

    fn issuances(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Issuance>> {
        self.issuances
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The error of the last issuance of `name`, while it backs off.
    pub(super) fn issue_failure(&self, name: &str) -> Option<String> {
        match &*self.issuances().get(name)?.state.borrow() {
            IssueState::Failed(message) => Some(message.clone()),
            IssueState::Pending | IssueState::Ready => None,
        }
    }

    fn is_current(&self, name: &str, generation: u64) -> bool {
        self.issuances()
            .get(name)
            .is_some_and(|issuance| issuance.generation == generation)
    }

    fn set_state(&self, name: &str, state: IssueState) {
        let mut issuances = self.issuances();
        match issuances.get(name) {
            Some(issuance) => {
                issuance.state.send_replace(state);
            }
            None => {
                let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
                let (sender, _) = watch::channel(state);
                issuances.insert(
                    name.to_owned(),
                    Issuance {
                        generation,
                        state: sender,
                    },
                );
            }
        }
    }
}
