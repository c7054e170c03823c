//! Point-in-time recovery for PostgreSQL add-ons (issue 34, opt-in `"pitr": true`): the
//! server archives every finished WAL segment, and base backups (`pg_basebackup`, a fast
//! checkpoint) are taken beside the logical ones, so a new add-on can be recovered to any
//! moment between the oldest base backup and the newest archived segment (`pitr_restore.rs`).
//!
//! How WAL reaches the backups volume: the server's sandbox sees only its own volume at
//! `/data`, so `archive_command` is a local copy into a staging directory there
//! (`/data/wal-archive`: `cp` to a `.tmp` name, then `mv`, never overwriting), and the daemon
//! moves finished segments from it into the backups volume's `wal/` on the host — every
//! `SHIP_EVERY`, and before every base backup and point-in-time restore. Never the network:
//! a copy cannot hang on a remote, and `pg_wal` only grows while the copy fails. When the
//! move fails (the backups volume full), the segments stay in staging (they count on the
//! add-on's own disk, whose alerts see them), the failure is logged and sent once as an
//! `addon.backup_failed` event until a move succeeds again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::backup::BACKUP_TIMEOUT;
use super::scripts;
use super::step::Step;
use super::{AddonError, Addons};
use crate::notifications::{Event, EventKind};
use crate::store::addon_backups::{AddonBackupRecord, BackupKind, BackupState};
use crate::store::addons::{AddonRecord, AddonState};

/// The staging directory on the add-on's volume `archive_command` copies into.
pub(super) const STAGING: &str = "wal-archive";
/// The archived segments' directory in the backups volume.
pub(super) const ARCHIVE: &str = "wal";
/// How often finished segments are moved into the backups volume.
const SHIP_EVERY: Duration = Duration::from_secs(10);
/// `archive_timeout`: a segment is switched (and archived) at most this long after a write,
/// so the newest recovery point is at most this old.
const ARCHIVE_TIMEOUT_S: u32 = 60;
/// The `pg_hba.conf` line `pg_basebackup`'s replication connection needs.
pub(super) const REPLICATION_HBA: &str = "host replication slipway 0.0.0.0/0 scram-sha-256";

/// The server's extra settings when PITR is on (`data`: where its volume is), for its
/// shell command line.
pub(super) fn archive_settings(data: &str) -> String {
    let staged = format!("{data}/{STAGING}/%f");
    format!(
        "-c wal_level=replica -c archive_mode=on -c archive_timeout={ARCHIVE_TIMEOUT_S} \
         -c \"archive_command=test ! -f {staged} && cp %p {staged}.tmp && mv {staged}.tmp {staged}\""
    )
}

/// Adds the replication line to `pg_hba.conf` when it is missing (add-ons made before it was
/// written at `initdb`). A data directory not there yet is left alone.
pub(super) fn ensure_replication_hba(pgdata: &Path) -> std::io::Result<()> {
    let path = pgdata.join("pg_hba.conf");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    if text.lines().any(|line| line.trim() == REPLICATION_HBA) {
        return Ok(());
    }
    let mut file = std::fs::OpenOptions::new().append(true).open(&path)?;
    std::io::Write::write_all(&mut file, format!("{REPLICATION_HBA}\n").as_bytes())
}

/// The span a point-in-time restore can reach, ms since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PitrWindow {
    /// The end of the oldest good base backup.
    pub from_ms: u64,
    /// When the newest archived segment was archived.
    pub to_ms: u64,
}

impl Addons {
    /// Moves the finished WAL segments of a PITR add-on from its staging directory into its
    /// backups volume; how many moved.
    pub(super) async fn ship_wal(&self, addon: &AddonRecord) -> Result<usize, String> {
        let project = self.owner(addon).await?;
        let backups = self.backups_volume(addon);
        self.prepare_volume(&backups, project.uid).await?;
        let _one_at_a_time = self.shipping.lock().await;
        let staging = self.volume(addon).dir.join(STAGING);
        let archive = backups.dir.join(ARCHIVE);
        tokio::task::spawn_blocking(move || ship_blocking(&staging, &archive, project.uid))
            .await
            .expect("blocking task")
            .map_err(|e| format!("cannot move WAL into the backups volume: {e}"))
    }

    /// Runs until `shutdown`: moves every running PITR add-on's WAL; a failure is logged,
    /// and sent as an event once until that add-on's WAL moves again.
    pub async fn ship_wal_forever(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        let mut failing = std::collections::HashSet::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(SHIP_EVERY) => {}
            }
            let Ok(addons) = self.store.call(|s| s.all_addons()).await else {
                continue;
            };
            for addon in addons
                .iter()
                .filter(|a| a.pitr && a.state == AddonState::Running)
            {
                let Err(error) = self.ship_wal(addon).await else {
                    failing.remove(&addon.id);
                    continue;
                };
                tracing::warn!(addon = %addon.id, %error, "archived WAL stays on the add-on's disk");
                if failing.insert(addon.id.clone()) {
                    let slug = self.owner(addon).await.map(|p| p.slug).unwrap_or_default();
                    let error = format!("{error}; the WAL waits on the add-on's own disk");
                    let event = Event::new(EventKind::AddonBackupFailed)
                        .project(&slug)
                        .addon(&addon.id)
                        .error(&error);
                    self.pipeline.notifier().emit(event);
                }
            }
        }
    }

    /// The span a point-in-time restore of `addon` can reach now, if any.
    pub async fn pitr_window(&self, addon: &AddonRecord) -> Option<PitrWindow> {
        if !addon.pitr {
            return None;
        }
        let id = addon.id.clone();
        let backups = self.store.call(move |s| s.addon_backups(&id)).await.ok()?;
        let from_ms = backups
            .iter()
            .filter(|b| b.kind == BackupKind::Base && b.state == BackupState::Ok)
            .filter_map(|b| b.finished_ms)
            .min()?;
        let archive = self.backups_volume(addon).dir.join(ARCHIVE);
        let to_ms = tokio::task::spawn_blocking(move || newest_archived_ms(&archive))
            .await
            .ok()
            .flatten()?;
        Some(PitrWindow { from_ms, to_ms })
    }

    /// Starts a base backup of a PITR add-on (its WAL moved first): the record, `running`.
    pub async fn start_base_backup(
        self: &Arc<Self>,
        addon: &AddonRecord,
        trigger: &str,
    ) -> Result<AddonBackupRecord, AddonError> {
        let busy = self.claim(addon)?;
        let record = self.new_backup_of(addon, trigger, BackupKind::Base).await?;
        let (this, addon, started) = (self.clone(), addon.clone(), record.clone());
        tokio::spawn(async move {
            let _busy = busy;
            this.base_backup_now(&addon, started).await;
        });
        Ok(record)
    }

    /// Moves the WAL, then takes and proves the base backup `record`.
    pub(super) async fn base_backup_now(&self, addon: &AddonRecord, record: AddonBackupRecord) {
        if let Err(error) = self.ship_wal(addon).await {
            tracing::warn!(addon = %addon.id, %error, "before a base backup");
        }
        self.backup_now(addon, record).await;
    }

    /// `pg_basebackup` into the backups volume; the first segment its recovery needs.
    pub(super) async fn base_dump(
        &self,
        addon: &AddonRecord,
        record: &mut AddonBackupRecord,
    ) -> Result<(), String> {
        let project = self.owner(addon).await?;
        let volume = self.backups_volume(addon);
        self.prepare_volume(&volume, project.uid).await?;
        let dir = self.step_path(&volume);
        let host = addon.address.to_string();
        let output = self
            .run_step(Step {
                addon,
                what: "base-backup",
                uid: project.uid,
                data_dir: volume.dir.clone(),
                command: scripts::postgres_base_backup(&dir, &record.file, &host, addon.port),
                env: vec![("PGPASSWORD".to_owned(), self.password(addon)?)],
                reach: Some(std::net::SocketAddrV4::new(addon.address, addon.port)),
                timeout: BACKUP_TIMEOUT,
            })
            .await?;
        let start = output.stdout.trim();
        if start.len() != 24 || !start.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "the base backup's backup_label names no start WAL segment ({start:?})"
            ));
        }
        record.wal_start = Some(start.to_owned());
        let (bytes, sha256) = super::files::hash_file(volume.dir.join(&record.file)).await?;
        (record.bytes, record.sha256) = (bytes, sha256);
        record.finished_ms = Some(crate::ids::now_ms());
        Ok(())
    }

    /// Forgets a PITR add-on's base backups and archived WAL: its cluster is made again
    /// (`appliance.rs`), and the new one's segments would take the old ones' names. The
    /// window starts again at the next base backup; logical backups stay.
    pub(super) async fn forget_pitr_history(&self, addon: &AddonRecord) {
        let id = addon.id.clone();
        let backups = self.store.call(move |s| s.addon_backups(&id)).await;
        let dir = self.backups_volume(addon).dir;
        for base in backups
            .into_iter()
            .flatten()
            .filter(|b| b.kind == BackupKind::Base)
        {
            let _ = tokio::fs::remove_file(dir.join(&base.file)).await;
            let key = base.id.clone();
            let _ = self.store.call(move |s| s.delete_addon_backup(&key)).await;
        }
        let _ = tokio::fs::remove_dir_all(dir.join(ARCHIVE)).await;
        tracing::warn!(addon = %addon.id, "its cluster is made again: point-in-time recovery starts again from its next base backup");
    }

    /// After PITR was turned off (the server restarted without archiving): what its last
    /// archiving staged is moved, and the staging directory goes.
    pub(super) async fn pitr_turned_off(&self, addon: &AddonRecord) {
        if let Err(error) = self.ship_wal(addon).await {
            tracing::warn!(addon = %addon.id, %error, "after point-in-time recovery was turned off");
            return;
        }
        let _ = tokio::fs::remove_dir(self.volume(addon).dir.join(STAGING)).await;
    }

    /// Removes archived segments older than the oldest good base backup's start: no restore
    /// can use them.
    pub(super) async fn prune_wal(&self, addon: &AddonRecord, backups: &[AddonBackupRecord]) {
        let oldest = backups
            .iter()
            .filter(|b| b.kind == BackupKind::Base && b.state == BackupState::Ok)
            .filter_map(|b| b.wal_start.clone())
            .min();
        let Some(oldest) = oldest else {
            return;
        };
        let archive = self.backups_volume(addon).dir.join(ARCHIVE);
        let _ = tokio::task::spawn_blocking(move || {
            for name in segment_names(&archive) {
                if name.len() >= 24 && name[..24] < *oldest && !name.ends_with(".history") {
                    let _ = std::fs::remove_file(archive.join(&name));
                }
            }
        })
        .await;
    }
}

/// The archived files' names (no `.tmp`), sorted.
pub(super) fn segment_names(archive: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(archive)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| !name.ends_with(".tmp"))
        .collect();
    names.sort();
    names
}

/// When the newest archived file was archived (its mtime), ms.
fn newest_archived_ms(archive: &Path) -> Option<u64> {
    segment_names(archive)
        .iter()
        .filter_map(|name| std::fs::metadata(archive.join(name)).ok()?.modified().ok())
        .max()
        .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|since| since.as_millis() as u64)
}

/// Copies each staged file into `archive` (`.tmp`, synced, renamed; its archive time kept as
/// its mtime, owned by `uid`), then removes it from staging. A file archived already with
/// the same bytes is only removed; with other bytes it is an error, and it stays.
fn ship_blocking(staging: &Path, archive: &Path, uid: u32) -> std::io::Result<usize> {
    let names = match std::fs::read_dir(staging) {
        Ok(_) => segment_names(staging),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(error),
    };
    if names.is_empty() {
        return Ok(0);
    }
    std::fs::create_dir_all(archive)?;
    std::os::unix::fs::chown(archive, Some(uid), Some(uid))?;
    let mut shipped = 0;
    for name in names {
        let (from, to): (PathBuf, PathBuf) = (staging.join(&name), archive.join(&name));
        if to.exists() {
            if std::fs::read(&from)? != std::fs::read(&to)? {
                return Err(std::io::Error::other(format!(
                    "{name} is archived already with other contents (kept in {STAGING})"
                )));
            }
            std::fs::remove_file(&from)?;
            continue;
        }
        let partial = archive.join(format!("{name}.tmp"));
        std::fs::copy(&from, &partial)?;
        let file = std::fs::OpenOptions::new().write(true).open(&partial)?;
        file.set_modified(std::fs::metadata(&from)?.modified()?)?;
        file.sync_all()?;
        std::os::unix::fs::chown(&partial, Some(uid), Some(uid))?;
        std::fs::rename(&partial, &to)?;
        std::fs::remove_file(&from)?;
        shipped += 1;
    }
    Ok(shipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_segments_move_once_and_conflicts_stay() {
        let dir = std::env::temp_dir().join(format!("slipway-ship-{}", std::process::id()));
        let (staging, archive) = (dir.join("staging"), dir.join("archive"));
        std::fs::create_dir_all(&staging).unwrap();
        let uid = nix::unistd::getuid().as_raw();
        std::fs::write(staging.join("000000010000000000000001"), b"one").unwrap();
        std::fs::write(staging.join("000000010000000000000002.tmp"), b"half").unwrap();
        assert_eq!(ship_blocking(&staging, &archive, uid).unwrap(), 1);
        assert_eq!(segment_names(&archive), ["000000010000000000000001"]);
        assert_eq!(segment_names(&staging), Vec::<String>::new());
        // Archived again with the same bytes: only removed from staging.
        std::fs::write(staging.join("000000010000000000000001"), b"one").unwrap();
        assert_eq!(ship_blocking(&staging, &archive, uid).unwrap(), 0);
        assert!(segment_names(&staging).is_empty());
        // Other bytes under an archived name: an error, and it stays.
        std::fs::write(staging.join("000000010000000000000001"), b"other").unwrap();
        assert!(ship_blocking(&staging, &archive, uid).is_err());
        assert_eq!(segment_names(&staging), ["000000010000000000000001"]);
        assert!(newest_archived_ms(&archive).is_some());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_replication_line_is_added_once() {
        let dir = std::env::temp_dir().join(format!("slipway-hba-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        ensure_replication_hba(&dir).unwrap();
        assert!(!dir.join("pg_hba.conf").exists());
        std::fs::write(dir.join("pg_hba.conf"), "local all all trust\n").unwrap();
        ensure_replication_hba(&dir).unwrap();
        ensure_replication_hba(&dir).unwrap();
        let text = std::fs::read_to_string(dir.join("pg_hba.conf")).unwrap();
        assert_eq!(text.matches(REPLICATION_HBA).count(), 1);
        let _ = std::fs::remove_dir_all(dir);
    }
}
