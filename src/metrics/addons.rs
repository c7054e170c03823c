//! The add-ons' figures as the disk watch (`addons::watch`) last measured them, for the
//! Prometheus page (`slipway_addon_*`); replaced whole at each round, so a deleted add-on
//! leaves the page at the next one.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// One add-on's last measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddonDisk {
    /// The owning project's id (a project-limited page shows its own add-ons only).
    pub project_id: String,
    pub used_bytes: u64,
    /// Open client connections (`None`: its server does not run).
    pub connections: Option<u64>,
    /// PITR: WAL segments staged, not yet in the backups volume (`None`: PITR off).
    pub wal_backlog: Option<u64>,
    pub backups: BackupFigures,
}

/// An add-on's backups as the metrics show them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackupFigures {
    /// Whether its newest finished backup is good (`None`: none finished yet).
    pub last_ok: Option<bool>,
    /// When its newest good backup finished.
    pub last_good_ms: Option<u64>,
}

/// Add-on id → its last measure.
#[derive(Debug, Default)]
pub struct AddonDisks {
    measured: Mutex<BTreeMap<String, AddonDisk>>,
}

impl AddonDisks {
    /// Replaces every measure with a round's.
    pub fn set(&self, measured: BTreeMap<String, AddonDisk>) {
        *self.measured.lock().expect("addon disks poisoned") = measured;
    }

    pub fn snapshot(&self) -> BTreeMap<String, AddonDisk> {
        self.measured.lock().expect("addon disks poisoned").clone()
    }
}
