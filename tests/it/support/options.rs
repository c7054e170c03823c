//! What a `TestDaemon` is started with: [`DaemonOptions`], built step by step from its
//! defaults (plain HTTP, `apps_domain = "localhost"`, no sandbox), and the [`TlsSetup`] that
//! becomes its `[tls]` table. `TestDaemon` turns them into `slipway.toml` and a command line.

use std::path::{Path, PathBuf};

/// The `[tls]` table of a test daemon: one variant per `tls.mode`.
#[derive(Clone, Debug)]
pub enum TlsSetup {
    Off,
    Internal,
    /// The operator's certificate chain and key (PEM files).
    Files {
        cert_file: PathBuf,
        key_file: PathBuf,
    },
    /// An ACME CA (Pebble in the tests: `Pebble::tls_setup`); `ca_file` is what the daemon
    /// trusts for the directory's own HTTPS.
    Acme {
        directory: String,
        email: String,
        ca_file: PathBuf,
    },
}

impl TlsSetup {
    /// The body of the `[tls]` table.
    fn table(&self) -> String {
        let path = |path: &Path| format!("{:?}", path.display().to_string());
        match self {
            TlsSetup::Off => "mode = \"off\"\n".into(),
            TlsSetup::Internal => {
                "mode = \"internal\"\ninternal_domain_suffixes = [\"test\"]\n".into()
            }
            TlsSetup::Files {
                cert_file,
                key_file,
            } => format!(
                "mode = \"files\"\ncert_file = {}\nkey_file = {}\n",
                path(cert_file),
                path(key_file)
            ),
            TlsSetup::Acme {
                directory,
                email,
                ca_file,
            } => format!(
                "mode = \"acme\"\nacme_directory = {directory:?}\nacme_email = {email:?}\n\
                 acme_ca_file = {}\n",
                path(ca_file)
            ),
        }
    }
}

/// Run by [`DaemonOptions::in_netns`] before the daemon, in a mount namespace of its own:
/// the namespace's interfaces in `/sys/class/net` (a sysfs mounts the network namespace of
/// whoever mounts it; the helper reads a link's `operstate` there), the rest of `/sys`
/// (cgroups) left as it is, unlike `ip netns exec`.
const NETNS_SYSFS: &str = "d=$(mktemp -d) && mount -t sysfs sysfs \"$d\" \
    && mount --bind \"$d/class/net\" /sys/class/net \
    && mount --bind \"$d/devices/virtual/net\" /sys/devices/virtual/net \
    && umount \"$d\" && rmdir \"$d\" && exec \"$@\"";

/// How to start a test daemon: `DaemonOptions::default()` and then the builder methods.
#[derive(Clone)]
pub struct DaemonOptions {
    pub(super) apps_domain: String,
    https_port: u16,
    tls: TlsSetup,
    /// `None`: no `sandbox.mode` line (the default of the mode `--dev` picks).
    sandbox_mode: Option<&'static str>,
    extra_toml: String,
    /// Top-level keys, written before the first table.
    root_toml: String,
    /// More keys of the `[tls]` table.
    tls_toml: String,
    /// The body of the `[domains]` table.
    domains_toml: String,
    pub(super) dev: bool,
    pub(super) env: Vec<(&'static str, String)>,
    pub(super) uid: Option<u32>,
    /// A program (and its arguments) that starts the daemon's command line, e.g.
    /// `systemd-socket-activate -l …`; empty: the daemon is run directly.
    pub(super) launcher: Vec<String>,
    /// A network namespace (`/run/netns/<name>`) the daemon and `stop-apps` run in.
    pub(super) netns: Option<String>,
    /// Where plain HTTP listens (port 0).
    http_ip: std::net::Ipv4Addr,
}

impl Default for DaemonOptions {
    fn default() -> Self {
        DaemonOptions {
            apps_domain: "localhost".into(),
            https_port: 0,
            tls: TlsSetup::Off,
            sandbox_mode: Some("none"),
            extra_toml: String::new(),
            root_toml: String::new(),
            tls_toml: String::new(),
            // Test names under `.test` need no proof; any other is looked up on a closed
            // loopback port (tests talk to loopback only), so it stays unproven.
            domains_toml: "trusted_suffixes = [\"test\"]\nnameserver = \"127.0.0.1:9\"\n".into(),
            dev: false,
            env: Vec::new(),
            uid: None,
            launcher: Vec::new(),
            netns: None,
            http_ip: std::net::Ipv4Addr::LOCALHOST,
        }
    }
}

impl DaemonOptions {
    /// Apps are served at `<slug>.<apps_domain>`, the API at `slipway.<apps_domain>`.
    pub fn apps_domain(mut self, apps_domain: &str) -> Self {
        apps_domain.clone_into(&mut self.apps_domain);
        self
    }

    /// HTTPS listens on 127.0.0.1 at this port (0, the default: any).
    pub fn https_port(mut self, port: u16) -> Self {
        self.https_port = port;
        self
    }

    pub fn tls(mut self, tls: TlsSetup) -> Self {
        self.tls = tls;
        self
    }

    /// `sandbox.mode` (the default is `none`).
    pub fn sandbox_mode(mut self, mode: &'static str) -> Self {
        self.sandbox_mode = Some(mode);
        self
    }

    /// No `sandbox.mode` line: the daemon picks its own default.
    pub fn default_sandbox_mode(mut self) -> Self {
        self.sandbox_mode = None;
        self
    }

    /// TOML appended to the generated config, right after the `[sandbox]` table's lines (so
    /// it may continue that table before opening others).
    pub fn extra_toml(mut self, toml: &str) -> Self {
        self.extra_toml.push_str(toml);
        self
    }

    /// Top-level config keys (e.g. `metrics_listen = "127.0.0.1:0"`), written before the
    /// first table.
    pub fn root_toml(mut self, toml: &str) -> Self {
        self.root_toml.push_str(toml);
        self
    }

    /// More keys of the `[tls]` table (after those of the [`TlsSetup`]).
    pub fn tls_keys(mut self, toml: &str) -> Self {
        self.tls_toml.push_str(toml);
        self
    }

    /// The body of the `[domains]` table, instead of the default (`.test` names trusted, DNS
    /// on a closed loopback port).
    pub fn domains_table(mut self, toml: &str) -> Self {
        toml.clone_into(&mut self.domains_toml);
        self
    }

    /// Runs `serve --dev --config …` (the config still overrides the dev defaults).
    pub fn dev(mut self) -> Self {
        self.dev = true;
        self
    }

    /// Extra environment for the daemon (e.g. a `PATH` without some tool).
    pub fn env(mut self, name: &'static str, value: &str) -> Self {
        self.env.push((name, value.to_owned()));
        self
    }

    /// Runs the daemon as this uid (and gid) instead of the test's own.
    pub fn uid(mut self, uid: u32) -> Self {
        self.uid = Some(uid);
        self
    }

    /// Starts the daemon through `launcher` (its arguments, then `slipway serve …`).
    pub fn launched_by(mut self, launcher: &[&str]) -> Self {
        self.launcher = launcher.iter().map(|arg| arg.to_string()).collect();
        self
    }

    /// Runs the daemon (and `slipway stop-apps`) in the network namespace `/run/netns/<name>`
    /// (through `nsenter --net`, with that namespace's sysfs: [`NETNS_SYSFS`]), plain HTTP listening on `address` there: the test reaches it
    /// over a link of its own into that namespace.
    pub fn in_netns(mut self, name: &str, address: std::net::Ipv4Addr) -> Self {
        self.netns = Some(name.to_owned());
        self.http_ip = address;
        self
    }

    /// The programs (and arguments) the daemon's command line starts with: `nsenter` for
    /// [`DaemonOptions::in_netns`], then the launcher, if any.
    pub(super) fn prefix(&self, with_launcher: bool) -> Vec<String> {
        let mut prefix = Vec::new();
        if let Some(netns) = &self.netns {
            prefix.extend(
                ["nsenter", &format!("--net=/run/netns/{netns}")]
                    .into_iter()
                    .chain(["unshare", "--mount", "--propagation", "slave"])
                    .chain(["sh", "-c", NETNS_SYSFS, "sh"])
                    .map(str::to_owned),
            );
        }
        if with_launcher {
            prefix.extend(self.launcher.iter().cloned());
        }
        prefix
    }

    /// `slipway.<apps_domain>`.
    pub(super) fn control_host(&self) -> String {
        format!("slipway.{}", self.apps_domain)
    }

    /// The whole `slipway.toml`, with the data under `data_dir`.
    pub(super) fn config_toml(&self, data_dir: &Path) -> String {
        format!(
            "data_dir = {data:?}\napps_domain = {domain:?}\ncontrol_host = {control:?}\n\
             http_listen = \"{http_ip}:0\"\nhttps_listen = \"127.0.0.1:{https_port}\"\n{root}\n[tls]\n{tls}{tls_keys}\n\
             [domains]\n{domains}\n[sandbox]\n{sandbox}\n{extra}\n",
            data = data_dir.display().to_string(),
            domain = self.apps_domain,
            control = self.control_host(),
            https_port = self.https_port,
            http_ip = self.http_ip,
            tls = self.tls.table(),
            tls_keys = self.tls_toml,
            domains = self.domains_toml,
            sandbox = match self.sandbox_mode {
                None => String::new(),
                Some(mode) => format!("mode = \"{mode}\"\n"),
            },
            extra = self.extra_toml,
            root = self.root_toml,
        )
    }
}
