//! The shapes of add-on services (`/api/projects/{projectId}/addons`, `/api/addons/{addonId}`),
//! issue 34.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::store::addons::AddonState;

/// `POST /api/projects/{projectId}/addons`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateAddon {
    /// `postgres` (PostgreSQL 15) or `redis`.
    #[schemars(regex(pattern = r"^(postgres|redis)$"))]
    pub kind: String,
    /// Its memory limit, MiB (default 256); its settings are derived from it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole_number::optional_u32"
    )]
    #[schemars(range(min = 64, max = 65536))]
    pub memory_mb: Option<u32>,
    /// Its data volume, MiB (default 1024).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole_number::optional_u32"
    )]
    #[schemars(range(min = 64, max = 1048576))]
    pub disk_mb: Option<u32>,
    /// The variable linked apps get (default `DATABASE_URL` / `REDIS_URL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(?!PORT$)[A-Z_][A-Z0-9_]{0,63}$"))]
    pub env_name: Option<String>,
    /// Redis: `persistent` (default) or `cache` (no persistence, LRU eviction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(persistent|cache)$"))]
    pub mode: Option<String>,
    /// PostgreSQL: point-in-time recovery (WAL archived into the backups volume, base
    /// backups beside the logical ones). Default false; `true` on redis is 409.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pitr: Option<bool>,
}

/// An add-on (never its password: see `…/credentials`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Addon {
    pub id: String,
    pub kind: String,
    /// The server's version (`15.18`, `7.0.15`).
    pub version: String,
    pub project_id: String,
    pub state: AddonState,
    pub memory_mb: u64,
    pub disk_mb: u64,
    /// Bytes used on its data volume.
    pub disk_used_bytes: u64,
    pub env_name: String,
    pub mode: String,
    /// Projects whose production gets `envName` and may connect.
    pub links: Vec<String>,
    /// Where linked apps reach it.
    pub host: String,
    pub port: u16,
    pub created_at: String,
    /// What it is doing or why it failed, in words (a restore running, a restore failed).
    pub message: Option<String>,
    /// PostgreSQL: point-in-time recovery is on.
    #[serde(default)]
    pub pitr: bool,
    /// With `pitr`: the moments a point-in-time restore can reach now (null until a base
    /// backup is proven and WAL after it archived).
    #[serde(default)]
    pub pitr_window: Option<PitrWindow>,
    /// The add-on this one was made from by an upgrade (`POST …/rollback` goes back to it).
    pub upgraded_from: Option<String>,
    /// The add-on this one was upgraded into (it is kept stopped for a rollback).
    pub upgraded_to: Option<String>,
}

/// The span a point-in-time restore reaches, RFC 3339.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PitrWindow {
    /// The end of the oldest good base backup.
    pub from: String,
    /// When the newest archived WAL segment was archived (a restore seals the WAL first, so
    /// up to the request's moment is reachable while the add-on runs).
    pub to: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonList {
    pub addons: Vec<Addon>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// `GET /api/addons/{addonId}/credentials`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonCredentials {
    /// What linked apps get in `envName`.
    pub url: String,
    pub user: Option<String>,
    pub password: String,
    pub host: String,
    pub port: u16,
    pub database: Option<String>,
}

/// The query of `DELETE /api/addons/{addonId}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeleteAddonQuery {
    /// The add-on's id again, as confirmation (another add-on's id: 409).
    #[schemars(regex(pattern = r"^adn_[a-z2-7]{24}$"))]
    pub confirm: String,
    /// `false`: no final backup first (an add-on that cannot be dumped); its earlier good
    /// backups are still kept. Default `true`: a final backup that fails deletes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_backup: Option<bool>,
}

/// The answer to `DELETE /api/addons/{addonId}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonDeleted {
    pub id: String,
    pub deleted: bool,
    /// The backup taken and proven before it was deleted (null with `finalBackup=false`, or
    /// when it was not running).
    pub final_backup_id: Option<String>,
    /// Until when its good backups stay restorable (`[addons] deleted_keep_days`).
    pub backups_kept_until: String,
}

pub use crate::store::addon_backups::{BackupKind, BackupState};

/// A backup of an add-on, and whether restoring it proved it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonBackup {
    pub id: String,
    pub addon_id: String,
    /// `logical` (`pg_dump -Fc` of the `app` database), `base` (`pg_basebackup` of the
    /// cluster, PITR add-ons) or `rdb` (Redis).
    pub kind: BackupKind,
    /// `manual` or `schedule`.
    pub trigger: String,
    /// `running` → `verifying` → `ok` or `failed`; only `ok` backups restore.
    pub state: BackupState,
    /// When it was started.
    pub at: String,
    pub bytes: u64,
    /// SHA-256 of the file, hex; checked again before every restore.
    pub sha256: String,
    pub verified_at: Option<String>,
    /// What the throw-away restore held: rows per table (`schema.table`), or keys per Redis
    /// database.
    pub check: Option<BackupCheck>,
    /// Why it failed.
    pub error: Option<String>,
}

/// The counts a backup's proof found.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BackupCheck {
    pub tables: std::collections::BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonBackupList {
    /// Newest first.
    pub backups: Vec<AddonBackup>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// `POST /api/addons/{addonId}/restore`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RestoreAddon {
    /// A backup of this add-on in state `ok` (a logical or RDB one); or `pointInTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^bak_[a-z2-7]{24}$"))]
    pub backup_id: Option<String>,
    /// PostgreSQL with `pitr`: the moment to recover to (RFC 3339), inside `pitrWindow`;
    /// only with `target: "new"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = super::history::HISTORY_TIME_PATTERN))]
    pub point_in_time: Option<String>,
    /// `new` (a new add-on with the same settings, not linked) or `in-place` (the data is
    /// replaced once the restored copy is proven).
    #[schemars(regex(pattern = r"^(new|in-place)$"))]
    pub target: String,
}

/// The query of `GET /api/addons/{addonId}/export`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportQuery {
    /// A good backup of this add-on; without it a new backup is taken and proven first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^bak_[a-z2-7]{24}$"))]
    pub backup_id: Option<String>,
}
