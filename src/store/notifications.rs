//! Webhook subscriptions, the queue of deliveries still to be made (keyed by due time, so
//! the worker reads the next one first and a restart loses none), and the last 100 attempts
//! of each subscription. The records are defined here; `notifications/` drives them.

use std::collections::{HashMap, HashSet};

use redb::{ReadableTable, ReadableTableMetadata};
use serde::{Deserialize, Serialize};

use super::{all_records, decode, encode, get_record, put_record, tables, Result, Store};

/// Attempts kept per subscription.
pub const ATTEMPTS_KEPT: u64 = 100;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NotificationRecord {
    pub v: u32,
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    /// `json` or `slack`.
    pub format: String,
    /// The signing secret sealed with the daemon's key (hex of nonce ‖ ciphertext ‖ tag).
    pub secret_sealed: String,
    pub created_ms: u64,
    /// Deliveries dropped because the subscription's queue was full.
    #[serde(default)]
    pub dropped: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueuedDelivery {
    pub v: u32,
    pub id: String,
    pub notification_id: String,
    pub event: String,
    /// The exact body to post (signed as is).
    pub body: String,
    /// Attempts made so far.
    pub attempts: u32,
    pub created_ms: u64,
    pub next_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeliveryAttempt {
    pub v: u32,
    pub delivery_id: String,
    pub event: String,
    pub at_ms: u64,
    /// 1 for the first try.
    pub attempt: u32,
    /// The receiver's HTTP status, if it answered.
    pub status: Option<u16>,
    /// Why the attempt failed (`None` on a 2xx).
    pub error: Option<String>,
}

impl Store {
    pub fn insert_notification(&self, record: &NotificationRecord) -> Result<()> {
        let txn = self.write()?;
        put_record(
            &mut txn.open_table(tables::NOTIFICATIONS)?,
            &record.id,
            record,
        )?;
        txn.commit()?;
        Ok(())
    }

    pub fn notification_count(&self) -> Result<u64> {
        let txn = self.read()?;
        Ok(txn.open_table(tables::NOTIFICATIONS)?.len()?)
    }

    /// Every subscription, oldest first.
    pub fn list_notifications(&self) -> Result<Vec<NotificationRecord>> {
        let txn = self.read()?;
        let mut records: Vec<NotificationRecord> =
            all_records(&txn.open_table(tables::NOTIFICATIONS)?, "notifications")?;
        records.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
        Ok(records)
    }

    pub fn notification(&self, id: &str) -> Result<Option<NotificationRecord>> {
        let txn = self.read()?;
        get_record(&txn.open_table(tables::NOTIFICATIONS)?, "notifications", id)
    }

    /// Removes a subscription with its queued deliveries and its attempts; `None` if there
    /// was no such subscription.
    pub fn delete_notification(&self, id: &str) -> Result<Option<NotificationRecord>> {
        let txn = self.write()?;
        let removed = {
            let mut table = txn.open_table(tables::NOTIFICATIONS)?;
            let record: Option<NotificationRecord> = get_record(&table, "notifications", id)?;
            if record.is_some() {
                table.remove(id)?;
                let mut queue = txn.open_table(tables::NOTIFICATION_QUEUE)?;
                let mut doomed = Vec::new();
                for entry in queue.iter()? {
                    let (key, value) = entry?;
                    let delivery: QueuedDelivery = decode("notification_queue", value.value())?;
                    if delivery.notification_id == id {
                        let (due, delivery_id) = key.value();
                        doomed.push((due, delivery_id.to_owned()));
                    }
                }
                for (due, delivery_id) in doomed {
                    queue.remove((due, delivery_id.as_str()))?;
                }
                let mut attempts = txn.open_table(tables::NOTIFICATION_ATTEMPTS)?;
                attempts.retain_in((id, 0)..=(id, u64::MAX), |_, _| false)?;
            }
            record
        };
        txn.commit()?;
        Ok(removed)
    }

    /// Queues deliveries (all or none). A subscription holds at most `cap` queued: past it
    /// its oldest are dropped and counted in its record's `dropped`.
    pub fn enqueue_deliveries(&self, deliveries: &[QueuedDelivery], cap: u64) -> Result<()> {
        let txn = self.write()?;
        {
            let mut queue = txn.open_table(tables::NOTIFICATION_QUEUE)?;
            // Each subscription's queued deliveries as (created, due, id), oldest last.
            let mut queued: HashMap<String, Vec<(u64, u64, String)>> = HashMap::new();
            for entry in queue.iter()? {
                let (key, value) = entry?;
                let delivery: QueuedDelivery = decode("notification_queue", value.value())?;
                let (due, id) = key.value();
                queued.entry(delivery.notification_id).or_default().push((
                    delivery.created_ms,
                    due,
                    id.to_owned(),
                ));
            }
            let mut dropped: HashMap<String, u64> = HashMap::new();
            for delivery in deliveries {
                let mine = queued.entry(delivery.notification_id.clone()).or_default();
                mine.sort_by(|a, b| b.cmp(a));
                while mine.len() as u64 >= cap {
                    let Some((_, due, id)) = mine.pop() else {
                        break;
                    };
                    queue.remove((due, id.as_str()))?;
                    *dropped.entry(delivery.notification_id.clone()).or_default() += 1;
                }
                queue.insert(
                    (delivery.next_ms, delivery.id.as_str()),
                    encode(delivery).as_slice(),
                )?;
                mine.push((delivery.created_ms, delivery.next_ms, delivery.id.clone()));
            }
            let mut subscriptions = txn.open_table(tables::NOTIFICATIONS)?;
            for (id, count) in dropped {
                let record: Option<NotificationRecord> =
                    get_record(&subscriptions, "notifications", &id)?;
                if let Some(mut record) = record {
                    record.dropped += count;
                    put_record(&mut subscriptions, &id, &record)?;
                }
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// The deliveries due at `now_ms`, the first of each subscription not in `busy` (in due
    /// order, at most `limit`), and when the next one not taken falls due.
    pub fn due_deliveries(
        &self,
        now_ms: u64,
        busy: &HashSet<String>,
        limit: usize,
    ) -> Result<(Vec<QueuedDelivery>, Option<u64>)> {
        let txn = self.read()?;
        let queue = txn.open_table(tables::NOTIFICATION_QUEUE)?;
        let mut taken: Vec<QueuedDelivery> = Vec::new();
        for entry in queue.iter()? {
            let (key, value) = entry?;
            let (due, _) = key.value();
            if due > now_ms {
                return Ok((taken, Some(due)));
            }
            if taken.len() >= limit {
                return Ok((taken, Some(due)));
            }
            let delivery: QueuedDelivery = decode("notification_queue", value.value())?;
            let waiting = busy.contains(&delivery.notification_id)
                || taken
                    .iter()
                    .any(|t| t.notification_id == delivery.notification_id);
            if !waiting {
                taken.push(delivery);
            }
        }
        Ok((taken, None))
    }

    /// How many deliveries of a subscription are queued.
    pub fn queued_count(&self, notification_id: &str) -> Result<u64> {
        let txn = self.read()?;
        let queue = txn.open_table(tables::NOTIFICATION_QUEUE)?;
        let mut count = 0;
        for entry in queue.iter()? {
            let delivery: QueuedDelivery = decode("notification_queue", entry?.1.value())?;
            count += u64::from(delivery.notification_id == notification_id);
        }
        Ok(count)
    }

    /// Records an attempt of `delivery` (as it was queued) and takes it off the queue, or puts
    /// it back as `retry` (its new due time and attempt count) — in one transaction.
    pub fn finish_attempt(
        &self,
        delivery: &QueuedDelivery,
        retry: Option<&QueuedDelivery>,
        attempt: &DeliveryAttempt,
    ) -> Result<()> {
        let txn = self.write()?;
        {
            let mut queue = txn.open_table(tables::NOTIFICATION_QUEUE)?;
            // Gone while in flight (dropped from a full queue, or its subscription deleted):
            // it is not put back.
            let still_queued = queue
                .remove((delivery.next_ms, delivery.id.as_str()))?
                .is_some();
            if let (true, Some(retry)) = (still_queued, retry) {
                queue.insert((retry.next_ms, retry.id.as_str()), encode(retry).as_slice())?;
            }
            let id = delivery.notification_id.as_str();
            let mut attempts = txn.open_table(tables::NOTIFICATION_ATTEMPTS)?;
            let last = attempts
                .range((id, 0)..=(id, u64::MAX))?
                .next_back()
                .transpose()?
                .map(|(key, _)| key.value().1)
                .unwrap_or(0);
            let seq = last + 1;
            attempts.insert((id, seq), encode(attempt).as_slice())?;
            if seq > ATTEMPTS_KEPT {
                let keep_from = seq - ATTEMPTS_KEPT + 1;
                attempts.retain_in((id, 0)..(id, keep_from), |_, _| false)?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Drops a queued delivery without an attempt (its subscription is gone).
    pub fn drop_delivery(&self, delivery: &QueuedDelivery) -> Result<()> {
        let txn = self.write()?;
        txn.open_table(tables::NOTIFICATION_QUEUE)?
            .remove((delivery.next_ms, delivery.id.as_str()))?;
        txn.commit()?;
        Ok(())
    }

    /// The last attempts of a subscription, newest first.
    pub fn delivery_attempts(&self, notification_id: &str) -> Result<Vec<DeliveryAttempt>> {
        let txn = self.read()?;
        let attempts = txn.open_table(tables::NOTIFICATION_ATTEMPTS)?;
        let mut out = Vec::new();
        for entry in attempts
            .range((notification_id, 0)..=(notification_id, u64::MAX))?
            .rev()
            .take(ATTEMPTS_KEPT as usize)
        {
            let (_, value) = entry?;
            out.push(decode("notification_attempts", value.value())?);
        }
        Ok(out)
    }
}
