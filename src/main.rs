//! The `slipway` binary: parse the command line, load the config (exit 78 when it is invalid),
//! set up logging, and hand over to the library.

use std::process::ExitCode;

use clap::Parser;
use slipway::cli::{CaAction, Cli, Command, DaemonTarget, TokenAction};
use slipway::config::{Config, EXIT_CONFIG};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::SandboxExec => slipway::sandbox::sandbox_exec_main(),
        Command::CheckConfig { dev, config } => match Config::load(config.as_deref(), dev) {
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
        },
        Command::Serve { dev, config } => {
            let config = match Config::load(config.as_deref(), dev) {
                Ok(config) => config,
                Err(error) => return config_error(error),
            };
            init_tracing();
            slipway::heap::bound_heap_growth();
            let runtime = tokio::runtime::Runtime::new().expect("cannot start the tokio runtime");
            match runtime.block_on(serve(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("slipway: {error:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Token { action, target } => {
            let request = match action {
                TokenAction::Create {
                    name,
                    scope,
                    projects,
                    expires_in_days,
                } => slipway::admin::AdminRequest::TokenCreate {
                    name,
                    scope: Some(match scope.as_str() {
                        "deploy" => slipway::auth::Scope::Deploy,
                        "read" => slipway::auth::Scope::Read,
                        _ => slipway::auth::Scope::Admin,
                    }),
                    projects: (!projects.is_empty()).then_some(projects),
                    expires_in_days,
                },
                TokenAction::List => slipway::admin::AdminRequest::TokenList,
                TokenAction::Revoke { id } => slipway::admin::AdminRequest::TokenRevoke { id },
            };
            admin(target, request)
        }
        Command::Ca {
            action: CaAction::Export { domains },
            target,
        } => admin(
            target,
            match domains {
                false => slipway::admin::AdminRequest::CaExport,
                true => slipway::admin::AdminRequest::CaExportDomains,
            },
        ),
        Command::StopApps { target } => stop_apps(target),
        Command::Backup { output, target } => backup(target, output),
        Command::Restore { file, data_dir } => match slipway::backup::restore(&file, &data_dir) {
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
        },
        Command::Doctor { dev, config } => match Config::load(config.as_deref(), dev) {
            Ok(config) => {
                let checks = slipway::doctor::run(&config);
                print!("{}", slipway::doctor::render(&checks));
                ExitCode::from(slipway::doctor::exit_code(&checks))
            }
            Err(error) => config_error(error),
        },
        Command::Client(command) => slipway::client::main(command),
    }
}

/// `slipway backup`: the daemon streams the archive over its admin socket into FILE.partial;
/// it is verified against its own manifest, then renamed to FILE.
fn backup(target: DaemonTarget, output: std::path::PathBuf) -> ExitCode {
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
        let header = slipway::admin::request_backup(&data_dir, &mut file).await?;
        tokio::io::AsyncWriteExt::flush(&mut file).await?;
        file.sync_all().await?;
        let (_, manifest) = slipway::backup::verify(&partial).map_err(|error| {
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

async fn serve(config: Config) -> anyhow::Result<()> {
    let shutdown = tokio_util::sync::CancellationToken::new();
    let signal_shutdown = shutdown.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        signal_shutdown.cancel();
    });
    slipway::app::run(config, shutdown, |bound| {
        // Printed on stdout, one line per listener, for operators and for tests.
        println!("listening http {}", bound.http);
        if let Some(https) = bound.https {
            println!("listening https {https}");
        }
        if let Some(api) = bound.api {
            println!("listening api {api}");
        }
        if let Some(metrics) = bound.metrics {
            println!("listening metrics {metrics}");
        }
        println!("ready");
    })
    .await
}

fn admin(target: DaemonTarget, request: slipway::admin::AdminRequest) -> ExitCode {
    let data_dir = match target_data_dir(target) {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    let runtime = client_runtime();
    match runtime.block_on(slipway::admin::request(&data_dir, &request)) {
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
fn stop_apps(target: DaemonTarget) -> ExitCode {
    let mut config = match Config::load(target.config.as_deref(), target.dev) {
        Ok(config) => config,
        Err(error) => return config_error(error),
    };
    if let Some(dir) = target.data_dir {
        config.data_dir = dir;
    }
    let runtime = client_runtime();
    let socket = slipway::admin::socket_path(&config.data_dir);
    let through_daemon = socket.exists().then(|| {
        runtime.block_on(slipway::admin::request(
            &config.data_dir,
            &slipway::admin::AdminRequest::StopApps,
        ))
    });
    let stopped = match through_daemon {
        Some(Ok(result)) => Ok(result["stopped"].as_u64().unwrap_or(0) as usize),
        // No daemon answers (a stale socket after a crash): stop them directly.
        _ => slipway::app::stop_apps_offline(&config),
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

fn config_error(error: slipway::config::ConfigError) -> ExitCode {
    eprintln!("slipway: {error}");
    ExitCode::from(EXIT_CONFIG as u8)
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("SLIPWAY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
