//! The store: the only owner of persistent state, one redb file at `<data_dir>/slipway.redb`.
//!
//! Only this module imports redb. Calls are blocking (a commit fsyncs): async callers go through
//! [`Store::call`], which runs them on the blocking pool. A second daemon on the same data dir
//! is refused at open by an exclusive lock on `<data_dir>/slipway.lock`.

pub mod addon_backups;
pub mod addons;
mod audit;
pub mod deleted_addons;
mod deployments;
pub mod domains;
mod formations;
pub mod git;
mod history;
pub mod jobs;
mod logs;
pub mod notifications;
mod projects;
pub mod records;
mod snapshot;
pub mod tables;
mod tokens;

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, Table};
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use history::{HistoryRow, HistorySize};
pub use logs::*;
pub use projects::*;
pub use snapshot::SnapshotInfo;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("another slipway daemon is already using the data directory {0} (lock held on slipway.lock); stop it first or choose another data_dir")]
    Locked(String),
    #[error("cannot open the store: {0}")]
    Open(String),
    #[error(
        "the store was written by a newer slipway (schema {found}, this binary knows {known})"
    )]
    Schema { found: u64, known: u64 },
    #[error("store error: {0}")]
    Db(String),
    #[error("corrupt record in {table}: {message}")]
    Corrupt {
        table: &'static str,
        message: String,
    },
}

macro_rules! db_error {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(error: $t) -> Self {
                StoreError::Db(error.to_string())
            }
        }
    )*};
}
db_error!(
    redb::Error,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

pub type Result<T> = std::result::Result<T, StoreError>;

tokio::task_local! {
    /// The audit entry of the API request this task serves, if it changes something: every
    /// write transaction begun through [`Store::call`] in the task writes it, so the entry
    /// commits with the change (tasks the request spawns do not inherit it).
    pub static AUDIT: Option<Arc<records::AuditRecord>>;
}

#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
    /// Held for the life of the store: the advisory lock against a second daemon.
    _lock: Arc<nix::fcntl::Flock<File>>,
    /// Written into every write transaction of this handle ([`Store::audited`]), so an API
    /// request's audit entry commits with the change it records, or not at all.
    audit: Option<Arc<records::AuditRecord>>,
}

/// Memory redb may keep for pages of the store.
const CACHE_BYTES: usize = 8 * 1024 * 1024;

impl Store {
    /// Opens (or creates) the store in `data_dir`, which must exist.
    pub fn open(data_dir: &Path) -> Result<Store> {
        let lock_path = data_dir.join("slipway.lock");
        let lock_file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|error| StoreError::Open(format!("{}: {error}", lock_path.display())))?;
        let lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|_| StoreError::Locked(data_dir.display().to_string()))?;
        let path = data_dir.join("slipway.redb");
        // redb caches up to 1 GiB of pages by default; the store is metadata and logs, read
        // mostly by key, and the daemon has to fit a small VPS beside its apps.
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(&path)
            .map_err(|error| match error {
                redb::DatabaseError::DatabaseAlreadyOpen => {
                    StoreError::Locked(data_dir.display().to_string())
                }
                other => StoreError::Open(format!("{}: {other}", path.display())),
            })?;
        restrict_permissions(&path);
        let store = Store {
            db: Arc::new(db),
            _lock: Arc::new(lock),
            audit: None,
        };
        store.init_schema()?;
        Ok(store)
    }

    fn init_schema(&self) -> Result<()> {
        let txn = self.db.begin_write()?;
        {
            let mut meta = txn.open_table(tables::META)?;
            let found = meta.get("schema_version")?.map(|v| u64_from(v.value()));
            match found {
                Some(found) if found > tables::SCHEMA_VERSION => {
                    return Err(StoreError::Schema {
                        found,
                        known: tables::SCHEMA_VERSION,
                    })
                }
                Some(_) => {}
                None => {
                    meta.insert(
                        "schema_version",
                        tables::SCHEMA_VERSION.to_le_bytes().as_slice(),
                    )?;
                }
            }
            // Create every table so read transactions never see a missing one.
            txn.open_table(tables::PROJECTS)?;
            txn.open_table(tables::PROJECT_SLUGS)?;
            txn.open_table(tables::ENV_VARS)?;
            txn.open_table(tables::ENV_VAR_SCOPES)?;
            txn.open_table(tables::TOKENS)?;
            txn.open_table(tables::TOKEN_HASHES)?;
            txn.open_table(tables::DEPLOYMENTS)?;
            txn.open_table(tables::RUNS)?;
            txn.open_table(tables::LOGS)?;
            txn.open_table(tables::LOG_STATS)?;
            txn.open_table(tables::SOURCES)?;
            txn.open_table(tables::TLS)?;
            txn.open_table(tables::APP_PROCESSES)?;
            txn.open_table(tables::FORMATIONS)?;
            txn.open_table(tables::JOB_RUNS)?;
            txn.open_table(tables::CRON_JOBS)?;
            txn.open_table(tables::ADDONS)?;
            txn.open_table(tables::ADDON_BACKUPS)?;
            txn.open_table(tables::DELETED_ADDONS)?;
            txn.open_table(tables::AUDIT)?;
            txn.open_table(tables::IDEMPOTENCY)?;
            txn.open_table(tables::NOTIFICATIONS)?;
            txn.open_table(tables::NOTIFICATION_QUEUE)?;
            txn.open_table(tables::NOTIFICATION_ATTEMPTS)?;
            txn.open_table(tables::DOMAINS)?;
            txn.open_table(tables::PREVIEWS)?;
            txn.open_table(tables::DEPLOY_HOOKS)?;
            txn.open_table(tables::WEBHOOK_DELIVERIES)?;
            txn.open_table(tables::BRANCH_HEADS)?;
            txn.open_table(tables::USAGE_HISTORY)?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Runs a blocking store call on the blocking thread pool. Inside an API request that
    /// changes something ([`AUDIT`] set for its task), the call's write transactions carry
    /// the request's audit entry.
    pub async fn call<T: Send + 'static>(&self, f: impl FnOnce(&Store) -> T + Send + 'static) -> T {
        let mut store = self.clone();
        if store.audit.is_none() {
            store.audit = AUDIT.try_with(Clone::clone).ok().flatten();
        }
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .expect("store call panicked")
    }

    pub(crate) fn read(&self) -> Result<redb::ReadTransaction> {
        Ok(self.db.begin_read()?)
    }

    pub(crate) fn write(&self) -> Result<redb::WriteTransaction> {
        let txn = self.db.begin_write()?;
        if let Some(entry) = &self.audit {
            let bytes = encode(entry.as_ref());
            txn.open_table(tables::AUDIT)?
                .insert(entry.id.as_str(), bytes.as_slice())?;
        }
        Ok(txn)
    }

    // Running apps' adoption handles, as opaque JSON the supervisor owns.

    pub fn put_app_process(&self, instance_key: &str, handle: &[u8]) -> Result<()> {
        let txn = self.write()?;
        txn.open_table(tables::APP_PROCESSES)?
            .insert(instance_key, handle)?;
        txn.commit()?;
        Ok(())
    }

    pub fn remove_app_process(&self, instance_key: &str) -> Result<()> {
        let txn = self.write()?;
        txn.open_table(tables::APP_PROCESSES)?
            .remove(instance_key)?;
        txn.commit()?;
        Ok(())
    }

    pub fn app_processes(&self) -> Result<Vec<(String, Vec<u8>)>> {
        let txn = self.read()?;
        let table = txn.open_table(tables::APP_PROCESSES)?;
        let mut all = Vec::new();
        for entry in table.iter()? {
            let (key, value) = entry?;
            all.push((key.value().to_owned(), value.value().to_vec()));
        }
        Ok(all)
    }

    // Raw byte values for the TLS module (which owns its own record formats).

    pub fn tls_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let txn = self.read()?;
        let table = txn.open_table(tables::TLS)?;
        Ok(table.get(key)?.map(|v| v.value().to_vec()))
    }

    pub fn tls_put(&self, key: &str, value: &[u8]) -> Result<()> {
        let txn = self.write()?;
        txn.open_table(tables::TLS)?.insert(key, value)?;
        txn.commit()?;
        Ok(())
    }

    pub fn tls_delete(&self, key: &str) -> Result<()> {
        let txn = self.write()?;
        txn.open_table(tables::TLS)?.remove(key)?;
        txn.commit()?;
        Ok(())
    }

    pub fn tls_list(&self, prefix: &str) -> Result<Vec<String>> {
        let txn = self.read()?;
        let table = txn.open_table(tables::TLS)?;
        let mut keys = Vec::new();
        for entry in table.range(prefix..)? {
            let (key, _) = entry?;
            if !key.value().starts_with(prefix) {
                break;
            }
            keys.push(key.value().to_owned());
        }
        Ok(keys)
    }
}

fn restrict_permissions(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
}

fn u64_from(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    let n = bytes.len().min(8);
    buf[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(buf)
}

pub(crate) fn decode<T: DeserializeOwned>(table: &'static str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|error| StoreError::Corrupt {
        table,
        message: error.to_string(),
    })
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("records always serialize")
}

pub(crate) fn get_record<T: DeserializeOwned>(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &'static str,
    key: &str,
) -> Result<Option<T>> {
    match table.get(key)? {
        Some(value) => Ok(Some(decode(name, value.value())?)),
        None => Ok(None),
    }
}

pub(crate) fn put_record<T: Serialize>(
    table: &mut Table<&'static str, &'static [u8]>,
    key: &str,
    value: &T,
) -> Result<()> {
    table.insert(key, encode(value).as_slice())?;
    Ok(())
}

pub(crate) fn all_records<T: DeserializeOwned>(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    name: &'static str,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for entry in table.iter()? {
        let (_, value) = entry?;
        out.push(decode(name, value.value())?);
    }
    Ok(out)
}

pub(crate) fn meta_u64(txn: &redb::WriteTransaction, key: &str) -> Result<u64> {
    let meta = txn.open_table(tables::META)?;
    let value = meta.get(key)?.map(|v| u64_from(v.value())).unwrap_or(0);
    Ok(value)
}

pub(crate) fn set_meta_u64(txn: &redb::WriteTransaction, key: &str, value: u64) -> Result<()> {
    txn.open_table(tables::META)?
        .insert(key, value.to_le_bytes().as_slice())?;
    Ok(())
}
