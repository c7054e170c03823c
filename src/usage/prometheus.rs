//! The Prometheus page: every family the contract lists, in a fixed order, labelled only by
//! project slug, status class, run result or certificate domain. A family with no sample
//! (no app memory to read, no certificate) is left out.

use super::{Observatory, ProjectFigures};
use crate::metrics::exposition::{Exposition, Kind};
use crate::metrics::{RunResult, STATUS_CLASSES};
use crate::sandbox::CgroupUsage;

pub(super) fn render(observatory: &Observatory, projects: &[ProjectFigures]) -> String {
    let mut page = Exposition::new();
    project_families(&mut page, projects);
    daemon_families(&mut page, observatory);
    process_families(&mut page);
    page.finish()
}

/// A family with one sample per project, labelled by its slug.
struct ProjectFamily {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    value: Reading,
}

/// Where a per-project family's value comes from.
enum Reading {
    /// The project's own figures: every project has one, and the family is written even
    /// when there is no project.
    Figures(fn(&ProjectFigures) -> f64),
    /// Its live app's cgroup: the family is left out when no project has one.
    App(fn(&CgroupUsage) -> Option<f64>),
}

/// The per-project families after the requests and their durations, in the page's order.
const PROJECT_FAMILIES: [ProjectFamily; 6] = [
    ProjectFamily {
        name: "slipway_http_response_bytes_total",
        kind: Kind::Counter,
        help: "Response body bytes sent to visitors, by project.",
        value: Reading::Figures(|f| f.counts.response_bytes as f64),
    },
    ProjectFamily {
        name: "slipway_upstream_errors_total",
        kind: Kind::Counter,
        help: "Requests the project's app did not answer (502 or 504 served).",
        value: Reading::Figures(|f| f.counts.upstream_errors as f64),
    },
    ProjectFamily {
        name: "slipway_app_restarts_total",
        kind: Kind::Counter,
        help: "Restarts of the project's app after it exited.",
        value: Reading::Figures(|f| f.counts.app_restarts as f64),
    },
    ProjectFamily {
        name: "slipway_app_memory_bytes",
        kind: Kind::Gauge,
        help: "Memory of the project's live app, from its cgroup.",
        value: Reading::App(|app| app.memory_bytes.map(|bytes| bytes as f64)),
    },
    ProjectFamily {
        name: "slipway_app_cpu_seconds_total",
        kind: Kind::Counter,
        help: "CPU time of the project's live app, from its cgroup (restarts each start from 0).",
        value: Reading::App(|app| app.cpu_seconds),
    },
    ProjectFamily {
        name: "slipway_build_cache_bytes",
        kind: Kind::Gauge,
        help: "Size of the project's build cache.",
        value: Reading::Figures(|f| f.build_cache_bytes as f64),
    },
];

/// Each project's requests by status class and their durations, then [`PROJECT_FAMILIES`].
fn project_families(page: &mut Exposition, projects: &[ProjectFigures]) {
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
    for family in &PROJECT_FAMILIES {
        let samples: Vec<(&ProjectFigures, f64)> = match family.value {
            Reading::Figures(value) => projects.iter().map(|f| (f, value(f))).collect(),
            Reading::App(value) => {
                let samples: Vec<_> = projects
                    .iter()
                    .filter_map(|f| Some((f, value(f.app.as_ref()?)?)))
                    .collect();
                if samples.is_empty() {
                    continue;
                }
                samples
            }
        };
        page.family(family.name, family.kind, family.help);
        for (figures, value) in samples {
            page.sample(family.name, &project(figures), value);
        }
    }
}

/// Provisioning runs, router threads, certificates and the daemon's version.
fn daemon_families(page: &mut Exposition, observatory: &Observatory) {
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

    let certificates = observatory.certificates();
    if !certificates.is_empty() {
        page.family(
            "slipway_certificate_expiry_timestamp_seconds",
            Kind::Gauge,
            "When each served certificate expires (notAfter, Unix seconds).",
        );
        for (domain, not_after) in &certificates {
            page.sample(
                "slipway_certificate_expiry_timestamp_seconds",
                &[("domain", domain)],
                *not_after as f64,
            );
        }
    }

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
