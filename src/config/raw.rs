//! The config file as written ([`RawConfig`], every field optional) and its validation into a
//! [`Config`] on top of the production or `--dev` defaults.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::{
    is_hostname, valid_instance, Config, ConfigError, Limits, MetricsConfig, NotificationsConfig,
    RateLimits, SandboxConfig, SandboxMode, TlsConfig, TlsMode, LETS_ENCRYPT_DIRECTORY,
    PROJECT_UID_RANGE,
};

/// The TOML file as written; every field optional so `--dev` and defaults can fill gaps.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
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
    limits: Limits,
    #[serde(default)]
    sandbox: RawSandbox,
    #[serde(default)]
    domains: super::domains::RawDomains,
    #[serde(default)]
    jobs: super::jobs::RawJobs,
    #[serde(default)]
    addons: super::addons::RawAddons,
    #[serde(default)]
    sleep: super::sleep::RawSleep,
    #[serde(default)]
    cluster: super::cluster::RawCluster,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    requests: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNotifications {
    retry_first_ms: Option<u64>,
    retry_max_ms: Option<u64>,
    max_attempts: Option<u32>,
    allow_destinations: Option<Vec<String>>,
    queue_per_subscription: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    mode: Option<String>,
    acme_directory: Option<String>,
    acme_email: Option<String>,
    acme_ca_file: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
    internal_domain_suffixes: Option<Vec<String>>,
    acme_orders_per_hour: Option<u32>,
    acme_orders_per_project_per_hour: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRateLimits {
    requests_per_minute: Option<u32>,
    posts_per_minute_per_endpoint: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSandbox {
    mode: Option<String>,
    uid_base: Option<u32>,
    subnet: Option<String>,
    pass_env: Option<Vec<String>>,
    instance: Option<String>,
    allow_smtp: Option<bool>,
}

impl Config {
    pub(super) fn from_raw(raw: RawConfig, dev: bool) -> Result<Config, ConfigError> {
        let data_dir = raw.data_dir.clone().unwrap_or_else(|| {
            PathBuf::from(if dev {
                "./.slipway"
            } else {
                "/var/lib/slipway"
            })
        });
        let (apps_domain, control_host) = raw.names(dev)?;
        let listens = raw.listens(dev)?;
        // Checked in the order a file reads, so the first mistake is the one reported.
        let notifications = raw.notifications.validate()?;
        let tls = raw.tls.validate(dev)?;
        let rate_limits = raw.rate_limits.validate()?;
        raw.limits.check()?;
        let domains = raw.domains.validate(dev)?;
        let sandbox = raw.sandbox.validate(dev)?;
        let jobs = raw.jobs.validate()?;
        let addons = raw.addons.validate()?;
        let sleep = raw.sleep.validate()?;
        let cluster = raw.cluster.validate()?;
        Ok(Config {
            data_dir,
            apps_domain,
            control_host,
            http_listen: listens.http,
            https_listen: listens.https,
            api_listen: listens.api,
            metrics_listen: listens.metrics,
            tls,
            rate_limits,
            limits: raw.limits,
            sandbox,
            metrics: MetricsConfig {
                requests: raw.metrics.requests.unwrap_or(true),
            },
            notifications,
            domains,
            jobs,
            addons,
            sleep,
            cluster,
            dev,
        })
    }
}

/// The addresses the daemon listens on.
struct Listens {
    http: SocketAddr,
    https: SocketAddr,
    api: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
}

impl RawConfig {
    /// `apps_domain` (required without `--dev`) and `control_host`, lowercase DNS names.
    fn names(&self, dev: bool) -> Result<(String, String), ConfigError> {
        let apps_domain =
            match self.apps_domain.as_deref() {
                Some(domain) => domain.trim_end_matches('.').to_ascii_lowercase(),
                None if dev => "localhost".to_owned(),
                None => return Err(ConfigError::Invalid {
                    key: "apps_domain".into(),
                    message:
                        "is required (e.g. apps_domain = \"apps.example.com\"), or run with --dev"
                            .into(),
                }),
            };
        if !is_hostname(&apps_domain) {
            return Err(ConfigError::Invalid {
                key: "apps_domain".into(),
                message: format!("{apps_domain:?} is not a DNS name"),
            });
        }
        let control_host = self
            .control_host
            .as_deref()
            .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
            .unwrap_or_else(|| format!("slipway.{apps_domain}"));
        if !is_hostname(&control_host) {
            return Err(ConfigError::Invalid {
                key: "control_host".into(),
                message: format!("{control_host:?} is not a DNS name"),
            });
        }
        Ok((apps_domain, control_host))
    }

    fn listens(&self, dev: bool) -> Result<Listens, ConfigError> {
        let http_listen = parse_addr(
            "http_listen",
            self.http_listen.as_deref().unwrap_or(if dev {
                "127.0.0.1:8080"
            } else {
                "0.0.0.0:80"
            }),
        )?;
        let https_listen = parse_addr(
            "https_listen",
            self.https_listen.as_deref().unwrap_or(if dev {
                "127.0.0.1:8443"
            } else {
                "0.0.0.0:443"
            }),
        )?;
        let api_listen = match self.api_listen.as_deref() {
            None | Some("") => None,
            Some(text) => Some(parse_addr("api_listen", text)?),
        };
        let metrics_listen = match self.metrics_listen.as_deref() {
            None | Some("") => None,
            Some(text) => Some(parse_addr("metrics_listen", text)?),
        };
        Ok(Listens {
            http: http_listen,
            https: https_listen,
            api: api_listen,
            metrics: metrics_listen,
        })
    }
}

impl RawNotifications {
    fn validate(self) -> Result<NotificationsConfig, ConfigError> {
        let mut allow_destinations = Vec::new();
        for text in self.allow_destinations.iter().flatten() {
            let block = super::Cidr::parse(text).ok_or_else(|| ConfigError::Invalid {
                key: "notifications.allow_destinations".into(),
                message: format!("{text:?} is not an address or address/prefix"),
            })?;
            allow_destinations.push(block);
        }
        let notifications = NotificationsConfig {
            allow_destinations,
            queue_per_subscription: positive(
                "notifications.queue_per_subscription",
                self.queue_per_subscription,
                100,
            )?,
            retry_first_ms: positive("notifications.retry_first_ms", self.retry_first_ms, 1000)?,
            retry_max_ms: positive("notifications.retry_max_ms", self.retry_max_ms, 3_600_000)?,
            max_attempts: positive("notifications.max_attempts", self.max_attempts, 10)?,
        };
        if notifications.retry_max_ms < notifications.retry_first_ms {
            return Err(ConfigError::Invalid {
                key: "notifications.retry_max_ms".into(),
                message: "must not be below notifications.retry_first_ms".into(),
            });
        }
        Ok(notifications)
    }
}

impl RawTls {
    fn validate(self, dev: bool) -> Result<TlsConfig, ConfigError> {
        let tls_mode = match self.mode.as_deref() {
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
                    key: "tls.mode".into(),
                    message: format!("{other:?} is not one of internal, acme, files, off"),
                })
            }
        };
        let non_empty = |v: Option<String>| v.filter(|s| !s.is_empty());
        let tls = TlsConfig {
            mode: tls_mode,
            acme_directory: non_empty(self.acme_directory)
                .unwrap_or_else(|| LETS_ENCRYPT_DIRECTORY.to_owned()),
            acme_email: self.acme_email.unwrap_or_default(),
            acme_ca_file: non_empty(self.acme_ca_file).map(PathBuf::from),
            cert_file: non_empty(self.cert_file).map(PathBuf::from),
            key_file: non_empty(self.key_file).map(PathBuf::from),
            internal_domain_suffixes: super::domains::suffixes(
                "tls.internal_domain_suffixes",
                self.internal_domain_suffixes,
                dev,
            )?,
            acme_orders_per_hour: positive(
                "tls.acme_orders_per_hour",
                self.acme_orders_per_hour,
                100,
            )?,
            acme_orders_per_project_per_hour: positive(
                "tls.acme_orders_per_project_per_hour",
                self.acme_orders_per_project_per_hour,
                10,
            )?,
        };
        if tls.mode == TlsMode::Files && (tls.cert_file.is_none() || tls.key_file.is_none()) {
            return Err(ConfigError::Invalid {
                key: "tls.cert_file".into(),
                message: "tls.mode = \"files\" needs both tls.cert_file and tls.key_file".into(),
            });
        }
        Ok(tls)
    }
}

impl RawRateLimits {
    fn validate(self) -> Result<RateLimits, ConfigError> {
        Ok(RateLimits {
            requests_per_minute: positive(
                "rate_limits.requests_per_minute",
                self.requests_per_minute,
                60,
            )?,
            posts_per_minute_per_endpoint: positive(
                "rate_limits.posts_per_minute_per_endpoint",
                self.posts_per_minute_per_endpoint,
                30,
            )?,
        })
    }
}

impl RawSandbox {
    fn validate(self, dev: bool) -> Result<SandboxConfig, ConfigError> {
        let sandbox_mode = match self.mode.as_deref() {
            None if dev => SandboxMode::Auto,
            Some("auto") => SandboxMode::Auto,
            None | Some("namespaces") => SandboxMode::Namespaces,
            Some("none") => SandboxMode::None,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    key: "sandbox.mode".into(),
                    message: format!("{other:?} is not one of auto, namespaces, none"),
                })
            }
        };
        let subnet_text = self.subnet.as_deref().unwrap_or("10.213.0.0/16");
        let subnet = parse_subnet(subnet_text).ok_or_else(|| ConfigError::Invalid {
            key: "sandbox.subnet".into(),
            message: format!("{subnet_text:?} is not an IPv4 CIDR range between /8 and /28"),
        })?;
        let uid_base = self.uid_base.unwrap_or(200_000);
        if !(65_536..=u32::MAX - PROJECT_UID_RANGE).contains(&uid_base) {
            return Err(ConfigError::Invalid {
                key: "sandbox.uid_base".into(),
                message: format!(
                    "{uid_base} must be between 65536 and {}",
                    u32::MAX - PROJECT_UID_RANGE
                ),
            });
        }
        let instance = self.instance.unwrap_or_else(|| "slipway".into());
        if !valid_instance(&instance) {
            return Err(ConfigError::Invalid {
                key: "sandbox.instance".into(),
                message: format!(
                    "{instance:?} must start with a lowercase letter and hold only lowercase \
                 letters, digits and _ (at most 24)"
                ),
            });
        }
        Ok(SandboxConfig {
            instance,
            allow_smtp: self.allow_smtp.unwrap_or(false),
            mode: sandbox_mode,
            uid_base,
            subnet,
            pass_env: self.pass_env.unwrap_or_else(|| {
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
        })
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
            key: key.into(),
            message: "must be greater than 0".into(),
        });
    }
    Ok(value)
}

fn parse_addr(key: &'static str, text: &str) -> Result<SocketAddr, ConfigError> {
    text.parse().map_err(|_| ConfigError::Invalid {
        key: key.into(),
        message: format!("{text:?} is not an address like \"127.0.0.1:8080\" or \"[::]:443\""),
    })
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
