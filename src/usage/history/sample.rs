//! What one stored sample holds, and how samples combine: two readings of the same minute
//! (a daemon that stopped and started within it) and the minutes of an hour into the hour's
//! sample. Pure: no clock, no store.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::metrics::REQUEST_BUCKETS;

/// Samples of one subject (a project or the machine) that combine.
pub trait Combine: Serialize + serde::de::DeserializeOwned + Default {
    /// The minutes this sample covers.
    fn minutes(&self) -> u32;
    /// Adds `other` (a later stretch of time): counters add, gauges average by minutes.
    fn absorb(&mut self, other: &Self);
    /// Sets the minutes covered (after two readings of one minute were absorbed: 1).
    fn set_minutes(&mut self, minutes: u32);
}

/// A level read once per minute: its average and its highest over the sample's minutes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Gauge {
    pub avg: u64,
    pub max: u64,
}

impl Gauge {
    pub fn at(value: u64) -> Gauge {
        Gauge {
            avg: value,
            max: value,
        }
    }
}

/// Combines two optional gauges weighted by the minutes each covers.
fn combine_gauge(a: Option<Gauge>, wa: u32, b: Option<Gauge>, wb: u32) -> Option<Gauge> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let (wa, wb) = (u128::from(wa.max(1)), u128::from(wb.max(1)));
            let avg = (u128::from(a.avg) * wa + u128::from(b.avg) * wb) / (wa + wb);
            Some(Gauge {
                avg: avg as u64,
                max: a.max.max(b.max),
            })
        }
        (a, None) => a,
        (None, b) => b,
    }
}

fn add_cpu(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, None) => a,
        (None, b) => b,
    }
}

/// One process type's figures (its instances summed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TypeSample {
    /// Memory of its instances together.
    #[serde(rename = "m")]
    pub memory: Option<Gauge>,
    /// CPU seconds its instances used in the sample's time.
    #[serde(rename = "c")]
    pub cpu_seconds: Option<f64>,
    /// Instances measured (the most in the sample's time).
    #[serde(rename = "i")]
    pub instances: u32,
    /// Their memory limits together, in MB.
    #[serde(rename = "l", default)]
    pub memory_limit_mb: u64,
    /// Each instance's own figures (`web.2` → …), kept for a type of several.
    #[serde(rename = "x", default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_instance: BTreeMap<String, InstanceSample>,
}

/// One instance's memory and CPU in a sample's time.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstanceSample {
    #[serde(rename = "m")]
    pub memory: Option<Gauge>,
    #[serde(rename = "c")]
    pub cpu_seconds: Option<f64>,
}

/// A build that finished in the sample's time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildSample {
    pub run: String,
    pub seconds: f64,
    /// `succeeded`, `failed` or `canceled`.
    pub result: String,
}

/// The builds one hour's sample keeps at most.
pub const MAX_BUILDS: usize = 60;

/// One project's minute (or hour).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProjectSample {
    #[serde(rename = "n")]
    pub minutes: u32,
    /// Requests by status class, `1xx` … `5xx`.
    #[serde(rename = "r")]
    pub requests: [u64; 5],
    /// Requests per duration bucket (not cumulative; [`REQUEST_BUCKETS`], then above them).
    #[serde(rename = "d")]
    pub latency: Vec<u64>,
    #[serde(rename = "s")]
    pub latency_sum_seconds: f64,
    /// Body bytes visitors sent to the app (0 in samples kept before it was counted).
    #[serde(rename = "i", default)]
    pub bytes_in: u64,
    /// Body bytes sent to visitors.
    #[serde(rename = "o")]
    pub bytes_out: u64,
    /// Requests the app did not answer.
    #[serde(rename = "u")]
    pub upstream_errors: u64,
    /// The live app's memory and CPU (every instance); `None` without a measured app.
    #[serde(rename = "m")]
    pub memory: Option<Gauge>,
    #[serde(rename = "c")]
    pub cpu_seconds: Option<f64>,
    /// By process type (`web`, `worker`).
    #[serde(rename = "t", default)]
    pub types: BTreeMap<String, TypeSample>,
    #[serde(rename = "b", default)]
    pub builds: Vec<BuildSample>,
}

impl Default for ProjectSample {
    fn default() -> Self {
        ProjectSample {
            minutes: 1,
            requests: [0; 5],
            latency: vec![0; REQUEST_BUCKETS.len() + 1],
            latency_sum_seconds: 0.0,
            bytes_in: 0,
            bytes_out: 0,
            upstream_errors: 0,
            memory: None,
            cpu_seconds: None,
            types: BTreeMap::new(),
            builds: Vec::new(),
        }
    }
}

impl Combine for ProjectSample {
    fn minutes(&self) -> u32 {
        self.minutes
    }

    fn absorb(&mut self, other: &Self) {
        let (wa, wb) = (self.minutes, other.minutes);
        for (mine, theirs) in self.requests.iter_mut().zip(other.requests) {
            *mine += theirs;
        }
        if self.latency.len() < other.latency.len() {
            self.latency.resize(other.latency.len(), 0);
        }
        for (mine, theirs) in self.latency.iter_mut().zip(&other.latency) {
            *mine += theirs;
        }
        self.latency_sum_seconds += other.latency_sum_seconds;
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        self.upstream_errors += other.upstream_errors;
        self.memory = combine_gauge(self.memory, wa, other.memory, wb);
        self.cpu_seconds = add_cpu(self.cpu_seconds, other.cpu_seconds);
        for (name, theirs) in &other.types {
            let mine = self.types.entry(name.clone()).or_default();
            mine.memory = combine_gauge(mine.memory, wa, theirs.memory, wb);
            mine.cpu_seconds = add_cpu(mine.cpu_seconds, theirs.cpu_seconds);
            mine.instances = mine.instances.max(theirs.instances);
            mine.memory_limit_mb = mine.memory_limit_mb.max(theirs.memory_limit_mb);
            for (instance, theirs) in &theirs.by_instance {
                let mine = mine.by_instance.entry(instance.clone()).or_default();
                mine.memory = combine_gauge(mine.memory, wa, theirs.memory, wb);
                mine.cpu_seconds = add_cpu(mine.cpu_seconds, theirs.cpu_seconds);
            }
        }
        for build in &other.builds {
            if self.builds.len() < MAX_BUILDS && !self.builds.iter().any(|b| b.run == build.run) {
                self.builds.push(build.clone());
            }
        }
        self.minutes = wa + wb;
    }

    fn set_minutes(&mut self, minutes: u32) {
        self.minutes = minutes;
    }
}

impl ProjectSample {
    /// The duration (seconds) under which a share `q` (0–1) of the requests finished,
    /// interpolated inside its bucket as Prometheus's `histogram_quantile` does; `None`
    /// without requests. Above the last bound, the last bound.
    pub fn latency_quantile(&self, q: f64) -> Option<f64> {
        let total: u64 = self.latency.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = q * total as f64;
        let mut below = 0u64;
        for (index, count) in self.latency.iter().enumerate() {
            let upto = below + count;
            if (upto as f64) >= rank && *count > 0 {
                let Some(upper) = REQUEST_BUCKETS.get(index) else {
                    return REQUEST_BUCKETS.last().copied();
                };
                let lower = if index == 0 {
                    0.0
                } else {
                    REQUEST_BUCKETS[index - 1]
                };
                let within = (rank - below as f64) / *count as f64;
                return Some(lower + (upper - lower) * within.clamp(0.0, 1.0));
            }
            below = upto;
        }
        REQUEST_BUCKETS.last().copied()
    }
}

/// The machine's minute (or hour), for the operator.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineSample {
    #[serde(rename = "n")]
    pub minutes: u32,
    /// CPU time the machine spent busy, and the time its CPUs had, in the sample's time.
    #[serde(rename = "b")]
    pub cpu_busy_seconds: Option<f64>,
    #[serde(rename = "a")]
    pub cpu_seconds: Option<f64>,
    #[serde(rename = "m")]
    pub memory_used: Option<Gauge>,
    #[serde(rename = "M")]
    pub memory_total: u64,
    /// The data dir's filesystem, as last read.
    #[serde(rename = "d")]
    pub disk_used: u64,
    #[serde(rename = "D")]
    pub disk_total: u64,
    /// Visitor connections open on the router.
    #[serde(rename = "c")]
    pub connections: Option<Gauge>,
}

impl Combine for MachineSample {
    fn minutes(&self) -> u32 {
        self.minutes
    }

    fn absorb(&mut self, other: &Self) {
        let (wa, wb) = (self.minutes, other.minutes);
        self.cpu_busy_seconds = add_cpu(self.cpu_busy_seconds, other.cpu_busy_seconds);
        self.cpu_seconds = add_cpu(self.cpu_seconds, other.cpu_seconds);
        self.memory_used = combine_gauge(self.memory_used, wa, other.memory_used, wb);
        self.memory_total = self.memory_total.max(other.memory_total);
        if other.disk_total > 0 {
            (self.disk_used, self.disk_total) = (other.disk_used, other.disk_total);
        }
        self.connections = combine_gauge(self.connections, wa, other.connections, wb);
        self.minutes = wa + wb;
    }

    fn set_minutes(&mut self, minutes: u32) {
        self.minutes = minutes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hour_adds_counters_and_averages_levels() {
        let mut hour = ProjectSample {
            requests: [0, 10, 0, 1, 2],
            memory: Some(Gauge::at(100)),
            cpu_seconds: Some(3.0),
            ..Default::default()
        };
        let other = ProjectSample {
            requests: [0, 5, 1, 0, 0],
            memory: Some(Gauge::at(300)),
            cpu_seconds: None,
            ..Default::default()
        };
        hour.absorb(&other);
        assert_eq!(hour.minutes, 2);
        assert_eq!(hour.requests, [0, 15, 1, 1, 2]);
        assert_eq!(hour.memory, Some(Gauge { avg: 200, max: 300 }));
        assert_eq!(hour.cpu_seconds, Some(3.0));
    }

    #[test]
    fn quantiles_interpolate_inside_the_bucket() {
        let mut sample = ProjectSample::default();
        // 0.001 < d ≤ 0.005: 10 requests; 0.05 < d ≤ 0.1: 10 requests.
        sample.latency[1] = 10;
        sample.latency[5] = 10;
        let p50 = sample.latency_quantile(0.5).unwrap();
        assert!((p50 - 0.005).abs() < 1e-9, "{p50}");
        let p95 = sample.latency_quantile(0.95).unwrap();
        assert!((p95 - 0.095).abs() < 1e-9, "{p95}");
        assert_eq!(ProjectSample::default().latency_quantile(0.5), None);
        let mut slow = ProjectSample::default();
        slow.latency[REQUEST_BUCKETS.len()] = 1;
        assert_eq!(slow.latency_quantile(0.99), Some(10.0));
    }
}
