//! Wiring: `run(config, shutdown)` is the whole daemon; `main` and the tests call it. It is
//! four steps, each in its own file, and one ordered stop:
//!
//! 1. `base`: the data dir checked, the store opened, surviving apps found, the sandbox,
//!    secret key and tokens loaded;
//! 2. `serve::Sockets::open`: the listeners bound (or handed over by systemd), so every later
//!    part knows the addresses;
//! 3. `services`: the control plane's parts built, then everything routed or live before
//!    brought back;
//! 4. `serve::start`: the router threads and the long-lived tasks;
//!
//! then `stop_in_order`, over the one shutdown tree (`shutdown`).

mod base;
mod serve;
mod services;
mod shutdown;

use std::net::SocketAddr;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use base::stop_apps_offline;

use crate::config::Config;

/// The addresses the daemon actually bound (port 0 resolved).
#[derive(Debug, Clone)]
pub struct Bound {
    pub http: SocketAddr,
    pub https: Option<SocketAddr>,
    pub api: Option<SocketAddr>,
    /// `metrics_listen`, when set.
    pub metrics: Option<SocketAddr>,
}

/// Runs the daemon until `shutdown` is cancelled. `on_ready` is called once every listener is
/// bound and every live app is back.
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(&Bound),
) -> anyhow::Result<()> {
    let drain = Duration::from_secs(config.limits.shutdown_drain_s);
    let stop = shutdown::Shutdown::new(shutdown, drain);
    let mut base = base::Base::open(config)?;
    let sockets = serve::Sockets::open(&base.config).await?;
    let bound = sockets.bound.clone();
    let services = services::Services::build(&base, &bound, stop.runs.clone()).await?;
    let survivors = std::mem::take(&mut base.survivors);
    let flusher = services.bring_back(survivors, stop.logs.clone()).await?;
    let serving = serve::start(&base, &services, sockets, &stop)?;

    let config = &base.config;
    tracing::info!(http = %bound.http, https = ?bound.https, api = ?bound.api, control_host = %config.control_host, sandbox = %config.sandbox.mode.as_str(), "slipway is ready");
    on_ready(&bound);
    crate::notify::ready();
    stop.root.cancelled().await;
    stop_in_order(stop, &base, &services, serving, flusher).await
}

/// The ordered stop, once the root token is cancelled: runs end INTERRUPTED; listeners drain;
/// WebSocket tunnels close; apps are let go (namespaces mode: the next daemon adopts them) or
/// stopped; logs flush; token use times are written.
async fn stop_in_order(
    stop: shutdown::Shutdown,
    base: &base::Base,
    services: &services::Services,
    serving: serve::Serving,
    flusher: tokio::task::JoinHandle<()>,
) -> anyhow::Result<()> {
    tracing::info!("shutting down: draining connections");
    crate::notify::stopping();
    stop.runs.cancel();
    services.pipeline.interrupt_all().await;
    services.jobs.shutdown().await;
    stop.wait_for_tasks().await;
    // WebSocket tunnels are not connections the listeners wait for: end them before the apps.
    serving.proxy.close_tunnels();
    let _ = tokio::time::timeout(stop.drain, serving.proxy.tunnels().wait()).await;
    serving.router.release();
    // `slipway stop-apps` stops apps that outlive the daemon.
    if services.supervisor.leave_all().await > 0 {
        base.sandbox.leave();
    } else {
        base.sandbox.shutdown();
    }
    stop.logs.cancel();
    let _ = flusher.await;
    let tokens = base.tokens.clone();
    base.store.call(move |_| tokens.flush_uses()).await?;
    let _ = std::fs::remove_file(crate::admin::socket_path(&base.config.data_dir));
    tracing::info!("stopped");
    Ok(())
}
