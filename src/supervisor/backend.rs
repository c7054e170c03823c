//! The app-backend seam (issue 36): what runs a deployment's instances. Two implementations:
//! the local sandbox ([`LocalBackend`](super::local::LocalBackend): each instance a helper
//! under this module's [`Supervisor`](super::Supervisor)) and a cluster engine
//! (`cluster::Swarm`: a type is a service). A Kubernetes (a Deployment + its Pods' IPs
//! through kube-rs watches) or Nomad (a job + its allocations' addresses through the event
//! stream) backend is a new module implementing [`AppBackend`].
//!
//! A backend starts a deployment's instances of one process type and answers once enough of
//! them are healthy (their addresses, for the router); it keeps them running and keeps the
//! route following them (restarts, reschedules, scaling) itself; it scales, stops and lists
//! them. What it never does: build, choose the deployment, order the types around the
//! switch (`overlap` before, `replace` after) or switch the route to it — the pipeline does
//! that the same way for every backend (`pipeline/backends.rs` picks the project's).
//!
//! Logs: a backend writes its instances' output into the deployment's log hub itself (the
//! local sandbox through its pipes, Swarm through the engine's service logs). Re-attaching
//! after a daemon restart: start-up restore calls [`AppBackend::start`] for each live
//! deployment again, and a backend that finds the deployment already running (local: the
//! sandboxes an earlier daemon left, same pid and port; Swarm: its service by name) takes it
//! over instead of starting it anew; then [`AppBackend::sweep`] removes what is left of
//! deployments no longer live.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::{AppSpec, InstanceView, StartFailure};
use crate::formation::InstanceId;

/// A started `web` instance: its name (`web.2`) and address.
pub type Started = Vec<(Arc<str>, SocketAddr)>;

/// The variable that names an instance to itself (`web.2`).
pub const INSTANCE_VAR: &str = "SLIPWAY_INSTANCE";

/// One process type of a deployment to run: the first instance's spec (its `instance` names
/// the type; the backend numbers the others, [`TypeSpec::instance`]) and how many.
#[derive(Debug, Clone)]
pub struct TypeSpec {
    pub template: AppSpec,
    pub project_id: String,
    pub instances: u32,
    /// How many must be healthy for a start (or the instances a scale adds) to succeed
    /// (`minHealthy`); the others go on trying and join the route once healthy. A backend
    /// that cannot tell them apart waits for all.
    pub needed: u32,
    pub health_timeout: Duration,
    /// Where a cluster may run its instances (the engine's constraints; the local sandbox
    /// has one place).
    pub constraints: Vec<String>,
}

impl TypeSpec {
    /// Instance `index`'s spec: the template renamed, its [`INSTANCE_VAR`] set, and `port`.
    pub fn instance(&self, index: u32, port: Option<u16>) -> AppSpec {
        let mut spec = self.template.clone();
        spec.instance = InstanceId::new(&spec.instance.process, index);
        spec.env.retain(|(name, _)| name != INSTANCE_VAR);
        spec.env
            .push((INSTANCE_VAR.to_owned(), spec.instance.to_string()));
        spec.port = port;
        spec
    }
}

/// What runs apps: the local sandbox, or a cluster engine.
pub trait AppBackend: Send + Sync {
    /// `local`, `swarm`, … (the formation and `GET /api/nodes` show it).
    fn engine(&self) -> &'static str;

    /// Starts the type's instances (all of `spec.instances`; a type at 0 too, so a later
    /// scale finds it) and waits until `spec.needed` of them are healthy; the `web` ones'
    /// addresses. On failure nothing of the type is left running (but what an earlier
    /// daemon left, which the next attempt takes over again).
    fn start(&self, spec: TypeSpec) -> BoxFuture<'_, Result<Started, StartFailure>>;

    /// The deployment's type runs as `spec` says from now on (the route follows): more
    /// instances start (`spec.needed` of all must be healthy), surplus ones leave the route
    /// and stop, new limits restart the instances where the backend can. What the backend
    /// was asked last is its reference: a failed scale is undone by scaling back.
    fn scale(&self, spec: TypeSpec) -> BoxFuture<'_, Result<(), StartFailure>>;

    /// Stops the deployment's instances (of type `process` only, when given) and waits until
    /// they are gone, with whatever the backend made for them.
    fn stop<'a>(&'a self, deployment_id: &'a str, process: Option<&'a str>) -> BoxFuture<'a, ()>;

    /// Removes what an earlier daemon left running of deployments other than `live` (called
    /// once, after start-up restore re-attached those).
    fn sweep<'a>(&'a self, live: &'a std::collections::HashSet<String>) -> BoxFuture<'a, ()>;

    /// The instance's memory in use, as last measured (`None`: not measured).
    fn memory_bytes(&self, deployment_id: &str, instance: &InstanceId) -> Option<u64>;

    /// Whether any instance of the deployment runs here.
    fn runs(&self, deployment_id: &str) -> bool;

    /// The deployment's instances as last seen.
    fn instances(&self, deployment_id: &str) -> Vec<InstanceView>;
}
