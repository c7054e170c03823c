//! `[addons]`: how often add-ons are backed up on their own, how many good backups each
//! keeps, the largest import, how often their disks are checked for the 80 % and 90 %
//! alerts, and how long a deleted one's backups are kept (issue 34).

use serde::Deserialize;

use super::ConfigError;

/// `[addons]`, validated.
#[derive(Debug, Clone)]
pub struct AddonsConfig {
    /// `backup_interval_h` (default 24; 0 turns scheduled backups off): an add-on whose
    /// newest backup is older than this is backed up (and the backup proven).
    pub backup_interval_h: u64,
    /// `backup_keep` (default 7): the good backups kept per add-on; older ones go.
    pub backup_keep: usize,
    /// `import_max_mb` (default 10240): the largest body `PUT /api/addons/{id}/import` takes.
    pub import_max_mb: u64,
    /// `disk_check_interval_s` (default 30, 1 to 3600): seconds between two checks of every
    /// add-on's disk use (`addon.disk_full` events, `slipway_addon_disk_used_bytes`).
    pub disk_check_interval_s: u64,
    /// `deleted_keep_days` (default 7, 0 to 3650): how long a deleted add-on's final backup
    /// (and its other good ones) are kept, restorable into a new add-on.
    pub deleted_keep_days: u64,
}

impl Default for AddonsConfig {
    fn default() -> Self {
        AddonsConfig {
            backup_interval_h: 24,
            backup_keep: 7,
            import_max_mb: 10240,
            disk_check_interval_s: 30,
            deleted_keep_days: 7,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAddons {
    backup_interval_h: Option<u64>,
    backup_keep: Option<usize>,
    import_max_mb: Option<u64>,
    disk_check_interval_s: Option<u64>,
    deleted_keep_days: Option<u64>,
}

impl RawAddons {
    pub(super) fn validate(self) -> Result<AddonsConfig, ConfigError> {
        let defaults = AddonsConfig::default();
        let keep = self.backup_keep.unwrap_or(defaults.backup_keep);
        if keep == 0 {
            return Err(ConfigError::Invalid {
                key: "addons.backup_keep".into(),
                message: "must be greater than 0 (a backup is kept until a newer one is proven)"
                    .into(),
            });
        }
        let interval = self
            .disk_check_interval_s
            .unwrap_or(defaults.disk_check_interval_s);
        if !(1..=3600).contains(&interval) {
            return Err(ConfigError::Invalid {
                key: "addons.disk_check_interval_s".into(),
                message: "must be from 1 to 3600".into(),
            });
        }
        let deleted_keep_days = self.deleted_keep_days.unwrap_or(defaults.deleted_keep_days);
        if deleted_keep_days > 3650 {
            return Err(ConfigError::Invalid {
                key: "addons.deleted_keep_days".into(),
                message: "must be from 0 to 3650".into(),
            });
        }
        Ok(AddonsConfig {
            backup_interval_h: self.backup_interval_h.unwrap_or(defaults.backup_interval_h),
            backup_keep: keep,
            import_max_mb: self.import_max_mb.unwrap_or(defaults.import_max_mb),
            disk_check_interval_s: interval,
            deleted_keep_days,
        })
    }
}
