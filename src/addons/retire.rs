//! Deleting an add-on through the API (`DELETE /api/addons/{id}?confirm=<id>`): a final
//! backup is taken and proven first — a delete whose final backup fails deletes nothing —
//! then the server stops and its data volume and address go, but its backups volume and its
//! good backups stay for `[addons] deleted_keep_days` (7), restorable into a new add-on of
//! its project (`POST /api/addons/{id}/restore {"backupId", "target": "new"}`). The schedule
//! (`schedule.rs`) purges them once that time is over.

use super::{AddonError, Addons};
use crate::store::addon_backups::BackupState;
use crate::store::addons::{AddonRecord, AddonState};
use crate::store::deleted_addons::DeletedAddonRecord;

impl Addons {
    /// Deletes `addon`, keeping its backups (with a final one when `final_backup` and it
    /// runs) until the keep time is over; what is kept.
    pub async fn retire(
        &self,
        addon: &AddonRecord,
        final_backup: bool,
    ) -> Result<DeletedAddonRecord, AddonError> {
        let busy = self.claim(addon)?;
        let final_backup = match final_backup && addon.state == AddonState::Running {
            true => Some(self.final_backup(addon).await?),
            false => None,
        };
        let now = crate::ids::now_ms();
        let deleted = DeletedAddonRecord {
            v: 1,
            addon: addon.clone(),
            deleted_ms: now,
            final_backup,
            purge_ms: now + self.deleted_keep_ms,
        };
        let stored = deleted.clone();
        self.store.call(move |s| s.retire_addon(&stored)).await?;
        self.supervisor.stop_deployment(&addon.id, None).await;
        self.pipeline.hub().remove(&addon.id);
        let (volumes, volume) = (self.pipeline.volumes().clone(), self.volume(addon));
        let app_dir = self.empty_app_dir(addon);
        let _ = tokio::task::spawn_blocking(move || {
            volumes.remove(&volume);
            let _ = std::fs::remove_dir_all(app_dir);
        })
        .await;
        let id = addon.id.clone();
        let _ = self.store.call(move |s| s.delete_logs(&id)).await;
        self.runner.release_link(addon.link_index);
        drop(busy);
        if self.deleted_keep_ms == 0 {
            self.purge(&deleted).await;
        }
        Ok(deleted)
    }

    /// A backup taken and proven now; 409 with why when it is not good.
    async fn final_backup(&self, addon: &AddonRecord) -> Result<String, AddonError> {
        let record = self.new_backup(addon, "final").await?;
        let record = self.backup_now(addon, record).await;
        if record.state == BackupState::Ok {
            return Ok(record.id);
        }
        Err(AddonError::Refused(format!(
            "the final backup {} failed, so nothing was deleted: {}; fix it, or delete without \
             one: ?confirm={}&finalBackup=false",
            record.id,
            record.error.unwrap_or_default(),
            addon.id
        )))
    }

    /// Purges every deleted add-on whose keep time is over.
    pub(super) async fn purge_due(&self) {
        let Ok(deleted) = self.store.call(|s| s.all_deleted_addons()).await else {
            return;
        };
        let now = crate::ids::now_ms();
        for gone in deleted.iter().filter(|d| d.purge_ms <= now) {
            self.purge(gone).await;
        }
    }

    /// Purges the deleted add-ons of `project_id` (deleted with it).
    pub(super) async fn purge_project(&self, project_id: &str) {
        let Ok(deleted) = self.store.call(|s| s.all_deleted_addons()).await else {
            return;
        };
        for gone in deleted.iter().filter(|d| d.addon.project_id == project_id) {
            self.purge(gone).await;
        }
    }

    /// Removes a deleted add-on's backups volume and records.
    async fn purge(&self, deleted: &DeletedAddonRecord) {
        let (volumes, backups) = (
            self.pipeline.volumes().clone(),
            self.backups_volume(&deleted.addon),
        );
        let _ = tokio::task::spawn_blocking(move || volumes.remove(&backups)).await;
        let id = deleted.addon.id.clone();
        match self.store.call(move |s| s.purge_deleted_addon(&id)).await {
            Ok(()) => {
                tracing::info!(addon = %deleted.addon.id, "a deleted add-on's backups were purged")
            }
            Err(error) => {
                tracing::warn!(addon = %deleted.addon.id, %error, "cannot purge a deleted add-on")
            }
        }
    }
}
