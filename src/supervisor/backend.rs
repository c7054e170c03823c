//! The app-backend seam (issue 36): what runs a deployment's instances. The local sandbox
//! (this module's [`Supervisor`](super::Supervisor), one helper per instance) is the first
//! backend; a cluster engine (`cluster::Swarm`) is the second, and a Kubernetes (a
//! Deployment + its Pods' IPs through kube-rs watches) or Nomad (a job + its allocations'
//! addresses through the event stream) backend is a new module implementing [`AppBackend`].
//!
//! A backend starts a deployment's instances of one process type and answers once enough of
//! them are healthy (their addresses, for the router); it keeps them running and keeps the
//! route following them (restarts, reschedules) itself; it scales, stops and lists them.
//! What it never does: build, choose the deployment, or switch the route to it — the
//! pipeline does that the same way for every backend.
//!
//! Logs: a backend writes its instances' output into the deployment's log hub itself (the
//! local sandbox through its pipes, Swarm through the engine's service logs). Re-attaching
//! after a daemon restart: start-up restore calls [`AppBackend::start`] for each live
//! deployment again, and a backend that finds the deployment already running (Swarm: its
//! service by name) takes it over instead of starting it anew; then [`AppBackend::sweep`]
//! removes what is left of deployments no longer live.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::{AppSpec, InstanceView, StartFailure};

/// A started `web` instance: its name (`web.2`) and address.
pub type Started = Vec<(Arc<str>, SocketAddr)>;

/// One process type of a deployment to run: the first instance's spec (its `instance` names
/// the type; the backend numbers the others) and how many.
#[derive(Debug, Clone)]
pub struct TypeSpec {
    pub template: AppSpec,
    pub project_id: String,
    pub instances: u32,
    pub health_timeout: Duration,
}

/// What runs apps: the local sandbox, or a cluster engine.
pub trait AppBackend: Send + Sync {
    /// `local`, `swarm`, … (the formation and `GET /api/nodes` show it).
    fn engine(&self) -> &'static str;

    /// Starts the type's instances and waits until all are healthy; the `web` ones'
    /// addresses. On failure nothing of it is left running.
    fn start(&self, spec: TypeSpec) -> BoxFuture<'_, Result<Started, StartFailure>>;

    /// The deployment's type runs `instances` instances from now on (the route follows).
    fn scale<'a>(
        &'a self,
        deployment_id: &'a str,
        process: &'a str,
        instances: u32,
    ) -> BoxFuture<'a, Result<(), StartFailure>>;

    /// Stops the deployment's instances (of type `process` only, when given) and waits until
    /// they are gone, with whatever the backend made for them.
    fn stop<'a>(&'a self, deployment_id: &'a str, process: Option<&'a str>) -> BoxFuture<'a, ()>;

    /// Removes what an earlier daemon left running of deployments other than `live` (called
    /// once, after start-up restore re-attached those).
    fn sweep<'a>(&'a self, live: &'a std::collections::HashSet<String>) -> BoxFuture<'a, ()>;

    /// The instance's memory in use, as last measured (`None`: not measured).
    fn memory_bytes(
        &self,
        deployment_id: &str,
        instance: &crate::formation::InstanceId,
    ) -> Option<u64>;

    /// Whether any instance of the deployment runs here.
    fn runs(&self, deployment_id: &str) -> bool;

    /// The deployment's instances as last seen.
    fn instances(&self, deployment_id: &str) -> Vec<InstanceView>;
}
