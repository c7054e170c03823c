//! The command line: server side (`serve`, `check-config`, `token`, `ca`) and the hidden
//! `sandbox-exec` helper entry. Parsing only; `main.rs` acts on it.

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
    /// Internal: the sandbox helper the daemon execs (reads its spec from a pipe).
    #[command(hide = true)]
    SandboxExec,
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
    },
    /// List tokens (never their secrets).
    List,
    /// Revoke a token at once.
    Revoke { id: String },
}

#[derive(Debug, Subcommand)]
pub enum CaAction {
    /// Print the internal CA's root certificate (PEM) for trust stores.
    Export,
}
