//! The daemon's side of "metrics per task": the last usage each cluster task reported
//! (`report.rs`, through the fetch server's `/usage/` path), per deployment and instance, with
//! when it came. The Swarm backend answers the formation's `memoryBytes` from it, and the
//! metrics and the usage history (`usage/`) read it for the instances the cluster runs, as
//! they read a local instance's cgroups. One way for every node: the daemon never asks an
//! engine for a container's stats.
//!
//! A reading older than [`STALE_AFTER`] is not shown (its task stopped or lost the daemon);
//! when two tasks report for one instance (a replacement started before the old one left),
//! the newer task's reading is the instance's. Bounded: at most [`MAX_PER_DEPLOYMENT`]
//! readings per deployment, only for deployments the fetch server grants, all dropped when
//! the deployment's capability is revoked.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::formation::InstanceId;
use crate::sandbox::CgroupUsage;

/// How often a task reports.
pub const REPORT_EVERY: Duration = Duration::from_secs(5);

/// One report, the body of `POST /usage/<deployment>/<capability>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskReport {
    /// `web.2`: the task's `SLIPWAY_INSTANCE`.
    pub instance: String,
    /// A random id of this reporter (one per task start): two tasks of one slot (a
    /// replacement started before the old one left) are told apart.
    pub boot: String,
    /// Memory in use less the page cache the kernel can drop, as `docker stats` shows it.
    pub memory_bytes: Option<u64>,
    /// CPU time used since the container started.
    pub cpu_seconds: Option<f64>,
}

/// How long a reading is shown after it came.
pub const STALE_AFTER: Duration = Duration::from_secs(3 * REPORT_EVERY.as_secs());

/// Readings kept per deployment (instances of every type, and a replacement of each).
pub const MAX_PER_DEPLOYMENT: usize = 256;

/// The longest reporter id taken.
const MAX_BOOT_ID: usize = 64;

struct Reading {
    instance: InstanceId,
    boot: String,
    /// When this task first reported.
    since: Instant,
    at: Instant,
    usage: CgroupUsage,
}

/// Why a report was not kept.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not an instance name, a reporter id too long, a negative or non-finite figure.
    Invalid,
    /// The deployment has [`MAX_PER_DEPLOYMENT`] fresh readings already.
    Full,
}

/// The last reading of every cluster task that reports.
#[derive(Default)]
pub struct TaskReadings {
    by_deployment: Mutex<HashMap<String, Vec<Reading>>>,
}

impl TaskReadings {
    /// Keeps `report` as its instance's reading at `now`.
    pub fn record(
        &self,
        deployment_id: &str,
        report: TaskReport,
        now: Instant,
    ) -> Result<(), Refused> {
        let instance = InstanceId::parse(&report.instance).ok_or(Refused::Invalid)?;
        let valid_cpu = report.cpu_seconds.is_none_or(|s| s.is_finite() && s >= 0.0);
        if report.boot.len() > MAX_BOOT_ID || !valid_cpu {
            return Err(Refused::Invalid);
        }
        let usage = CgroupUsage {
            memory_bytes: report.memory_bytes,
            cpu_seconds: report.cpu_seconds,
        };
        let mut all = self.lock();
        let readings = all.entry(deployment_id.to_owned()).or_default();
        readings.retain(|r| now.saturating_duration_since(r.at) < STALE_AFTER);
        if let Some(reading) = readings
            .iter_mut()
            .find(|r| r.instance == instance && r.boot == report.boot)
        {
            reading.at = now;
            reading.usage = usage;
            return Ok(());
        }
        if readings.len() >= MAX_PER_DEPLOYMENT {
            return Err(Refused::Full);
        }
        readings.push(Reading {
            instance,
            boot: report.boot,
            since: now,
            at: now,
            usage,
        });
        Ok(())
    }

    /// The instance's usage as last reported, unless stale.
    pub fn usage(&self, deployment_id: &str, instance: &InstanceId) -> Option<CgroupUsage> {
        self.usage_at(deployment_id, instance, Instant::now())
    }

    fn usage_at(
        &self,
        deployment_id: &str,
        instance: &InstanceId,
        now: Instant,
    ) -> Option<CgroupUsage> {
        self.lock()
            .get(deployment_id)?
            .iter()
            .filter(|r| r.instance == *instance)
            .filter(|r| now.saturating_duration_since(r.at) < STALE_AFTER)
            .max_by_key(|r| r.since)
            .map(|r| r.usage)
    }

    /// Drops the deployment's readings (its capability was revoked).
    pub fn forget(&self, deployment_id: &str) {
        self.lock().remove(deployment_id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Reading>>> {
        self.by_deployment.lock().expect("readings poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(instance: &str, boot: &str, memory: u64, cpu: f64) -> TaskReport {
        TaskReport {
            instance: instance.to_owned(),
            boot: boot.to_owned(),
            memory_bytes: Some(memory),
            cpu_seconds: Some(cpu),
        }
    }

    #[test]
    fn the_last_fresh_reading_of_the_newest_task_is_the_instances() {
        let readings = TaskReadings::default();
        let t0 = Instant::now();
        let web2 = InstanceId::new("web", 2);
        readings
            .record("dpl_a", report("web.2", "old", 100, 1.0), t0)
            .unwrap();
        readings
            .record("dpl_a", report("web.2", "old", 200, 2.0), t0 + REPORT_EVERY)
            .unwrap();
        let at = |d: Duration| readings.usage_at("dpl_a", &web2, t0 + d);
        assert_eq!(at(REPORT_EVERY).unwrap().memory_bytes, Some(200));
        // A replacement in the same slot: its figures, not the old task's.
        readings
            .record(
                "dpl_a",
                report("web.2", "new", 50, 0.1),
                t0 + 2 * REPORT_EVERY,
            )
            .unwrap();
        readings
            .record(
                "dpl_a",
                report("web.2", "old", 300, 3.0),
                t0 + 2 * REPORT_EVERY,
            )
            .unwrap();
        assert_eq!(at(2 * REPORT_EVERY).unwrap().cpu_seconds, Some(0.1));
        // Nothing for another deployment or instance; nothing once stale.
        assert_eq!(readings.usage_at("dpl_b", &web2, t0), None);
        assert_eq!(
            readings.usage_at("dpl_a", &InstanceId::new("web", 1), t0),
            None
        );
        assert_eq!(at(2 * REPORT_EVERY + STALE_AFTER), None);
        readings.forget("dpl_a");
        assert_eq!(at(2 * REPORT_EVERY), None);
    }

    #[test]
    fn what_is_not_a_reading_is_refused_and_a_deployment_holds_a_bounded_number() {
        let readings = TaskReadings::default();
        let now = Instant::now();
        for bad in [
            report("web", "b", 1, 1.0),
            report("web.0", "b", 1, 1.0),
            report("web.1", &"b".repeat(65), 1, 1.0),
            report("web.1", "b", 1, f64::NAN),
            report("web.1", "b", 1, -1.0),
        ] {
            assert_eq!(readings.record("dpl_a", bad, now), Err(Refused::Invalid));
        }
        for slot in 1..=MAX_PER_DEPLOYMENT {
            let instance = format!("web.{slot}");
            readings
                .record("dpl_a", report(&instance, "b", 1, 1.0), now)
                .unwrap();
        }
        let one_more = report("web.999", "b", 1, 1.0);
        assert_eq!(
            readings.record("dpl_a", one_more.clone(), now),
            Err(Refused::Full)
        );
        // Once the others are stale, there is room again.
        assert_eq!(
            readings.record("dpl_a", one_more, now + STALE_AFTER),
            Ok(())
        );
    }
}
