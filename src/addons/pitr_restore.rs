//! Point-in-time recovery of a PostgreSQL add-on (issue 34) into a **new** add-on: the
//! newest good base backup that ended before the moment, the archived WAL after it, and a
//! server that replays it to `recovery_target_time` and promotes.
//!
//! Before the window is judged, a running source is **sealed**: a transaction that only takes
//! a transaction id commits (a commit record stamped now, which recovery needs to find after
//! the moment to stop there), the WAL segment is switched, and the daemon waits until that
//! segment is archived and moved; so any moment up to the request can be reached. The new
//! add-on's server cannot see the source's backups volume: the base backup and the WAL are
//! copied onto its own volume (`restore/`), recovered from there by a step with no address,
//! then removed. In place is refused: the copy is checked and linked in its place instead.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::backup::{Busy, BACKUP_TIMEOUT};
use super::pitr::{segment_names, PitrWindow, ARCHIVE};
use super::scripts;
use super::step::Step;
use super::{AddonError, Addons};
use crate::store::addon_backups::{AddonBackupRecord, BackupKind, BackupState};
use crate::store::addons::{AddonRecord, AddonState};

/// How long the seal's segment may take to be archived and moved.
const SEAL_TIMEOUT: Duration = Duration::from_secs(60);

/// What a point-in-time recovery's message starts with while it runs.
pub(super) const RECOVERING: &str = "recovering to";

impl Addons {
    /// Starts recovering `addon` as it was at `at_ms` into a new add-on (same settings and
    /// password, not linked): that add-on, `starting` until the recovery ends.
    pub async fn start_pitr_restore(
        self: &Arc<Self>,
        addon: &AddonRecord,
        at_ms: u64,
    ) -> Result<AddonRecord, AddonError> {
        if !addon.pitr {
            return Err(AddonError::Unavailable(format!(
                "point-in-time recovery is off for {}: turn it on (\"pitr\": true); it reaches \
                 moments from its first base backup on",
                addon.id
            )));
        }
        let busy = self.claim(addon)?;
        if addon.state == AddonState::Running {
            self.seal(addon).await.map_err(AddonError::Unavailable)?;
        }
        self.ship_wal(addon)
            .await
            .map_err(AddonError::Unavailable)?;
        let base = self.base_for(addon, at_ms).await?;
        let password = self.password(addon).map_err(AddonError::Failed)?;
        let into = self.copy_of(addon, Some(password), None).await?;
        let message = format!(
            "{RECOVERING} {} from {} of {}",
            crate::ids::rfc3339(at_ms),
            base.id,
            addon.id
        );
        let target = recovery_target(at_ms);
        let into = self
            .set_state(&into, AddonState::Starting, Some(message))
            .await?;
        let (this, source, recovering) = (self.clone(), addon.clone(), into.clone());
        tokio::spawn(async move {
            this.finish_pitr(&source, &recovering, &base, &target, busy)
                .await;
        });
        Ok(into)
    }

    /// A commit stamped now, then a WAL switch; waits until that segment is in the backups
    /// volume.
    async fn seal(&self, addon: &AddonRecord) -> Result<(), String> {
        let project = self.owner(addon).await?;
        let host = addon.address.to_string();
        let output = self
            .run_step(Step {
                addon,
                what: "seal",
                uid: project.uid,
                data_dir: self.backups_volume(addon).dir,
                command: format!(
                    "psql -X -q -v ON_ERROR_STOP=1 -h {host} -p {} -U slipway -d postgres -tA \
                     -c 'select pg_current_xact_id()' \
                     -c 'select pg_walfile_name(pg_switch_wal())'",
                    addon.port
                ),
                env: vec![("PGPASSWORD".to_owned(), self.password(addon)?)],
                reach: Some(std::net::SocketAddrV4::new(addon.address, addon.port)),
                timeout: Duration::from_secs(60),
            })
            .await?;
        let segment = output.stdout.lines().last().unwrap_or("").trim().to_owned();
        let archived = self.backups_volume(addon).dir.join(ARCHIVE).join(&segment);
        let deadline = tokio::time::Instant::now() + SEAL_TIMEOUT;
        loop {
            self.ship_wal(addon).await?;
            if !segment.is_empty() && archived.exists() {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!(
                    "WAL segment {segment:?} was not archived within {} s: archive_command \
                     may be failing (see the add-on's log)",
                    SEAL_TIMEOUT.as_secs()
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The newest good base backup that ended before `at_ms`; 409 with the window when the
    /// moment is outside it.
    async fn base_for(
        &self,
        addon: &AddonRecord,
        at_ms: u64,
    ) -> Result<AddonBackupRecord, AddonError> {
        let window = self.pitr_window(addon).await;
        let Some(PitrWindow { from_ms, to_ms }) = window else {
            return Err(AddonError::Unavailable(format!(
                "{} has no proven base backup with archived WAL after it yet: nothing to \
                 recover from",
                addon.id
            )));
        };
        if at_ms < from_ms || at_ms > to_ms {
            return Err(AddonError::Unavailable(format!(
                "{} is outside the recovery window of {}: from {} to {}",
                crate::ids::rfc3339(at_ms),
                addon.id,
                crate::ids::rfc3339(from_ms),
                crate::ids::rfc3339(to_ms)
            )));
        }
        let id = addon.id.clone();
        let backups = self.store.call(move |s| s.addon_backups(&id)).await?;
        backups
            .into_iter()
            .rfind(|b| {
                b.kind == BackupKind::Base
                    && b.state == BackupState::Ok
                    && b.finished_ms.is_some_and(|end| end <= at_ms)
                    && b.wal_start.is_some()
            })
            .ok_or_else(|| AddonError::Unavailable("no base backup ended before it".into()))
    }

    /// Recovers, then records how it ended: `running` with PITR on and a base backup of
    /// its own started, or `failed` with why.
    async fn finish_pitr(
        self: &Arc<Self>,
        source: &AddonRecord,
        into: &AddonRecord,
        base: &AddonBackupRecord,
        target: &str,
        _busy: Busy,
    ) {
        let outcome = self.recover(source, into, base, target).await;
        let (state, message) = match &outcome {
            Ok(()) => (AddonState::Running, None),
            Err(error) => {
                tracing::warn!(addon = %into.id, %error, "a point-in-time recovery failed");
                (
                    AddonState::Failed,
                    Some(format!("point-in-time recovery failed: {error}")),
                )
            }
        };
        let Ok(done) = self.set_state(into, state, message).await else {
            return;
        };
        if outcome.is_ok() {
            if let Err(error) = self.start_base_backup(&done, "pitr").await {
                tracing::warn!(addon = %done.id, %error, "no base backup after a recovery");
            }
        }
    }

    /// Stops `into`, puts the base backup and WAL on its volume, recovers to `target`, and
    /// starts it again with PITR on.
    async fn recover(
        &self,
        source: &AddonRecord,
        into: &AddonRecord,
        base: &AddonBackupRecord,
        target: &str,
    ) -> Result<(), String> {
        let project = self.owner(into).await?;
        self.supervisor.stop_deployment(&into.id, None).await;
        let (from, data) = (self.backups_volume(source).dir, self.volume(into).dir);
        let (file, start, uid) = (base.file.clone(), base.wal_start.clone(), project.uid);
        let staged = data.clone();
        tokio::task::spawn_blocking(move || {
            stage_recovery(&from, &file, start.as_deref().unwrap_or(""), &staged, uid)
        })
        .await
        .expect("blocking task")
        .map_err(|e| format!("cannot put the base backup and WAL in place: {e}"))?;
        let path = self.step_path(&self.volume(into));
        self.run_step(Step {
            addon: into,
            what: "recover",
            uid: project.uid,
            data_dir: data,
            command: scripts::postgres_recover(&path, target, into.memory_mb),
            env: Vec::new(),
            reach: None,
            timeout: BACKUP_TIMEOUT,
        })
        .await?;
        let id = into.id.clone();
        let on = self
            .store
            .call(move |s| -> crate::store::Result<Option<AddonRecord>> {
                let Some(mut current) = s.addon(&id)? else {
                    return Ok(None);
                };
                current.pitr = true;
                s.put_addon(&current)?;
                Ok(Some(current))
            })
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the new add-on was deleted")?;
        self.run(&project, &on, None).await
    }
}

/// `at_ms` as `recovery_target_time` reads it: `2026-11-21 19:40:00.123+00` (it refuses
/// RFC 3339's `T` and `Z`).
fn recovery_target(at_ms: u64) -> String {
    let text = crate::ids::rfc3339(at_ms);
    format!("{}+00", text.trim_end_matches('Z').replacen('T', " ", 1))
}

/// Copies the base backup `{backups}/{file}` to `{data}/restore/base.tar` and every archived
/// file from `start` on (and the timeline histories) to `{data}/restore/wal/`, owned by `uid`.
fn stage_recovery(
    backups: &Path,
    file: &str,
    start: &str,
    data: &Path,
    uid: u32,
) -> std::io::Result<()> {
    let restore = data.join("restore");
    let _ = std::fs::remove_dir_all(&restore);
    let wal = restore.join("wal");
    std::fs::create_dir_all(&wal)?;
    std::fs::copy(backups.join(file), restore.join("base.tar"))?;
    let archive = backups.join(ARCHIVE);
    for name in segment_names(&archive) {
        if name.as_str() >= start || name.ends_with(".history") {
            std::fs::copy(archive.join(&name), wal.join(&name))?;
        }
    }
    for path in [&restore, &wal] {
        std::os::unix::fs::chown(path, Some(uid), Some(uid))?;
    }
    for entry in std::fs::read_dir(&wal)?.flatten() {
        std::os::unix::fs::chown(entry.path(), Some(uid), Some(uid))?;
    }
    std::os::unix::fs::chown(restore.join("base.tar"), Some(uid), Some(uid))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_target_is_written_as_postgres_reads_it() {
        assert_eq!(
            super::recovery_target(1_795_000_000_123),
            "2026-11-18 11:06:40.123+00"
        );
    }
}
