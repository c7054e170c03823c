//! The namespaced runner's state, shared by the runner (`ns.rs`, which builds it in
//! `NamespaceRunner::start`) and the steps it spawned (`step.rs`, which give their link and
//! cgroup back to it when they end). Its own module so that both point down at it.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};

use super::cgroup::Cgroups;
use super::net::AddressPool;
use super::served::Served;

pub(super) struct Shared {
    pub(super) daemon_exe: PathBuf,
    /// Apps' exit files.
    pub(super) run_dir: PathBuf,
    pub(super) table: String,
    /// The host table's full script, to put it back when it went missing.
    pub(super) host_rules: String,
    pub(super) subnet: (Ipv4Addr, u8),
    pub(super) allow_smtp: bool,
    pub(super) interface_prefix: String,
    pub(super) addresses: AddressPool,
    /// The host table's served endpoints (`StepSpec::serve_port` of live steps).
    pub(super) served: Served,
    pub(super) cgroups: Cgroups,
    pub(super) nameservers: Vec<Ipv4Addr>,
    pub(super) next_step: AtomicU64,
    pub(super) stopped: AtomicBool,
    /// The last check of dockerd's `DOCKER-USER` chain failed (logged once until it works).
    pub(super) docker_user_failing: AtomicBool,
}
