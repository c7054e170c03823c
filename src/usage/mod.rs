//! What the daemon measures, gathered at scrape time: each project's traffic counters (from
//! the route snapshot), its app's memory and CPU (from the app's cgroups through the runner,
//! or, for instances on a cluster, from what their tasks reported: `cluster::readings`),
//! its build cache, certificate expiry (TLS), provisioning runs, the add-ons (`addons.rs`),
//! and the process's own figures. Rendered as the Prometheus page (`prometheus.rs`: `GET /metrics` on
//! `metrics_listen`, served by `server.rs`, and `GET /api/metrics`) and as one project's JSON
//! ([`ProjectUsage`]: `GET /api/projects/{projectId}/usage`). Built by `app.rs`.

mod addons;
pub mod history;
mod prometheus;
pub mod server;
mod sleeping;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::metrics::{DaemonMetrics, ProjectCounts, ProjectMetrics, STATUS_CLASSES};
use crate::router::{Routes, Target};
use crate::sandbox::{CgroupUsage, Runner};
use crate::store::records::ProjectRecord;
use crate::store::{Store, StoreError};

/// Everything the figures are read from.
pub struct Observatory {
    pub routes: Arc<Routes>,
    pub runner: Arc<dyn Runner>,
    /// Which instances each live deployment runs (their cgroups are read one by one).
    pub supervisor: Arc<crate::supervisor::Supervisor>,
    /// What runs apps (the local sandbox, a cluster): whose instances are measured.
    pub backends: Vec<Arc<dyn crate::supervisor::backend::AppBackend>>,
    pub tls: Option<Arc<crate::tls::TlsManager>>,
    pub daemon: Arc<DaemonMetrics>,
    pub store: Store,
    pub data_dir: PathBuf,
    /// What the cluster's tasks report (their instances have no cgroup here).
    pub task_readings: Arc<crate::cluster::readings::TaskReadings>,
}

/// Whose figures a Prometheus page shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audience {
    /// Every project and the daemon's own figures (`metrics_listen`, unlimited tokens).
    Operator,
    /// These projects (ids) only: a token limited to them.
    Projects(Vec<String>),
}

/// One project's figures at one moment.
struct ProjectFigures {
    record: ProjectRecord,
    counts: ProjectCounts,
    /// The live server-mode deployment, if any.
    app_deployment: Option<String>,
    /// `None`: no cgroup to read (static site, no app running, or sandbox mode `none`).
    app: Option<CgroupUsage>,
    /// Each instance's own (`web.1`, `worker.2`), where measured.
    instances: Vec<(crate::formation::InstanceId, CgroupUsage)>,
    build_cache_bytes: u64,
}

/// `GET /api/projects/{projectId}/usage`: the figures of `GET /api/metrics` for one project.
/// Counters count since the daemon started (`since`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectUsage {
    pub project_id: String,
    pub slug: String,
    /// When the counters started (the daemon's start).
    pub since: String,
    /// Requests answered on the project's hosts, by status class (`1xx` … `5xx`).
    pub requests: BTreeMap<String, u64>,
    pub requests_total: u64,
    /// Time to the response head.
    pub request_duration: DurationHistogram,
    /// Body bytes visitors sent to the app (requests' bodies).
    pub request_bytes: u64,
    pub response_bytes: u64,
    /// Requests the app did not answer (502/504 pages).
    pub upstream_errors: u64,
    pub app_restarts: u64,
    /// The live app (server mode); `null` for a static site or nothing live.
    pub app: Option<AppUsage>,
    pub build_cache_bytes: u64,
    /// Certificates served for the project's hosts.
    pub certificates: Vec<CertificateExpiry>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DurationHistogram {
    pub count: u64,
    pub sum_seconds: f64,
    /// Cumulative: requests that took at most `le` seconds.
    pub buckets: Vec<HistogramBucket>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct HistogramBucket {
    pub le: f64,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AppUsage {
    pub deployment_id: String,
    /// From the app's cgroup; `null` where there is none (sandbox mode `none`).
    pub memory_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateExpiry {
    pub domain: String,
    pub expires_at: String,
}

/// The size of a project's build caches in bytes: production's
/// (`<data_dir>/build-cache/<project id>`) and each preview's (`<project id>--<preview>`).
pub fn build_cache_bytes(data_dir: &Path, project_id: &str) -> u64 {
    fn walk(dir: &Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .map(|entry| match entry.file_type() {
                Ok(kind) if kind.is_dir() => walk(&entry.path()),
                Ok(kind) if kind.is_file() => entry.metadata().map(|m| m.len()).unwrap_or(0),
                _ => 0,
            })
            .sum()
    }
    let root = data_dir.join("build-cache");
    let previews = preview_cache_names(&root, &format!("{project_id}--"));
    walk(&root.join(project_id))
        + previews
            .iter()
            .map(|name| walk(&root.join(name)))
            .sum::<u64>()
}

/// The directories under `root` (`build-cache/`) whose names start with `prefix`: a project's
/// preview caches.
pub fn preview_cache_names(root: &Path, prefix: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| name.starts_with(prefix))
        .collect()
}

impl Observatory {
    /// The cgroup figures of each instance of a live deployment (a cluster instance's as its
    /// task reported them).
    fn instance_usage(
        &self,
        deployment_id: &str,
    ) -> Vec<(crate::formation::InstanceId, CgroupUsage)> {
        self.backends
            .iter()
            .flat_map(|backend| backend.instances(deployment_id))
            .filter_map(|view| {
                let name = crate::supervisor::app_step_name(deployment_id, &view.instance);
                let usage = self
                    .runner
                    .usage(&name)
                    .or_else(|| self.task_readings.usage(deployment_id, &view.instance))?;
                Some((view.instance, usage))
            })
            .collect()
    }

    /// The live app's figures: its step cgroups' here, else the sum of what its cluster
    /// instances reported (`instances`); `None` when nothing is measured.
    fn app_usage(
        &self,
        deployment_id: &str,
        instances: &[(crate::formation::InstanceId, CgroupUsage)],
    ) -> Option<CgroupUsage> {
        let local = self
            .runner
            .usage(&crate::supervisor::app_step_prefix(deployment_id));
        local.or_else(|| {
            let sum =
                |figures: Vec<Option<f64>>| figures.into_iter().flatten().reduce(|a, b| a + b);
            let memory = sum(instances
                .iter()
                .map(|(_, u)| u.memory_bytes.map(|b| b as f64))
                .collect());
            let cpu = sum(instances.iter().map(|(_, u)| u.cpu_seconds).collect());
            (memory.is_some() || cpu.is_some()).then_some(CgroupUsage {
                memory_bytes: memory.map(|b| b as u64),
                cpu_seconds: cpu,
            })
        })
    }

    /// The Prometheus text page (format 0.0.4) for `audience`.
    pub async fn prometheus_text(
        self: &Arc<Self>,
        audience: &Audience,
    ) -> Result<String, StoreError> {
        let mut projects = self.gather(None, true).await?;
        if let Audience::Projects(ids) = audience {
            projects.retain(|figures| ids.contains(&figures.record.id));
        }
        Ok(prometheus::render(self, audience, &projects))
    }

    /// One project's figures.
    pub async fn project_usage(self: &Arc<Self>, project: ProjectRecord) -> ProjectUsage {
        let figures = self
            .gather(Some(project), true)
            .await
            .ok()
            .and_then(|mut all| all.pop())
            .expect("gathering one given project reads no store");
        let certificates = self
            .certificates()
            .into_iter()
            .filter(|(domain, _)| {
                crate::router::app_slug(domain, self.routes.apps_domain())
                    == Some(figures.record.slug.as_str())
            })
            .map(|(domain, not_after)| CertificateExpiry {
                domain,
                expires_at: crate::ids::rfc3339(not_after.saturating_mul(1000)),
            })
            .collect();
        let counts = &figures.counts;
        ProjectUsage {
            project_id: figures.record.id.clone(),
            slug: figures.record.slug.clone(),
            since: crate::ids::rfc3339(self.daemon.started_unix * 1000),
            requests: STATUS_CLASSES
                .iter()
                .zip(counts.requests)
                .map(|(class, n)| ((*class).to_owned(), n))
                .collect(),
            requests_total: counts.requests.iter().sum(),
            request_duration: DurationHistogram {
                count: counts.duration.count,
                sum_seconds: counts.duration.sum_seconds,
                buckets: counts
                    .duration
                    .buckets
                    .iter()
                    .map(|(le, count)| HistogramBucket {
                        le: *le,
                        count: *count,
                    })
                    .collect(),
            },
            request_bytes: counts.request_bytes,
            response_bytes: counts.response_bytes,
            upstream_errors: counts.upstream_errors,
            app_restarts: counts.app_restarts,
            app: figures
                .app_deployment
                .clone()
                .map(|deployment_id| AppUsage {
                    deployment_id,
                    memory_bytes: figures.app.and_then(|a| a.memory_bytes),
                    cpu_seconds: figures.app.and_then(|a| a.cpu_seconds),
                }),
            build_cache_bytes: figures.build_cache_bytes,
            certificates,
        }
    }

    /// Served certificates by name with their `notAfter` (Unix seconds).
    fn certificates(&self) -> Vec<(String, u64)> {
        self.tls
            .as_ref()
            .map(|tls| tls.certificate_expiries())
            .unwrap_or_default()
    }

    /// Every project's figures (or just `only`'s), sorted by slug. The cgroup and build cache
    /// reads are filesystem reads, so they run on the blocking pool; the build caches (a walk
    /// of their trees) only when `build_caches` (the usage history does without).
    async fn gather(
        self: &Arc<Self>,
        only: Option<ProjectRecord>,
        build_caches: bool,
    ) -> Result<Vec<ProjectFigures>, StoreError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut records = match only {
                Some(record) => vec![record],
                None => this.store.list_projects()?,
            };
            records.sort_by(|a, b| a.slug.cmp(&b.slug));
            let table = this.routes.snapshot();
            let figures = records
                .into_iter()
                .map(|record| {
                    let counts = table
                        .metrics
                        .get(&record.slug)
                        .map(|metrics| metrics.snapshot())
                        .unwrap_or_else(|| ProjectMetrics::new().snapshot());
                    let app_deployment = match table.apps.get(&record.slug) {
                        Some(Some(Target::Proxy { deployment_id, .. })) => {
                            Some(deployment_id.clone())
                        }
                        _ => None,
                    };
                    let instances = app_deployment
                        .as_deref()
                        .map(|deployment_id| this.instance_usage(deployment_id))
                        .unwrap_or_default();
                    let app = app_deployment
                        .as_deref()
                        .and_then(|deployment_id| this.app_usage(deployment_id, &instances));
                    let build_cache_bytes = if build_caches {
                        build_cache_bytes(&this.data_dir, &record.id)
                    } else {
                        0
                    };
                    ProjectFigures {
                        record,
                        counts,
                        app_deployment,
                        app,
                        instances,
                        build_cache_bytes,
                    }
                })
                .collect();
            Ok(figures)
        })
        .await
        .expect("gathering figures panicked")
    }
}
