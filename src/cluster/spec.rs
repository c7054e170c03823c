//! A deployment's process type as a Docker Swarm service (Engine API 1.41 `ServiceSpec`):
//! the formation's replicas, memory, CPU and pids limits, a restart policy, the sandbox's
//! user and a read-only root, no capabilities, and the port published in `host` mode on the
//! task's node (no routing mesh: it needs IPVS), which is what the router connects to.

use serde_json::{json, Value};

use crate::supervisor::AppSpec;

/// The label every object Slipway makes carries (its deployment or project id).
pub const DEPLOYMENT_LABEL: &str = "slipway.deployment";
pub const PROJECT_LABEL: &str = "slipway.project";
pub const PROCESS_LABEL: &str = "slipway.process";

/// Where the task's boot secret is mounted (the boot reads and never logs it).
pub const BOOT_SECRET_PATH: &str = "/run/secrets/slipway-boot";

/// The service's name: one per deployment and process type.
pub fn service_name(deployment_id: &str, process: &str) -> String {
    format!("slipway-{deployment_id}-{process}")
}

/// The project's overlay network (tasks' egress and their host-mode ports).
pub fn network_name(project_id: &str) -> String {
    format!("slipway-{project_id}")
}

/// The secret holding a deployment's boot document (env, build URL and digest).
pub fn secret_name(deployment_id: &str, process: &str) -> String {
    format!("slipway-{deployment_id}-{process}-boot")
}

pub struct ServiceParts<'a> {
    pub spec: &'a AppSpec,
    pub project_id: &'a str,
    pub image: &'a str,
    pub replicas: u32,
    pub network_id: &'a str,
    pub secret_id: &'a str,
    /// The nodes it may run on (the engine's placement constraints).
    pub constraints: &'a [String],
}

/// What a task sees of its node, read-only: `/usr` (the programs and libraries apps run
/// with) and the parts of `/etc` that TLS and Debian's alternatives need — the same as the
/// local sandbox's view, less what differs per node. A Debian node has each of them.
pub const NODE_PATHS: &[&str] = &[
    "/usr",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
];

fn node_mounts() -> impl Iterator<Item = Value> {
    NODE_PATHS
        .iter()
        .map(|path| json!({"Type": "bind", "Source": path, "Target": path, "ReadOnly": true}))
}

/// The `ServiceSpec` for `POST /services/create`.
pub fn service_spec(parts: &ServiceParts<'_>) -> Value {
    let spec = parts.spec;
    let process = &spec.instance.process;
    let name = service_name(&spec.deployment_id, process);
    let secret = secret_name(&spec.deployment_id, process);
    let labels = json!({
        DEPLOYMENT_LABEL: spec.deployment_id,
        PROJECT_LABEL: parts.project_id,
        PROCESS_LABEL: process,
    });
    let ports: Vec<Value> = spec
        .port
        .map(|port| json!({"Protocol": "tcp", "TargetPort": port, "PublishMode": "host"}))
        .into_iter()
        .collect();
    json!({
        "Name": name,
        "Labels": labels,
        "TaskTemplate": {
            "ContainerSpec": {
                "Image": parts.image,
                "Command": [super::image::BOOT_BINARY, "task-boot", BOOT_SECRET_PATH],
                "Labels": labels,
                // The engine fills in the task's slot; task-boot hands it to the app.
                "Env": [format!("SLIPWAY_INSTANCE={process}.{{{{.Task.Slot}}}}")],
                "User": format!("{0}:{0}", spec.uid),
                "ReadOnly": true,
                "CapabilityDrop": ["ALL"],
                "Init": true,
                "StopGracePeriod": 10_000_000_000u64,
                "Mounts": node_mounts().chain([
                    json!({"Type": "tmpfs", "Target": "/app",
                     "TmpfsOptions": {"SizeBytes": 1u64 << 30, "Mode": 0o1777}}),
                    json!({"Type": "tmpfs", "Target": "/tmp",
                     "TmpfsOptions": {"SizeBytes": 64u64 << 20, "Mode": 0o1777}}),
                ]).collect::<Vec<Value>>(),
                "Secrets": [{
                    "SecretID": parts.secret_id,
                    "SecretName": secret,
                    "File": {"Name": "slipway-boot", "UID": spec.uid.to_string(),
                             "GID": spec.uid.to_string(), "Mode": 0o400},
                }],
            },
            "Resources": {
                "Limits": {
                    "NanoCPUs": (spec.cpus * 1e9) as u64,
                    "MemoryBytes": spec.memory_mb << 20,
                    "Pids": spec.pids,
                },
            },
            "RestartPolicy": {"Condition": "any", "Delay": 1_000_000_000u64, "MaxAttempts": 0},
            "Placement": {"Constraints": parts.constraints},
            "Networks": [{"Target": parts.network_id}],
        },
        "Mode": {"Replicated": {"Replicas": parts.replicas}},
        "UpdateConfig": {"Parallelism": 1, "Order": "start-first", "FailureAction": "pause"},
        "EndpointSpec": {"Mode": "dnsrr", "Ports": ports},
    })
}
