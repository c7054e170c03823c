//! Configuration: raw TOML → validated [`Config`].
//!
//! `main` loads it once (`serve`, `check-config`) and passes it down explicitly; nothing reads
//! it from a global. Unknown keys are an error (`deny_unknown_fields`), so a typo never silently
//! falls back to a default. `--dev` fills in the development defaults before the file is applied.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

mod addons;
mod cidr;
mod cluster;
pub use cluster::default_runtime_image;
mod domains;
mod jobs;
mod raw;
mod sleep;
pub use addons::AddonsConfig;
pub use cidr::Cidr;
pub use cluster::{ClusterConfig, Engine};
pub use domains::{under_suffix, DomainsConfig};
pub use jobs::JobsConfig;
use raw::RawConfig;
pub use sleep::SleepConfig;

/// Exit code for a configuration error (EX_CONFIG from sysexits.h).
pub const EXIT_CONFIG: i32 = 78;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid config: `{key}`: {message}")]
    Invalid { key: String, message: String },
}

/// The validated configuration the daemon runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    pub apps_domain: String,
    pub control_host: String,
    pub http_listen: SocketAddr,
    pub https_listen: SocketAddr,
    pub api_listen: Option<SocketAddr>,
    pub tls: TlsConfig,
    pub rate_limits: RateLimits,
    pub limits: Limits,
    pub sandbox: SandboxConfig,
    /// `metrics_listen`: where `GET /metrics` is served without auth; off by default.
    pub metrics_listen: Option<SocketAddr>,
    pub metrics: MetricsConfig,
    pub notifications: NotificationsConfig,
    pub domains: DomainsConfig,
    pub jobs: JobsConfig,
    pub addons: AddonsConfig,
    /// `[sleep]`: the idle tick and how requests wait for a sleeping app.
    pub sleep: SleepConfig,
    /// `[cluster]`: the engine apps run on instead of this machine (issue 36).
    pub cluster: ClusterConfig,
    /// True when started with `--dev`; only used for messages.
    pub dev: bool,
}

/// `[metrics]`.
#[derive(Debug, Clone, Copy)]
pub struct MetricsConfig {
    /// Count every app-host request per project (`requests`, default true); false only to
    /// measure what counting costs.
    pub requests: bool,
}

/// `[notifications]`: where webhooks may go, how many wait per subscription, and how failed
/// deliveries are retried.
#[derive(Debug, Clone)]
pub struct NotificationsConfig {
    /// Blocks of loopback, link-local and private addresses that subscriptions may still
    /// reach (`allow_destinations`, default none: every such address is refused).
    pub allow_destinations: Vec<Cidr>,
    /// Deliveries queued per subscription at most (`queue_per_subscription`, default 100);
    /// past it the oldest is dropped and counted.
    pub queue_per_subscription: u64,
    /// Wait before the first retry (`retry_first_ms`, default 1000) and before the last
    /// (`retry_max_ms`, default 3,600,000); the waits between grow geometrically.
    pub retry_first_ms: u64,
    pub retry_max_ms: u64,
    /// Attempts in all, the first included (`max_attempts`, default 10).
    pub max_attempts: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    Internal,
    Acme,
    Files,
    Off,
}

impl TlsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Internal => "internal",
            TlsMode::Acme => "acme",
            TlsMode::Files => "files",
            TlsMode::Off => "off",
        }
    }
}

#[derive(Debug, Clone)]
pub struct TlsConfig {
    pub mode: TlsMode,
    pub acme_directory: String,
    pub acme_email: String,
    pub acme_ca_file: Option<PathBuf>,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// `internal` mode: the custom domains the custom-domains root may sign (these names and
    /// those under them; the root is name-constrained to them). `--dev` default: `localhost`
    /// and `test`; otherwise none, so `internal` mode refuses custom domains until set.
    pub internal_domain_suffixes: Vec<String>,
    /// `acme` mode: new orders the daemon places in any hour, and for one project's names.
    pub acme_orders_per_hour: u32,
    pub acme_orders_per_project_per_hour: u32,
}

#[derive(Debug, Clone, Copy)]
pub struct RateLimits {
    pub requests_per_minute: u32,
    pub posts_per_minute_per_endpoint: u32,
}

/// `[limits]` as written, with these defaults for what it leaves out; every value must be
/// greater than 0 but `disk_reserve_mb` and `memory_reserve_mb` ([`Limits::check`]).
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    pub build_memory_mb: u64,
    pub app_memory_mb: u64,
    pub pids: u64,
    pub build_timeout_s: u64,
    pub health_timeout_s: u64,
    /// A live app is probed this often; three failed probes in a row restart it.
    pub health_interval_s: u64,
    /// Disk space of a build's workspace (its own filesystem) and of an app's `/data`.
    pub build_disk_mb: u64,
    /// Each project's build cache (package managers' caches kept between builds).
    pub build_cache_mb: u64,
    /// Memory for static sites' file contents, all sites together; the rest is read from disk.
    pub static_cache_mb: u64,
    pub app_disk_mb: u64,
    /// Free space the data dir's filesystem keeps for the store: uploads and runs that would
    /// eat into it are refused (`INSUFFICIENT_STORAGE`).
    pub disk_reserve_mb: u64,
    pub source_max_mb: u64,
    pub log_retention_mb: u64,
    /// What one deployment may log: a sustained rate and a burst above it; past them its lines
    /// are dropped and counted.
    pub log_rate_kb_s: u64,
    pub log_burst_kb: u64,
    /// CPU quota of a build step and of a live app, in cores.
    pub build_cpus: f64,
    pub app_cpus: f64,
    /// Memory kept for the system, the daemon and builds: the memory limits of every app
    /// instance together may not exceed the machine's memory minus this (formation admission).
    pub memory_reserve_mb: u64,
    /// SIGTERM → SIGKILL grace when an app is stopped.
    pub app_stop_grace_s: u64,
    /// How long a replaced app keeps serving in-flight requests after a live switch.
    pub app_drain_s: u64,
    /// Open connections across every listener.
    pub max_connections: usize,
    /// Open connections per client address (IPv4) or /64 (IPv6).
    pub max_connections_per_client: u32,
    /// Of `max_connections`, how many only the control host may use (at most half).
    pub control_reserved_connections: usize,
    /// A connection with no request in flight for this long is closed.
    pub idle_timeout_s: u64,
    /// A response write that makes no progress for this long fails (the client stopped reading).
    pub write_timeout_s: u64,
    /// Builds (source, install, build) running at once; more wait for a slot.
    pub max_concurrent_builds: usize,
    /// Open WebSocket tunnels, in all and per client; one idle this long is closed.
    pub max_websockets: usize,
    pub max_websockets_per_client: u32,
    pub websocket_idle_timeout_s: u64,
    /// TLS handshake, and the wait for a plain connection's first request.
    pub handshake_timeout_s: u64,
    /// Reading one request's headers, and the idle wait between keep-alive requests.
    pub header_timeout_s: u64,
    pub max_header_kb: usize,
    /// The public routes (webhooks): the largest body one may send, the time it gets to
    /// arrive, and the bytes all of them being read at once may hold.
    pub public_body_kb: usize,
    pub public_body_timeout_s: u64,
    pub public_bodies_kb: usize,
    /// How long open connections get to finish after SIGTERM.
    pub shutdown_drain_s: u64,
    /// Connecting to an app, and waiting for its response head.
    pub proxy_connect_timeout_s: u64,
    pub proxy_response_timeout_s: u64,
    /// Threads serving visitors' connections, each with a runtime of its own (default: one
    /// per CPU the daemon may run on).
    pub router_threads: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            build_memory_mb: 1024,
            app_memory_mb: 1024,
            pids: 512,
            build_timeout_s: 900,
            health_timeout_s: 60,
            health_interval_s: 10,
            build_disk_mb: 4096,
            build_cache_mb: 2048,
            static_cache_mb: 256,
            app_disk_mb: 1024,
            disk_reserve_mb: 1024,
            source_max_mb: 100,
            log_retention_mb: 10,
            log_rate_kb_s: 512,
            log_burst_kb: 4096,
            build_cpus: 2.0,
            app_cpus: 1.0,
            memory_reserve_mb: 1024,
            app_stop_grace_s: 10,
            app_drain_s: 10,
            max_connections: 10_000,
            max_connections_per_client: 256,
            control_reserved_connections: 128,
            idle_timeout_s: 60,
            write_timeout_s: 30,
            max_concurrent_builds: 2,
            max_websockets: 4096,
            max_websockets_per_client: 64,
            websocket_idle_timeout_s: 300,
            handshake_timeout_s: 10,
            header_timeout_s: 30,
            max_header_kb: 64,
            public_body_kb: 1024,
            public_body_timeout_s: 10,
            public_bodies_kb: 4096,
            shutdown_drain_s: 10,
            proxy_connect_timeout_s: 3,
            proxy_response_timeout_s: 60,
            router_threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }
}

impl Limits {
    /// The one positivity pass: every limit is a count, a size or a duration that 0 (or less)
    /// would turn off or break, but the data dir's reserve, which 0 turns off on purpose.
    pub(crate) fn check(&self) -> Result<(), ConfigError> {
        let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(self) else {
            return Ok(());
        };
        for (name, value) in fields {
            if name != "disk_reserve_mb"
                && name != "memory_reserve_mb"
                && value.as_f64().is_some_and(|v| v <= 0.0)
            {
                return Err(ConfigError::Invalid {
                    key: format!("limits.{name}"),
                    message: "must be greater than 0".into(),
                });
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// Namespaces where the machine allows them, else `None` with a loud warning naming what is
    /// missing. The default of `--dev`; `app.rs` resolves it to the mode in force at start.
    Auto,
    Namespaces,
    None,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::Auto => "auto",
            SandboxMode::Namespaces => "namespaces",
            SandboxMode::None => "none",
        }
    }
}

#[derive(Debug, Clone)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    pub uid_base: u32,
    /// The private IPv4 range sandboxes get their /30 links from: (network, prefix length).
    pub subnet: (std::net::Ipv4Addr, u8),
    pub pass_env: Vec<String>,
    /// Names the host objects the namespaced runner owns (nftables table `inet <instance>`,
    /// veth prefix, cgroup directory); two daemons on one machine need different ones.
    pub instance: String,
    /// Whether sandboxes may open outbound SMTP connections (TCP 25, 465, 587).
    pub allow_smtp: bool,
}

/// Projects take the host uids `sandbox.uid_base` .. `uid_base + PROJECT_UID_RANGE`, one each,
/// never reused.
pub const PROJECT_UID_RANGE: u32 = 1_000_000;

pub const LETS_ENCRYPT_DIRECTORY: &str = "https://acme-v02.api.letsencrypt.org/directory";

impl Config {
    /// Reads and validates a config file (if any) on top of the production or dev defaults.
    pub fn load(path: Option<&Path>, dev: bool) -> Result<Config, ConfigError> {
        let raw = match path {
            None => RawConfig::default(),
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })?;
                toml::from_str(&text).map_err(|error| ConfigError::Parse {
                    path: path.to_owned(),
                    message: error.to_string().trim().replace('\n', " "),
                })?
            }
        };
        Config::from_raw(raw, dev)
    }

    /// Parses config text; used by tests and `check-config`.
    pub fn from_toml(text: &str, dev: bool) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|error| ConfigError::Parse {
            path: PathBuf::from("<inline>"),
            message: error.to_string().trim().replace('\n', " "),
        })?;
        Config::from_raw(raw, dev)
    }

    /// Setup choices that work but weaken a production deployment, each with what to do;
    /// logged at start (outside `--dev`) and shown by `slipway doctor`.
    pub fn advice(&self) -> Vec<String> {
        let mut advice = Vec::new();
        if self
            .control_host
            .ends_with(&format!(".{}", self.apps_domain))
        {
            advice.push(format!(
                "control_host {} is inside apps_domain {}: every app is a sibling of the \
                 dashboard and can set cookies it receives; put the control host outside \
                 apps_domain (e.g. slipway.example.com with apps under *.apps.example.com) and \
                 submit apps_domain to the Public Suffix List (https://publicsuffix.org) so \
                 browsers keep apps apart",
                self.control_host, self.apps_domain
            ));
        }
        advice
    }

    /// The first label of the control host: reserved as a slug.
    pub fn reserved_slug(&self) -> &str {
        self.control_host.split('.').next().unwrap_or("")
    }
}

/// A name usable for an nftables table and a cgroup directory.
pub fn valid_instance(instance: &str) -> bool {
    !instance.is_empty()
        && instance.len() <= 24
        && instance.starts_with(|c: char| c.is_ascii_lowercase())
        && instance
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A DNS name: labels of letters, digits and inner hyphens, at most 253 characters.
fn is_hostname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests;
