//! Configuration: raw TOML → validated [`Config`].
//!
//! `main` loads it once (`serve`, `check-config`) and passes it down explicitly; nothing reads
//! it from a global. Unknown keys are an error (`deny_unknown_fields`), so a typo never silently
//! falls back to a default. `--dev` fills in the development defaults before the file is applied.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

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
    Invalid { key: &'static str, message: String },
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

/// `[notifications]`: how failed webhook deliveries are retried.
#[derive(Debug, Clone, Copy)]
pub struct NotificationsConfig {
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
}

#[derive(Debug, Clone, Copy)]
pub struct RateLimits {
    pub requests_per_minute: u32,
    pub posts_per_minute_per_endpoint: u32,
}

#[derive(Debug, Clone, Copy)]
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
    /// How long open connections get to finish after SIGTERM.
    pub shutdown_drain_s: u64,
    /// Connecting to an app, and waiting for its response head.
    pub proxy_connect_timeout_s: u64,
    pub proxy_response_timeout_s: u64,
    /// Threads serving visitors' connections, each with a runtime of its own (default: one
    /// per CPU the daemon may run on).
    pub router_threads: usize,
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

/// The TOML file as written; every field optional so `--dev` and defaults can fill gaps.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    data_dir: Option<PathBuf>,
    apps_domain: Option<String>,
    control_host: Option<String>,
    http_listen: Option<String>,
    https_listen: Option<String>,
    api_listen: Option<String>,
    metrics_listen: Option<String>,
    #[serde(default)]
    metrics: RawMetrics,
    #[serde(default)]
    notifications: RawNotifications,
    #[serde(default)]
    tls: RawTls,
    #[serde(default)]
    rate_limits: RawRateLimits,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    sandbox: RawSandbox,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    requests: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotifications {
    retry_first_ms: Option<u64>,
    retry_max_ms: Option<u64>,
    max_attempts: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    mode: Option<String>,
    acme_directory: Option<String>,
    acme_email: Option<String>,
    acme_ca_file: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimits {
    requests_per_minute: Option<u32>,
    posts_per_minute_per_endpoint: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    build_memory_mb: Option<u64>,
    app_memory_mb: Option<u64>,
    pids: Option<u64>,
    build_timeout_s: Option<u64>,
    health_timeout_s: Option<u64>,
    health_interval_s: Option<u64>,
    build_disk_mb: Option<u64>,
    build_cache_mb: Option<u64>,
    static_cache_mb: Option<u64>,
    app_disk_mb: Option<u64>,
    disk_reserve_mb: Option<u64>,
    source_max_mb: Option<u64>,
    log_retention_mb: Option<u64>,
    log_rate_kb_s: Option<u64>,
    log_burst_kb: Option<u64>,
    build_cpus: Option<f64>,
    app_cpus: Option<f64>,
    app_stop_grace_s: Option<u64>,
    app_drain_s: Option<u64>,
    max_connections: Option<usize>,
    max_connections_per_client: Option<u32>,
    control_reserved_connections: Option<usize>,
    idle_timeout_s: Option<u64>,
    write_timeout_s: Option<u64>,
    max_websockets: Option<usize>,
    max_concurrent_builds: Option<usize>,
    max_websockets_per_client: Option<u32>,
    websocket_idle_timeout_s: Option<u64>,
    handshake_timeout_s: Option<u64>,
    header_timeout_s: Option<u64>,
    max_header_kb: Option<usize>,
    shutdown_drain_s: Option<u64>,
    proxy_connect_timeout_s: Option<u64>,
    proxy_response_timeout_s: Option<u64>,
    router_threads: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSandbox {
    mode: Option<String>,
    uid_base: Option<u32>,
    subnet: Option<String>,
    pass_env: Option<Vec<String>>,
    instance: Option<String>,
    allow_smtp: Option<bool>,
}

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

    fn from_raw(raw: RawConfig, dev: bool) -> Result<Config, ConfigError> {
        let data_dir = raw.data_dir.unwrap_or_else(|| {
            PathBuf::from(if dev {
                "./.slipway"
            } else {
                "/var/lib/slipway"
            })
        });
        let apps_domain =
            match raw.apps_domain {
                Some(domain) => domain.trim_end_matches('.').to_ascii_lowercase(),
                None if dev => "localhost".to_owned(),
                None => return Err(ConfigError::Invalid {
                    key: "apps_domain",
                    message:
                        "is required (e.g. apps_domain = \"apps.example.com\"), or run with --dev"
                            .into(),
                }),
            };
        if !is_hostname(&apps_domain) {
            return Err(ConfigError::Invalid {
                key: "apps_domain",
                message: format!("{apps_domain:?} is not a DNS name"),
            });
        }
        let control_host = raw
            .control_host
            .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
            .unwrap_or_else(|| format!("slipway.{apps_domain}"));
        if !is_hostname(&control_host) {
            return Err(ConfigError::Invalid {
                key: "control_host",
                message: format!("{control_host:?} is not a DNS name"),
            });
        }
        let http_listen = parse_addr(
            "http_listen",
            raw.http_listen
                .as_deref()
                .unwrap_or(if dev { "127.0.0.1:8080" } else { "0.0.0.0:80" }),
        )?;
        let https_listen = parse_addr(
            "https_listen",
            raw.https_listen.as_deref().unwrap_or(if dev {
                "127.0.0.1:8443"
            } else {
                "0.0.0.0:443"
            }),
        )?;
        let api_listen = match raw.api_listen.as_deref() {
            None | Some("") => None,
            Some(text) => Some(parse_addr("api_listen", text)?),
        };
        let metrics_listen = match raw.metrics_listen.as_deref() {
            None | Some("") => None,
            Some(text) => Some(parse_addr("metrics_listen", text)?),
        };
        let metrics = MetricsConfig {
            requests: raw.metrics.requests.unwrap_or(true),
        };
        let notifications = NotificationsConfig {
            retry_first_ms: positive(
                "notifications.retry_first_ms",
                raw.notifications.retry_first_ms,
                1000,
            )?,
            retry_max_ms: positive(
                "notifications.retry_max_ms",
                raw.notifications.retry_max_ms,
                3_600_000,
            )?,
            max_attempts: positive(
                "notifications.max_attempts",
                raw.notifications.max_attempts,
                10,
            )?,
        };
        if notifications.retry_max_ms < notifications.retry_first_ms {
            return Err(ConfigError::Invalid {
                key: "notifications.retry_max_ms",
                message: "must not be below notifications.retry_first_ms".into(),
            });
        }

        let tls_mode = match raw.tls.mode.as_deref() {
            None => {
                if dev {
                    TlsMode::Internal
                } else {
                    TlsMode::Acme
                }
            }
            Some("internal") => TlsMode::Internal,
            Some("acme") => TlsMode::Acme,
            Some("files") => TlsMode::Files,
            Some("off") => TlsMode::Off,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    key: "tls.mode",
                    message: format!("{other:?} is not one of internal, acme, files, off"),
                })
            }
        };
        let non_empty = |v: Option<String>| v.filter(|s| !s.is_empty());
        let tls = TlsConfig {
            mode: tls_mode,
            acme_directory: non_empty(raw.tls.acme_directory)
                .unwrap_or_else(|| LETS_ENCRYPT_DIRECTORY.to_owned()),
            acme_email: raw.tls.acme_email.unwrap_or_default(),
            acme_ca_file: non_empty(raw.tls.acme_ca_file).map(PathBuf::from),
            cert_file: non_empty(raw.tls.cert_file).map(PathBuf::from),
            key_file: non_empty(raw.tls.key_file).map(PathBuf::from),
        };
        if tls.mode == TlsMode::Files && (tls.cert_file.is_none() || tls.key_file.is_none()) {
            return Err(ConfigError::Invalid {
                key: "tls.cert_file",
                message: "tls.mode = \"files\" needs both tls.cert_file and tls.key_file".into(),
            });
        }

        let rate_limits = RateLimits {
            requests_per_minute: positive(
                "rate_limits.requests_per_minute",
                raw.rate_limits.requests_per_minute,
                60,
            )?,
            posts_per_minute_per_endpoint: positive(
                "rate_limits.posts_per_minute_per_endpoint",
                raw.rate_limits.posts_per_minute_per_endpoint,
                30,
            )?,
        };
        let limits = Limits {
            build_memory_mb: positive("limits.build_memory_mb", raw.limits.build_memory_mb, 1024)?,
            app_memory_mb: positive("limits.app_memory_mb", raw.limits.app_memory_mb, 1024)?,
            pids: positive("limits.pids", raw.limits.pids, 512)?,
            build_timeout_s: positive("limits.build_timeout_s", raw.limits.build_timeout_s, 900)?,
            health_timeout_s: positive("limits.health_timeout_s", raw.limits.health_timeout_s, 60)?,
            health_interval_s: positive(
                "limits.health_interval_s",
                raw.limits.health_interval_s,
                10,
            )?,
            build_disk_mb: positive("limits.build_disk_mb", raw.limits.build_disk_mb, 4096)?,
            build_cache_mb: positive("limits.build_cache_mb", raw.limits.build_cache_mb, 2048)?,
            static_cache_mb: positive("limits.static_cache_mb", raw.limits.static_cache_mb, 256)?,
            app_disk_mb: positive("limits.app_disk_mb", raw.limits.app_disk_mb, 1024)?,
            disk_reserve_mb: raw.limits.disk_reserve_mb.unwrap_or(1024),
            source_max_mb: positive("limits.source_max_mb", raw.limits.source_max_mb, 100)?,
            log_retention_mb: positive("limits.log_retention_mb", raw.limits.log_retention_mb, 10)?,
            log_rate_kb_s: positive("limits.log_rate_kb_s", raw.limits.log_rate_kb_s, 512)?,
            log_burst_kb: positive("limits.log_burst_kb", raw.limits.log_burst_kb, 4096)?,
            build_cpus: positive("limits.build_cpus", raw.limits.build_cpus, 2.0)?,
            app_cpus: positive("limits.app_cpus", raw.limits.app_cpus, 1.0)?,
            app_stop_grace_s: positive("limits.app_stop_grace_s", raw.limits.app_stop_grace_s, 10)?,
            app_drain_s: positive("limits.app_drain_s", raw.limits.app_drain_s, 10)?,
            max_connections: positive(
                "limits.max_connections",
                raw.limits.max_connections,
                10_000,
            )?,
            max_connections_per_client: positive(
                "limits.max_connections_per_client",
                raw.limits.max_connections_per_client,
                256,
            )?,
            control_reserved_connections: positive(
                "limits.control_reserved_connections",
                raw.limits.control_reserved_connections,
                128,
            )?,
            idle_timeout_s: positive("limits.idle_timeout_s", raw.limits.idle_timeout_s, 60)?,
            write_timeout_s: positive("limits.write_timeout_s", raw.limits.write_timeout_s, 30)?,
            max_concurrent_builds: positive(
                "limits.max_concurrent_builds",
                raw.limits.max_concurrent_builds,
                2,
            )?,
            max_websockets: positive("limits.max_websockets", raw.limits.max_websockets, 4096)?,
            max_websockets_per_client: positive(
                "limits.max_websockets_per_client",
                raw.limits.max_websockets_per_client,
                64,
            )?,
            websocket_idle_timeout_s: positive(
                "limits.websocket_idle_timeout_s",
                raw.limits.websocket_idle_timeout_s,
                300,
            )?,
            handshake_timeout_s: positive(
                "limits.handshake_timeout_s",
                raw.limits.handshake_timeout_s,
                10,
            )?,
            header_timeout_s: positive("limits.header_timeout_s", raw.limits.header_timeout_s, 30)?,
            max_header_kb: positive("limits.max_header_kb", raw.limits.max_header_kb, 64)?,
            shutdown_drain_s: positive("limits.shutdown_drain_s", raw.limits.shutdown_drain_s, 10)?,
            proxy_connect_timeout_s: positive(
                "limits.proxy_connect_timeout_s",
                raw.limits.proxy_connect_timeout_s,
                3,
            )?,
            proxy_response_timeout_s: positive(
                "limits.proxy_response_timeout_s",
                raw.limits.proxy_response_timeout_s,
                60,
            )?,
            router_threads: positive(
                "limits.router_threads",
                raw.limits.router_threads,
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            )?,
        };

        let sandbox_mode = match raw.sandbox.mode.as_deref() {
            None if dev => SandboxMode::Auto,
            Some("auto") => SandboxMode::Auto,
            None | Some("namespaces") => SandboxMode::Namespaces,
            Some("none") => SandboxMode::None,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    key: "sandbox.mode",
                    message: format!("{other:?} is not one of auto, namespaces, none"),
                })
            }
        };
        let subnet_text = raw.sandbox.subnet.as_deref().unwrap_or("10.213.0.0/16");
        let subnet = parse_subnet(subnet_text).ok_or_else(|| ConfigError::Invalid {
            key: "sandbox.subnet",
            message: format!("{subnet_text:?} is not an IPv4 CIDR range between /8 and /28"),
        })?;
        let uid_base = raw.sandbox.uid_base.unwrap_or(200_000);
        if !(65_536..=u32::MAX - PROJECT_UID_RANGE).contains(&uid_base) {
            return Err(ConfigError::Invalid {
                key: "sandbox.uid_base",
                message: format!(
                    "{uid_base} must be between 65536 and {}",
                    u32::MAX - PROJECT_UID_RANGE
                ),
            });
        }
        let instance = raw.sandbox.instance.unwrap_or_else(|| "slipway".into());
        if !valid_instance(&instance) {
            return Err(ConfigError::Invalid {
                key: "sandbox.instance",
                message: format!(
                    "{instance:?} must start with a lowercase letter and hold only lowercase \
                     letters, digits and _ (at most 24)"
                ),
            });
        }
        let sandbox = SandboxConfig {
            instance,
            allow_smtp: raw.sandbox.allow_smtp.unwrap_or(false),
            mode: sandbox_mode,
            uid_base,
            subnet,
            pass_env: raw.sandbox.pass_env.unwrap_or_else(|| {
                [
                    "HTTP_PROXY",
                    "HTTPS_PROXY",
                    "NO_PROXY",
                    "SSL_CERT_FILE",
                    "SSL_CERT_DIR",
                    "NODE_EXTRA_CA_CERTS",
                    "REQUESTS_CA_BUNDLE",
                    "PIP_CERT",
                    "PIP_INDEX_URL",
                    "CURL_CA_BUNDLE",
                    "GIT_SSL_CAINFO",
                ]
                .map(String::from)
                .to_vec()
            }),
        };

        Ok(Config {
            data_dir,
            apps_domain,
            control_host,
            http_listen,
            https_listen,
            api_listen,
            tls,
            rate_limits,
            limits,
            sandbox,
            metrics_listen,
            metrics,
            notifications,
            dev,
        })
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

fn positive<T: PartialOrd + Default + Copy>(
    key: &'static str,
    value: Option<T>,
    default: T,
) -> Result<T, ConfigError> {
    let value = value.unwrap_or(default);
    if value <= T::default() {
        return Err(ConfigError::Invalid {
            key,
            message: "must be greater than 0".into(),
        });
    }
    Ok(value)
}

fn parse_addr(key: &'static str, text: &str) -> Result<SocketAddr, ConfigError> {
    text.parse().map_err(|_| ConfigError::Invalid {
        key,
        message: format!("{text:?} is not an address like \"127.0.0.1:8080\" or \"[::]:443\""),
    })
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

fn parse_subnet(text: &str) -> Option<(std::net::Ipv4Addr, u8)> {
    let (addr, prefix) = text.split_once('/')?;
    let addr: std::net::Ipv4Addr = addr.parse().ok()?;
    let prefix: u8 = prefix.parse().ok()?;
    if !(8..=28).contains(&prefix) {
        return None;
    }
    let mask = u32::MAX << (32 - prefix);
    Some((std::net::Ipv4Addr::from(u32::from(addr) & mask), prefix))
}

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
