//! The `slipway` binary: parse the command line, load the config (exit 78 when it is invalid),
//! set up logging, and hand over to the library (`app::run` for the daemon, `operator` for the
//! operator's commands, `client` for the API client).

use std::process::ExitCode;

use clap::Parser;
use slipway::cli::{Cli, Command};
use slipway::config::Config;
use slipway::operator;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::SandboxExec => slipway::sandbox::sandbox_exec_main(),
        Command::Node {
            action:
                slipway::cli::NodeAction::Join {
                    manager,
                    token,
                    advertise_addr,
                    listen_addr,
                    docker_socket,
                    image,
                },
        } => {
            let args = slipway::cluster::join::JoinArgs {
                manager,
                token,
                advertise_addr,
                listen_addr,
                docker_socket,
                image: image.unwrap_or_else(slipway::config::default_runtime_image),
            };
            match slipway::cluster::join::run(&args) {
                Ok(said) => {
                    print!("{said}");
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("slipway node join: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::TaskBoot { secret } => match slipway::cluster::boot::run(&secret) {
            Ok(never) => match never {},
            Err(error) => {
                eprintln!("slipway task-boot: {error}");
                ExitCode::FAILURE
            }
        },
        Command::CheckConfig { dev, config } => operator::check_config(config.as_deref(), dev),
        Command::Serve { dev, config } => {
            let config = match Config::load(config.as_deref(), dev) {
                Ok(config) => config,
                Err(error) => return operator::config_error(error),
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
        Command::Token { action, target } => operator::token(action, target),
        Command::Ca { action, target } => operator::ca(action, target),
        Command::StopApps { target } => operator::stop_apps(target),
        Command::Backup { output, target } => operator::backup(target, output),
        Command::Restore { file, data_dir } => operator::restore(&file, &data_dir),
        Command::Doctor { dev, config } => operator::doctor(config.as_deref(), dev),
        Command::Client(command) => slipway::client::main(command),
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

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("SLIPWAY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
