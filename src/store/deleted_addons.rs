//! Deleted add-ons whose backups are kept for a while (`[addons] deleted_keep_days`): the
//! add-on as it was, when it was deleted, its final backup and when they all go. Moved out of
//! `addons` in the transaction that deletes it, so nothing that runs add-ons sees it.

use serde::{Deserialize, Serialize};

use super::addons::AddonRecord;
use super::{all_records, get_record, put_record, tables, Result, Store};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeletedAddonRecord {
    pub v: u32,
    pub addon: AddonRecord,
    pub deleted_ms: u64,
    /// The backup taken and proven as it was deleted (`None`: asked for none, or it did not
    /// run).
    pub final_backup: Option<String>,
    /// When its backups volume and backup records go.
    pub purge_ms: u64,
}

impl Store {
    /// Moves the add-on out of `addons` into the deleted ones, in one transaction.
    pub fn retire_addon(&self, deleted: &DeletedAddonRecord) -> Result<()> {
        let txn = self.write()?;
        txn.open_table(tables::ADDONS)?
            .remove(deleted.addon.id.as_str())?;
        put_record(
            &mut txn.open_table(tables::DELETED_ADDONS)?,
            &deleted.addon.id,
            deleted,
        )?;
        txn.commit()?;
        Ok(())
    }

    pub fn deleted_addon(&self, id: &str) -> Result<Option<DeletedAddonRecord>> {
        let txn = self.read()?;
        get_record(
            &txn.open_table(tables::DELETED_ADDONS)?,
            "deleted_addons",
            id,
        )
    }

    pub fn all_deleted_addons(&self) -> Result<Vec<DeletedAddonRecord>> {
        let txn = self.read()?;
        all_records(&txn.open_table(tables::DELETED_ADDONS)?, "deleted_addons")
    }

    /// Forgets a deleted add-on and its backup records (its files are the caller's).
    pub fn purge_deleted_addon(&self, id: &str) -> Result<()> {
        let txn = self.write()?;
        {
            let backups: Vec<super::addon_backups::AddonBackupRecord> =
                all_records(&txn.open_table(tables::ADDON_BACKUPS)?, "addon_backups")?;
            let mut table = txn.open_table(tables::ADDON_BACKUPS)?;
            for backup in backups.iter().filter(|b| b.addon_id == id) {
                table.remove(backup.id.as_str())?;
            }
            txn.open_table(tables::DELETED_ADDONS)?.remove(id)?;
        }
        txn.commit()?;
        Ok(())
    }
}
