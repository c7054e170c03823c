//! Pending proofs of ownership: [`Domains::verify`] checks one now (the API's verify action),
//! [`Domains::run_rechecks`] checks each again in the background, 5 s after it was added and
//! then with a backoff doubling to an hour, until it is proven or deleted. The schedule is in
//! memory: a restart checks every pending domain again from the start ([`Domains::restore`]).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::proof::Outcome;
use super::{DomainError, DomainView, Domains};
use crate::store::domains::DomainRecord;
use crate::store::records::ProjectRecord;

/// The first background re-check after a failed one.
pub const RECHECK_FIRST: Duration = Duration::from_secs(5);
/// The longest wait between two background re-checks.
pub const RECHECK_MAX: Duration = Duration::from_secs(60 * 60);
/// How often the background task looks for checks that are due.
const TICK: Duration = Duration::from_secs(1);

/// One pending domain's schedule.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    project_id: String,
    failures: u32,
    next_check_ms: u64,
    last_error: Option<String>,
}

/// The wait after `failures` failed checks: 5 s doubling, at most an hour.
fn delay(failures: u32) -> Duration {
    RECHECK_FIRST
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(RECHECK_MAX)
}

impl Domains {
    fn pending(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Pending>> {
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Puts `record` (not proven) on the background schedule, with why it is not proven.
    pub(super) fn schedule_check(&self, record: &DomainRecord, last_error: Option<String>) {
        let failures = 1;
        let next_check_ms = crate::ids::now_ms() + delay(failures).as_millis() as u64;
        self.pending().insert(
            record.domain.clone(),
            Pending {
                project_id: record.project_id.clone(),
                failures,
                next_check_ms,
                last_error,
            },
        );
    }

    pub(super) fn unschedule(&self, name: &str) {
        self.pending().remove(name);
    }

    /// Why the last check of a pending `name` failed, and when the next runs (Unix ms).
    pub(super) fn pending_state(&self, name: &str) -> (Option<String>, Option<u64>) {
        match self.pending().get(name) {
            Some(pending) => (pending.last_error.clone(), Some(pending.next_check_ms)),
            None => (None, None),
        }
    }

    /// Checks the proof of `domain` of `project` now: proven, it is routed and its certificate
    /// requested; not, the answer's `verification.lastError` says why. A proven domain is
    /// answered as it is.
    pub async fn verify(
        self: &Arc<Self>,
        project: &ProjectRecord,
        domain: &str,
    ) -> Result<DomainView, DomainError> {
        let view = self.get(project, domain).await?;
        if view.record.verified_ms.is_some() {
            return Ok(view);
        }
        self.check_now(project, &view.record).await?;
        self.get(project, domain).await
    }

    /// One check of a pending `record`: proven → stored, routed, certified; not → backoff.
    async fn check_now(
        self: &Arc<Self>,
        project: &ProjectRecord,
        record: &DomainRecord,
    ) -> Result<(), DomainError> {
        let why = match self.proofs.check(&project.id, &record.domain).await {
            Outcome::Missing(why) => why,
            outcome => {
                let (id, name) = (project.id.clone(), record.domain.clone());
                let now = crate::ids::now_ms();
                let proven = self
                    .store
                    .call(move |store| store.set_domain_verified(&id, &name, now))
                    .await?;
                self.unschedule(&record.domain);
                if let Some(proven) = proven {
                    tracing::info!(domain = %proven.domain, ?outcome, "custom domain proven");
                    self.go_live(project, &proven).await;
                }
                return Ok(());
            }
        };
        if let Some(pending) = self.pending().get_mut(&record.domain) {
            pending.failures = pending.failures.saturating_add(1);
            pending.next_check_ms =
                crate::ids::now_ms() + delay(pending.failures).as_millis() as u64;
            pending.last_error = Some(why);
        }
        Ok(())
    }

    /// The background re-checks; ends when `shutdown` is cancelled.
    pub async fn run_rechecks(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => self.recheck_due().await,
            }
        }
    }

    async fn recheck_due(self: &Arc<Self>) {
        let now = crate::ids::now_ms();
        let due: Vec<(String, String)> = self
            .pending()
            .iter()
            .filter(|(_, pending)| pending.next_check_ms <= now)
            .map(|(name, pending)| (name.clone(), pending.project_id.clone()))
            .collect();
        for (name, project_id) in due {
            let key = name.clone();
            let found = self
                .store
                .call(move |store| {
                    let record = store.domain(&key)?;
                    let project = store.find_project(&project_id)?;
                    Ok::<_, crate::store::StoreError>(record.zip(project))
                })
                .await;
            match found {
                Ok(Some((record, project))) if record.project_id == project.id => {
                    if let Err(error) = self.check_now(&project, &record).await {
                        tracing::warn!(domain = %record.domain, %error, "re-checking a custom domain failed");
                    }
                }
                // Deleted, or taken by a project that proved it.
                Ok(_) => self.unschedule(&name),
                Err(error) => tracing::warn!(%error, "re-checking custom domains failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rechecks_back_off_from_five_seconds_to_an_hour() {
        let seconds: Vec<u64> = (1..=12).map(|n| delay(n).as_secs()).collect();
        assert_eq!(&seconds[..5], &[5, 10, 20, 40, 80]);
        assert_eq!(seconds[11], 3600);
    }
}
