//! The shapes of `/api/projects/{projectId}/formation`: process types and their instances.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::formation::{Affinity, DeployStrategy};
pub use crate::supervisor::InstanceState;

/// `PATCH /api/projects/{projectId}/formation`: process type → the fields to change. Only the
/// named types change; no rebuild, and the other types' instances keep running.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = formation_patch_names)]
pub struct FormationPatch(pub BTreeMap<String, ProcessTypePatch>);

fn formation_patch_names(schema: &mut schemars::Schema) {
    let mut names = serde_json::Map::new();
    names.insert("pattern".into(), crate::formation::NAME_PATTERN.into());
    schema.insert("propertyNames".into(), names.into());
    schema.insert("minProperties".into(), 1.into());
    schema.insert("maxProperties".into(), crate::formation::MAX_TYPES.into());
}

/// One type's change; fields left out keep their value.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProcessTypePatch {
    /// How many instances run (0 stops the type).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole_number::optional_u32"
    )]
    #[schemars(range(min = 0, max = 32))]
    pub instances: Option<u32>,
    /// Each instance's memory limit, MiB.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole_number::optional_u32"
    )]
    #[schemars(range(min = 32, max = 262144))]
    pub memory_mb: Option<u32>,
    /// Each instance's CPU quota, in cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.05, max = 256.0))]
    pub cpus: Option<f64>,
    /// How a deploy replaces the type's instances (`web` always overlaps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy: Option<DeployStrategy>,
    /// `web` only: `cookie` keeps a client on the instance it first reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// How many instances a deploy needs healthy to switch (the others keep trying and join
    /// once healthy); at most `instances`. Unset: all of them.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::whole_number::optional_u32"
    )]
    #[schemars(range(min = 1, max = 32))]
    pub min_healthy: Option<u32>,
    /// Types other than `web`: a command run beside each instance (same build, env and
    /// `/data`) that exits 0 while it is healthy; three failures in a row restart it. `""`
    /// clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096), regex(pattern = r"^[^\u0000]*$"))]
    pub health_command: Option<String>,
}

/// `GET /api/projects/{projectId}/formation`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Formation {
    pub project_id: String,
    /// The live deployment whose types these are (`null`: nothing live, or a static site).
    pub deployment_id: Option<String>,
    pub types: BTreeMap<String, ProcessTypeView>,
}

/// A process type as it runs.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProcessTypeView {
    pub command: String,
    pub instances: u32,
    pub memory_mb: u64,
    pub cpus: f64,
    pub deploy: DeployStrategy,
    pub affinity: Affinity,
    /// How many instances a deploy needs healthy to switch.
    pub min_healthy: u32,
    /// The command that says an instance of a type without a port is healthy.
    pub health_command: Option<String>,
    /// Its instances the supervisor runs now.
    pub running: Vec<RunningInstance>,
}

/// One running instance.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunningInstance {
    /// `web.1`, `worker.2`.
    pub instance: String,
    pub state: InstanceState,
    /// The sandbox's process (namespaces mode).
    pub pid: Option<i32>,
    /// The cluster node it runs on (`null`: this machine).
    pub node: Option<String>,
    /// Where the router reaches a `web` instance.
    pub address: Option<String>,
    /// How often it was restarted after exiting or hanging.
    pub restarts: u32,
    pub started_at: String,
    /// Memory in use now, bytes (`null` where not measured: sandbox mode none).
    pub memory_bytes: Option<u64>,
}
