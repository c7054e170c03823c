//! Add-on services (issue 34): a PostgreSQL or Redis instance per add-on, from Debian's
//! packages, each in a sandbox of its own as the apps run — the owning project's uid, its own
//! network namespace on a pinned link (an address that never changes: it is in the linked
//! apps' `DATABASE_URL`), the cgroup limits its settings are derived from (`engine.rs`), its
//! data on a disk-limited volume of its own. The supervisor runs it like an app instance
//! (`adn_…:postgres.1`): restarted with backoff when it crashes, its output in its log
//! channel, left running across a daemon restart and adopted by the next daemon.
//!
//! A link gives a project's production its URL and the sandbox allowance to connect to the
//! add-on's address and port (`pipeline::links`, `sandbox` `reach`/`serve_port`); nothing else
//! can reach it. The password is sealed with `secret.key` and only shown by
//! `GET /api/addons/{id}/credentials`. From a laptop, `GET /api/addons/{id}/tunnel` carries
//! one TCP connection to it over a WebSocket (`tunnel.rs`, `slipway db proxy|connect`).

mod appliance;
mod backup;
pub mod engine;
mod files;
mod gauges;
mod pitr;
mod pitr_restore;
mod resize;
mod restore;
mod retire;
mod schedule;
mod scripts;
mod sleep;
mod start;
mod step;
mod transfer;
pub mod tunnel;
mod upgrade;
pub mod watch;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::disk::Volume;
use crate::pipeline::Pipeline;
use crate::sandbox::{AppHandle, Runner};
use crate::secrets::SecretBox;
use crate::store::addons::{AddonRecord, AddonState};
use crate::store::records::ProjectRecord;
use crate::store::Store;
use crate::supervisor::Supervisor;

pub use appliance::Held;
pub use backup::Busy;
pub use engine::{AddonKind, RedisMode};
pub use pitr::PitrWindow;
pub use resize::AddonChange;
pub use restore::RestoreTarget;

/// The add-on service, shared by the API.
pub struct Addons {
    store: Store,
    secrets: Arc<SecretBox>,
    runner: Arc<dyn Runner>,
    supervisor: Arc<Supervisor>,
    pipeline: Arc<Pipeline>,
    data_dir: PathBuf,
    /// Sandbox mode none: every add-on listens on 127.0.0.1, on a port of its own.
    loopback: bool,
    /// Where the packages' programs are looked for (`/`).
    programs_root: PathBuf,
    /// Add-ons a backup or restore is running on (`backup::Busy`).
    busy: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Good backups kept per add-on.
    backup_keep: usize,
    /// How long a deleted add-on's backups are kept (`retire.rs`).
    deleted_keep_ms: u64,
    memory_reserve_mb: u64,
    /// Changes of running add-ons (`resize.rs`) one at a time.
    changes: tokio::sync::Mutex<()>,
    /// Held while WAL is moved into a backups volume (`pitr.rs`): one mover at a time, and
    /// none while the appliance's backup archives the backups volumes (`appliance.rs`).
    shipping: Arc<tokio::sync::Mutex<()>>,
    /// Add-ons put to sleep with their apps and woken for them one at a time (`sleep.rs`).
    sleeping: tokio::sync::Mutex<()>,
}

/// What `POST /api/projects/{id}/addons` asks for.
#[derive(Debug, Clone)]
pub struct AddonRequest {
    pub kind: AddonKind,
    pub memory_mb: u64,
    pub disk_mb: u64,
    pub env_name: Option<String>,
    pub mode: RedisMode,
    /// Linked to its project from the start (a restored copy is not: it is linked in place
    /// of the original when the user says so).
    pub link: bool,
    /// PostgreSQL: point-in-time recovery on (`pitr.rs`).
    pub pitr: bool,
    /// The password to give it (a point-in-time copy keeps its source's: the data holds
    /// the role's); a new random one when `None`.
    pub password: Option<String>,
    /// PostgreSQL: the major to run (`engine::POSTGRES_MAJOR` when `None`; an upgrade or a
    /// copy of an add-on names its own).
    pub major: Option<u32>,
}

/// Why an add-on was not made or changed.
#[derive(Debug, thiserror::Error)]
pub enum AddonError {
    /// The machine cannot run it (a package missing, no address left): 409.
    #[error("{0}")]
    Unavailable(String),
    /// The change asked for is not possible (shrinking a disk): 409.
    #[error("{0}")]
    Refused(String),
    /// It did not start (`ADDON_FAILED`).
    #[error("{0}")]
    Failed(String),
    /// A backup or restore of it is running: 409.
    #[error("{0}")]
    Busy(String),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

/// Where add-ons live on this machine.
pub struct Place {
    pub data_dir: PathBuf,
    /// Sandbox mode none: every add-on listens on 127.0.0.1, on a port of its own.
    pub loopback: bool,
    /// Good backups kept per add-on (`[addons] backup_keep`).
    pub backup_keep: usize,
    /// How long a deleted add-on's backups are kept (`[addons] deleted_keep_days`).
    pub deleted_keep_ms: u64,
    /// Memory kept for the system (`limits.memory_reserve_mb`): add-ons are admitted as
    /// instances are.
    pub memory_reserve_mb: u64,
}

impl Addons {
    pub fn new(
        store: Store,
        secrets: Arc<SecretBox>,
        runner: Arc<dyn Runner>,
        supervisor: Arc<Supervisor>,
        pipeline: Arc<Pipeline>,
        place: Place,
    ) -> Arc<Addons> {
        Arc::new(Addons {
            store,
            secrets,
            runner,
            supervisor,
            pipeline,
            data_dir: place.data_dir,
            loopback: place.loopback,
            programs_root: PathBuf::from("/"),
            busy: Arc::default(),
            backup_keep: place.backup_keep,
            deleted_keep_ms: place.deleted_keep_ms,
            memory_reserve_mb: place.memory_reserve_mb,
            changes: tokio::sync::Mutex::new(()),
            shipping: Arc::default(),
            sleeping: tokio::sync::Mutex::new(()),
        })
    }

    /// The add-on's data volume (its own size, `diskMb`).
    fn volume(&self, addon: &AddonRecord) -> Volume {
        Volume::app_data(&self.data_dir.join("addons").join(&addon.id), addon.disk_mb)
    }

    /// An empty directory the sandbox shows read-only at `/app`.
    fn empty_app_dir(&self, addon: &AddonRecord) -> PathBuf {
        self.data_dir
            .join("addons")
            .join(format!("{}-app", addon.id))
    }

    /// Bytes used on the add-on's volume.
    pub async fn disk_used_bytes(&self, addon: &AddonRecord) -> u64 {
        let dir = self.volume(addon).dir;
        tokio::task::spawn_blocking(move || {
            nix::sys::statvfs::statvfs(&dir)
                .map(|fs| (fs.blocks() - fs.blocks_free()) * fs.fragment_size())
                .unwrap_or(0)
        })
        .await
        .unwrap_or(0)
    }

    /// Makes an add-on for `project` (linked to it) and starts it; the record once it
    /// accepts connections.
    pub async fn create(
        &self,
        project: &ProjectRecord,
        request: AddonRequest,
    ) -> Result<AddonRecord, AddonError> {
        self.can_run(request.kind)?;
        self.admit(
            request.memory_mb,
            None,
            &format!("a {} add-on", request.kind.as_str()),
        )?;
        let (link_index, address) = self.runner.allocate_link().ok_or_else(|| {
            AddonError::Unavailable("no sandbox address is free (sandbox.subnet is full)".into())
        })?;
        let id = crate::ids::new_id("adn_");
        let password = request.password.unwrap_or_else(new_password);
        let port = match self.loopback {
            true => free_port().map_err(AddonError::Failed)?,
            false => request.kind.port(),
        };
        let mut addon = AddonRecord {
            v: 1,
            id: id.clone(),
            kind: request.kind.as_str().to_owned(),
            // A PostgreSQL add-on's major decides its programs; the server's full version
            // takes its place once it ran.
            version: match request.kind {
                AddonKind::Postgres => request.major.unwrap_or(engine::POSTGRES_MAJOR).to_string(),
                AddonKind::Redis => String::new(),
            },
            project_id: project.id.clone(),
            state: AddonState::Starting,
            memory_mb: request.memory_mb,
            disk_mb: request.disk_mb,
            env_name: request
                .env_name
                .unwrap_or_else(|| request.kind.default_env_name().to_owned()),
            mode: match request.mode {
                RedisMode::Persistent => "persistent".into(),
                RedisMode::Cache => "cache".into(),
            },
            links: match request.link {
                true => vec![project.id.clone()],
                false => Vec::new(),
            },
            link_index,
            address,
            port,
            sealed_password: self
                .secrets
                .seal(&crate::pipeline::password_context(&id), password.as_bytes()),
            created_ms: crate::ids::now_ms(),
            message: None,
            pitr: request.pitr && request.kind == AddonKind::Postgres,
            upgraded_from: None,
            upgraded_to: None,
        };
        let stored = addon.clone();
        self.store.call(move |s| s.put_addon(&stored)).await?;
        match self.first_start(project, &mut addon, &password).await {
            Ok(()) => {
                addon.state = AddonState::Running;
                let stored = addon.clone();
                self.store.call(move |s| s.put_addon(&stored)).await?;
                Ok(addon)
            }
            Err(message) => {
                self.remove(&addon).await;
                let key = addon.id.clone();
                self.store.call(move |s| s.delete_addon(&key)).await?;
                Err(AddonError::Failed(message))
            }
        }
    }

    /// Deletes an add-on at once: it stops, its data, its backups and its address go (a
    /// failed upgrade's copy, a deleted project's add-ons; the API's delete is `retire`).
    pub async fn delete(&self, addon: &AddonRecord) -> Result<(), AddonError> {
        let key = addon.id.clone();
        self.store.call(move |s| s.delete_addon(&key)).await?;
        self.remove(addon).await;
        Ok(())
    }

    /// Stops it and removes its data, its backups, its logs and its address.
    async fn remove(&self, addon: &AddonRecord) {
        self.supervisor.stop_deployment(&addon.id, None).await;
        // Its log followers end; its lines go.
        self.pipeline.hub().remove(&addon.id);
        let (volumes, volume) = (self.pipeline.volumes().clone(), self.volume(addon));
        let (backups, app_dir) = (self.backups_volume(addon), self.empty_app_dir(addon));
        let _ = tokio::task::spawn_blocking(move || {
            volumes.remove(&volume);
            volumes.remove(&backups);
            let _ = std::fs::remove_dir_all(app_dir);
        })
        .await;
        let id = addon.id.clone();
        let _ = self
            .store
            .call(move |s| {
                for backup in s.addon_backups(&id)? {
                    s.delete_addon_backup(&backup.id)?;
                }
                s.delete_logs(&id)?;
                Ok::<_, crate::store::StoreError>(())
            })
            .await;
        self.runner.release_link(addon.link_index);
    }

    /// At start: every add-on's address is claimed; the running ones an earlier daemon left
    /// are adopted, the others started again. `survivors` are the add-ons' leftovers.
    pub async fn restore(
        self: &Arc<Self>,
        mut survivors: HashMap<String, AppHandle>,
    ) -> Result<usize, crate::store::StoreError> {
        self.interrupted_backups().await?;
        let mut addons = self.store.call(|s| s.all_addons()).await?;
        for addon in &mut addons {
            let address = self.runner.claim_link(addon.link_index);
            if address != addon.address && !self.loopback {
                // Another sandbox.subnet here (an appliance restored on another machine): the
                // link's address is this subnet's; linked apps get the new URL as they start.
                addon.address = address;
                let stored = addon.clone();
                self.store.call(move |s| s.put_addon(&stored)).await?;
            }
            self.interrupted_restore(addon).await;
        }
        let mut restored = 0;
        for addon in addons.iter().cloned() {
            if addon.state == AddonState::Stopped {
                // Kept for a rollback (an upgrade's old add-on): it stays stopped.
                continue;
            }
            let project_id = addon.project_id.clone();
            let Some(project) = self
                .store
                .call(move |s| s.find_project(&project_id))
                .await?
            else {
                continue;
            };
            let key = start::instance_key(&addon);
            let adopt = survivors.remove(&key);
            if adopt.is_none() && self.data_missing(&addon) {
                // In the background: the daemon serves meanwhile, the add-on says so.
                let this = self.clone();
                tokio::spawn(async move { this.rebuild_in_background(project, addon).await });
                continue;
            }
            let adopted = adopt.is_some();
            let started = self.run(&project, &addon, adopt).await;
            match started {
                Ok(()) => {
                    restored += 1;
                    if !adopted {
                        // An adopted server still runs the program it started with.
                        self.record_version(&addon).await;
                    }
                }
                Err(message) => {
                    tracing::error!(addon = %addon.id, %message, "an add-on did not start again")
                }
            }
        }
        for (key, handle) in survivors {
            self.supervisor.stop_left_over(&key, &handle).await;
        }
        self.interrupted_upgrades(&addons).await;
        Ok(restored)
    }

    /// A minor upgrade is the Debian package's: the version the server runs now is recorded.
    async fn record_version(&self, addon: &AddonRecord) {
        let version = start::version(addon).await;
        if version.is_empty() || version == addon.version {
            return;
        }
        tracing::info!(addon = %addon.id, from = %addon.version, to = %version, "the add-on's server was upgraded by its package");
        let key = addon.id.clone();
        let _ = self
            .store
            .call(move |s| s.update_addon(&key, |a| a.version = version))
            .await;
    }

    /// The add-ons of `project_id` go with it (stopped, data removed).
    pub async fn project_deleted(&self, project_id: &str) {
        let Ok(addons) = self.store.call(|s| s.all_addons()).await else {
            return;
        };
        for addon in addons.iter().filter(|a| a.project_id == project_id) {
            let _ = self.delete(addon).await;
        }
        // Kept backups of its deleted add-ons: nothing could restore them now.
        self.purge_project(project_id).await;
    }
}

impl Addons {
    /// 409 when this machine cannot run `kind`: its package missing, or PostgreSQL as root.
    fn can_run(&self, kind: AddonKind) -> Result<(), AddonError> {
        kind.check_installed(&self.programs_root)
            .map_err(AddonError::Unavailable)?;
        if self.loopback && kind == AddonKind::Postgres && nix::unistd::geteuid().is_root() {
            return Err(AddonError::Unavailable(
                "PostgreSQL refuses to run as root, and in sandbox mode \"none\" an add-on runs \
                 as the daemon's user: run the daemon as another user, or use sandbox.mode = \
                 \"namespaces\""
                    .into(),
            ));
        }
        Ok(())
    }

    /// Refuses `memory_mb` (409) when it, with every running instance and add-on (but
    /// `replacing`, whose limit it takes the place of), exceeds the machine's memory minus
    /// the reserve: add-ons are admitted as process instances are.
    fn admit(&self, memory_mb: u64, replacing: Option<&str>, what: &str) -> Result<(), AddonError> {
        let Some(total_mb) = crate::formation::host_memory_mb() else {
            return Ok(());
        };
        let held_mb = self
            .supervisor
            .held_memory_mb(|owner, _| Some(owner) == replacing);
        crate::formation::Admission {
            total_mb,
            reserve_mb: self.memory_reserve_mb,
            held_mb,
        }
        .admit(memory_mb, &format!("{what} × {memory_mb} MiB"))
        .map_err(AddonError::Unavailable)
    }
}

/// A new add-on's database password: 20 random bytes, base32.
fn new_password() -> String {
    crate::ids::base32(&crate::ids::random_bytes::<20>())
}

/// A free loopback port (mode none: every add-on on 127.0.0.1 needs its own).
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|error| format!("no free port: {error}"))
}
