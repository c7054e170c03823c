//! Moving data in and out of an add-on (issue 34). **Export** answers with a proven backup's
//! file: the one asked for, or a new backup taken (and proven) for it — so what leaves is
//! known to restore. **Import** takes a `pg_dump -Fc` archive or SQL text (PostgreSQL) or an
//! RDB (Redis): the upload becomes a backup of the add-on (`trigger: import`), is proven
//! like any backup (restored into a throw-away server), and only then restored in place, by
//! the same path a restore takes (the live data replaced only once the copy holds the same
//! counts).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::files::{hash_file, head_of, ImportFormat};
use super::restore::Source;
use super::{AddonError, Addons};
use crate::store::addon_backups::{AddonBackupRecord, BackupState};
use crate::store::addons::{AddonRecord, AddonState};

impl Addons {
    /// The file of a good backup to export: `backup` when given, else a new backup, taken
    /// and proven now. The record and the file's path.
    pub async fn export(
        &self,
        addon: &AddonRecord,
        backup: Option<AddonBackupRecord>,
    ) -> Result<(AddonBackupRecord, PathBuf), AddonError> {
        let record = match backup {
            Some(record) if record.state == BackupState::Ok => record,
            Some(record) => {
                return Err(AddonError::Unavailable(format!(
                    "backup {} is not a good backup ({}); export a good one, or none to take a \
                     new one",
                    record.id,
                    record.error.as_deref().unwrap_or("not proven yet")
                )))
            }
            None => {
                let busy = self.claim(addon)?;
                let started = self.new_backup(addon, "export").await?;
                let record = self.backup_now(addon, started).await;
                drop(busy);
                if record.state != BackupState::Ok {
                    return Err(AddonError::Unavailable(format!(
                        "the export's backup failed: {}",
                        record.error.as_deref().unwrap_or("unknown")
                    )));
                }
                record
            }
        };
        let path = self.backups_volume(addon).dir.join(&record.file);
        Ok((record, path))
    }

    /// Takes `upload` as a backup of the add-on, proves it, and restores it in place: the
    /// backup record (`verifying`) at once; the add-on is `starting` until it ends.
    pub async fn start_import(
        self: &Arc<Self>,
        addon: &AddonRecord,
        upload: &Path,
    ) -> Result<AddonBackupRecord, AddonError> {
        let format = ImportFormat::of(&head_of(upload).await);
        match (addon.kind.as_str(), format) {
            ("redis", ImportFormat::Rdb)
            | ("postgres", ImportFormat::PgCustom | ImportFormat::Sql) => {}
            ("redis", _) => {
                return Err(AddonError::Unavailable(
                    "a redis add-on imports an RDB file (it starts with REDIS)".into(),
                ))
            }
            _ => {
                return Err(AddonError::Unavailable(
                    "a postgres add-on imports `pg_dump -Fc` output or SQL text, not an RDB".into(),
                ))
            }
        }
        let busy = self.claim(addon)?;
        let project = self.owner(addon).await.map_err(AddonError::Failed)?;
        let mut record = self.new_backup(addon, "import").await?;
        record.file = format!("{}.{}", record.id, format.extension());
        let volume = self.backups_volume(addon);
        self.prepare_volume(&volume, project.uid)
            .await
            .map_err(AddonError::Failed)?;
        let (from, to, uid) = (
            upload.to_owned(),
            volume.dir.join(&record.file),
            project.uid,
        );
        tokio::task::spawn_blocking(move || {
            std::fs::copy(&from, &to)?;
            std::os::unix::fs::chown(&to, Some(uid), Some(uid))
        })
        .await
        .expect("blocking task")
        .map_err(|e| AddonError::Failed(format!("cannot keep the upload: {e}")))?;
        let (bytes, sha256) = hash_file(volume.dir.join(&record.file))
            .await
            .map_err(AddonError::Failed)?;
        (record.bytes, record.sha256) = (bytes, sha256);
        record.state = BackupState::Verifying;
        self.save_backup(&record).await;
        let importing = Some(format!("importing {}", record.id));
        self.set_state(addon, AddonState::Starting, importing)
            .await?;
        let (this, addon, started) = (self.clone(), addon.clone(), record.clone());
        tokio::spawn(async move {
            let mut record = started;
            let outcome = this.verify(&addon, &record).await;
            let proven = outcome.is_ok();
            this.judge(&addon, &mut record, outcome).await;
            if !proven {
                let why = format!(
                    "import failed (the data it had is unchanged): {}",
                    record.error.as_deref().unwrap_or("it does not restore")
                );
                let _ = this.set_state(&addon, AddonState::Running, Some(why)).await;
                return;
            }
            let source = Source {
                volume: this.backups_volume(&addon),
                file: &record.file,
                check: record.check.as_ref(),
                written: Some((record.bytes, &record.sha256)),
            };
            this.finish_restore(&addon, source, busy).await;
        });
        Ok(record)
    }
}
