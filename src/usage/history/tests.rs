//! The sampler against a real store and a fake clock: deltas, restarts within a minute, the
//! hourly roll-up, and the size bound after a simulated month.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::metrics::ProjectMetrics;

const START_MS: u64 = 1_700_000_000_000 / 3_600_000 * 3_600_000;

struct World {
    clock: Arc<AtomicU64>,
    metrics: Vec<(String, ProjectMetrics)>,
    cpu: f64,
}

impl World {
    fn new(projects: usize) -> World {
        World {
            clock: Arc::new(AtomicU64::new(START_MS)),
            metrics: (0..projects)
                .map(|i| (format!("prj_{i:024}"), ProjectMetrics::new()))
                .collect(),
            cpu: 0.0,
        }
    }

    /// One minute of traffic: `n` requests per project, one of them a 500.
    fn traffic(&mut self, n: u64) {
        for (_, metrics) in &self.metrics {
            for i in 0..n {
                let status = if i == 0 { 500 } else { 200 };
                metrics.record_response(status, Duration::from_millis(3 + i % 40));
                metrics.add_response_bytes(1000);
            }
        }
        self.cpu += 6.0;
        self.clock.fetch_add(60_000, Ordering::SeqCst);
    }

    fn readings(&self) -> Vec<ProjectReading> {
        self.metrics
            .iter()
            .map(|(id, metrics)| ProjectReading {
                project_id: id.clone(),
                counts: metrics.snapshot(),
                app: Some(AppReading {
                    deployment_id: "dpl_1".into(),
                    instances: ["web.1", "web.2", "worker.1"]
                        .iter()
                        .map(|name| InstanceReading {
                            process: name.split('.').next().unwrap().into(),
                            name: (*name).into(),
                            key: format!("{id}-{name}"),
                            memory_bytes: Some(100 << 20),
                            cpu_seconds: Some(self.cpu),
                            memory_limit_mb: 512,
                        })
                        .collect(),
                }),
            })
            .collect()
    }
}

fn machine() -> MachineReading {
    MachineReading {
        cpu: Some((10.0, 100.0)),
        memory_used: Some(1 << 30),
        memory_total: 4 << 30,
        disk_used: 5 << 30,
        disk_total: 20 << 30,
        connections: 7,
    }
}

fn store() -> (tempfile::TempDir, Store) {
    // On tmpfs where there is one: a simulated month is 43,200 commits.
    let dir = tempfile::Builder::new()
        .tempdir_in(if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        })
        .unwrap();
    let store = Store::open(dir.path()).unwrap();
    (dir, store)
}

#[test]
fn minutes_hold_deltas_and_a_restart_adds_to_its_minute() {
    let (_dir, store) = store();
    let mut world = World::new(1);
    let clock = Clock::Manual(world.clock.clone());
    let mut sampler = Sampler::new(store.clone(), clock.clone());
    world.clock.fetch_add(30_000, Ordering::SeqCst);
    world.traffic(10); // read at START + 1:30: the minute that began at START.
    sampler
        .record(&world.readings(), &machine(), false)
        .unwrap();
    world.traffic(4);
    sampler
        .record(&world.readings(), &machine(), false)
        .unwrap();
    let id = world.metrics[0].0.clone();
    let minutes: Vec<(u64, ProjectSample)> = read(&store, &id, Step::Minute, 0, u64::MAX).unwrap();
    let at: Vec<u64> = minutes.iter().map(|(at, _)| *at).collect();
    assert_eq!(at, [START_MS / 1000, START_MS / 1000 + 60]);
    assert_eq!(minutes[0].1.requests, [0, 9, 0, 0, 1]);
    assert_eq!(minutes[1].1.requests, [0, 3, 0, 0, 1]);
    assert_eq!(
        minutes[0].1.cpu_seconds, None,
        "no CPU figure before a second reading"
    );
    assert_eq!(minutes[1].1.types["web"].cpu_seconds, Some(12.0));
    assert_eq!(minutes[1].1.types["web"].memory_limit_mb, 1024);
    assert_eq!(minutes[1].1.memory.unwrap().avg, 300 << 20);

    // The daemon stops 20 s into a minute, a new one starts in it (counters from zero).
    world.clock.fetch_add(20_000, Ordering::SeqCst);
    world.metrics[0]
        .1
        .record_response(404, Duration::from_millis(1));
    sampler.record(&world.readings(), &machine(), true).unwrap();
    let mut after = Sampler::new(store.clone(), clock);
    world.metrics[0].1 = ProjectMetrics::new();
    world.traffic(2);
    after.record(&world.readings(), &machine(), false).unwrap();
    let minutes: Vec<(u64, ProjectSample)> = read(&store, &id, Step::Minute, 0, u64::MAX).unwrap();
    assert_eq!(minutes.len(), 3);
    assert_eq!(
        minutes[2].1.requests,
        [0, 1, 0, 1, 1],
        "both daemons' share"
    );
    assert_eq!(minutes[2].1.minutes, 1);
}

/// A month of minutes, three projects with two process types each and the machine: the
/// store keeps a day of minutes and 30 days of hours, and no more.
#[test]
fn a_simulated_month_stays_within_its_bound() {
    let (dir, store) = store();
    let mut world = World::new(3);
    let mut sampler = Sampler::new(store.clone(), Clock::Manual(world.clock.clone()));
    let started = std::time::Instant::now();
    let minutes = 31 * 24 * 60;
    for _ in 0..minutes {
        world.traffic(5);
        sampler
            .record(&world.readings(), &machine(), false)
            .unwrap();
    }
    let size = store.history_size().unwrap();
    let file = std::fs::metadata(dir.path().join("slipway.redb"))
        .unwrap()
        .len();
    println!(
        "simulated month ({minutes} minutes, 3 projects + machine) in {:.1} s: {} samples, {} bytes of samples, store file {} bytes",
        started.elapsed().as_secs_f64(),
        size.samples,
        size.bytes,
        file
    );
    // Per subject: at most 1440 minutes (+1 at the edge) and 720 hours (+1).
    assert!(size.samples <= 4 * (1441 + 721), "{size:?}");
    assert!(size.samples >= 4 * (1440 + 719), "{size:?}");
    assert!(file < 32 << 20, "the store file stays small: {file}");
    let now = world.clock.load(Ordering::SeqCst) / 1000;
    let id = &world.metrics[0].0;
    let hours: Vec<(u64, ProjectSample)> = read(&store, id, Step::Hour, 0, u64::MAX).unwrap();
    assert!(hours[0].0 >= now - Step::Hour.kept_seconds());
    let full = &hours[hours.len() - 2].1;
    assert_eq!(full.minutes, 60);
    assert_eq!(full.requests, [0, 4 * 60, 0, 0, 60]);
    assert_eq!(full.bytes_out, 5 * 60 * 1000);
    assert!((full.types["worker"].cpu_seconds.unwrap() - 360.0).abs() < 1e-6);
    // Each of web's two instances on its own, rolled up like the type; worker (one) not.
    let web = &full.types["web"];
    let names: Vec<&String> = web.by_instance.keys().collect();
    assert_eq!(names, ["web.1", "web.2"]);
    assert_eq!(web.by_instance["web.1"].memory, Some(Gauge::at(100 << 20)));
    assert!((web.by_instance["web.2"].cpu_seconds.unwrap() - 360.0).abs() < 1e-6);
    assert!(full.types["worker"].by_instance.is_empty());
    let minutes: Vec<(u64, ProjectSample)> = read(&store, id, Step::Minute, 0, u64::MAX).unwrap();
    assert!(minutes[0].0 >= now - Step::Minute.kept_seconds());
    let machine_hours: Vec<(u64, MachineSample)> =
        read(&store, MACHINE, Step::Hour, 0, u64::MAX).unwrap();
    assert_eq!(
        machine_hours[machine_hours.len() - 2].1.connections,
        Some(Gauge::at(7))
    );
}
