//! The shapes of an add-on's operations: `PATCH /api/addons/{addonId}` (grow its disk, change
//! its memory, point-in-time recovery on or off), `POST …/upgrade` and its server's output (`GET /api/addons/{addonId}/logs`), issue 34.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::LogLine;

/// `PATCH /api/addons/{addonId}`: what changes (at least one).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PatchAddon {
    /// A larger data volume, MiB: it grows online, the server keeps running. Smaller is 409.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole_number::optional_u32"
    )]
    #[schemars(range(min = 64, max = 1048576))]
    pub disk_mb: Option<u32>,
    /// A new memory limit, MiB: the settings are derived again and the server restarts (a
    /// short interruption).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole_number::optional_u32"
    )]
    #[schemars(range(min = 64, max = 65536))]
    pub memory_mb: Option<u32>,
    /// PostgreSQL: point-in-time recovery on or off (a restart; turned on, a base backup is
    /// taken at once). `true` on redis is 409.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pitr: Option<bool>,
    /// PostgreSQL: the major version (`"15"`). The add-on's own is accepted and changes
    /// nothing (minor versions come with the Debian package and a restart); another is 409:
    /// a major version never changes in place, `POST /api/addons/{addonId}/upgrade` does it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,2}$"))]
    pub version: Option<String>,
}

/// `POST /api/addons/{addonId}/upgrade`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UpgradeAddon {
    /// PostgreSQL: the major version to move to, installed on this machine (the newest
    /// installed when absent; never older than the add-on's). Redis: the installed server;
    /// leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,2}$"))]
    pub version: Option<String>,
}

/// A page of an add-on server's output (`GET /api/addons/{addonId}/logs`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddonLogPage {
    pub addon_id: String,
    pub logs: Vec<LogLine>,
    pub next_since: u64,
    pub has_more: bool,
}
