//! Add-ons in the appliance's backup (`slipway backup` / `slipway restore`, issue 34): never
//! a copy of a live data directory. Before the store is snapshotted, every running add-on is
//! backed up and the backup proven (as any backup); the archive holds the add-ons' backups
//! volumes, not their data volumes. A daemon that starts with an add-on whose data volume is
//! missing (a restored appliance, a lost disk) makes it again from its newest good backup:
//! the same address, password and settings, its data restored by the restore's path.

use std::time::Duration;

use super::backup::Busy;
use super::restore::Source;
use super::{AddonKind, Addons};
use crate::store::addon_backups::{AddonBackupRecord, BackupKind, BackupState};
use crate::store::addons::{AddonRecord, AddonState};
use crate::store::records::ProjectRecord;

/// How long the appliance backup waits for an add-on's own backup or restore to end.
const WAIT_BUSY: Duration = Duration::from_secs(600);

/// What keeps the backups volumes still while the appliance's backup archives them.
pub struct Held {
    _busy: Vec<Busy>,
    _shipping: tokio::sync::OwnedMutexGuard<()>,
}

impl Addons {
    /// Backs every running add-on up for the appliance's backup: the guards to hold until
    /// the archive is written (no backup or restore changes a backups volume meanwhile, and
    /// no WAL is moved into one) and the trees to archive (`addons/<id>-backups`, of add-ons
    /// with a good backup).
    pub async fn for_appliance_backup(&self) -> (Held, Vec<String>) {
        let addons = self
            .store
            .call(|s| s.all_addons())
            .await
            .unwrap_or_default();
        let (mut guards, mut trees) = (Vec::new(), Vec::new());
        for addon in addons {
            let deadline = tokio::time::Instant::now() + WAIT_BUSY;
            let busy = loop {
                match self.claim(&addon) {
                    Ok(busy) => break Some(busy),
                    Err(_) if tokio::time::Instant::now() < deadline => {
                        tokio::time::sleep(Duration::from_millis(500)).await
                    }
                    Err(_) => break None,
                }
            };
            let Some(busy) = busy else {
                tracing::warn!(addon = %addon.id, "appliance backup: the add-on stayed busy; its last good backup is archived");
                continue;
            };
            // A stopped add-on (kept for a rollback) has nothing new: its last good backup.
            let fresh = match addon.state {
                AddonState::Running => self.new_backup(&addon, "appliance").await.ok(),
                _ => None,
            };
            if let Some(record) = fresh {
                let record = self.backup_now(&addon, record).await;
                if record.state != BackupState::Ok {
                    tracing::warn!(addon = %addon.id, error = ?record.error, "appliance backup: the add-on's backup failed; its last good one is archived");
                }
            }
            let id = addon.id.clone();
            let has_good = self
                .store
                .call(move |s| s.addon_backups(&id))
                .await
                .is_ok_and(|backups| backups.iter().any(|b| b.state == BackupState::Ok));
            if has_good {
                trees.push(format!("addons/{}-backups", addon.id));
            }
            guards.push(busy);
        }
        // Taken last: the backups above may move WAL themselves.
        let held = Held {
            _busy: guards,
            _shipping: self.shipping.clone().lock_owned().await,
        };
        (held, trees)
    }

    /// Whether the add-on's data volume is missing (nothing to start the server on).
    pub(super) fn data_missing(&self, addon: &AddonRecord) -> bool {
        let volume = self.volume(addon);
        let marker = match AddonKind::parse(&addon.kind) {
            Some(AddonKind::Redis) => "redis.conf",
            _ => "pgdata/PG_VERSION",
        };
        !volume.image.exists() && !volume.dir.join(marker).exists()
    }

    /// [`Addons::rebuild`], the add-on `starting` meanwhile and `running` or `failed` after.
    pub(super) async fn rebuild_in_background(&self, project: ProjectRecord, addon: AddonRecord) {
        let message = Some(
            "its data volume is missing: making it again from its newest good backup".to_owned(),
        );
        let _ = self.set_state(&addon, AddonState::Starting, message).await;
        let (state, message) = match self.rebuild(&project, &addon).await {
            Ok(()) => (AddonState::Running, None),
            Err(error) => {
                tracing::error!(addon = %addon.id, %error, "an add-on could not be made again");
                (
                    AddonState::Failed,
                    Some(format!("could not be made again: {error}")),
                )
            }
        };
        let _ = self.set_state(&addon, state, message).await;
        if state == AddonState::Running {
            // PITR: the made-again cluster's first base backup opens its window.
            self.base_backup_too(&addon, "pitr").await;
        }
    }

    /// Makes a missing add-on again from its newest good backup.
    pub(super) async fn rebuild(
        &self,
        project: &ProjectRecord,
        addon: &AddonRecord,
    ) -> Result<(), String> {
        let id = addon.id.clone();
        let backups = self
            .store
            .call(move |s| s.addon_backups(&id))
            .await
            .map_err(|e| e.to_string())?;
        // A base backup (point-in-time recovery) is restored by `pitr_restore`, not here.
        let restorable =
            |b: &&AddonBackupRecord| b.state == BackupState::Ok && b.kind != BackupKind::Base;
        let Some(newest) = backups.iter().rev().find(restorable) else {
            return Err(
                "its data volume is missing and it has no good backup to make it again from".into(),
            );
        };
        tracing::warn!(addon = %addon.id, backup = %newest.id, "an add-on's data volume is missing: made again from its newest good backup");
        if addon.pitr {
            self.forget_pitr_history(addon).await;
        }
        let password = self.password(addon)?;
        let mut made = addon.clone();
        self.first_start(project, &mut made, &password).await?;
        let source = Source {
            volume: self.backups_volume(addon),
            file: &newest.file,
            check: newest.check.as_ref(),
            written: Some((newest.bytes, &newest.sha256)),
        };
        self.restore_into(&made, &source).await
    }
}
