//! Apps on a cluster engine (issue 36): with `[cluster] engine = "swarm"` server apps run as
//! Docker Swarm services instead of local sandboxes; builds, the store, the API, TLS and the
//! router stay on this machine (the control plane). `docker.rs` talks to the engine,
//! `spec.rs` says what a service is, `swarm.rs` is the backend (the supervisor's
//! [`AppBackend`](crate::supervisor::backend::AppBackend) seam), `fetch.rs` serves builds to
//! tasks without a registry and `boot.rs` is the task's side of it, `nodes.rs` lists nodes.

pub mod boot;
pub mod docker;
pub mod fetch;
pub mod image;
pub mod join;
pub mod logs;
pub mod nodes;
pub mod spec;
pub mod swarm;

pub use swarm::Swarm;
