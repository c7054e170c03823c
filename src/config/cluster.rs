//! `[cluster]` (issue 36): whether apps run on a cluster engine instead of this machine's
//! sandbox, and how the daemon reaches it. Default: no engine, every app runs locally.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;

/// The cluster engines Slipway can hand apps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Swarm,
}

impl Engine {
    pub fn as_str(self) -> &'static str {
        match self {
            Engine::Swarm => "swarm",
        }
    }
}

/// The runtime image's reference by default: this build's version (a node made by another
/// version has its own).
pub fn default_runtime_image() -> String {
    format!("slipway-runtime:{}", env!("CARGO_PKG_VERSION"))
}

/// `[cluster]`, validated.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// `engine` (default none): `"swarm"` runs server apps as Docker Swarm services.
    pub engine: Option<Engine>,
    /// `docker_socket` (default `/var/run/docker.sock`): a swarm manager's Engine API.
    pub docker_socket: PathBuf,
    /// `runtime_image` (default `slipway-runtime:<version>`): the base every task starts
    /// from, made on every node from its own files (the daemon on its engine at start-up,
    /// `slipway node join` on a worker); never pulled.
    pub runtime_image: String,
    /// `fetch_listen`: where the daemon serves builds to tasks over TLS (an address every
    /// node reaches, e.g. the `docker_gwbridge` gateway on a single node). Required with an
    /// engine.
    pub fetch_listen: Option<SocketAddr>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    engine: Option<String>,
    docker_socket: Option<PathBuf>,
    runtime_image: Option<String>,
    fetch_listen: Option<String>,
}

impl RawCluster {
    pub(super) fn validate(self) -> Result<ClusterConfig, ConfigError> {
        let invalid = |key: &str, message: &str| ConfigError::Invalid {
            key: key.into(),
            message: message.into(),
        };
        let engine = match self.engine.as_deref() {
            None | Some("none") => None,
            Some("swarm") => Some(Engine::Swarm),
            Some(_) => return Err(invalid("cluster.engine", "must be \"swarm\" or \"none\"")),
        };
        let fetch_listen = match self.fetch_listen {
            None => None,
            Some(text) => Some(text.parse().map_err(|_| {
                invalid(
                    "cluster.fetch_listen",
                    "must be an address and port, e.g. 172.18.0.1:8477",
                )
            })?),
        };
        if engine.is_some() && fetch_listen.is_none() {
            return Err(invalid(
                "cluster.fetch_listen",
                "is required with an engine: the address tasks fetch builds from",
            ));
        }
        let runtime_image = self.runtime_image.unwrap_or_else(default_runtime_image);
        if runtime_image.is_empty() || runtime_image.contains(char::is_whitespace) {
            return Err(invalid(
                "cluster.runtime_image",
                "must be an image reference",
            ));
        }
        Ok(ClusterConfig {
            engine,
            docker_socket: self
                .docker_socket
                .unwrap_or_else(|| PathBuf::from("/var/run/docker.sock")),
            runtime_image,
            fetch_listen,
        })
    }
}
