//! A consistent copy of the whole store while the daemon serves: every table is copied from
//! ONE read transaction (a redb snapshot; writers go on meanwhile) into a fresh redb file.
//! `backup` calls it through the admin socket. A table the copy does not know about fails
//! the snapshot rather than being left out silently (and the unit test below fails first).

use std::path::Path;

use redb::{Database, ReadTransaction, TableDefinition, TableHandle};

use super::{all_records, tables, Result, Store, StoreError};
use crate::store::records::ProjectRecord;

/// What the snapshot holds, read from the same transaction it copied.
#[derive(Debug, Clone)]
pub struct SnapshotInfo {
    pub schema_version: u64,
    /// The live deployment of every project: their builds belong in a backup.
    pub live_deployments: Vec<String>,
    pub projects: usize,
}

impl Store {
    /// Writes a copy of every table to a new redb file at `dest` (which must not exist).
    pub fn snapshot_to(&self, dest: &Path) -> Result<SnapshotInfo> {
        let read = self.read()?;
        let copy = Database::create(dest)
            .map_err(|error| StoreError::Open(format!("{}: {error}", dest.display())))?;
        super::restrict_permissions(dest);
        let write = copy.begin_write()?;
        let mut copied: Vec<String> = Vec::new();
        copy_table(&read, &write, tables::META, &mut copied)?;
        copy_table(&read, &write, tables::PROJECTS, &mut copied)?;
        copy_table(&read, &write, tables::PROJECT_SLUGS, &mut copied)?;
        copy_table(&read, &write, tables::ENV_VARS, &mut copied)?;
        copy_table(&read, &write, tables::ENV_VAR_SCOPES, &mut copied)?;
        copy_table(&read, &write, tables::TOKENS, &mut copied)?;
        copy_table(&read, &write, tables::TOKEN_HASHES, &mut copied)?;
        copy_table(&read, &write, tables::DEPLOYMENTS, &mut copied)?;
        copy_table(&read, &write, tables::RUNS, &mut copied)?;
        copy_table(&read, &write, tables::LOGS, &mut copied)?;
        copy_table(&read, &write, tables::LOG_STATS, &mut copied)?;
        copy_table(&read, &write, tables::SOURCES, &mut copied)?;
        copy_table(&read, &write, tables::TLS, &mut copied)?;
        copy_table(&read, &write, tables::AUDIT, &mut copied)?;
        copy_table(&read, &write, tables::IDEMPOTENCY, &mut copied)?;
        copy_table(&read, &write, tables::NOTIFICATIONS, &mut copied)?;
        copy_table(&read, &write, tables::NOTIFICATION_QUEUE, &mut copied)?;
        copy_table(&read, &write, tables::NOTIFICATION_ATTEMPTS, &mut copied)?;
        copy_table(&read, &write, tables::DOMAINS, &mut copied)?;
        copy_table(&read, &write, tables::PREVIEWS, &mut copied)?;
        copy_table(&read, &write, tables::DEPLOY_HOOKS, &mut copied)?;
        copy_table(&read, &write, tables::WEBHOOK_DELIVERIES, &mut copied)?;
        copy_table(&read, &write, tables::BRANCH_HEADS, &mut copied)?;
        copy_table(&read, &write, tables::FORMATIONS, &mut copied)?;
        copy_table(&read, &write, tables::JOB_RUNS, &mut copied)?;
        copy_table(&read, &write, tables::CRON_JOBS, &mut copied)?;
        copy_table(&read, &write, tables::ADDONS, &mut copied)?;
        copy_table(&read, &write, tables::ADDON_BACKUPS, &mut copied)?;
        copy_table(&read, &write, tables::DELETED_ADDONS, &mut copied)?;
        copy_table(&read, &write, tables::USAGE_HISTORY, &mut copied)?;
        // Not copied: which processes of this machine run the live apps. A restored data dir
        // starts its apps afresh (the table is created empty when the copy is opened).
        copied.push(tables::APP_PROCESSES.name().to_owned());
        for table in read.list_tables()? {
            if !copied.iter().any(|name| name == table.name()) {
                return Err(StoreError::Db(format!(
                    "the backup does not know the table {:?}: add it to store/snapshot.rs",
                    table.name()
                )));
            }
        }
        write.commit()?;
        let projects: Vec<ProjectRecord> =
            all_records(&read.open_table(tables::PROJECTS)?, "projects")?;
        let schema_version = {
            let meta = read.open_table(tables::META)?;
            let value = redb::ReadableTable::get(&meta, "schema_version")?;
            value.map(|v| super::u64_from(v.value())).unwrap_or(0)
        };
        Ok(SnapshotInfo {
            schema_version,
            live_deployments: projects
                .iter()
                .filter_map(|project| project.live_deployment_id.clone())
                .collect(),
            projects: projects.len(),
        })
    }
}

fn copy_table<K: redb::Key + 'static, V: redb::Value + 'static>(
    read: &ReadTransaction,
    write: &redb::WriteTransaction,
    table: TableDefinition<K, V>,
    copied: &mut Vec<String>,
) -> Result<()> {
    let source = read.open_table(table)?;
    let mut dest = write.open_table(table)?;
    for entry in redb::ReadableTable::iter(&source)? {
        let (key, value) = entry?;
        dest.insert(key.value(), value.value())?;
    }
    copied.push(table.name().to_owned());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_copies_every_table_and_opens_as_a_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.tls_put("ca/root", b"pem bytes").unwrap();
        let copy_dir = tempfile::tempdir().unwrap();
        let info = store
            .snapshot_to(&copy_dir.path().join("slipway.redb"))
            .expect("every table of a fresh store is known to the snapshot");
        assert_eq!(info.schema_version, tables::SCHEMA_VERSION);
        assert_eq!(info.projects, 0);
        drop(store);
        let copy = Store::open(copy_dir.path()).unwrap();
        assert_eq!(
            copy.tls_get("ca/root").unwrap().as_deref(),
            Some(&b"pem bytes"[..])
        );
    }
}
