//! The command line: server side (`serve`, `check-config`, `token`, `ca`, `backup`,
//! `restore`, `doctor`), client side
//! (`login`, `deploy`, `logs`, `env`, `projects`, `rollback`, `scale`, `ps`, `addons`, `db`, …; run by
//! `client::main`) and the
//! hidden `sandbox-exec` helper entry. Parsing only; `main.rs` acts on it.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "slipway",
    version,
    about = "Self-hosted deployments: build, sandbox and serve web apps"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon.
    Serve {
        /// Development defaults: ./.slipway, *.localhost, ports 8080/8443, internal TLS.
        #[arg(long)]
        dev: bool,
        /// TOML config file (overrides the defaults and --dev).
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
    },
    /// Validate a config file without starting.
    CheckConfig {
        #[arg(long)]
        dev: bool,
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
    },
    /// Manage API tokens of the running daemon (through its admin socket; root only).
    Token {
        #[command(subcommand)]
        action: TokenAction,
        #[command(flatten)]
        target: DaemonTarget,
    },
    /// The internal certificate authority.
    Ca {
        #[command(subcommand)]
        action: CaAction,
        #[command(flatten)]
        target: DaemonTarget,
    },
    /// Stop every running app. Apps outlive daemon restarts and upgrades; this stops them
    /// (through the running daemon, or directly when none runs). Package removal runs it.
    StopApps {
        #[command(flatten)]
        target: DaemonTarget,
    },
    /// Write a backup of the running daemon (store snapshot, keys, CA and certificates,
    /// sources, live builds, app data) to one archive, checked before it is kept.
    Backup {
        /// The archive to write (.tar.gz; mode 0600: it holds the secret key).
        #[arg(long, short, value_name = "FILE")]
        output: PathBuf,
        #[command(flatten)]
        target: DaemonTarget,
    },
    /// Make a new data dir from a backup (refuses a corrupt archive or one from a newer
    /// Slipway); then start a daemon with data_dir pointing at it.
    Restore {
        /// The archive `slipway backup` wrote.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The data dir to create (must not exist, or be empty).
        #[arg(long, value_name = "DIR")]
        data_dir: PathBuf,
    },
    /// Check this machine for what Slipway needs and say what to fix (exit 1 when something
    /// blocks it).
    Doctor {
        #[arg(long)]
        dev: bool,
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
    },
    /// This machine in the cluster apps run on: `slipway node join --manager ADDR --token T`
    /// makes the runtime image here (from this binary; nothing is pulled) and joins the swarm
    /// as a worker.
    Node {
        #[command(subcommand)]
        action: NodeAction,
    },
    /// Internal: the sandbox helper the daemon execs (reads its spec from a pipe).
    #[command(hide = true)]
    SandboxExec,
    /// Internal: a cluster task's first process (fetches and checks its build, runs it).
    #[command(hide = true)]
    TaskBoot { secret: PathBuf },
    #[command(flatten)]
    Client(ClientCommand),
}

/// The client side: talks to a daemon's API from any machine with a token (`SLIPWAY_URL` and
/// `SLIPWAY_TOKEN`, else the file `slipway login` writes).
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Save the API URL and token to ~/.config/slipway/credentials.toml (0600).
    Login {
        /// The daemon's API URL, e.g. https://slipway.apps.example.com.
        #[arg(long, value_name = "URL")]
        url: String,
        /// The API token (read from stdin when omitted, so it stays out of `ps`).
        #[arg(long, value_name = "TOKEN")]
        token: Option<String>,
    },
    /// Pack a directory (respecting .gitignore), upload, build and serve it; follows the logs.
    Deploy(DeployArgs),
    /// Print a deployment's logs (`-f`: follow them live until the deployment ends).
    Logs {
        /// A deployment id (dpl_…).
        deployment: String,
        #[arg(short, long)]
        follow: bool,
    },
    /// A project's environment variables (applied to its next deployment).
    Env {
        #[command(subcommand)]
        action: EnvAction,
        /// The project (default: `project` in ./slipway.toml).
        #[arg(long, global = true, value_name = "SLUG")]
        project: Option<String>,
    },
    /// List projects: slug, state, URL and live deployment.
    Projects,
    /// Re-activate an earlier successful deployment without rebuilding, and wait for it.
    Rollback {
        /// The project's slug or id.
        project: String,
        /// The deployment to go back to (dpl_…).
        deployment: String,
    },
    /// Put a project's app to sleep now (its instances stop; the next request wakes it).
    Sleep {
        /// The project's slug or id.
        project: String,
        /// One of its previews instead of production.
        #[arg(long)]
        preview: Option<String>,
    },
    /// Wake a project's sleeping app and wait until it runs.
    Wake {
        /// The project's slug or id.
        project: String,
        /// One of its previews instead of production.
        #[arg(long)]
        preview: Option<String>,
    },
    /// A project's traffic, app memory and CPU, build cache and certificates since the daemon
    /// started.
    Usage {
        /// The project's slug or id.
        project: String,
        /// Print the API's JSON instead of the summary.
        #[arg(long)]
        json: bool,
    },
    /// The cluster's nodes apps run on (`[cluster] engine`): name, address, state, tasks.
    Nodes {
        /// Print the API's JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// A project's deployments, newest first: environment, branch, commit, trigger, state.
    Deployments {
        /// The project's slug or id.
        project: String,
    },
    /// A project's previews (branches and pull requests) and their hosts.
    Previews {
        /// The project's slug or id.
        project: String,
    },
    /// A project's custom domains: `slipway domains add|ls|rm`.
    Domains {
        #[command(subcommand)]
        action: DomainsAction,
        /// The project (default: `project` in ./slipway.toml).
        #[arg(long, global = true, value_name = "SLUG")]
        project: Option<String>,
    },
    /// Set how many instances of the live deployment's process types run (`web=2 worker=1`)
    /// and, with `--memory`, each instance's memory limit; then print the formation. Only the
    /// named types change, without a rebuild.
    Scale {
        /// A process type and how many instances it runs (0 stops it), e.g. `web=2`.
        #[arg(value_name = "TYPE=N", value_parser = parse_type_setting,
              required_unless_present = "memory")]
        instances: Vec<TypeSetting>,
        /// A process type and each instance's memory limit in MiB, e.g. `worker=256`
        /// (repeat for several types).
        #[arg(long = "memory", value_name = "TYPE=MB", value_parser = parse_type_setting)]
        memory: Vec<TypeSetting>,
        /// The project (default: `project` in ./slipway.toml).
        #[arg(long, value_name = "SLUG")]
        project: Option<String>,
    },
    /// The live deployment's process instances: type, state, pid, address, memory used and
    /// limit, restarts, start time.
    Ps {
        /// The project (default: `project` in ./slipway.toml).
        #[arg(long, value_name = "SLUG")]
        project: Option<String>,
        /// Print the API's JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Run a one-off command in a fresh sandbox from the live deployment's build (its env
    /// vars and /data), e.g. `slipway run -- npm run migrate`; prints its output as it comes
    /// and exits with the command's exit code.
    Run {
        /// The project (default: `project` in ./slipway.toml).
        #[arg(long, value_name = "SLUG")]
        project: Option<String>,
        /// A variable for this run only (repeatable), e.g. `-e DEBUG=1`.
        #[arg(short = 'e', long = "env", value_name = "KEY=VALUE", value_parser = parse_env_setting)]
        env: Vec<(String, String)>,
        /// Seconds before the run is stopped (default 3600).
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<u32>,
        /// Keep standard input open and attach a terminal (`-it`, for shells and consoles).
        #[arg(short = 'i', long)]
        interactive: bool,
        /// Allocate a terminal (the same as `-i`; `-it` reads as in docker).
        #[arg(short = 't', long)]
        tty: bool,
        /// Start it and print its id without waiting for it.
        #[arg(short = 'd', long)]
        detach: bool,
        /// The command and its arguments, joined with spaces and run by `sh -c`.
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "COMMAND"
        )]
        command: Vec<String>,
    },
    /// PostgreSQL and Redis add-ons: `slipway addons list|create|show|delete|link|unlink|credentials`.
    Addons {
        #[command(subcommand)]
        action: AddonsAction,
    },
    /// Reach an add-on from here through the API (no public port): `slipway db proxy|connect`.
    Db {
        #[command(subcommand)]
        action: DbAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum AddonsAction {
    /// The add-ons a project is linked to.
    List {
        /// The project (default: `project` in ./slipway.toml).
        #[arg(long, value_name = "SLUG")]
        project: Option<String>,
        /// Print the API's JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Create an add-on linked to the project (its production gets the URL from its next
    /// deployment); waits until it accepts connections.
    Create(CreateAddonArgs),
    /// One add-on's state, size and links (never its password).
    Show {
        /// The add-on's id (adn_…).
        #[arg(value_name = "ADDON")]
        id: String,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete an add-on and its data.
    Delete {
        /// The add-on's id (adn_…).
        #[arg(value_name = "ADDON")]
        id: String,
        /// Its id again: deleting it deletes its data.
        #[arg(long, value_name = "ADDON")]
        confirm: String,
    },
    /// Link another project: its next deployment gets the URL and may connect.
    Link {
        /// The add-on's id (adn_…).
        #[arg(value_name = "ADDON")]
        id: String,
        #[arg(value_name = "PROJECT")]
        project: String,
    },
    /// Unlink a project (from its next deployment on).
    Unlink {
        /// The add-on's id (adn_…).
        #[arg(value_name = "ADDON")]
        id: String,
        #[arg(value_name = "PROJECT")]
        project: String,
    },
    /// Move an add-on to a new server version: a new add-on with its data (dumped, restored,
    /// counted), the links moved; the old one kept stopped for `rollback`.
    Upgrade {
        /// The add-on's id (adn_…).
        #[arg(value_name = "ADDON")]
        id: String,
        /// PostgreSQL: the major version to move to (default: the newest installed).
        #[arg(long, value_name = "MAJOR")]
        version: Option<String>,
    },
    /// Go back to the add-on this one was upgraded from (the links move back).
    Rollback {
        /// The add-on an upgrade made (adn_…).
        #[arg(value_name = "ADDON")]
        id: String,
    },
    /// The add-on's URL, user and password (the read is audited).
    Credentials {
        /// The add-on's id (adn_…).
        #[arg(value_name = "ADDON")]
        id: String,
        /// Print the API's JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `slipway addons create`.
#[derive(Debug, clap::Args)]
pub struct CreateAddonArgs {
    #[arg(value_enum)]
    pub kind: AddonKindArg,
    /// Its memory limit in MiB (default 256); its settings follow from it.
    #[arg(long, value_name = "MB")]
    pub memory: Option<u32>,
    /// Its data volume in MiB (default 1024).
    #[arg(long, value_name = "MB")]
    pub disk: Option<u32>,
    /// The variable linked apps get (default DATABASE_URL / REDIS_URL).
    #[arg(long, value_name = "NAME")]
    pub env_name: Option<String>,
    /// Redis only: `cache` keeps nothing on disk and evicts least recently used keys.
    #[arg(long, value_enum)]
    pub mode: Option<AddonModeArg>,
    /// PostgreSQL only: point-in-time recovery (WAL archived, base backups taken).
    #[arg(long)]
    pub pitr: bool,
    /// The project (default: `project` in ./slipway.toml).
    #[arg(long, value_name = "SLUG")]
    pub project: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AddonKindArg {
    Postgres,
    Redis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AddonModeArg {
    Persistent,
    Cache,
}

#[derive(Debug, Subcommand)]
pub enum DbAction {
    /// Listen on 127.0.0.1 and carry every connection to the add-on through the API, until
    /// Ctrl-C; prints the URL to connect to.
    Proxy {
        /// The add-on's id (adn_…).
        #[arg(value_name = "ADDON")]
        id: String,
        /// The local port (default: the kind's, 5432 or 6379; 0: any free port).
        #[arg(long, value_name = "N")]
        port: Option<u16>,
    },
    /// Run `psql` or `redis-cli` here against the add-on (through a proxy on a free local
    /// port; the password in its environment) and exit with its exit code.
    Connect {
        /// The add-on's id (adn_…).
        #[arg(value_name = "ADDON")]
        id: String,
        /// Passed on to psql / redis-cli, e.g. `-- -c 'select 1'`.
        #[arg(last = true, value_name = "ARGS")]
        args: Vec<String>,
    },
}

/// `KEY=VALUE` of `slipway run -e`; the name's rules are the API's to check.
pub fn parse_env_setting(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err("expected KEY=VALUE, e.g. DEBUG=1".into()),
    }
}

/// `TYPE=N` on the command line (`slipway scale web=2 --memory worker=256`): a process type
/// and a whole number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeSetting {
    pub process: String,
    pub value: u32,
}

/// Parses `TYPE=N` for clap, so a malformed one is a usage error (exit 2) that says why.
/// The number's range is the API's to check (instances 0–32, memory 32–262144 MiB).
pub fn parse_type_setting(text: &str) -> Result<TypeSetting, String> {
    let Some((process, value)) = text.split_once('=') else {
        return Err("expected TYPE=N, e.g. web=2".into());
    };
    crate::formation::check_name(process)?;
    let value = value.parse::<u32>().map_err(|_| {
        format!("{value:?} is not a whole number (expected TYPE=N, e.g. {process}=2)")
    })?;
    Ok(TypeSetting {
        process: process.to_owned(),
        value,
    })
}

#[derive(Debug, Subcommand)]
pub enum DomainsAction {
    /// Add a domain; its certificate is issued at once (see `ls` for its status).
    Add {
        #[arg(value_name = "DOMAIN")]
        domain: String,
        /// Send this domain's visitors (308) to another domain of the project or its slug host.
        #[arg(long, value_name = "HOST")]
        redirect_to: Option<String>,
    },
    /// List the domains with their status and certificate.
    Ls,
    /// Remove a domain: it stops being served at once.
    Rm {
        #[arg(value_name = "DOMAIN")]
        domain: String,
    },
}

/// `slipway deploy`: every flag overrides the same key of `DIR/slipway.toml`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct DeployArgs {
    /// The directory to deploy.
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Project slug (default: the directory's name, slugified).
    #[arg(long, value_name = "SLUG")]
    pub project: Option<String>,
    /// Install command, e.g. `npm ci`.
    #[arg(long, value_name = "CMD")]
    pub install: Option<String>,
    /// Build command, e.g. `npm run build`.
    #[arg(long, value_name = "CMD")]
    pub build: Option<String>,
    /// Start command (server mode; it must listen on $PORT). Without it the output is served
    /// statically.
    #[arg(long, value_name = "CMD")]
    pub start: Option<String>,
    /// Release command: run once per deployment before it goes live, with the app's env
    /// vars and /data (migrations); a failure keeps the live deployment.
    #[arg(long, value_name = "CMD")]
    pub release: Option<String>,
    /// The build's output directory to serve (static mode).
    #[arg(long, value_name = "DIR")]
    pub output: Option<String>,
    /// A path the app must answer with 2xx/3xx before it goes live, e.g. /healthz.
    #[arg(long, value_name = "PATH")]
    pub health: Option<String>,
    /// Print what would be deployed (with no command given: the detected plan and why) and
    /// stop before uploading anything.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub enum EnvAction {
    /// Set variables: `slipway env set KEY=value OTHER=value`. Without `--environment` or
    /// `--branch` they apply to production and every preview.
    Set {
        #[arg(required = true, value_name = "KEY=VALUE")]
        pairs: Vec<String>,
        /// Only where they apply: `production` or `preview` (repeat for both).
        #[arg(long = "environment", value_name = "ENV")]
        environments: Vec<EnvEnvironment>,
        /// Only this branch's previews (with no `--environment`: previews only).
        #[arg(long, value_name = "BRANCH")]
        branch: Option<String>,
    },
    /// List the variables, their values and where each applies.
    Ls,
    /// Remove a variable.
    Rm {
        #[arg(value_name = "KEY")]
        key: String,
    },
}

/// Where `slipway env set` variables apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EnvEnvironment {
    Production,
    Preview,
}

/// Which daemon to talk to: its data dir (from the config, --dev, or given directly).
#[derive(Debug, clap::Args)]
pub struct DaemonTarget {
    #[arg(long, global = true)]
    pub dev: bool,
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The daemon's data_dir (overrides the config's).
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum TokenAction {
    /// Create a token and print its secret (shown once).
    Create {
        #[arg(long)]
        name: String,
        /// admin (everything), deploy (its projects, no tokens or new projects) or read (GET
        /// only, env values masked).
        #[arg(long, value_parser = ["admin", "deploy", "read"], default_value = "admin")]
        scope: String,
        /// Limit a deploy or read token to this project (repeat for several).
        #[arg(long = "project", value_name = "SLUG")]
        projects: Vec<String>,
        /// The token expires after this many days.
        #[arg(long, value_name = "DAYS")]
        expires_in_days: Option<u32>,
    },
    /// List tokens (never their secrets).
    List,
    /// Revoke a token at once.
    Revoke { id: String },
}

#[derive(Debug, Subcommand)]
pub enum CaAction {
    /// Print the internal CA's root certificate (PEM) for trust stores.
    Export {
        /// Print the root that signs the projects' custom domains instead. It has no name
        /// constraints: trusting it trusts this daemon for any name (see docs/security.md).
        #[arg(long)]
        domains: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum NodeAction {
    /// Make this machine a worker: the runtime image on its engine, then `swarm join`.
    Join {
        /// A manager's swarm address, e.g. 10.0.0.1:2377.
        #[arg(long, value_name = "ADDR")]
        manager: String,
        /// The worker join token (`docker swarm join-token -q worker` on the manager).
        #[arg(long, value_name = "TOKEN")]
        token: String,
        /// The address other nodes reach this one at (default: the engine picks).
        #[arg(long, value_name = "ADDR")]
        advertise_addr: Option<String>,
        /// Where this node's swarm listens.
        #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:2377")]
        listen_addr: String,
        /// This machine's Docker Engine socket.
        #[arg(long, value_name = "PATH", default_value = "/var/run/docker.sock")]
        docker_socket: PathBuf,
        /// The runtime image to make (the control plane's `[cluster] runtime_image`; default
        /// `slipway-runtime:<version>`).
        #[arg(long, value_name = "REF")]
        image: Option<String>,
    },
}
