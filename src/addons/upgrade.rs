//! Moving an add-on to a new server version (`POST /api/addons/{id}/upgrade`), and back
//! (`POST /api/addons/{id}/rollback`). A major-version change never happens in place: a new
//! add-on is made at the version asked for, the old one stops taking writes (PostgreSQL:
//! every new transaction of `app` read-only, its sessions closed; Redis: the default user's
//! write commands taken away), a backup of it is taken and proven, restored into the new one
//! and counted against it, and only then do the links move: every linked project's live
//! deployment goes live again with the new URL, and the old add-on stops — its data kept, so
//! that a rollback is a relink. A failure before the links moved leaves everything as it was
//! (the old add-on takes writes again, the new one is removed).
//!
//! Minor versions are the Debian package's: `apt-get upgrade` and a restart of the add-on (the
//! daemon's restart records the new version).

use std::sync::Arc;
use std::time::Duration;

use super::backup::Busy;
use super::restore::Source;
use super::step::Step;
use super::{engine, scripts, AddonError, AddonKind, Addons};
use crate::pipeline::{ProvisionError, RunPlan};
use crate::store::addon_backups::BackupState;
use crate::store::addons::{AddonRecord, AddonState};

/// The new add-on's message while the upgrade runs.
const UPGRADING: &str = "upgrading from";

/// How long the linked projects may take to go live again with the new URL.
const RELINK_TIMEOUT: Duration = Duration::from_secs(600);

impl Addons {
    /// Starts upgrading `addon` to PostgreSQL `major` (its newest installed when `None`;
    /// Redis: the installed server): the new add-on at once (`starting`), the move going on.
    pub async fn start_upgrade(
        self: &Arc<Self>,
        addon: &AddonRecord,
        major: Option<u32>,
    ) -> Result<AddonRecord, AddonError> {
        if let Some(into) = &addon.upgraded_to {
            return Err(AddonError::Refused(format!(
                "{} was upgraded into {into} already: upgrade {into}, or roll back with POST \
                 /api/addons/{into}/rollback",
                addon.id
            )));
        }
        if addon.state != AddonState::Running {
            return Err(AddonError::Refused(format!(
                "{} is {}: only a running add-on can be upgraded",
                addon.id,
                state_word(addon.state)
            )));
        }
        let major = match AddonKind::parse(&addon.kind) {
            Some(AddonKind::Postgres) => Some(self.target_major(addon, major)?),
            _ if major.is_some() => {
                return Err(AddonError::Refused(
                    "a redis add-on moves to the redis-server installed here: leave `version` \
                     out"
                    .into(),
                ))
            }
            _ => None,
        };
        let busy = self.claim(addon)?;
        let into = self.copy_of(addon, None, major).await?;
        let message = format!("{UPGRADING} {} ({})", addon.id, addon.version);
        let (key, from_id) = (into.id.clone(), addon.id.clone());
        let into = self
            .store
            .call(move |s| {
                s.update_addon(&key, |into| {
                    into.state = AddonState::Starting;
                    into.message = Some(message);
                    into.upgraded_from = Some(from_id);
                })
            })
            .await?
            .ok_or_else(|| AddonError::Failed("the new add-on was deleted".into()))?;
        let (this, from, upgrading) = (self.clone(), addon.clone(), into.clone());
        tokio::spawn(async move { this.finish_upgrade(&from, &upgrading, busy).await });
        Ok(into)
    }

    /// The installed major asked for (or the newest): never older than the add-on's.
    fn target_major(&self, addon: &AddonRecord, asked: Option<u32>) -> Result<u32, AddonError> {
        let installed = engine::postgres_majors(&self.programs_root);
        let current = super::engine::postgres_major(addon);
        let Some(&newest) = installed.last() else {
            return Err(AddonError::Unavailable(
                "no PostgreSQL is installed (/usr/lib/postgresql/*/bin/postgres)".into(),
            ));
        };
        let major = asked.unwrap_or(newest);
        if !installed.contains(&major) {
            let listed: Vec<String> = installed.iter().map(u32::to_string).collect();
            return Err(AddonError::Unavailable(format!(
                "PostgreSQL {major} is not installed (installed: {}); install \
                 postgresql-{major} first",
                listed.join(", ")
            )));
        }
        if major < current {
            return Err(AddonError::Refused(format!(
                "{} runs PostgreSQL {current}: a dump does not go back to {major}; export it \
                 and import it into a new add-on if you must",
                addon.id
            )));
        }
        Ok(major)
    }

    async fn finish_upgrade(&self, from: &AddonRecord, into: &AddonRecord, busy: Busy) {
        let moved = self.copy_frozen(from, into).await;
        drop(busy);
        if let Err(error) = moved {
            tracing::warn!(addon = %from.id, %error, "an upgrade failed");
            let _ = self.read_only(from, false).await;
            let _ = self.delete(into).await;
            let message = format!("upgrade failed (the add-on is unchanged): {error}");
            let _ = self
                .set_state(from, AddonState::Running, Some(message))
                .await;
            return;
        }
        let moved = self.move_links(from, into).await;
        match moved {
            Ok((from, _)) => self.stop_kept(&from, into, "upgraded into").await,
            Err(error) => tracing::error!(addon = %from.id, %error, "an upgrade's relink failed"),
        }
    }

    /// `from` refusing writes, a proven backup of it restored into `into` and counted.
    async fn copy_frozen(&self, from: &AddonRecord, into: &AddonRecord) -> Result<(), String> {
        self.read_only(from, true).await?;
        let record = self
            .new_backup(from, "upgrade")
            .await
            .map_err(|e| e.to_string())?;
        let backup = self.backup_now(from, record).await;
        if backup.state != BackupState::Ok {
            let why = backup.error.unwrap_or_default();
            return Err(format!("the backup {} was not good: {why}", backup.id));
        }
        let source = Source {
            volume: self.backups_volume(from),
            file: &backup.file,
            check: backup.check.as_ref(),
            written: Some((backup.bytes, &backup.sha256)),
        };
        self.restore_into(into, &source).await?;
        self.set_state(into, AddonState::Running, None)
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Rolls an upgraded add-on back: the one it was upgraded from runs and takes writes
    /// again, the links move back to it, and `addon` stops (its data kept: what was written
    /// to it since the upgrade is there, not in the old one).
    pub async fn start_rollback(
        self: &Arc<Self>,
        addon: &AddonRecord,
    ) -> Result<AddonRecord, AddonError> {
        let Some(from_id) = addon.upgraded_from.clone() else {
            return Err(AddonError::Refused(format!(
                "{} was not made by an upgrade: there is nothing to roll back to",
                addon.id
            )));
        };
        let key = from_id.clone();
        let from = self.store.call(move |s| s.addon(&key)).await?;
        let Some(from) = from.filter(|f| f.upgraded_to.as_deref() == Some(addon.id.as_str()))
        else {
            return Err(AddonError::Refused(format!(
                "{from_id}, which {} was upgraded from, is gone or was rolled back to already",
                addon.id
            )));
        };
        let busy = self.claim(addon)?;
        let project = self.owner(&from).await.map_err(AddonError::Failed)?;
        self.run(&project, &from, None)
            .await
            .map_err(AddonError::Failed)?;
        self.read_only(&from, false)
            .await
            .map_err(AddonError::Failed)?;
        let from = self.set_state(&from, AddonState::Running, None).await?;
        let (this, newer) = (self.clone(), addon.clone());
        tokio::spawn(async move {
            let _busy = busy;
            match this.move_links(&newer, &from).await {
                Ok((newer, _)) => this.stop_kept(&newer, &from, "rolled back to").await,
                Err(error) => {
                    tracing::error!(addon = %newer.id, %error, "a rollback's relink failed")
                }
            }
        });
        Ok(addon.clone())
    }

    /// Moves every link of `from` to `to` (marking which was upgraded into which, or
    /// clearing it for a rollback), then brings each linked project's live deployment live
    /// again so its apps get `to`'s URL. Both records as they are then.
    async fn move_links(
        &self,
        from: &AddonRecord,
        to: &AddonRecord,
    ) -> Result<(AddonRecord, AddonRecord), String> {
        let (from_id, to_id) = (from.id.clone(), to.id.clone());
        let rollback = from.upgraded_from.as_deref() == Some(to.id.as_str());
        let moved = self
            .store
            .call(move |s| s.move_addon_links(&from_id, &to_id, rollback))
            .await
            .map_err(|e| e.to_string())?
            .ok_or("an add-on was deleted meanwhile")?;
        for project_id in &moved.1.links {
            if let Err(error) = self.go_live_again(project_id).await {
                tracing::warn!(project = %project_id, %error, "a linked project did not go live with the new add-on");
            }
        }
        Ok(moved)
    }

    /// Brings `project_id`'s live deployment live again (its env read anew); waits for it.
    async fn go_live_again(&self, project_id: &str) -> Result<(), String> {
        let id = project_id.to_owned();
        let found = self
            .store
            .call(move |s| -> crate::store::Result<_> {
                let Some(project) = s.find_project(&id)? else {
                    return Ok(None);
                };
                let live = match &project.live_deployment_id {
                    Some(live) => s.deployment(live)?,
                    None => None,
                };
                Ok(live.map(|live| (project, live)))
            })
            .await
            .map_err(|e| e.to_string())?;
        let Some((project, live)) = found else {
            return Ok(());
        };
        let run = self
            .pipeline
            .provision(&project, RunPlan::Rollback(live))
            .await
            .map_err(|error| match error {
                ProvisionError::Invalid(_, message) => message,
                ProvisionError::Store(error) => error.to_string(),
            })?;
        let deadline = tokio::time::Instant::now() + RELINK_TIMEOUT;
        while tokio::time::Instant::now() < deadline {
            let id = run.id.clone();
            let status = self.store.call(move |s| s.run(&id)).await;
            if let Ok(Some(record)) = status {
                if record.finished_ms.is_some() {
                    return match record.error {
                        None => Ok(()),
                        Some(error) => Err(error.message),
                    };
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Err(format!(
            "{} did not finish within {} s",
            run.id,
            RELINK_TIMEOUT.as_secs()
        ))
    }

    /// Stops `kept` (its data kept for a rollback), saying where its links went.
    async fn stop_kept(&self, kept: &AddonRecord, now: &AddonRecord, word: &str) {
        self.supervisor.stop_deployment(&kept.id, None).await;
        let message = match kept.upgraded_to.as_deref() {
            Some(into) => format!(
                "{word} {into}; kept stopped for a rollback (POST /api/addons/{into}/rollback)"
            ),
            None => format!(
                "{word} {}; kept stopped (delete it when you no longer need it)",
                now.id
            ),
        };
        let _ = self
            .set_state(kept, AddonState::Stopped, Some(message))
            .await;
    }

    /// Makes `addon` refuse writes (`on`) or take them again.
    async fn read_only(&self, addon: &AddonRecord, on: bool) -> Result<(), String> {
        let project = self.owner(addon).await?;
        let (host, password) = (addon.address.to_string(), self.password(addon)?);
        let (command, env) = match addon.kind.as_str() {
            "redis" => (
                scripts::redis_read_only(&host, addon.port, on),
                ("REDISCLI_AUTH".to_owned(), password),
            ),
            _ => (
                scripts::postgres_read_only(&host, addon.port, on),
                ("PGPASSWORD".to_owned(), password),
            ),
        };
        self.run_step(Step {
            addon,
            what: if on { "freeze" } else { "thaw" },
            uid: project.uid,
            data_dir: self.empty_app_dir(addon),
            command,
            env: vec![env],
            reach: Some(std::net::SocketAddrV4::new(addon.address, addon.port)),
            timeout: Duration::from_secs(60),
        })
        .await
        .map(|_| ())
    }
}

impl Addons {
    /// At start: upgrades the last daemon did not finish (the links had not moved) are
    /// undone — the new add-on removed, the old one taking writes again.
    pub(super) async fn interrupted_upgrades(&self, addons: &[AddonRecord]) {
        for into in addons {
            let upgrading = into.state == AddonState::Starting
                && into
                    .message
                    .as_deref()
                    .is_some_and(|m| m.starts_with(UPGRADING));
            let Some(from_id) = into.upgraded_from.clone().filter(|_| upgrading) else {
                continue;
            };
            let _ = self.delete(into).await;
            let Ok(Some(from)) = self.store.call(move |s| s.addon(&from_id)).await else {
                continue;
            };
            let thawed = match self.read_only(&from, false).await {
                Ok(()) => "it takes writes again".to_owned(),
                Err(error) => format!("making it take writes again failed: {error}"),
            };
            let message = format!(
                "the daemon stopped during an upgrade into {}, which was removed; {thawed}",
                into.id
            );
            let _ = self.set_state(&from, from.state, Some(message)).await;
        }
    }
}

fn state_word(state: AddonState) -> &'static str {
    match state {
        AddonState::Starting => "starting",
        AddonState::Running => "running",
        AddonState::Stopped => "stopped",
        AddonState::Failed => "failed",
    }
}
