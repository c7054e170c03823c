//! The operator's commands on this machine (`slipway token|ca|backup|restore|stop-apps|doctor|
//! check-config`): through the running daemon's admin socket, or offline on its data dir.
//! Each returns the process's exit code; `main.rs` only dispatches to them.

use std::process::ExitCode;

use crate::admin::AdminRequest;
use crate::cli::{CaAction, DaemonTarget, TokenAction};
use crate::config::{Config, EXIT_CONFIG};

/// `slipway check-config`: loads and validates the config, says what it found.
pub fn check_config(config: Option<&std::path::Path>, dev: bool) -> ExitCode {
    match Config::load(config, dev) {
        Ok(config) => {
            println!(
                "config OK: data_dir={} apps_domain={} tls={:?} sandbox={:?}",
                config.data_dir.display(),
                config.apps_domain,
                config.tls.mode,
                config.sandbox.mode
            );
            ExitCode::SUCCESS
        }
        Err(error) => config_error(error),
    }
}

/// `slipway doctor`: the machine's checks, rendered; the exit code follows the worst.
pub fn doctor(config: Option<&std::path::Path>, dev: bool) -> ExitCode {
    match Config::load(config, dev) {
        Ok(config) => {
            let checks = crate::doctor::run(&config);
            print!("{}", crate::doctor::render(&checks));
            ExitCode::from(crate::doctor::exit_code(&checks))
        }
        Err(error) => config_error(error),
    }
}

/// `slipway token create|list|revoke`.
pub fn token(action: TokenAction, target: DaemonTarget) -> ExitCode {
    let request = match action {
        TokenAction::Create {
            name,
            scope,
            projects,
            expires_in_days,
        } => AdminRequest::TokenCreate {
            name,
            scope: Some(match scope.as_str() {
                "deploy" => crate::auth::Scope::Deploy,
                "read" => crate::auth::Scope::Read,
                _ => crate::auth::Scope::Admin,
            }),
            projects: (!projects.is_empty()).then_some(projects),
            expires_in_days,
        },
        TokenAction::List => AdminRequest::TokenList,
        TokenAction::Revoke { id } => AdminRequest::TokenRevoke { id },
    };
    admin(target, request)
}

/// `slipway ca export [--domains]`.
pub fn ca(action: CaAction, target: DaemonTarget) -> ExitCode {
    let CaAction::Export { domains } = action;
    let request = match domains {
        false => AdminRequest::CaExport,
        true => AdminRequest::CaExportDomains,
    };
    admin(target, request)
}

/// `slipway restore FILE DATA_DIR` (offline: no daemon involved).
pub fn restore(file: &std::path::Path, data_dir: &std::path::Path) -> ExitCode {
    match crate::backup::restore(file, data_dir) {
        Ok(header) => {
            println!(
                "restored {} project(s) from {} (made by slipway {} at {}) into {}; set \
                 data_dir = {:?} in the config and start the daemon",
                header.projects,
                file.display(),
                header.slipway_version,
                header.created_at,
                data_dir.display(),
                data_dir.display().to_string()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("slipway: restore refused: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `slipway backup`: the daemon streams the archive over its admin socket into FILE.partial;
/// it is verified against its own manifest, then renamed to FILE.
pub fn backup(target: DaemonTarget, output: std::path::PathBuf) -> ExitCode {
    let data_dir = match target_data_dir(target) {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    let runtime = client_runtime();
    let mut partial_name = output.as_os_str().to_owned();
    partial_name.push(".partial");
    let partial = std::path::PathBuf::from(partial_name);
    let result = runtime.block_on(async {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)
            .map_err(|error| anyhow::anyhow!("cannot write {}: {error}", partial.display()))?;
        let mut file = tokio::fs::File::from_std(file);
        let header = crate::admin::request_backup(&data_dir, &mut file).await?;
        tokio::io::AsyncWriteExt::flush(&mut file).await?;
        file.sync_all().await?;
        let (_, manifest) = crate::backup::verify(&partial).map_err(|error| {
            anyhow::anyhow!(
                "the archive the daemon sent does not check out: {error} (see the daemon's log)"
            )
        })?;
        std::fs::rename(&partial, &output)?;
        anyhow::Ok((header, manifest))
    });
    match result {
        Ok((header, manifest)) => {
            let bytes: u64 = manifest.files.iter().map(|f| f.size).sum();
            println!(
                "backup written to {}: {} project(s), {} live deployment(s), {} files ({} bytes \
                 before compression), every checksum verified",
                output.display(),
                header.projects,
                header.live_deployments.len(),
                manifest.files.len(),
                bytes
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            let _ = std::fs::remove_file(&partial);
            eprintln!("slipway: backup failed: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn target_data_dir(target: DaemonTarget) -> Result<std::path::PathBuf, ExitCode> {
    match target.data_dir {
        Some(dir) => Ok(dir),
        None => match Config::load(target.config.as_deref(), target.dev) {
            Ok(config) => Ok(config.data_dir),
            Err(error) => Err(config_error(error)),
        },
    }
}

fn admin(target: DaemonTarget, request: AdminRequest) -> ExitCode {
    let data_dir = match target_data_dir(target) {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    let runtime = client_runtime();
    match runtime.block_on(crate::admin::request(&data_dir, &request)) {
        Ok(serde_json::Value::String(text)) => {
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        Ok(value) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&value).unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("slipway: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Through the running daemon's admin socket; directly when no daemon runs.
pub fn stop_apps(target: DaemonTarget) -> ExitCode {
    let mut config = match Config::load(target.config.as_deref(), target.dev) {
        Ok(config) => config,
        Err(error) => return config_error(error),
    };
    if let Some(dir) = target.data_dir {
        config.data_dir = dir;
    }
    let runtime = client_runtime();
    let socket = crate::admin::socket_path(&config.data_dir);
    let through_daemon = socket.exists().then(|| {
        runtime.block_on(crate::admin::request(
            &config.data_dir,
            &AdminRequest::StopApps,
        ))
    });
    let stopped = match through_daemon {
        Some(Ok(result)) => Ok(result["stopped"].as_u64().unwrap_or(0) as usize),
        // No daemon answers (a stale socket after a crash): stop them directly.
        _ => crate::app::stop_apps_offline(&config),
    };
    match stopped {
        Ok(count) => {
            println!("stopped {count} app(s)");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("slipway: stop-apps: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The small runtime the host-side commands (admin socket, backup, stop-apps) run on.
fn client_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

pub fn config_error(error: crate::config::ConfigError) -> ExitCode {
    eprintln!("slipway: {error}");
    ExitCode::from(EXIT_CONFIG as u8)
}
