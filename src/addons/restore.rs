//! Restoring an add-on from a proven backup (issue 34), into a new add-on or in place. The
//! live data is never dropped before the restored copy is proven: PostgreSQL restores into
//! a database of its own (`app_restore`), counted against the backup's check, and only then
//! takes the place of `app` (renamed in one script, its connections closed); Redis's files
//! are set aside, the RDB put in place (as the append-only file's base in persistent mode),
//! and the old files brought back if the server does not come up holding the backup's keys.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::backup::{Busy, BACKUP_TIMEOUT};
use super::scripts;
use super::step::Step;
use super::{AddonError, AddonRequest, Addons, RedisMode};
use crate::disk::Volume;
use crate::store::addon_backups::{AddonBackupRecord, BackupState};
use crate::store::addons::{AddonRecord, AddonState};

/// Where a restore goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreTarget {
    /// A new add-on of the same project and settings, not linked to anything yet.
    New,
    /// The add-on itself: its data replaced once the restored copy is proven.
    InPlace,
}

/// A backup file to restore and what it must hold.
pub(super) struct Source<'a> {
    /// The backups volume it is in, and its name there.
    pub volume: Volume,
    pub file: &'a str,
    /// The counts a restore must show (`None`: an import of SQL text, nothing to compare).
    pub check: Option<&'a BTreeMap<String, u64>>,
    /// Its length and SHA-256 as written, checked again first.
    pub written: Option<(u64, &'a str)>,
}

impl Addons {
    /// Starts restoring `backup` of `addon` into `target`: the add-on restored into, as it is
    /// now (`starting`, with a message, until the restore ends).
    pub async fn start_restore(
        self: &Arc<Self>,
        addon: &AddonRecord,
        backup: &AddonBackupRecord,
        target: RestoreTarget,
    ) -> Result<AddonRecord, AddonError> {
        if backup.state != BackupState::Ok {
            return Err(AddonError::Unavailable(
                format!(
                    "backup {} is {:?}: only a backup proven by its verification restores",
                    backup.id, backup.state
                )
                .to_lowercase(),
            ));
        }
        let busy = self.claim(addon)?;
        let into = match target {
            RestoreTarget::InPlace => addon.clone(),
            RestoreTarget::New => self.copy_of(addon, None, None).await?,
        };
        let into = self
            .set_state(
                &into,
                AddonState::Starting,
                Some(format!("restoring {}", backup.id)),
            )
            .await?;
        let (this, backup, restoring) = (self.clone(), backup.clone(), into.clone());
        let source_addon = addon.clone();
        tokio::spawn(async move {
            let source = Source {
                volume: this.backups_volume(&source_addon),
                file: &backup.file,
                check: backup.check.as_ref(),
                written: Some((backup.bytes, &backup.sha256)),
            };
            this.finish_restore(&restoring, source, busy).await;
        });
        Ok(into)
    }

    /// Restores, then records how it ended (`running`, or `failed` with why: the data it had
    /// stays).
    pub(super) async fn finish_restore(&self, into: &AddonRecord, source: Source<'_>, _busy: Busy) {
        let (state, message) = match self.restore_into(into, &source).await {
            Ok(()) => (AddonState::Running, None),
            Err(error) => {
                tracing::warn!(addon = %into.id, %error, "a restore failed");
                let kept = "the data it had is unchanged";
                (
                    AddonState::Failed,
                    Some(format!("restore failed ({kept}): {error}")),
                )
            }
        };
        let _ = self.set_state(into, state, message).await;
    }

    /// A new add-on with `addon`'s settings (PITR off until it holds its data), not linked,
    /// with `password` (or a new one), running PostgreSQL `major` (or `addon`'s).
    pub(super) async fn copy_of(
        &self,
        addon: &AddonRecord,
        password: Option<String>,
        major: Option<u32>,
    ) -> Result<AddonRecord, AddonError> {
        let project = self.owner(addon).await.map_err(AddonError::Failed)?;
        let request = AddonRequest {
            kind: super::AddonKind::parse(&addon.kind).unwrap_or(super::AddonKind::Postgres),
            memory_mb: addon.memory_mb,
            disk_mb: addon.disk_mb,
            env_name: Some(addon.env_name.clone()),
            mode: match addon.mode.as_str() {
                "cache" => RedisMode::Cache,
                _ => RedisMode::Persistent,
            },
            link: false,
            pitr: false,
            password,
            major: Some(major.unwrap_or_else(|| super::engine::postgres_major(addon))),
        };
        self.create(&project, request).await
    }

    /// Sets the add-on's state and message (reading it fresh: links may have changed).
    pub(super) async fn set_state(
        &self,
        addon: &AddonRecord,
        state: AddonState,
        message: Option<String>,
    ) -> Result<AddonRecord, AddonError> {
        let id = addon.id.clone();
        let updated = self
            .store
            .call(move |s| -> crate::store::Result<Option<AddonRecord>> {
                let Some(mut current) = s.addon(&id)? else {
                    return Ok(None);
                };
                current.state = state;
                current.message = message;
                s.put_addon(&current)?;
                Ok(Some(current))
            })
            .await?;
        updated.ok_or_else(|| AddonError::Failed(format!("add-on {} was deleted", addon.id)))
    }

    /// Restores `source` into `into`, proven before it replaces anything.
    pub(super) async fn restore_into(
        &self,
        into: &AddonRecord,
        source: &Source<'_>,
    ) -> Result<(), String> {
        let project = self.owner(into).await?;
        self.prepare_volume(&source.volume, project.uid).await?;
        if let Some((bytes, sha256)) = source.written {
            let found = super::files::hash_file(source.volume.dir.join(source.file)).await?;
            if (found.0, found.1.as_str()) != (bytes, sha256) {
                return Err(format!(
                    "{} changed since it was written and proven (SHA-256 {}, expected {sha256})",
                    source.file, found.1
                ));
            }
        }
        match into.kind.as_str() {
            "redis" => self.restore_redis(into, source).await,
            _ => self.restore_postgres(into, source).await,
        }
    }

    async fn restore_postgres(
        &self,
        into: &AddonRecord,
        source: &Source<'_>,
    ) -> Result<(), String> {
        let project = self.owner(into).await?;
        let path = format!("{}/{}", self.step_path(&source.volume), source.file);
        let head = super::files::head_of(&source.volume.dir.join(source.file)).await;
        let custom = super::files::ImportFormat::of(&head) == super::files::ImportFormat::PgCustom;
        let host = into.address.to_string();
        let password = self.password(into)?;
        let step = |what, command| Step {
            addon: into,
            what,
            uid: project.uid,
            data_dir: source.volume.dir.clone(),
            command,
            env: vec![("PGPASSWORD".to_owned(), password.clone())],
            reach: Some(std::net::SocketAddrV4::new(into.address, into.port)),
            timeout: BACKUP_TIMEOUT,
        };
        let restore = scripts::postgres_restore(&path, custom, &host, into.port);
        let output = self.run_step(step("restore", restore)).await?;
        let found = scripts::parse_counts(&output.stdout)?;
        check_counts(source.check, &found)?;
        let swap = scripts::postgres_swap(&host, into.port);
        self.run_step(step("swap", swap)).await.map(|_| ())
    }

    async fn restore_redis(&self, into: &AddonRecord, source: &Source<'_>) -> Result<(), String> {
        let project = self.owner(into).await?;
        let data = self.volume(into).dir;
        let rdb = source.volume.dir.join(source.file);
        let persistent = into.mode != "cache";
        self.supervisor.stop_deployment(&into.id, None).await;
        let uid = project.uid;
        let placed = {
            let data = data.clone();
            tokio::task::spawn_blocking(move || place_rdb(&data, &rdb, persistent, uid))
                .await
                .expect("blocking task")
        };
        let started = match placed {
            Ok(()) => self.run(&project, into, None).await,
            Err(error) => Err(format!("cannot put the RDB in place: {error}")),
        };
        let proven = match started {
            Ok(()) => self
                .redis_keys(into, project.uid)
                .await
                .and_then(|found| check_counts(source.check, &found)),
            Err(error) => Err(error),
        };
        let Err(error) = proven else {
            let _ = tokio::task::spawn_blocking(move || discard_set_aside(&data)).await;
            return Ok(());
        };
        // Its own files back, as they were.
        self.supervisor.stop_deployment(&into.id, None).await;
        let back = data.clone();
        let _ = tokio::task::spawn_blocking(move || bring_back_set_aside(&back)).await;
        if let Err(again) = self.run(&project, into, None).await {
            return Err(format!(
                "{error}; and it did not start again on its own data: {again}"
            ));
        }
        Err(error)
    }

    /// The keys per database of a running Redis add-on.
    async fn redis_keys(
        &self,
        addon: &AddonRecord,
        uid: u32,
    ) -> Result<BTreeMap<String, u64>, String> {
        let output = self
            .run_step(Step {
                addon,
                what: "keyspace",
                uid,
                data_dir: self.backups_volume(addon).dir,
                command: scripts::redis_keyspace(&addon.address.to_string(), addon.port),
                env: vec![("REDISCLI_AUTH".to_owned(), self.password(addon)?)],
                reach: Some(std::net::SocketAddrV4::new(addon.address, addon.port)),
                timeout: std::time::Duration::from_secs(60),
            })
            .await?;
        Ok(scripts::parse_keyspace(&output.stdout))
    }
}

impl Addons {
    /// At start: a restore the last daemon did not finish has not replaced anything (Redis's
    /// files set aside come back); the add-on says so.
    pub(super) async fn interrupted_restore(&self, addon: &AddonRecord) {
        let restoring = addon.state == AddonState::Starting
            && addon
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("restoring"));
        if !restoring {
            return self.interrupted_recovery(addon).await;
        }
        let data = self.volume(addon).dir;
        if data.join(SET_ASIDE).exists() {
            let _ = tokio::task::spawn_blocking(move || bring_back_set_aside(&data)).await;
        }
        let message = "the daemon stopped during a restore: nothing was replaced, try again";
        let _ = self
            .set_state(addon, AddonState::Running, Some(message.into()))
            .await;
    }
}

impl Addons {
    /// At start: a point-in-time recovery the last daemon did not finish left a new add-on
    /// with no data of its own; it says so (delete it and recover again).
    async fn interrupted_recovery(&self, addon: &AddonRecord) {
        let recovering = addon.state == AddonState::Starting
            && addon
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with(super::pitr_restore::RECOVERING));
        if recovering {
            let message = "the daemon stopped during its point-in-time recovery: delete this \
                           add-on and recover again";
            let _ = self
                .set_state(addon, AddonState::Failed, Some(message.into()))
                .await;
        }
    }
}

/// Whether the restored copy holds what the backup's proof found.
fn check_counts(
    expected: Option<&BTreeMap<String, u64>>,
    found: &BTreeMap<String, u64>,
) -> Result<(), String> {
    match expected {
        Some(expected) if expected != found => Err(format!(
            "the restored copy holds {found:?}, the backup held {expected:?}; nothing was replaced"
        )),
        _ => Ok(()),
    }
}

/// Redis's own files, set aside while a restore is tried.
const REDIS_FILES: [&str; 2] = ["dump.rdb", "appendonlydir"];
const SET_ASIDE: &str = ".before-restore";

/// Sets Redis's files aside and puts `rdb` in their place: `dump.rdb`, and in persistent
/// mode the append-only file's base (Redis loads that, not `dump.rdb`, when `appendonly` is
/// on), owned by `uid`.
fn place_rdb(data: &Path, rdb: &Path, persistent: bool, uid: u32) -> std::io::Result<()> {
    let aside = data.join(SET_ASIDE);
    let _ = std::fs::remove_dir_all(&aside);
    std::fs::create_dir_all(&aside)?;
    for name in REDIS_FILES {
        if data.join(name).exists() {
            std::fs::rename(data.join(name), aside.join(name))?;
        }
    }
    let chown = |path: &Path| std::os::unix::fs::chown(path, Some(uid), Some(uid));
    std::fs::copy(rdb, data.join("dump.rdb"))?;
    chown(&data.join("dump.rdb"))?;
    if persistent {
        let dir = data.join("appendonlydir");
        std::fs::create_dir_all(&dir)?;
        chown(&dir)?;
        let base = dir.join("appendonly.aof.1.base.rdb");
        std::fs::copy(rdb, &base)?;
        chown(&base)?;
        let manifest = dir.join("appendonly.aof.manifest");
        std::fs::write(&manifest, "file appendonly.aof.1.base.rdb seq 1 type b\n")?;
        chown(&manifest)?;
    }
    Ok(())
}

fn discard_set_aside(data: &Path) {
    let _ = std::fs::remove_dir_all(data.join(SET_ASIDE));
}

fn bring_back_set_aside(data: &Path) {
    let aside = data.join(SET_ASIDE);
    for name in REDIS_FILES {
        let _ = std::fs::remove_dir_all(data.join(name));
        let _ = std::fs::remove_file(data.join(name));
        if aside.join(name).exists() {
            let _ = std::fs::rename(aside.join(name), data.join(name));
        }
    }
    let _ = std::fs::remove_dir_all(aside);
}
