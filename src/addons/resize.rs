//! Changing a running add-on (`PATCH /api/addons/{id}`): a larger disk grows online — the
//! image, its loop device and the mounted ext4 (`disk::grow`) — while the server keeps
//! running; a new memory limit derives the settings again (`engine.rs`) and restarts the
//! server under the supervisor with them; turning point-in-time recovery on or off restarts
//! it with the archive settings (`pitr.rs`) or without. Where the kernel refuses to grow a mounted
//! filesystem (the daemon without `CAP_SYS_RESOURCE`), the disk grows with a restart instead:
//! the server stops, the volume is grown unmounted, the server starts again. Shrinking is
//! refused, and so is a change while a backup or restore of the add-on runs (`backup::Busy`).
//! Changes run one at a time; the record holds the new sizes before the server
//! starts again, so a daemon that stops meanwhile starts it with them.

use super::{AddonError, Addons};
use crate::store::addons::{AddonRecord, AddonState};

/// What `PATCH /api/addons/{id}` asks for (validated: within the creation's bounds).
#[derive(Debug, Clone, Copy, Default)]
pub struct AddonChange {
    pub disk_mb: Option<u64>,
    pub memory_mb: Option<u64>,
    /// PostgreSQL: point-in-time recovery on or off (`pitr.rs`; a restart).
    pub pitr: Option<bool>,
}

/// How the disk changed.
enum Disk {
    Same,
    GrownOnline,
    /// Growing it needs the server stopped.
    GrowUnmounted,
}

impl Addons {
    /// Applies `change` to add-on `id`; the add-on as it is then.
    pub async fn change(&self, id: &str, change: AddonChange) -> Result<AddonRecord, AddonError> {
        let _one_at_a_time = self.changes.lock().await;
        let key = id.to_owned();
        let addon = self
            .store
            .call(move |s| s.addon(&key))
            .await?
            .ok_or_else(|| AddonError::Refused(format!("the add-on {id} was deleted")))?;
        // No backup or restore meanwhile (nor this during one): 409.
        let _busy = self.claim(&addon)?;
        let disk_mb = change.disk_mb.unwrap_or(addon.disk_mb);
        if disk_mb < addon.disk_mb {
            return Err(AddonError::Refused(format!(
                "a disk cannot shrink ({} MB → {disk_mb} MB): export the add-on and import it \
                 into a new, smaller one",
                addon.disk_mb
            )));
        }
        let memory_mb = change.memory_mb.unwrap_or(addon.memory_mb);
        if memory_mb > addon.memory_mb {
            self.admit(
                memory_mb,
                Some(&addon.id),
                &format!("{} ({})", addon.id, addon.kind),
            )?;
        }
        let pitr = change.pitr.unwrap_or(addon.pitr);
        if pitr && addon.kind != "postgres" {
            return Err(AddonError::Refused(
                "`pitr` (point-in-time recovery) is for postgres; redis has RDB backups".into(),
            ));
        }
        let disk = match disk_mb > addon.disk_mb {
            true => self.grow_online(&addon, disk_mb).await?,
            false => Disk::Same,
        };
        let key = addon.id.clone();
        let updated = self
            .store
            .call(move |s| {
                s.update_addon(&key, |a| {
                    a.disk_mb = disk_mb;
                    a.memory_mb = memory_mb;
                    a.pitr = pitr;
                })
            })
            .await?
            .ok_or_else(|| AddonError::Refused(format!("the add-on {id} was deleted")))?;
        let restart = memory_mb != addon.memory_mb
            || pitr != addon.pitr
            || matches!(disk, Disk::GrowUnmounted);
        if !restart {
            return Ok(updated);
        }
        let restarted = self.restart(&addon, updated, disk).await?;
        if addon.pitr && !restarted.pitr {
            self.pitr_turned_off(&restarted).await;
        }
        Ok(restarted)
    }

    /// Grows the volume while the server runs, or says it needs the server stopped.
    async fn grow_online(&self, addon: &AddonRecord, disk_mb: u64) -> Result<Disk, AddonError> {
        let (volumes, volume) = (self.pipeline.volumes().clone(), self.volume(addon));
        let grown = tokio::task::spawn_blocking(move || volumes.grow(&volume, disk_mb))
            .await
            .expect("blocking task");
        match grown {
            Ok(()) => Ok(Disk::GrownOnline),
            Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
                tracing::warn!(
                    addon = %addon.id,
                    %error,
                    "the kernel refuses to grow a mounted filesystem for the daemon (no \
                     CAP_SYS_RESOURCE): the add-on restarts to grow its disk"
                );
                Ok(Disk::GrowUnmounted)
            }
            Err(error) => Err(AddonError::Failed(format!(
                "the disk could not grow: {error}"
            ))),
        }
    }

    /// Stops the server, grows its volume unmounted if `disk` says so, writes Redis's config
    /// for the new limit, and starts it again with `updated`'s settings.
    async fn restart(
        &self,
        before: &AddonRecord,
        updated: AddonRecord,
        disk: Disk,
    ) -> Result<AddonRecord, AddonError> {
        let project_id = updated.project_id.clone();
        let project = self
            .store
            .call(move |s| s.find_project(&project_id))
            .await?
            .ok_or_else(|| AddonError::Failed("the add-on's project is gone".into()))?;
        self.supervisor.stop_deployment(&updated.id, None).await;
        let mut failure = None;
        if matches!(disk, Disk::GrowUnmounted) {
            let (volumes, volume) = (self.pipeline.volumes().clone(), self.volume(before));
            let disk_mb = updated.disk_mb;
            let grown =
                tokio::task::spawn_blocking(move || volumes.grow_unmounted(&volume, disk_mb))
                    .await
                    .expect("blocking task");
            failure = grown
                .err()
                .map(|error| format!("the disk could not grow: {error}"));
        }
        if updated.kind == "redis" && failure.is_none() {
            failure = self.rewrite_redis_config(&project, &updated).await.err();
        }
        let started = self.run(&project, &updated, None).await;
        match (started, failure) {
            (Ok(()), None) => Ok(updated),
            (Ok(()), Some(message)) => Err(AddonError::Failed(message)),
            (Err(message), _) => {
                let (key, said) = (updated.id.clone(), message.clone());
                self.store
                    .call(move |s| {
                        s.update_addon(&key, |a| {
                            a.state = AddonState::Failed;
                            a.message = Some(said);
                        })
                    })
                    .await?;
                Err(AddonError::Failed(message))
            }
        }
    }

    /// Redis reads its `maxmemory` from its config file, which holds the password too.
    async fn rewrite_redis_config(
        &self,
        project: &crate::store::records::ProjectRecord,
        addon: &AddonRecord,
    ) -> Result<(), String> {
        let password = self
            .secrets
            .open(
                &crate::pipeline::password_context(&addon.id),
                &addon.sealed_password,
            )
            .map_err(|error| format!("the add-on's password cannot be read: {error}"))?;
        let password = String::from_utf8_lossy(&password).into_owned();
        self.write_secret_file(project, addon, &password).await
    }
}
