//! Add-on services (`adn_…`, issue 34): one PostgreSQL or Redis instance each, its settings,
//! its sealed password, the link (stable address) it keeps, and the projects linked to it.

use serde::{Deserialize, Serialize};

use super::{all_records, get_record, put_record, tables, Result, Store};

/// Where an add-on is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AddonState {
    Starting,
    Running,
    Stopped,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AddonRecord {
    pub v: u32,
    pub id: String,
    /// `postgres` or `redis`.
    pub kind: String,
    /// The server's version as it reported it at creation (`15.18`, `7.0.15`).
    pub version: String,
    /// The project that made it (it is linked to it).
    pub project_id: String,
    pub state: AddonState,
    pub memory_mb: u64,
    pub disk_mb: u64,
    /// The variable linked projects get (`DATABASE_URL`, `REDIS_URL`, or the one asked for).
    pub env_name: String,
    /// Redis: `persistent` or `cache`.
    pub mode: String,
    /// Projects whose apps get `env_name` and may connect (the owner first).
    pub links: Vec<String>,
    /// The sandbox link index it keeps (its address never changes).
    pub link_index: u32,
    pub address: std::net::Ipv4Addr,
    pub port: u16,
    /// The database user's password, sealed with `secret.key` (like env vars).
    pub sealed_password: Vec<u8>,
    pub created_ms: u64,
    /// Why it failed, in words.
    pub message: Option<String>,
    /// PostgreSQL: point-in-time recovery on (WAL archived into the backups volume, base
    /// backups taken); off for add-ons made before it existed.
    #[serde(default)]
    pub pitr: bool,
    /// The add-on this one was made from by an upgrade (`addons::upgrade`).
    #[serde(default)]
    pub upgraded_from: Option<String>,
    /// The add-on this one was upgraded into (it is kept stopped for a rollback).
    #[serde(default)]
    pub upgraded_to: Option<String>,
}

impl Store {
    pub fn put_addon(&self, addon: &AddonRecord) -> Result<()> {
        let txn = self.write()?;
        put_record(&mut txn.open_table(tables::ADDONS)?, &addon.id, addon)?;
        txn.commit()?;
        Ok(())
    }

    pub fn addon(&self, id: &str) -> Result<Option<AddonRecord>> {
        let txn = self.read()?;
        get_record(&txn.open_table(tables::ADDONS)?, "addons", id)
    }

    pub fn all_addons(&self) -> Result<Vec<AddonRecord>> {
        let txn = self.read()?;
        all_records(&txn.open_table(tables::ADDONS)?, "addons")
    }

    /// The add-ons `project_id` is linked to (its own among them).
    pub fn addons_linked_to(&self, project_id: &str) -> Result<Vec<AddonRecord>> {
        Ok(self
            .all_addons()?
            .into_iter()
            .filter(|addon| addon.links.iter().any(|p| p == project_id))
            .collect())
    }

    /// The add-ons `project_id` owns or is linked to (what its add-ons list shows).
    pub fn addons_of(&self, project_id: &str) -> Result<Vec<AddonRecord>> {
        Ok(self
            .all_addons()?
            .into_iter()
            .filter(|addon| {
                addon.project_id == project_id || addon.links.iter().any(|p| p == project_id)
            })
            .collect())
    }

    /// Adds (`link`) or removes `project_id` from the add-on's links; the add-on as it is
    /// now, `None` when it does not exist.
    pub fn set_addon_link(
        &self,
        id: &str,
        project_id: &str,
        link: bool,
    ) -> Result<Option<AddonRecord>> {
        let txn = self.write()?;
        let updated = {
            let mut table = txn.open_table(tables::ADDONS)?;
            let addon: Option<AddonRecord> = get_record(&table, "addons", id)?;
            let Some(mut addon) = addon else {
                return Ok(None);
            };
            addon.links.retain(|p| p != project_id);
            if link {
                addon.links.push(project_id.to_owned());
            }
            put_record(&mut table, id, &addon)?;
            addon
        };
        txn.commit()?;
        Ok(Some(updated))
    }

    /// Changes the add-on with `change` in one transaction; the add-on as it is now, `None`
    /// when it does not exist.
    pub fn update_addon(
        &self,
        id: &str,
        change: impl FnOnce(&mut AddonRecord),
    ) -> Result<Option<AddonRecord>> {
        let txn = self.write()?;
        let updated = {
            let mut table = txn.open_table(tables::ADDONS)?;
            let addon: Option<AddonRecord> = get_record(&table, "addons", id)?;
            let Some(mut addon) = addon else {
                return Ok(None);
            };
            change(&mut addon);
            put_record(&mut table, id, &addon)?;
            addon
        };
        txn.commit()?;
        Ok(Some(updated))
    }

    /// Gives `to` every link of `from` (which keeps none) in one transaction, and records
    /// the upgrade (`from` upgraded into `to`) or, for a rollback (`to` is the add-on `from`
    /// was upgraded from), clears it. Both as they are now; `None` if one does not exist.
    pub fn move_addon_links(
        &self,
        from: &str,
        to: &str,
        rollback: bool,
    ) -> Result<Option<(AddonRecord, AddonRecord)>> {
        let txn = self.write()?;
        let moved = {
            let mut table = txn.open_table(tables::ADDONS)?;
            let source: Option<AddonRecord> = get_record(&table, "addons", from)?;
            let target: Option<AddonRecord> = get_record(&table, "addons", to)?;
            let (Some(mut source), Some(mut target)) = (source, target) else {
                return Ok(None);
            };
            target.links = std::mem::take(&mut source.links);
            match rollback {
                true => target.upgraded_to = None,
                false => {
                    source.upgraded_to = Some(to.to_owned());
                    target.upgraded_from = Some(from.to_owned());
                }
            }
            put_record(&mut table, from, &source)?;
            put_record(&mut table, to, &target)?;
            (source, target)
        };
        txn.commit()?;
        Ok(Some(moved))
    }

    pub fn delete_addon(&self, id: &str) -> Result<Option<AddonRecord>> {
        let txn = self.write()?;
        let removed = {
            let mut table = txn.open_table(tables::ADDONS)?;
            let removed = get_record(&table, "addons", id)?;
            table.remove(id)?;
            removed
        };
        txn.commit()?;
        Ok(removed)
    }
}
