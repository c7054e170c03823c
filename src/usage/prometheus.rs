//! The Prometheus page: every family the contract lists, in a fixed order, labelled only by
//! project slug, status class, run result or certificate domain. A family with no sample
//! (no app memory to read, no certificate) is left out. A page for some projects only
//! (`Audience::Projects`) has their families and certificates and the build info, none of
//! the daemon-wide figures (runs, router threads, the process).

use super::{Audience, Observatory, ProjectFigures};
use crate::metrics::exposition::{Exposition, Kind};
use crate::metrics::{RunResult, STATUS_CLASSES};
use crate::sandbox::CgroupUsage;

pub(super) fn render(
    observatory: &Observatory,
    audience: &Audience,
    projects: &[ProjectFigures],
) -> String {
    let mut page = Exposition::new();
    project_families(&mut page, projects);
    super::addons::addon_families(observatory, &mut page, projects);
    if let Audience::Operator = audience {
        daemon_families(observatory, &mut page);
        super::sleeping::sleep_families(observatory, &mut page);
    }
    certificate_family(
        &mut page,
        &served_certificates(observatory, audience, projects),
    );
    build_info_family(&mut page);
    if let Audience::Operator = audience {
        process_families(&mut page);
    }
    page.finish()
}

/// The families of the projects on the page, one sample (or histogram) per project each.
fn project_families(page: &mut Exposition, projects: &[ProjectFigures]) {
    requests_family(page, projects);
    request_duration_family(page, projects);
    project_counter_families(page, projects);
    app_usage_families(page, projects);
    build_cache_family(page, projects);
}

fn requests_family(page: &mut Exposition, projects: &[ProjectFigures]) {
    page.family(
        "slipway_http_requests_total",
        Kind::Counter,
        "Requests answered on a project's hosts, by status class.",
    );
    for figures in projects {
        for (class, count) in STATUS_CLASSES.iter().zip(figures.counts.requests) {
            page.sample(
                "slipway_http_requests_total",
                &[("project", &figures.record.slug), ("code", class)],
                count as f64,
            );
        }
    }
}

fn request_duration_family(page: &mut Exposition, projects: &[ProjectFigures]) {
    page.family(
        "slipway_http_request_duration_seconds",
        Kind::Histogram,
        "Time from a request's arrival to its response head, by project.",
    );
    for figures in projects {
        page.histogram(
            "slipway_http_request_duration_seconds",
            &project(figures),
            &figures.counts.duration,
        );
    }
}

/// The plain per-project counters: request and response bytes, upstream errors, app
/// restarts.
fn project_counter_families(page: &mut Exposition, projects: &[ProjectFigures]) {
    let counters: [(&str, &str, Figure); 4] = [
        (
            "slipway_http_request_bytes_total",
            "Request body bytes visitors sent to the project's app.",
            |f| f.counts.request_bytes,
        ),
        (
            "slipway_http_response_bytes_total",
            "Response body bytes sent to visitors, by project.",
            |f| f.counts.response_bytes,
        ),
        (
            "slipway_upstream_errors_total",
            "Requests the project's app did not answer (502 or 504 served).",
            |f| f.counts.upstream_errors,
        ),
        (
            "slipway_app_restarts_total",
            "Restarts of the project's app after it exited.",
            |f| f.counts.app_restarts,
        ),
    ];
    for (name, help, value) in counters {
        page.family(name, Kind::Counter, help);
        for figures in projects {
            page.sample(name, &project(figures), value(figures) as f64);
        }
    }
}

/// Memory and CPU of the projects' live apps, from their cgroups; a family is left out when
/// no project has a reading for it.
fn app_usage_families(page: &mut Exposition, projects: &[ProjectFigures]) {
    let memory: Vec<_> = projects
        .iter()
        .filter_map(|f| Some((f, f.app?.memory_bytes?)))
        .collect();
    if !memory.is_empty() {
        page.family(
            "slipway_app_memory_bytes",
            Kind::Gauge,
            "Memory of the project's live app, from its cgroup.",
        );
        for (figures, bytes) in memory {
            page.sample("slipway_app_memory_bytes", &project(figures), bytes as f64);
        }
    }
    let cpu: Vec<_> = projects
        .iter()
        .filter_map(|f| Some((f, f.app?.cpu_seconds?)))
        .collect();
    if !cpu.is_empty() {
        page.family(
            "slipway_app_cpu_seconds_total",
            Kind::Counter,
            "CPU time of the project's live app, from its cgroup (restarts each start from 0).",
        );
        for (figures, seconds) in cpu {
            page.sample("slipway_app_cpu_seconds_total", &project(figures), seconds);
        }
    }
    instance_families(page, projects);
}

/// One figure of an instance's cgroup.
type Reading = fn(&CgroupUsage) -> Option<f64>;

/// The same figures per process instance (`process="worker"`, `instance="worker.2"`).
fn instance_families(page: &mut Exposition, projects: &[ProjectFigures]) {
    let families: [(&str, Kind, &str, Reading); 2] = [
        (
            "slipway_app_instance_memory_bytes",
            Kind::Gauge,
            "Memory of one process instance of the project's live deployment, from its cgroup.",
            |u| u.memory_bytes.map(|b| b as f64),
        ),
        (
            "slipway_app_instance_cpu_seconds_total",
            Kind::Counter,
            "CPU time of one process instance (each start from 0).",
            |u| u.cpu_seconds,
        ),
    ];
    for (name, kind, help, value) in families {
        let samples: Vec<(&str, &str, String, f64)> = projects
            .iter()
            .flat_map(|figures| {
                figures
                    .instances
                    .iter()
                    .filter_map(move |(instance, usage)| {
                        Some((
                            figures.record.slug.as_str(),
                            instance.process.as_str(),
                            instance.to_string(),
                            value(usage)?,
                        ))
                    })
            })
            .collect();
        if samples.is_empty() {
            continue;
        }
        page.family(name, kind, help);
        for (slug, process, instance, sample) in &samples {
            let labels = [
                ("project", *slug),
                ("process", *process),
                ("instance", instance.as_str()),
            ];
            page.sample(name, &labels, *sample);
        }
    }
}

fn build_cache_family(page: &mut Exposition, projects: &[ProjectFigures]) {
    page.family(
        "slipway_build_cache_bytes",
        Kind::Gauge,
        "Size of the project's build cache.",
    );
    for figures in projects {
        page.sample(
            "slipway_build_cache_bytes",
            &project(figures),
            figures.build_cache_bytes as f64,
        );
    }
}

/// The served certificates the audience may see, with their `notAfter`: every one for the
/// operator; for a project-limited page only those of its projects' hosts (a name whose app
/// slug is one of `projects`).
fn served_certificates(
    observatory: &Observatory,
    audience: &Audience,
    projects: &[ProjectFigures],
) -> Vec<(String, u64)> {
    observatory
        .certificates()
        .into_iter()
        .filter(|(domain, _)| match audience {
            Audience::Operator => true,
            Audience::Projects(_) => {
                let slug = crate::router::app_slug(domain, observatory.routes.apps_domain());
                projects
                    .iter()
                    .any(|f| Some(f.record.slug.as_str()) == slug)
            }
        })
        .collect()
}

/// Left out when there is no certificate to show.
fn certificate_family(page: &mut Exposition, certificates: &[(String, u64)]) {
    if certificates.is_empty() {
        return;
    }
    page.family(
        "slipway_certificate_expiry_timestamp_seconds",
        Kind::Gauge,
        "When each served certificate expires (notAfter, Unix seconds).",
    );
    for (domain, not_after) in certificates {
        page.sample(
            "slipway_certificate_expiry_timestamp_seconds",
            &[("domain", domain)],
            *not_after as f64,
        );
    }
}

fn build_info_family(page: &mut Exposition) {
    page.family(
        "slipway_build_info",
        Kind::Gauge,
        "Always 1; the version of the running daemon.",
    );
    page.sample(
        "slipway_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
}

/// Figures of the daemon as a whole: provisioning runs and router threads.
fn daemon_families(observatory: &Observatory, page: &mut Exposition) {
    page.family(
        "slipway_provisioning_runs_total",
        Kind::Counter,
        "Provisioning runs (builds and rollbacks) finished, by result.",
    );
    for (result, count) in RunResult::ALL.iter().zip(observatory.daemon.runs()) {
        page.sample(
            "slipway_provisioning_runs_total",
            &[("result", result.as_str())],
            count as f64,
        );
    }
    page.family(
        "slipway_provisioning_duration_seconds",
        Kind::Histogram,
        "Duration of finished provisioning runs.",
    );
    page.histogram(
        "slipway_provisioning_duration_seconds",
        &[],
        &observatory.daemon.run_duration(),
    );

    let load = &observatory.daemon.router_load;
    page.family(
        "slipway_router_connections",
        Kind::Gauge,
        "Open visitor connections, by router thread (each new one goes to the least loaded).",
    );
    for thread in 0..load.threads() {
        page.sample(
            "slipway_router_connections",
            &[("thread", &thread.to_string())],
            load.open(thread) as f64,
        );
    }
}

/// Reads one counter of a project's figures.
type Figure = fn(&ProjectFigures) -> u64;

fn project(figures: &ProjectFigures) -> [(&'static str, &str); 1] {
    [("project", figures.record.slug.as_str())]
}

fn process_families(page: &mut Exposition) {
    let process = crate::metrics::process::read();
    let families: [(&str, Kind, &str, Option<f64>); 6] = [
        (
            "process_cpu_seconds_total",
            Kind::Counter,
            "User and system CPU time of the daemon.",
            process.cpu_seconds,
        ),
        (
            "process_resident_memory_bytes",
            Kind::Gauge,
            "Resident memory of the daemon.",
            process.resident_memory_bytes.map(|v| v as f64),
        ),
        (
            "process_virtual_memory_bytes",
            Kind::Gauge,
            "Virtual memory of the daemon.",
            process.virtual_memory_bytes.map(|v| v as f64),
        ),
        (
            "process_open_fds",
            Kind::Gauge,
            "Open file descriptors of the daemon.",
            process.open_fds.map(|v| v as f64),
        ),
        (
            "process_max_fds",
            Kind::Gauge,
            "The daemon's file descriptor limit.",
            process.max_fds.map(|v| v as f64),
        ),
        (
            "process_start_time_seconds",
            Kind::Gauge,
            "When the daemon started (Unix seconds).",
            process.start_time_seconds,
        ),
    ];
    for (name, kind, help, value) in families {
        if let Some(value) = value {
            page.family(name, kind, help);
            page.sample(name, &[], value);
        }
    }
}
