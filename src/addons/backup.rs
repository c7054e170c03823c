//! Backups of an add-on (issue 34): a logical dump (`pg_dump -Fc` of `app`, in the snapshot
//! whose per-table row counts are taken with it) or a Redis RDB, written by a sandbox next to
//! the add-on into its **backups volume** (a disk-limited volume of its own, so a backup can
//! never fill the add-on's disk), then **proven**: restored into a throw-away server in
//! another sandbox and counted; only a backup whose restore holds what the source held is
//! listed `ok`. A backup that fails (the dump, the restore, a count that differs) is listed
//! `failed` with why, its file removed, and an `addon.backup_failed` event sent. A PITR
//! add-on's base backups (`pitr.rs`) go through the same records, proof and retention.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::engine::AddonKind;
use super::files::hash_file;
use super::scripts;
use super::step::Step;
use super::{AddonError, Addons};
use crate::disk::Volume;
use crate::notifications::{Event, EventKind};
use crate::store::addon_backups::{AddonBackupRecord, BackupKind, BackupState};
use crate::store::addons::AddonRecord;
use crate::store::records::ProjectRecord;

/// How long a dump, or the restore that proves it, may take.
pub(super) const BACKUP_TIMEOUT: Duration = Duration::from_secs(3600);

/// Work on an add-on that must not overlap (a backup, a restore): held while it runs.
pub struct Busy {
    set: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    id: String,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.set.lock().expect("busy set").remove(&self.id);
    }
}

impl Addons {
    /// The add-on's backups volume: its dumps, and room for the restore that proves one
    /// (twice the add-on's disk).
    pub(super) fn backups_volume(&self, addon: &AddonRecord) -> Volume {
        let dir = self
            .data_dir
            .join("addons")
            .join(format!("{}-backups", addon.id));
        Volume::app_data(&dir, (addon.disk_mb * 2).max(256))
    }

    /// Where a step sees `volume` (`/data`; the host path in sandbox mode none).
    pub(super) fn step_path(&self, volume: &Volume) -> String {
        match self.loopback {
            true => volume.dir.display().to_string(),
            false => "/data".into(),
        }
    }

    /// Makes a backups volume if it does not exist, else mounts it (after a reboot).
    pub(super) async fn prepare_volume(&self, volume: &Volume, uid: u32) -> Result<(), String> {
        let (volumes, volume) = (self.pipeline.volumes().clone(), volume.clone());
        tokio::task::spawn_blocking(move || volumes.ensure_app_data(&volume, uid))
            .await
            .expect("blocking task")
            .map_err(|e| format!("cannot prepare the backups volume: {e}"))
    }

    /// The add-on's password, opened.
    pub(super) fn password(&self, addon: &AddonRecord) -> Result<String, String> {
        let sealed = self.secrets.open(
            &crate::pipeline::password_context(&addon.id),
            &addon.sealed_password,
        );
        sealed
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .map_err(|e| format!("cannot open the password of {}: {e}", addon.id))
    }

    /// The project that owns it (its uid runs the add-on's sandboxes).
    pub(super) async fn owner(&self, addon: &AddonRecord) -> Result<ProjectRecord, String> {
        let id = addon.project_id.clone();
        self.store
            .call(move |s| s.find_project(&id))
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("the project of {} is gone", addon.id))
    }

    /// Marks the add-on busy, or says what it is busy with.
    pub(super) fn claim(&self, addon: &AddonRecord) -> Result<Busy, AddonError> {
        let mut set = self.busy.lock().expect("busy set");
        if !set.insert(addon.id.clone()) {
            return Err(AddonError::Busy(format!(
                "a backup or restore of {} is running; try again when it has finished",
                addon.id
            )));
        }
        Ok(Busy {
            set: self.busy.clone(),
            id: addon.id.clone(),
        })
    }

    /// Starts a backup: the record (`running`) at once; the dump and its proof go on.
    pub async fn start_backup(
        self: &Arc<Self>,
        addon: &AddonRecord,
        trigger: &str,
    ) -> Result<AddonBackupRecord, AddonError> {
        let busy = self.claim(addon)?;
        let record = self.new_backup(addon, trigger).await?;
        let (this, addon, started) = (self.clone(), addon.clone(), record.clone());
        tokio::spawn(async move {
            let _busy = busy;
            this.backup_now(&addon, started).await;
            this.base_backup_too(&addon, "manual").await;
        });
        Ok(record)
    }

    /// After a logical backup of a PITR add-on: a base backup beside it.
    pub(super) async fn base_backup_too(&self, addon: &AddonRecord, trigger: &str) {
        if !addon.pitr {
            return;
        }
        if let Ok(record) = self.new_backup_of(addon, trigger, BackupKind::Base).await {
            self.base_backup_now(addon, record).await;
        }
    }

    /// Proves a good backup again (its file may have changed since): the record
    /// (`verifying`) at once; `ok` again, or `failed` with why.
    pub async fn start_verify(
        self: &Arc<Self>,
        addon: &AddonRecord,
        mut record: AddonBackupRecord,
    ) -> Result<AddonBackupRecord, AddonError> {
        let busy = self.claim(addon)?;
        record.state = BackupState::Verifying;
        self.save_backup(&record).await;
        let (this, addon, verifying) = (self.clone(), addon.clone(), record.clone());
        tokio::spawn(async move {
            let _busy = busy;
            let mut record = verifying;
            let outcome = this.verify(&addon, &record).await;
            this.judge(&addon, &mut record, outcome).await;
        });
        Ok(record)
    }

    /// At start: backups the last daemon was writing or proving when it stopped are failed
    /// (their files removed).
    pub(super) async fn interrupted_backups(&self) -> Result<(), crate::store::StoreError> {
        let backups = self.store.call(|s| s.all_addon_backups()).await?;
        for mut backup in backups {
            if !matches!(backup.state, BackupState::Running | BackupState::Verifying) {
                continue;
            }
            let id = backup.addon_id.clone();
            if let Some(addon) = self.store.call(move |s| s.addon(&id)).await? {
                let _ = tokio::fs::remove_file(self.backups_volume(&addon).dir.join(&backup.file))
                    .await;
            }
            backup.state = BackupState::Failed;
            backup.error = Some("the daemon stopped while it ran".into());
            backup.finished_ms.get_or_insert(crate::ids::now_ms());
            self.save_backup(&backup).await;
        }
        Ok(())
    }

    /// A new backup record, stored as `running`.
    pub(super) async fn new_backup(
        &self,
        addon: &AddonRecord,
        trigger: &str,
    ) -> Result<AddonBackupRecord, AddonError> {
        let kind = match addon.kind.as_str() {
            "redis" => BackupKind::Rdb,
            _ => BackupKind::Logical,
        };
        self.new_backup_of(addon, trigger, kind).await
    }

    /// A new backup record of `kind`, stored as `running`.
    pub(super) async fn new_backup_of(
        &self,
        addon: &AddonRecord,
        trigger: &str,
        kind: BackupKind,
    ) -> Result<AddonBackupRecord, AddonError> {
        let id = crate::ids::new_id("bak_");
        let extension = match kind {
            BackupKind::Rdb => "rdb",
            BackupKind::Logical => "dump",
            BackupKind::Base => "base.tar",
        };
        let record = AddonBackupRecord {
            v: 1,
            file: format!("{id}.{extension}"),
            id,
            addon_id: addon.id.clone(),
            kind,
            trigger: trigger.to_owned(),
            state: BackupState::Running,
            created_ms: crate::ids::now_ms(),
            finished_ms: None,
            bytes: 0,
            sha256: String::new(),
            expected: None,
            verified_ms: None,
            check: None,
            error: None,
            wal_start: None,
        };
        let stored = record.clone();
        self.store
            .call(move |s| s.put_addon_backup(&stored))
            .await?;
        Ok(record)
    }

    /// Dumps and proves a backup; the record as it ends (`ok` or `failed`).
    pub(super) async fn backup_now(
        &self,
        addon: &AddonRecord,
        mut record: AddonBackupRecord,
    ) -> AddonBackupRecord {
        let outcome = match self.dump(addon, &mut record).await {
            Ok(()) => {
                record.state = BackupState::Verifying;
                self.save_backup(&record).await;
                self.verify(addon, &record).await
            }
            Err(error) => Err(error),
        };
        self.judge(addon, &mut record, outcome).await;
        if record.state == BackupState::Ok {
            self.prune(addon).await;
        }
        record
    }

    /// Records how a backup's proof ended; a failure removes the file and is an event.
    pub(super) async fn judge(
        &self,
        addon: &AddonRecord,
        record: &mut AddonBackupRecord,
        outcome: Result<BTreeMap<String, u64>, String>,
    ) {
        let now = crate::ids::now_ms();
        record.finished_ms.get_or_insert(now);
        match outcome {
            Ok(check) => {
                record.state = BackupState::Ok;
                record.verified_ms = Some(now);
                record.check = Some(check);
                record.error = None;
            }
            Err(error) => {
                tracing::warn!(addon = %addon.id, backup = %record.id, %error, "an add-on backup failed");
                record.state = BackupState::Failed;
                record.error = Some(error.clone());
                (record.verified_ms, record.check) = (None, None);
                let file = self.backups_volume(addon).dir.join(&record.file);
                let _ = tokio::fs::remove_file(file).await;
                let slug = self.owner(addon).await.map(|p| p.slug).unwrap_or_default();
                let event = Event::new(EventKind::AddonBackupFailed)
                    .project(&slug)
                    .addon(&addon.id)
                    .error(&error);
                self.pipeline.notifier().emit(event);
            }
        }
        self.save_backup(record).await;
    }

    pub(super) async fn save_backup(&self, record: &AddonBackupRecord) {
        let stored = record.clone();
        if let Err(error) = self.store.call(move |s| s.put_addon_backup(&stored)).await {
            tracing::error!(backup = %record.id, %error, "cannot record a backup");
        }
    }

    /// Writes the dump into the backups volume: its size, checksum and (PostgreSQL) the
    /// source's row counts in the same snapshot.
    async fn dump(
        &self,
        addon: &AddonRecord,
        record: &mut AddonBackupRecord,
    ) -> Result<(), String> {
        if record.kind == BackupKind::Base {
            return self.base_dump(addon, record).await;
        }
        let project = self.owner(addon).await?;
        let volume = self.backups_volume(addon);
        self.prepare_volume(&volume, project.uid).await?;
        let (dir, host) = (self.step_path(&volume), addon.address.to_string());
        let password = self.password(addon)?;
        let (command, env) = match addon.kind.as_str() {
            "redis" => (
                scripts::redis_dump(&dir, &record.file, &host, addon.port),
                vec![("REDISCLI_AUTH".to_owned(), password)],
            ),
            _ => (
                scripts::postgres_dump(&dir, &record.file, &host, addon.port),
                vec![("PGPASSWORD".to_owned(), password)],
            ),
        };
        let output = self
            .run_step(Step {
                addon,
                what: "dump",
                uid: project.uid,
                data_dir: volume.dir.clone(),
                command,
                env,
                reach: Some(std::net::SocketAddrV4::new(addon.address, addon.port)),
                timeout: BACKUP_TIMEOUT,
            })
            .await?;
        if addon.kind == "postgres" {
            record.expected = Some(scripts::parse_counts(&output.stdout)?);
        }
        let (bytes, sha256) = hash_file(volume.dir.join(&record.file)).await?;
        record.bytes = bytes;
        record.sha256 = sha256;
        record.finished_ms = Some(crate::ids::now_ms());
        Ok(())
    }

    /// Proves a backup: its checksum, then a throw-away restore whose counts must be the
    /// source's. The counts found.
    pub(super) async fn verify(
        &self,
        addon: &AddonRecord,
        record: &AddonBackupRecord,
    ) -> Result<BTreeMap<String, u64>, String> {
        let project = self.owner(addon).await?;
        let volume = self.backups_volume(addon);
        self.prepare_volume(&volume, project.uid).await?;
        let (bytes, sha256) = hash_file(volume.dir.join(&record.file)).await?;
        if (bytes, sha256.as_str()) != (record.bytes, record.sha256.as_str()) {
            return Err(format!(
                "{} changed since it was written: {bytes} bytes, SHA-256 {sha256} (expected \
                 {} bytes, {})",
                record.file, record.bytes, record.sha256
            ));
        }
        let dir = self.step_path(&volume);
        let command = match (addon.kind.as_str(), record.kind) {
            (_, BackupKind::Base) => {
                scripts::postgres_verify_base(&dir, &record.file, &record.id, addon.memory_mb)
            }
            ("redis", _) => scripts::redis_verify(&dir, &record.file, &record.id),
            _ => {
                let head = super::files::head_of(&volume.dir.join(&record.file)).await;
                let custom =
                    super::files::ImportFormat::of(&head) == super::files::ImportFormat::PgCustom;
                scripts::postgres_verify(&dir, &record.file, &record.id, addon.memory_mb, custom)
            }
        };
        let output = self
            .run_step(Step {
                addon,
                what: "verify",
                uid: project.uid,
                data_dir: volume.dir.clone(),
                command,
                env: Vec::new(),
                reach: None,
                timeout: BACKUP_TIMEOUT,
            })
            .await
            .map_err(|e| format!("the backup does not restore: {e}"))?;
        let found = match AddonKind::parse(&addon.kind) {
            Some(AddonKind::Redis) => scripts::parse_redis_check(&output.stdout)?,
            _ => scripts::parse_counts(&output.stdout)?,
        };
        match &record.expected {
            Some(expected) if *expected != found => Err(format!(
                "restored, it holds other row counts than the source did: {} (expected {})",
                show_counts(&found),
                show_counts(expected)
            )),
            _ => Ok(found),
        }
    }

    /// Keeps the newest `keep` good backups of each kind (and failed ones of the last day);
    /// removes the rest with their files, and the archived WAL no kept base backup needs.
    pub(super) async fn prune(&self, addon: &AddonRecord) {
        let id = addon.id.clone();
        let Ok(backups) = self.store.call(move |s| s.addon_backups(&id)).await else {
            return;
        };
        let day_ago = crate::ids::now_ms().saturating_sub(24 * 3600 * 1000);
        let mut good: BTreeMap<&str, usize> = BTreeMap::new();
        for backup in backups.iter().filter(|b| b.state == BackupState::Ok) {
            *good.entry(kind_word(backup.kind)).or_default() += 1;
        }
        let dir = self.backups_volume(addon).dir;
        let mut kept = Vec::new();
        for backup in &backups {
            let left = good.entry(kind_word(backup.kind)).or_default();
            let expired = match backup.state {
                BackupState::Ok if *left > self.backup_keep => {
                    *left -= 1;
                    true
                }
                BackupState::Failed => backup.created_ms < day_ago,
                _ => false,
            };
            if !expired {
                kept.push(backup.clone());
                continue;
            }
            let _ = tokio::fs::remove_file(dir.join(&backup.file)).await;
            let key = backup.id.clone();
            let _ = self.store.call(move |s| s.delete_addon_backup(&key)).await;
        }
        self.prune_wal(addon, &kept).await;
    }

    /// A backup of `addon` by id, with its file's path.
    pub async fn backup_file(&self, addon: &AddonRecord, backup: &AddonBackupRecord) -> PathBuf {
        self.backups_volume(addon).dir.join(&backup.file)
    }
}

fn kind_word(kind: BackupKind) -> &'static str {
    match kind {
        BackupKind::Logical => "logical",
        BackupKind::Base => "base",
        BackupKind::Rdb => "rdb",
    }
}

/// `{a: 1, b: 2}` as `a 1, b 2`.
fn show_counts(counts: &BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
    match parts.is_empty() {
        true => "no tables".into(),
        false => parts.join(", "),
    }
}
