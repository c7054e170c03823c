//! An add-on's backups (`bak_…`, issue 34): each file in the add-on's backups volume, its
//! checksum, and whether restoring it into a throw-away server proved it (`state: ok`, with
//! the per-table row counts it was checked against).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{all_records, get_record, put_record, tables, Result, Store};

/// What a backup holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackupKind {
    // `pg_dump -Fc` of the `app` database.
    Logical,
    // `pg_basebackup` of the whole cluster (point-in-time recovery starts from one).
    Base,
    // A Redis RDB snapshot.
    Rdb,
}

/// Where a backup is: being written, being proven, proven good, or not good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackupState {
    Running,
    Verifying,
    Ok,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AddonBackupRecord {
    pub v: u32,
    pub id: String,
    pub addon_id: String,
    pub kind: BackupKind,
    /// `manual`, `schedule`, `import` or `export`.
    pub trigger: String,
    pub state: BackupState,
    pub created_ms: u64,
    pub finished_ms: Option<u64>,
    /// The file's name in the add-on's backups volume.
    pub file: String,
    pub bytes: u64,
    /// SHA-256 of the file, hex (checked again before every restore).
    pub sha256: String,
    /// What the source held at the dump's moment (per table, or per Redis database), when
    /// it could be counted in the same snapshot.
    pub expected: Option<BTreeMap<String, u64>>,
    pub verified_ms: Option<u64>,
    /// What the throw-away restore held.
    pub check: Option<BTreeMap<String, u64>>,
    pub error: Option<String>,
    /// A base backup: the first WAL segment its recovery needs (`backup_label`'s START WAL
    /// LOCATION file); older archived segments are of no use once it is the oldest kept.
    #[serde(default)]
    pub wal_start: Option<String>,
}

impl Store {
    pub fn put_addon_backup(&self, backup: &AddonBackupRecord) -> Result<()> {
        let txn = self.write()?;
        put_record(
            &mut txn.open_table(tables::ADDON_BACKUPS)?,
            &backup.id,
            backup,
        )?;
        txn.commit()?;
        Ok(())
    }

    pub fn addon_backup(&self, id: &str) -> Result<Option<AddonBackupRecord>> {
        let txn = self.read()?;
        get_record(&txn.open_table(tables::ADDON_BACKUPS)?, "addon_backups", id)
    }

    /// The backups of `addon_id`, oldest first.
    pub fn addon_backups(&self, addon_id: &str) -> Result<Vec<AddonBackupRecord>> {
        let txn = self.read()?;
        let all: Vec<AddonBackupRecord> =
            all_records(&txn.open_table(tables::ADDON_BACKUPS)?, "addon_backups")?;
        let mut mine: Vec<AddonBackupRecord> =
            all.into_iter().filter(|b| b.addon_id == addon_id).collect();
        mine.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
        Ok(mine)
    }

    pub fn all_addon_backups(&self) -> Result<Vec<AddonBackupRecord>> {
        let txn = self.read()?;
        all_records(&txn.open_table(tables::ADDON_BACKUPS)?, "addon_backups")
    }

    pub fn delete_addon_backup(&self, id: &str) -> Result<()> {
        let txn = self.write()?;
        txn.open_table(tables::ADDON_BACKUPS)?.remove(id)?;
        txn.commit()?;
        Ok(())
    }
}
