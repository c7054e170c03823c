//! The audit log and the idempotency records: the API's own bookkeeping of who changed what,
//! and of the first answer to each `Idempotency-Key`.

use redb::{ReadableTable, ReadableTableMetadata};

use super::records::{AuditRecord, IdempotentResponse};
use super::{decode, encode, tables, Result, Store};

/// Audit entries are kept this long, and at most [`AUDIT_MAX_ENTRIES`] of them.
pub const AUDIT_RETENTION_MS: u64 = 90 * 24 * 60 * 60 * 1000;
pub const AUDIT_MAX_ENTRIES: u64 = 100_000;
/// An idempotent answer is replayed for this long.
pub const IDEMPOTENCY_TTL_MS: u64 = 24 * 60 * 60 * 1000;

impl Store {
    /// This store with `entry` written into every write transaction it begins: the entry
    /// commits with the change it records (a change made of several transactions writes the
    /// same entry each time).
    pub fn audited(&self, entry: AuditRecord) -> Store {
        let mut store = self.clone();
        store.audit = Some(std::sync::Arc::new(entry));
        store
    }

    pub fn audit_entry(&self, id: &str) -> Result<Option<AuditRecord>> {
        let txn = self.read()?;
        let table = txn.open_table(tables::AUDIT)?;
        table
            .get(id)?
            .map(|v| decode("audit", v.value()))
            .transpose()
    }

    /// Writes (or replaces) an entry on its own: a request that changed nothing, or whose
    /// final status differs from the one its change was recorded with.
    pub fn put_audit(&self, entry: &AuditRecord) -> Result<()> {
        let txn = self.db.begin_write()?;
        txn.open_table(tables::AUDIT)?
            .insert(entry.id.as_str(), encode(entry).as_slice())?;
        txn.commit()?;
        Ok(())
    }

    /// Up to `limit` entries older than `before` (an entry id), newest first, optionally of one
    /// project; and whether more follow.
    pub fn audit_page(
        &self,
        before: Option<&str>,
        limit: usize,
        project_id: Option<&str>,
    ) -> Result<(Vec<AuditRecord>, bool)> {
        let txn = self.read()?;
        let table = txn.open_table(tables::AUDIT)?;
        let range = match before {
            Some(before) => table.range::<&str>(..before)?,
            None => table.range::<&str>(..)?,
        };
        let mut page = Vec::new();
        for entry in range.rev() {
            let (_, value) = entry?;
            let record: AuditRecord = decode("audit", value.value())?;
            if project_id.is_some_and(|id| record.project_id.as_deref() != Some(id)) {
                continue;
            }
            if page.len() == limit {
                return Ok((page, true));
            }
            page.push(record);
        }
        Ok((page, false))
    }

    /// Drops entries past the retention (age or count).
    pub fn purge_audit(&self, now_ms: u64) -> Result<usize> {
        let txn = self.db.begin_write()?;
        let removed;
        {
            let mut table = txn.open_table(tables::AUDIT)?;
            let total = table.len()?;
            let cutoff = format!("aud_{:013}", now_ms.saturating_sub(AUDIT_RETENTION_MS));
            let mut doomed: Vec<String> = Vec::new();
            let over = total.saturating_sub(AUDIT_MAX_ENTRIES) as usize;
            for (index, entry) in table.range::<&str>(..)?.enumerate() {
                let (key, _) = entry?;
                if index < over || key.value() < cutoff.as_str() {
                    doomed.push(key.value().to_owned());
                } else {
                    break;
                }
            }
            for key in &doomed {
                table.remove(key.as_str())?;
            }
            removed = doomed.len();
        }
        txn.commit()?;
        Ok(removed)
    }

    pub fn idempotent_response(
        &self,
        token_id: &str,
        key: &str,
        now_ms: u64,
    ) -> Result<Option<IdempotentResponse>> {
        let txn = self.read()?;
        let table = txn.open_table(tables::IDEMPOTENCY)?;
        let Some(value) = table.get((token_id, key))? else {
            return Ok(None);
        };
        let record: IdempotentResponse = decode("idempotency", value.value())?;
        Ok(replayable(&record, now_ms).then_some(record))
    }

    pub fn put_idempotent_response(
        &self,
        token_id: &str,
        key: &str,
        record: &IdempotentResponse,
    ) -> Result<()> {
        let txn = self.db.begin_write()?;
        txn.open_table(tables::IDEMPOTENCY)?
            .insert((token_id, key), encode(record).as_slice())?;
        txn.commit()?;
        Ok(())
    }

    /// Drops idempotency records older than their 24 h, and those of version 1 (plain text).
    pub fn purge_idempotency(&self, now_ms: u64) -> Result<usize> {
        let txn = self.db.begin_write()?;
        let removed;
        {
            let mut table = txn.open_table(tables::IDEMPOTENCY)?;
            let mut doomed = Vec::new();
            for entry in table.iter()? {
                let (key, value) = entry?;
                let record: IdempotentResponse = decode("idempotency", value.value())?;
                if !replayable(&record, now_ms) {
                    let (token, idempotency_key) = key.value();
                    doomed.push((token.to_owned(), idempotency_key.to_owned()));
                }
            }
            for (token, idempotency_key) in &doomed {
                table.remove((token.as_str(), idempotency_key.as_str()))?;
            }
            removed = doomed.len();
        }
        txn.commit()?;
        Ok(removed)
    }
}

/// Younger than 24 h and sealed (version 1 records kept their answer in plain text).
fn replayable(record: &IdempotentResponse, now_ms: u64) -> bool {
    record.v >= super::records::IDEMPOTENT_RESPONSE_VERSION
        && now_ms.saturating_sub(record.created_ms) < IDEMPOTENCY_TTL_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, project: Option<&str>) -> AuditRecord {
        AuditRecord {
            v: 1,
            id: id.into(),
            at_ms: 1,
            token_id: "tok_1".into(),
            token_name: "ci".into(),
            ip: "127.0.0.1".into(),
            method: "POST".into(),
            route: "/api/projects".into(),
            target: None,
            project_id: project.map(str::to_owned),
            status: 201,
        }
    }

    #[test]
    fn an_entry_commits_with_its_change_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let audited = store.audited(entry("aud_0000000000001a", None));
        // A change that commits brings its entry.
        audited.put_app_process("dpl_1", b"{}").unwrap();
        assert!(store.audit_entry("aud_0000000000001a").unwrap().is_some());
        // A transaction that is dropped (the change failed) takes its entry with it.
        let other = store.audited(entry("aud_0000000000002b", None));
        drop(other.write().unwrap());
        assert!(store.audit_entry("aud_0000000000002b").unwrap().is_none());
        // Reads never write.
        let _ = other.app_processes().unwrap();
        assert!(store.audit_entry("aud_0000000000002b").unwrap().is_none());
    }

    #[test]
    fn pages_go_newest_first_and_filter_by_project() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        for i in 0..5 {
            let project = if i % 2 == 0 { Some("prj_a") } else { None };
            store
                .put_audit(&entry(&format!("aud_{i:013}x"), project))
                .unwrap();
        }
        let (page, more) = store.audit_page(None, 2, None).unwrap();
        assert_eq!(
            page.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
            ["aud_0000000000004x", "aud_0000000000003x"]
        );
        assert!(more);
        let (page, more) = store
            .audit_page(Some("aud_0000000000003x"), 10, Some("prj_a"))
            .unwrap();
        assert_eq!(
            page.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
            ["aud_0000000000002x", "aud_0000000000000x"]
        );
        assert!(!more);
        // Retention by age: everything here is from 1970.
        assert_eq!(store.purge_audit(AUDIT_RETENTION_MS + 10).unwrap(), 5);
    }
}
