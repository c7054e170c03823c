//! Apps on a cluster engine (issue 36): with `[cluster] engine = "swarm"` server apps run as
//! Docker Swarm services instead of local sandboxes; builds, the store, the API, TLS and the
//! router stay on this machine (the control plane). `docker.rs` talks to the engine,
//! `spec.rs` says what a service is, `swarm.rs` is the backend (the supervisor's
//! [`AppBackend`](crate::supervisor::backend::AppBackend) seam), `fetch.rs` serves builds to
//! tasks without a registry and `boot.rs` is the task's side of it, `tunnel.rs` carries
//! tasks' connections to their linked add-ons, `nodes.rs` lists nodes; each task reports
//! its usage (`report.rs`) to the fetch server, kept in `readings.rs`.

pub mod boot;
mod cleanup;
pub mod docker;
pub mod fetch;
pub mod image;
pub mod join;
mod link;
pub mod logs;
pub mod nodes;
pub mod readings;
pub mod report;
pub mod spec;
pub mod swarm;
mod tasks;
pub mod tunnel;

pub use swarm::Swarm;

/// A start that failed in the engine, said as the backend's.
fn failure(message: impl std::fmt::Display) -> crate::supervisor::StartFailure {
    crate::supervisor::StartFailure {
        code: crate::error_code::ErrorCode::StartFailed,
        message: format!("swarm: {message}"),
    }
}
