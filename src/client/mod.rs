//! The client side of the `slipway` binary, for any machine with a token: `login`, `deploy`,
//! `logs`, `env`, `projects`, `rollback`, `scale`, `ps`, … (`main.rs` calls [`main`] with the parsed
//! [`ClientCommand`]). It speaks only the public REST API, never the daemon's store or
//! admin socket.
//!
//! Reading order: [`credentials`] (URL + token) → [`http`] over [`connect`] (HTTP/1.1,
//! rustls, `*.localhost` as loopback) → [`deploy`] ([`project_file`], [`pack`] with
//! [`gitignore`]) → [`follow`] (SSE via [`sse`], status polling) → [`display`] →
//! [`commands`] (the smaller commands), [`formation`] (`scale`, `ps`), [`addons`] and [`db`]
//! (`db proxy|connect`: an add-on through the API's tunnel).

pub mod addons;
pub mod commands;
pub mod connect;
pub mod credentials;
pub mod db;
pub mod deploy;
pub mod display;
pub mod domains;
pub mod follow;
pub mod formation;
pub mod gitignore;
pub mod history;
pub mod http;
pub mod nodes;
pub mod pack;
pub mod project_file;
pub mod runs;
pub mod sleep;
pub mod sse;
pub mod tty;
pub mod usage;

use std::path::PathBuf;
use std::process::ExitCode;

use crate::cli::ClientCommand;

/// Everything that stops a client command before it has an outcome to report.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Missing or invalid credentials, `slipway.toml`, or arguments.
    #[error("{0}")]
    Config(String),
    /// Arguments that parse one by one but not together (a type named twice): a usage error,
    /// exit 2 like clap's.
    #[error("{0}")]
    Usage(String),
    #[error("cannot reach {target}: {detail}")]
    Connect { target: String, detail: String },
    /// The API answered with its error envelope (a code this build does not know is kept as
    /// text).
    #[error("{message} ({code})")]
    Api {
        status: u16,
        code: crate::api::types::WireCode,
        message: String,
    },
    /// Another non-2xx answer without the API's envelope (e.g. a proxy's page): a client-side
    /// condition, not an API error code.
    #[error("{message}")]
    Http { status: u16, message: String },
    #[error("unexpected answer from the API: {0}")]
    Protocol(String),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("{0}")]
    Io(String),
    #[error("cannot pack the directory: {0}")]
    Pack(#[from] pack::PackError),
}

/// Runs one client command on a small runtime; the exit code says how it went (0 success,
/// 1 a failed run or any error, 2 a usage error; printed on stderr).
pub fn main(command: ClientCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("slipway: cannot start the tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(command));
    // A read of stdin may still block a thread (`slipway run -it`): do not wait for it.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(error @ ClientError::Usage(_)) => {
            eprintln!("slipway: {error}");
            ExitCode::from(2)
        }
        Err(error) => {
            eprintln!("slipway: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one client command against the API named by the environment or credentials file.
pub async fn run(command: ClientCommand) -> Result<ExitCode, ClientError> {
    let api = || api_client(&credentials::load()?);
    match command {
        ClientCommand::Login { url, token } => commands::login(&url, token).await,
        ClientCommand::Deploy(args) => deploy::deploy(&api()?, args).await,
        ClientCommand::Logs { deployment, follow } => {
            commands::logs(&api()?, &deployment, follow).await
        }
        ClientCommand::Env { action, project } => {
            commands::env(&api()?, action, project.as_deref()).await
        }
        ClientCommand::Projects => commands::projects(&api()?).await,
        ClientCommand::Nodes { json } => nodes::nodes(&api()?, json).await,
        ClientCommand::Rollback {
            project,
            deployment,
        } => commands::rollback(&api()?, &project, &deployment).await,
        ClientCommand::Sleep { project, preview } => {
            sleep::sleep(&api()?, &project, preview.as_deref()).await
        }
        ClientCommand::Wake { project, preview } => {
            sleep::wake(&api()?, &project, preview.as_deref()).await
        }
        ClientCommand::Usage { project, json } => usage::usage(&api()?, &project, json).await,
        ClientCommand::Deployments { project } => history::deployments(&api()?, &project).await,
        ClientCommand::Previews { project } => history::previews(&api()?, &project).await,
        ClientCommand::Domains { action, project } => {
            domains::domains(&api()?, action, project.as_deref()).await
        }
        ClientCommand::Scale {
            instances,
            memory,
            project,
        } => {
            // The arguments are checked before anything is read or sent.
            let change = formation::scale_body(&instances, &memory)?;
            formation::scale(&api()?, change, project.as_deref()).await
        }
        ClientCommand::Ps { project, json } => {
            formation::ps(&api()?, project.as_deref(), json).await
        }
        ClientCommand::Run {
            project,
            env,
            timeout,
            interactive,
            tty,
            detach,
            command,
        } => {
            let args = runs::RunArgs {
                project,
                env,
                timeout_s: timeout,
                interactive: interactive || tty,
                detach,
                command,
            };
            runs::run(&api()?, args).await
        }
        ClientCommand::Addons { action } => addons::addons(&api()?, action).await,
        ClientCommand::Db { action } => db::db(api()?, action).await,
    }
}

/// An API client for `credentials`, trusting for `https` the webpki roots, the system bundle
/// and `SLIPWAY_CA_FILE` when set.
pub fn api_client(credentials: &credentials::Credentials) -> Result<http::ApiClient, ClientError> {
    let endpoint = connect::Endpoint::parse(&credentials.url)?;
    let tls = match endpoint.https {
        true => {
            let extra = std::env::var_os("SLIPWAY_CA_FILE")
                .filter(|value| !value.is_empty())
                .map(PathBuf::from);
            Some(connect::tls_config(
                std::path::Path::new(connect::SYSTEM_CA_FILE),
                extra.as_deref(),
            )?)
        }
        false => None,
    };
    http::ApiClient::new(credentials, tls)
}

/// Percent-encodes one path segment (ids and slugs pass unchanged).
pub fn path_segment(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'~' => {
                encoded.push(byte as char)
            }
            other => encoded.push_str(&format!("%{other:02X}")),
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    #[test]
    fn path_segments_cannot_escape() {
        assert_eq!(super::path_segment("dpl_abc-1"), "dpl_abc-1");
        assert_eq!(super::path_segment("../x y/"), "%2E%2E%2Fx%20y%2F");
    }
}
