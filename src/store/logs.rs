//! Deployment log lines, keyed by (deployment, seq), with bounded retention per deployment:
//! when a deployment's retained bytes pass the limit, its oldest lines are dropped first.

use redb::ReadableTable;

use super::records::LogStats;
use super::{decode, encode, tables, Result, Store};

/// One stored line as JSON bytes, with its sequence number.
pub struct StoredLine {
    pub seq: u64,
    pub json: Vec<u8>,
}

impl Store {
    /// Appends lines (seq already assigned, increasing) in one commit and trims the oldest
    /// lines beyond `retention_bytes`.
    pub fn append_logs(
        &self,
        deployment_id: &str,
        lines: &[StoredLine],
        retention_bytes: u64,
    ) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let txn = self.write()?;
        {
            let mut logs = txn.open_table(tables::LOGS)?;
            let mut stats_table = txn.open_table(tables::LOG_STATS)?;
            let mut stats: LogStats = match stats_table.get(deployment_id)? {
                Some(value) => decode("log_stats", value.value())?,
                None => LogStats::default(),
            };
            for line in lines {
                logs.insert((deployment_id, line.seq), line.json.as_slice())?;
                if stats.first_seq == 0 {
                    stats.first_seq = line.seq;
                }
                stats.last_seq = line.seq;
                stats.bytes += line.json.len() as u64;
            }
            while stats.bytes > retention_bytes && stats.first_seq <= stats.last_seq {
                if let Some(old) = logs.remove((deployment_id, stats.first_seq))? {
                    stats.bytes = stats.bytes.saturating_sub(old.value().len() as u64);
                }
                stats.first_seq += 1;
            }
            stats_table.insert(deployment_id, encode(&stats).as_slice())?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Lines with seq > `after`, at most `limit`, in order.
    pub fn read_logs(
        &self,
        deployment_id: &str,
        after: u64,
        limit: usize,
    ) -> Result<Vec<StoredLine>> {
        let txn = self.read()?;
        let logs = txn.open_table(tables::LOGS)?;
        let mut out = Vec::new();
        let start = after.saturating_add(1);
        for entry in logs.range((deployment_id, start)..=(deployment_id, u64::MAX))? {
            let (key, value) = entry?;
            out.push(StoredLine {
                seq: key.value().1,
                json: value.value().to_vec(),
            });
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// The highest seq stored for a deployment (0 when none).
    pub fn last_log_seq(&self, deployment_id: &str) -> Result<u64> {
        let txn = self.read()?;
        let stats = txn.open_table(tables::LOG_STATS)?;
        let value = stats.get(deployment_id)?;
        Ok(match value {
            Some(value) => decode::<LogStats>("log_stats", value.value())?.last_seq,
            None => 0,
        })
    }

    /// Drops all lines of a deployment (retention across deployments).
    pub fn delete_logs(&self, deployment_id: &str) -> Result<()> {
        let txn = self.write()?;
        txn.open_table(tables::LOGS)?
            .retain_in((deployment_id, 0)..=(deployment_id, u64::MAX), |_, _| false)?;
        txn.open_table(tables::LOG_STATS)?.remove(deployment_id)?;
        txn.commit()?;
        Ok(())
    }
}
