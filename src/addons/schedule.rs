//! Scheduled backups (`[addons] backup_interval_h`): every add-on whose newest backup (good
//! or not) is older than the interval is backed up and the backup proven, one add-on at a
//! time, so backups never pile onto the machine together. An add-on busy with a backup or
//! restore asked for through the API is passed over until the next look. Each look also
//! purges the deleted add-ons whose backups were kept long enough (`retire.rs`).

use std::sync::Arc;
use std::time::Duration;

use super::Addons;
use crate::store::addons::AddonState;

/// How often the scheduler looks.
const LOOK_EVERY: Duration = Duration::from_secs(300);

impl Addons {
    /// Runs until `shutdown` (no backups when the interval is 0); deleted add-ons whose
    /// keep time is over are purged at each look, and once at start.
    pub async fn schedule_backups(
        self: Arc<Self>,
        interval_h: u64,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        let interval_ms = interval_h * 3600 * 1000;
        loop {
            self.purge_due().await;
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(LOOK_EVERY) => {}
            }
            if interval_ms > 0 {
                self.back_up_due(interval_ms, &shutdown).await;
            }
        }
    }

    /// Backs up every running add-on whose newest backup is older than `interval_ms`.
    async fn back_up_due(&self, interval_ms: u64, shutdown: &tokio_util::sync::CancellationToken) {
        let Ok(addons) = self.store.call(|s| s.all_addons()).await else {
            return;
        };
        for addon in addons {
            if shutdown.is_cancelled() {
                return;
            }
            if addon.state != AddonState::Running {
                continue;
            }
            let id = addon.id.clone();
            let newest = self
                .store
                .call(move |s| s.addon_backups(&id))
                .await
                .ok()
                .and_then(|backups| backups.last().map(|b| b.created_ms));
            let due =
                newest.is_none_or(|at| crate::ids::now_ms().saturating_sub(at) >= interval_ms);
            if !due {
                continue;
            }
            let Ok(busy) = self.claim(&addon) else {
                continue;
            };
            if let Ok(record) = self.new_backup(&addon, "schedule").await {
                self.backup_now(&addon, record).await;
                self.base_backup_too(&addon, "schedule").await;
            }
            drop(busy);
        }
    }
}
