//! The add-ons' disk alerts: every `addons.disk_check_interval_s` (30 s) each add-on's volume
//! is measured, and a use crossing 80 % or 90 % of it sends `addon.disk_full` once; the alert
//! is re-armed when the use falls back below the mark (after a grow, or a cleanup). Jumping
//! from under 80 % past 90 % between two checks is one event, at 90 %. What was crossed is
//! kept in memory: a daemon that starts with an add-on above a mark says so once more.
//! Only disk-limited volumes (their own filesystem) are watched: a plain directory shares the
//! host's disk, which is not the add-on's to fill. Each round's measures are also what
//! `slipway_addon_disk_used_bytes` shows, with the figures of `gauges.rs` (connections, WAL
//! backlog, backups). Started by `app::serve` with the daemon.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Addons;
use crate::metrics::addons::AddonDisk;
use crate::metrics::DaemonMetrics;
use crate::notifications::{Event, EventKind, Notifier};
use crate::store::addons::AddonRecord;

/// The marks, percent of the volume, lowest first.
pub const MARKS: [u8; 2] = [80, 90];

/// The highest mark `used` of `total` bytes is at or above (0: under every mark).
pub fn mark(used: u64, total: u64) -> u8 {
    if total == 0 {
        return 0;
    }
    let percent = used.saturating_mul(100) / total;
    MARKS
        .iter()
        .rev()
        .copied()
        .find(|mark| percent >= u64::from(*mark))
        .unwrap_or(0)
}

/// Whether moving from mark `before` to `now` is a crossing to tell (upward only).
pub fn crossed(before: u8, now: u8) -> bool {
    now > before
}

/// The watcher; [`DiskWatch::check`] is one round.
pub struct DiskWatch {
    addons: Arc<Addons>,
    notifier: Notifier,
    metrics: Arc<DaemonMetrics>,
    /// Add-on id → the mark it was at, at the last check.
    marks: Mutex<HashMap<String, u8>>,
}

impl DiskWatch {
    pub fn new(
        addons: Arc<Addons>,
        notifier: Notifier,
        metrics: Arc<DaemonMetrics>,
    ) -> Arc<DiskWatch> {
        Arc::new(DiskWatch {
            addons,
            notifier,
            metrics,
            marks: Mutex::new(HashMap::new()),
        })
    }

    /// Checks every `interval` until `shutdown`.
    pub async fn run(self: Arc<Self>, interval: Duration, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(interval) => {}
            }
            self.check().await;
        }
    }

    /// One round: measures every add-on and sends an event for each crossing; the events sent.
    pub async fn check(&self) -> Vec<Event> {
        let addons = match self.addons.store.call(|s| s.all_addons()).await {
            Ok(addons) => addons,
            Err(error) => {
                tracing::warn!(%error, "could not read the add-ons to check their disks");
                return Vec::new();
            }
        };
        let mut sent = Vec::new();
        let mut measured = std::collections::BTreeMap::new();
        let ids: std::collections::HashSet<String> = addons.iter().map(|a| a.id.clone()).collect();
        // Deleted add-ons are forgotten.
        self.marks
            .lock()
            .expect("marks poisoned")
            .retain(|id, _| ids.contains(id));
        for addon in addons {
            let Some(disk) = self.addons.disk_use(&addon).await else {
                continue;
            };
            let (used, total) = (disk.used, disk.size);
            measured.insert(
                addon.id.clone(),
                AddonDisk {
                    project_id: addon.project_id.clone(),
                    used_bytes: used,
                    connections: self.addons.connections(&addon).await,
                    wal_backlog: self.addons.wal_backlog(&addon).await,
                    backups: self.addons.backup_figures(&addon).await,
                },
            );
            if !disk.limited {
                continue;
            }
            let now = mark(used, total);
            let before = self
                .marks
                .lock()
                .expect("marks poisoned")
                .insert(addon.id.clone(), now)
                .unwrap_or(0);
            if !crossed(before, now) {
                continue;
            }
            let event = self.event(&addon, now, used, total).await;
            self.notifier.emit(event.clone());
            sent.push(event);
        }
        self.metrics.addon_disks.set(measured);
        let ids: Vec<String> = sent.iter().filter_map(|e| e.addon.clone()).collect();
        if !ids.is_empty() {
            tracing::warn!(addons = ?ids, "add-on disks past an alert mark");
        }
        sent
    }

    async fn event(&self, addon: &AddonRecord, mark: u8, used: u64, total: u64) -> Event {
        let project_id = addon.project_id.clone();
        let slug = self
            .addons
            .store
            .call(move |s| s.find_project(&project_id))
            .await
            .ok()
            .flatten()
            .map(|project| project.slug);
        let mut event = Event::new(EventKind::AddonDiskFull)
            .addon(&addon.id)
            .error(&format!(
                "{} disk past {mark} %: {} of {} MB used ({} %); grow it with PATCH \
                 /api/addons/{} {{\"diskMb\": …}}",
                addon.kind,
                used >> 20,
                total >> 20,
                used.saturating_mul(100) / total.max(1),
                addon.id
            ));
        event.project = slug;
        event
    }
}

/// An add-on's volume measured, in bytes.
struct DiskUse {
    used: u64,
    size: u64,
    /// A filesystem of its own (else `used` and `size` are the host disk's).
    limited: bool,
}

impl Addons {
    /// Its volume's use, `None` when it cannot be read (being made, or gone).
    async fn disk_use(&self, addon: &AddonRecord) -> Option<DiskUse> {
        let (volumes, volume) = (self.pipeline.volumes().clone(), self.volume(addon));
        tokio::task::spawn_blocking(move || {
            let limited = matches!(volumes.limited_device(&volume), Ok(Some(_)));
            let stat = nix::sys::statvfs::statvfs(&volume.dir).ok()?;
            let size = stat.blocks().saturating_mul(stat.fragment_size());
            let used = (stat.blocks() - stat.blocks_free()).saturating_mul(stat.fragment_size());
            Some(DiskUse {
                used,
                size,
                limited,
            })
        })
        .await
        .ok()
        .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_and_crossings() {
        assert_eq!(mark(0, 100), 0);
        assert_eq!(mark(79, 100), 0);
        assert_eq!(mark(80, 100), 80);
        assert_eq!(mark(89, 100), 80);
        assert_eq!(mark(90, 100), 90);
        assert_eq!(mark(100, 100), 90);
        assert_eq!(mark(5, 0), 0);
        // Up past 80, then 90: two events; back under 80 re-arms; 80 → 90 → 85 is no event.
        let uses = [10, 85, 86, 95, 85, 95, 50, 92];
        let mut before = 0;
        let mut told = Vec::new();
        for used in uses {
            let now = mark(used, 100);
            if crossed(before, now) {
                told.push(now);
            }
            before = now;
        }
        assert_eq!(told, vec![80, 90, 90, 90]);
    }
}
