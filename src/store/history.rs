//! Usage history: samples of a project (or the machine) per minute and per hour, keyed by
//! (subject, step, start). The values are opaque JSON the `usage::history` module owns; it
//! hands in how two samples of the same key combine.

use redb::ReadableTable;

use super::{set_meta_u64, tables, Result, Store};

/// One sample to write: (subject, step, start in Unix seconds, JSON).
pub type HistoryRow = (String, u8, u64, Vec<u8>);

/// How two samples of one key combine: `(subject, old, new)` → what is written.
pub type HistoryMerge = dyn Fn(&str, &[u8], &[u8]) -> Vec<u8>;

/// How many samples and bytes the history holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistorySize {
    pub samples: u64,
    pub bytes: u64,
}

impl Store {
    /// Writes `rows` in one commit; where a key already holds a sample, `merge(subject, old, new)` is
    /// written instead. `meta`, if given, is set in the same commit (the history's own marks).
    pub fn put_history(
        &self,
        rows: &[HistoryRow],
        merge: &HistoryMerge,
        meta: Option<(&str, u64)>,
    ) -> Result<()> {
        let txn = self.write()?;
        {
            let mut table = txn.open_table(tables::USAGE_HISTORY)?;
            for (subject, step, at, value) in rows {
                let key = (subject.as_str(), *step, *at);
                let merged = table
                    .get(key)?
                    .map(|old| merge(subject, old.value(), value));
                table.insert(key, merged.as_deref().unwrap_or(value))?;
            }
        }
        if let Some((key, value)) = meta {
            set_meta_u64(&txn, key, value)?;
        }
        txn.commit()?;
        Ok(())
    }

    /// The samples of `subject` at `step` starting in `from..to` (Unix seconds), oldest first.
    pub fn history_range(
        &self,
        subject: &str,
        step: u8,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        let txn = self.read()?;
        let table = txn.open_table(tables::USAGE_HISTORY)?;
        let mut out = Vec::new();
        if from >= to {
            return Ok(out);
        }
        for entry in table.range((subject, step, from)..(subject, step, to))? {
            let (key, value) = entry?;
            out.push((key.value().2, value.value().to_vec()));
        }
        Ok(out)
    }

    /// Removes samples older than `keep_from[step]` (Unix seconds); how many went.
    pub fn prune_history(&self, keep_from: [u64; 2]) -> Result<u64> {
        let txn = self.write()?;
        let mut removed = 0;
        txn.open_table(tables::USAGE_HISTORY)?
            .retain(|(_, step, at), _| {
                let keep = at >= keep_from.get(usize::from(step)).copied().unwrap_or(0);
                removed += u64::from(!keep);
                keep
            })?;
        txn.commit()?;
        Ok(removed)
    }

    pub fn history_size(&self) -> Result<HistorySize> {
        let txn = self.read()?;
        let table = txn.open_table(tables::USAGE_HISTORY)?;
        let mut size = HistorySize::default();
        for entry in table.iter()? {
            let (_, value) = entry?;
            size.samples += 1;
            size.bytes += value.value().len() as u64;
        }
        Ok(size)
    }

    /// A mark of the history kept in the store's meta table (0 when unset).
    pub fn history_mark(&self, key: &str) -> Result<u64> {
        let txn = self.read()?;
        let meta = txn.open_table(tables::META)?;
        let value = meta.get(key)?.map(|v| super::u64_from(v.value()));
        Ok(value.unwrap_or(0))
    }
}
