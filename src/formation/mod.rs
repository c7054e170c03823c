//! A project's formation (issue 32): its process types — `web` (routed) and any others from
//! the Procfile (`worker:`, `clock:`, …) — and how each runs: how many instances, their memory
//! and CPU limits, and how a deploy replaces them. Pure: the types, the Procfile's rules, the
//! checks of a change and the memory admission; the supervisor runs the instances and the
//! pipeline applies changes (`pipeline/formation.rs`).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

mod admission;
mod procfile;
pub mod sleep;

pub use admission::{host_memory_mb, Admission};
pub use procfile::{parse_procfile, ProcfileError};

/// The routed type; `startCommand` is its command.
pub const WEB: &str = "web";
/// The Procfile's release command (issue 33): never a running type.
pub const RELEASE: &str = "release";
/// The most instances of one type.
pub const MAX_INSTANCES: u32 = 32;
/// The most process types of one project.
pub const MAX_TYPES: usize = 16;
/// The longest health command.
pub const MAX_COMMAND_BYTES: usize = 4096;
/// Memory limits an instance may ask for, in MiB.
pub const MEMORY_MB: std::ops::RangeInclusive<u64> = 32..=262_144;
/// CPU quotas an instance may ask for, in cores.
pub const CPUS: std::ops::RangeInclusive<f64> = 0.05..=256.0;

/// How a deploy replaces a type's instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeployStrategy {
    // The new instances start, are healthy, take over; the old ones drain and stop (`web`).
    Overlap,
    // The old instances stop before the new ones start: a singleton never runs twice (the
    // default of every type but `web`).
    Replace,
}

/// Whether a `web` type's visitors stick to one instance.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Affinity {
    // Every request goes to the less loaded of two instances. (Plain comments: doc comments
    // on variants make the OpenAPI enum a `oneOf`.)
    #[default]
    None,
    // A signed `slipway_instance` cookie sends a client back to the instance it first
    // reached, while that one serves (socket.io's polling, in-memory sessions).
    Cookie,
}

/// A type's settings as stored: what the operator or the API set. Unset fields take the
/// defaults (`Settings::resolve`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredType {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy: Option<DeployStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_healthy: Option<u32>,
    /// `""` in a change clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_command: Option<String>,
}

/// A project's stored formation: type name → its settings. Types with nothing set are absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoredFormation {
    #[serde(default)]
    pub types: BTreeMap<String, StoredType>,
}

/// A type as it runs: its settings resolved against the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessType {
    pub name: String,
    pub command: String,
    pub instances: u32,
    pub memory_mb: u64,
    pub cpus: f64,
    pub deploy: DeployStrategy,
    /// `web` only.
    pub affinity: Affinity,
    /// How many instances a deploy needs healthy to switch (`None`: all).
    pub min_healthy: Option<u32>,
    /// Types without a port: the command that says an instance is healthy.
    pub health_command: Option<String>,
}

impl ProcessType {
    pub fn is_web(&self) -> bool {
        self.name == WEB
    }

    /// How many of its instances a deploy needs healthy before the switch: `minHealthy`,
    /// at most every instance.
    pub fn min_healthy(&self) -> u32 {
        self.min_healthy
            .unwrap_or(self.instances)
            .min(self.instances)
    }

    /// The memory its instances may use together, in MiB.
    pub fn memory_total_mb(&self) -> u64 {
        self.memory_mb * u64::from(self.instances)
    }
}

/// The defaults every type starts from (`limits.app_memory_mb`, `limits.app_cpus`).
#[derive(Debug, Clone, Copy)]
pub struct Defaults {
    pub memory_mb: u64,
    pub cpus: f64,
}

/// One instance of a type: `web.1`, `worker.2` (numbered from 1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId {
    pub process: String,
    pub index: u32,
}

impl InstanceId {
    pub fn new(process: &str, index: u32) -> InstanceId {
        InstanceId {
            process: process.to_owned(),
            index,
        }
    }

    /// `web.1` → the id; `None` for anything else.
    pub fn parse(text: &str) -> Option<InstanceId> {
        let (process, index) = text.rsplit_once('.')?;
        let index: u32 = index.parse().ok().filter(|i| *i >= 1)?;
        check_name(process).ok()?;
        Some(InstanceId::new(process, index))
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.process, self.index)
    }
}

/// The key of a deployment's instance in the supervisor and the store's `app_processes`:
/// `dpl_…:web.1`.
pub fn instance_key(deployment_id: &str, instance: &InstanceId) -> String {
    format!("{deployment_id}:{instance}")
}

/// `dpl_…:web.1` → its parts. A bare deployment id (an app recorded before process types)
/// is its `web.1`.
pub fn split_instance_key(key: &str) -> Option<(&str, InstanceId)> {
    match key.split_once(':') {
        Some((deployment, instance)) => Some((deployment, InstanceId::parse(instance)?)),
        None => Some((key, InstanceId::new(WEB, 1))),
    }
}

/// A type's name: 1–16 of `a-z`, `0-9` and `_`, starting with a letter. It becomes part of
/// cgroup names (`…-app-worker_2-<n>`, where only `_` may stand between the name and the
/// instance number so that no instance's prefix is another's) and of log tags.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=16).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "process type {name:?} must be 1-16 characters of a-z, 0-9 and `_`, starting with \
             a letter"
        ))
    }
}

/// The pattern `check_name` enforces, for the OpenAPI document.
pub const NAME_PATTERN: &str = "^[a-z][a-z0-9_]{0,15}$";

impl StoredFormation {
    /// The types a deployment runs: `commands` (type → command, `web` from `startCommand`)
    /// with this formation's settings over `defaults`. A type the formation does not name
    /// runs one instance; `web` overlaps, the others replace.
    pub fn resolve(
        &self,
        commands: &BTreeMap<String, String>,
        defaults: Defaults,
    ) -> Vec<ProcessType> {
        commands
            .iter()
            .map(|(name, command)| {
                let stored = self.types.get(name).cloned().unwrap_or_default();
                ProcessType {
                    name: name.clone(),
                    command: command.clone(),
                    instances: stored.instances.unwrap_or(1),
                    memory_mb: stored.memory_mb.unwrap_or(defaults.memory_mb),
                    cpus: stored.cpus.unwrap_or(defaults.cpus),
                    deploy: stored.deploy.unwrap_or(if name == WEB {
                        DeployStrategy::Overlap
                    } else {
                        DeployStrategy::Replace
                    }),
                    affinity: stored.affinity.unwrap_or_default(),
                    min_healthy: stored.min_healthy,
                    health_command: stored.health_command,
                }
            })
            .collect()
    }

    /// This formation with `change` applied: only the named types and fields change.
    pub fn with(&self, change: &BTreeMap<String, StoredType>) -> StoredFormation {
        let mut next = self.clone();
        for (name, fields) in change {
            let entry = next.types.entry(name.clone()).or_default();
            entry.instances = fields.instances.or(entry.instances);
            entry.memory_mb = fields.memory_mb.or(entry.memory_mb);
            entry.cpus = fields.cpus.or(entry.cpus);
            entry.deploy = fields.deploy.or(entry.deploy);
            entry.affinity = fields.affinity.or(entry.affinity);
            entry.min_healthy = fields.min_healthy.or(entry.min_healthy);
            match fields.health_command.as_deref() {
                Some("") => entry.health_command = None,
                Some(command) => entry.health_command = Some(command.to_owned()),
                None => {}
            }
        }
        next
    }
}

/// Checks a formation change against the types the live deployment has (`known`); the
/// message names the type and field.
pub fn check_change(
    change: &BTreeMap<String, StoredType>,
    known: &BTreeMap<String, String>,
) -> Result<(), ChangeError> {
    if change.is_empty() {
        return Err(ChangeError::Invalid(
            "name at least one process type, e.g. {\"web\": {\"instances\": 2}}".into(),
        ));
    }
    for (name, fields) in change {
        check_fields(name, fields)?;
        if !known.contains_key(name) {
            let names: Vec<&str> = known.keys().map(String::as_str).collect();
            return Err(ChangeError::UnknownType(format!(
                "the live deployment has no process type `{name}` (it has: {}); add a \
                 `{name}:` line to the Procfile and deploy",
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            )));
        }
    }
    Ok(())
}

/// One type's fields, whatever the live deployment has: the name, the ranges, what only
/// `web` (or only the other types) may set.
fn check_fields(name: &str, fields: &StoredType) -> Result<(), ChangeError> {
    check_name(name).map_err(ChangeError::Invalid)?;
    if let Some(instances) = fields.instances {
        if instances > MAX_INSTANCES {
            return Err(ChangeError::Invalid(format!(
                "`{name}.instances` must be 0 to {MAX_INSTANCES}, not {instances}"
            )));
        }
    }
    if fields
        .min_healthy
        .is_some_and(|m| m == 0 || m > MAX_INSTANCES)
    {
        return Err(ChangeError::Invalid(format!(
            "`{name}.minHealthy` must be 1 to {MAX_INSTANCES}"
        )));
    }
    if let Some(memory) = fields.memory_mb {
        if !MEMORY_MB.contains(&memory) {
            return Err(ChangeError::Invalid(format!(
                "`{name}.memoryMb` must be {} to {}, not {memory}",
                MEMORY_MB.start(),
                MEMORY_MB.end()
            )));
        }
    }
    if let Some(cpus) = fields.cpus {
        if !CPUS.contains(&cpus) || !cpus.is_finite() {
            return Err(ChangeError::Invalid(format!(
                "`{name}.cpus` must be {} to {}, not {cpus}",
                CPUS.start(),
                CPUS.end()
            )));
        }
    }
    if name != WEB && fields.affinity.is_some() {
        return Err(ChangeError::Invalid(format!(
            "`{name}.affinity`: only `web` is routed, so only it has an affinity"
        )));
    }
    if let Some(command) = &fields.health_command {
        if name == WEB && !command.is_empty() {
            return Err(ChangeError::Invalid(
                "`web.healthCommand`: web is checked over HTTP (healthCheckPath)".into(),
            ));
        }
        if command.len() > MAX_COMMAND_BYTES || command.contains('\0') {
            return Err(ChangeError::Invalid(format!(
                "`{name}.healthCommand` must be at most {MAX_COMMAND_BYTES} bytes, without NUL"
            )));
        }
    }
    if name == WEB && fields.deploy == Some(DeployStrategy::Replace) {
        return Err(ChangeError::Invalid(
            "`web.deploy` is always \"overlap\": visitors are served throughout a deploy".into(),
        ));
    }
    Ok(())
}

/// Why a formation change is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeError {
    /// A value out of range (400).
    Invalid(String),
    /// A type the live deployment does not have (409: the next deploy may have it).
    UnknownType(String),
}

#[cfg(test)]
mod tests;
