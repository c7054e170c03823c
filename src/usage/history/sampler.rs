//! The sampler: once a minute, the figures `usage` gathers become the minute's samples
//! (counters as deltas from the last reading), written in one commit; then any hour whose
//! minutes are all in is rolled up, and samples past their retention are pruned. When the
//! daemon stops, the minute so far is written too (the next daemon's reading of the same
//! minute adds to it), so a restart loses no traffic.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::sample::{
    BuildSample, Combine, Gauge, InstanceSample, MachineSample, ProjectSample, TypeSample,
};
use super::{Clock, MachineReading, Step, MACHINE};
use crate::metrics::ProjectCounts;
use crate::store::records::{RunRecord, RunStatus};
use crate::store::{HistoryRow, Store, StoreError};

/// The meta key of the next hour to roll up (Unix seconds).
const ROLLED_UP: &str = "usage_history_next_hour";

/// One instance of a live app, as read.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceReading {
    /// Its process type (`web`).
    pub process: String,
    /// Its name (`web.2`).
    pub name: String,
    /// The instance's cgroup (unique per start): its CPU counter is compared with this key's.
    pub key: String,
    pub memory_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub memory_limit_mb: u64,
}

/// A project's live app, as read.
#[derive(Debug, Clone, PartialEq)]
pub struct AppReading {
    pub deployment_id: String,
    pub instances: Vec<InstanceReading>,
}

/// A project's figures at one moment.
#[derive(Debug, Clone)]
pub struct ProjectReading {
    pub project_id: String,
    /// Its counters since the daemon started.
    pub counts: ProjectCounts,
    pub app: Option<AppReading>,
}

/// The sampler's memory between readings.
pub struct Sampler {
    store: Store,
    clock: Clock,
    /// The counters of each project at the last reading (counters start at zero with the
    /// daemon, so a project not read before compares with zero).
    counts: HashMap<String, ProjectCounts>,
    /// Each instance's CPU seconds at the last reading. A cgroup's counter outlives the
    /// daemon (apps are adopted), so an instance first seen gives no CPU figure yet.
    cpu: HashMap<String, f64>,
    machine_cpu: Option<(f64, f64)>,
}

impl Sampler {
    pub fn new(store: Store, clock: Clock) -> Sampler {
        Sampler {
            store,
            clock,
            counts: HashMap::new(),
            cpu: HashMap::new(),
            machine_cpu: None,
        }
    }

    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Records one reading: at a minute's turn (`partial` false) as the minute just ended,
    /// at shutdown (`partial` true) as the minute under way. Then rolls up and prunes.
    pub fn record(
        &mut self,
        projects: &[ProjectReading],
        machine: &MachineReading,
        partial: bool,
    ) -> Result<(), StoreError> {
        let now = self.clock.now_ms() / 1000;
        let minute = now / 60 * 60;
        let at = if partial {
            minute
        } else {
            minute.saturating_sub(60)
        };
        let runs = self.store.all_runs()?;
        let mut rows: Vec<HistoryRow> = projects
            .iter()
            .map(|reading| {
                let sample = self.project_sample(reading, &runs, at);
                (reading.project_id.clone(), 0, at, encode(&sample))
            })
            .collect();
        let live: std::collections::HashSet<&str> = projects
            .iter()
            .flat_map(|p| p.app.iter().flat_map(|app| &app.instances))
            .map(|instance| instance.key.as_str())
            .collect();
        self.cpu.retain(|key, _| live.contains(key.as_str()));
        let machine = self.machine_sample(machine);
        rows.push((MACHINE.to_owned(), 0, at, encode(&machine)));
        self.store.put_history(&rows, &merge_any, None)?;
        // A deleted project's counters go; its samples stay until their retention ends.
        self.counts
            .retain(|id, _| projects.iter().any(|p| &p.project_id == id));
        let mut subjects: Vec<String> = self.counts.keys().cloned().collect();
        subjects.extend(self.store.list_projects()?.into_iter().map(|p| p.id));
        subjects.sort();
        subjects.dedup();
        self.roll_up(&subjects, now)
    }

    fn project_sample(
        &mut self,
        reading: &ProjectReading,
        runs: &[RunRecord],
        at: u64,
    ) -> ProjectSample {
        let now = &reading.counts;
        let before = self.counts.insert(reading.project_id.clone(), now.clone());
        let before = before.filter(|b| b.duration.count <= now.duration.count);
        let delta = |new: u64, old: Option<u64>| new.saturating_sub(old.unwrap_or(0));
        let mut sample = ProjectSample::default();
        for (index, slot) in sample.requests.iter_mut().enumerate() {
            *slot = delta(
                now.requests[index],
                before.as_ref().map(|b| b.requests[index]),
            );
        }
        let cumulative = |counts: &ProjectCounts| -> Vec<u64> {
            let mut all: Vec<u64> = counts.duration.buckets.iter().map(|(_, n)| *n).collect();
            all.push(counts.duration.count);
            all
        };
        let (new_buckets, old_buckets) = (cumulative(now), before.as_ref().map(cumulative));
        let mut below = 0;
        for (index, slot) in sample.latency.iter_mut().enumerate() {
            let upto = delta(new_buckets[index], old_buckets.as_ref().map(|o| o[index]));
            *slot = upto.saturating_sub(below);
            below = upto;
        }
        sample.latency_sum_seconds = (now.duration.sum_seconds
            - before.as_ref().map_or(0.0, |b| b.duration.sum_seconds))
        .max(0.0);
        sample.bytes_in = delta(now.request_bytes, before.as_ref().map(|b| b.request_bytes));
        sample.bytes_out = delta(
            now.response_bytes,
            before.as_ref().map(|b| b.response_bytes),
        );
        sample.upstream_errors = delta(
            now.upstream_errors,
            before.as_ref().map(|b| b.upstream_errors),
        );
        if let Some(app) = &reading.app {
            self.app_figures(app, &mut sample);
        }
        sample.builds = builds_in(runs, &reading.project_id, at);
        sample
    }

    /// Memory and CPU per process type and in all.
    fn app_figures(&mut self, app: &AppReading, sample: &mut ProjectSample) {
        let mut types: BTreeMap<String, TypeSample> = BTreeMap::new();
        for instance in &app.instances {
            let figures = types.entry(instance.process.clone()).or_default();
            figures.instances += 1;
            figures.memory_limit_mb += instance.memory_limit_mb;
            let mut own = InstanceSample {
                memory: instance.memory_bytes.map(Gauge::at),
                cpu_seconds: None,
            };
            if let Some(bytes) = instance.memory_bytes {
                let sum = figures.memory.map_or(0, |g| g.avg) + bytes;
                figures.memory = Some(Gauge::at(sum));
            }
            if let Some(cpu) = instance.cpu_seconds {
                if let Some(before) = self.cpu.insert(instance.key.clone(), cpu) {
                    let used = if cpu >= before { cpu - before } else { cpu };
                    figures.cpu_seconds = Some(figures.cpu_seconds.unwrap_or(0.0) + used);
                    own.cpu_seconds = Some(used);
                }
            }
            figures.by_instance.insert(instance.name.clone(), own);
        }
        // One instance's figures are its type's: kept apart only for a type of several.
        for figures in types.values_mut() {
            if figures.instances < 2 {
                figures.by_instance.clear();
            }
        }
        for figures in types.values() {
            if let Some(memory) = figures.memory {
                let sum = sample.memory.map_or(0, |g| g.avg) + memory.avg;
                sample.memory = Some(Gauge::at(sum));
            }
            if let Some(cpu) = figures.cpu_seconds {
                sample.cpu_seconds = Some(sample.cpu_seconds.unwrap_or(0.0) + cpu);
            }
        }
        sample.types = types;
    }

    fn machine_sample(&mut self, reading: &MachineReading) -> MachineSample {
        let before = std::mem::replace(&mut self.machine_cpu, reading.cpu);
        let cpu = before.zip(reading.cpu).filter(|(b, n)| n.1 >= b.1);
        MachineSample {
            minutes: 1,
            cpu_busy_seconds: cpu.map(|(b, n)| (n.0 - b.0).max(0.0)),
            cpu_seconds: cpu.map(|(b, n)| n.1 - b.1),
            memory_used: reading.memory_used.map(Gauge::at),
            memory_total: reading.memory_total,
            disk_used: reading.disk_used,
            disk_total: reading.disk_total,
            connections: Some(Gauge::at(reading.connections)),
        }
    }

    /// Rolls every hour whose minutes are all in (up to a day back) into its hour sample,
    /// then prunes what is past its retention.
    fn roll_up(&self, subjects: &[String], now: u64) -> Result<(), StoreError> {
        let this_hour = now / 3600 * 3600;
        let next = self.store.history_mark(ROLLED_UP)?;
        let first = next.max(this_hour.saturating_sub(Step::Minute.kept_seconds()));
        if first >= this_hour {
            return Ok(());
        }
        let mut rows = Vec::new();
        for hour in (first..this_hour).step_by(3600) {
            for subject in subjects.iter().map(String::as_str).chain([MACHINE]) {
                let row = if subject == MACHINE {
                    hour_of::<MachineSample>(&self.store, subject, hour)?
                } else {
                    hour_of::<ProjectSample>(&self.store, subject, hour)?
                };
                rows.extend(row.map(|bytes| (subject.to_owned(), 1, hour, bytes)));
            }
        }
        self.store.put_history(
            &rows,
            &|_, _, new| new.to_vec(),
            Some((ROLLED_UP, this_hour)),
        )?;
        let keep_from =
            [Step::Minute, Step::Hour].map(|step| now.saturating_sub(step.kept_seconds()));
        self.store.prune_history(keep_from)?;
        Ok(())
    }
}

/// The hour starting at `hour` from its minute samples; `None` when there are none.
fn hour_of<T: Combine>(
    store: &Store,
    subject: &str,
    hour: u64,
) -> Result<Option<Vec<u8>>, StoreError> {
    let minutes = super::read::<T>(store, subject, Step::Minute, hour, hour + 3600)?;
    let mut all = minutes.into_iter().map(|(_, sample)| sample);
    let Some(mut sum) = all.next() else {
        return Ok(None);
    };
    all.for_each(|sample| sum.absorb(&sample));
    Ok(Some(encode(&sum)))
}

/// The builds of `project_id` that finished in the minute starting at `at`.
fn builds_in(runs: &[RunRecord], project_id: &str, at: u64) -> Vec<BuildSample> {
    let window = at * 1000..(at + 60) * 1000;
    runs.iter()
        .filter(|run| run.project_id == project_id)
        .filter_map(|run| {
            let finished = run.finished_ms.filter(|ms| window.contains(ms))?;
            let result = match run.status {
                RunStatus::ProvisioningComplete => "succeeded",
                RunStatus::ProvisioningFailed => "failed",
                RunStatus::ProvisioningCanceled => "canceled",
                RunStatus::ProvisioningInProgress => return None,
            };
            Some(BuildSample {
                run: run.id.clone(),
                seconds: finished.saturating_sub(run.created_ms) as f64 / 1000.0,
                result: result.to_owned(),
            })
        })
        .collect()
}

fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("samples always serialize")
}

/// Two readings of one minute (a restart within it): the second adds to the first.
fn merge_any(subject: &str, old: &[u8], new: &[u8]) -> Vec<u8> {
    fn both<T: Combine>(old: &[u8], new: &[u8]) -> Option<Vec<u8>> {
        let mut old: T = serde_json::from_slice(old).ok()?;
        let new: T = serde_json::from_slice(new).ok()?;
        old.absorb(&new);
        old.set_minutes(1);
        Some(encode(&old))
    }
    let merged = if subject == MACHINE {
        both::<MachineSample>(old, new)
    } else {
        both::<ProjectSample>(old, new)
    };
    merged.unwrap_or_else(|| new.to_vec())
}

/// Runs the sampler until `shutdown`: a reading at each minute's turn, and one of the minute
/// under way when the daemon stops.
pub async fn run(
    observatory: Arc<super::super::Observatory>,
    mut sampler: Sampler,
    shutdown: CancellationToken,
) {
    loop {
        let now = sampler.clock().now_ms();
        let next = (now / 60_000 + 1) * 60_000;
        let partial = tokio::select! {
            _ = shutdown.cancelled() => true,
            _ = tokio::time::sleep(Duration::from_millis(next - now + 50)) => false,
        };
        let (projects, machine) = observatory.readings().await;
        let result = tokio::task::spawn_blocking(move || {
            let result = sampler.record(&projects, &machine, partial);
            (sampler, result)
        })
        .await;
        let Ok((returned, result)) = result else {
            tracing::error!("the usage sampler panicked");
            return;
        };
        sampler = returned;
        if let Err(error) = result {
            tracing::warn!(%error, "could not record the usage history");
        }
        if partial {
            return;
        }
    }
}
