//! The add-ons' disk use as the disk watch (`addons::watch`) last measured it, for the
//! Prometheus page (`slipway_addon_disk_used_bytes`); replaced whole at each round, so a
//! deleted add-on leaves the page at the next one.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// One add-on's last measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddonDisk {
    /// The owning project's id (a project-limited page shows its own add-ons only).
    pub project_id: String,
    pub used_bytes: u64,
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
