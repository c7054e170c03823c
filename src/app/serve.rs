//! The third step: the listeners open, the router threads serve visitors, and the control
//! plane's long-lived tasks (the API listener, metrics, notifications, the admin socket,
//! renewals, the add-ons' disk watch, maintenance) run until the daemon's shutdown, each tracked by `Shutdown`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;

use super::base::Base;
use super::services::Services;
use super::shutdown::Shutdown;
use super::Bound;
use crate::config::{Config, TlsMode};
use crate::control::ControlHost;
use crate::dispatch::{ControlHandler, Dispatch};
use crate::proxy::{Proxy, ProxySettings};
use crate::server::threads::{Listener, RouterThreads, Shared};
use crate::server::{BudgetLimits, ConnectionBudget, ConnectionLimits, ListenerKind};

/// The sockets the daemon serves on, bound before anything is built on their addresses.
pub(super) struct Sockets {
    pub bound: Bound,
    http: TcpListener,
    https: Option<TcpListener>,
    api: Option<TcpListener>,
    metrics: Option<TcpListener>,
}

impl Sockets {
    /// Handed over by systemd (slipway.socket) or bound here.
    pub async fn open(config: &Config) -> anyhow::Result<Sockets> {
        let crate::server::listeners::Listeners { http, https, api } =
            crate::server::listeners::open(config).await?;
        let metrics = match config.metrics_listen {
            Some(addr) => Some(crate::server::listeners::bind(addr, "metrics_listen").await?),
            None => None,
        };
        let address = |l: &TcpListener| l.local_addr();
        let bound = Bound {
            http: http.local_addr()?,
            https: https.as_ref().map(address).transpose()?,
            api: api.as_ref().map(address).transpose()?,
            metrics: metrics.as_ref().map(address).transpose()?,
        };
        Ok(Sockets {
            bound,
            http,
            https,
            api,
            metrics,
        })
    }
}

/// What serves visitors, kept for the ordered stop.
pub(super) struct Serving {
    pub proxy: Arc<Proxy>,
    pub router: RouterThreads,
}

/// Starts serving on `sockets`.
pub(super) fn start(
    base: &Base,
    services: &Services,
    sockets: Sockets,
    shutdown: &Shutdown,
) -> anyhow::Result<Serving> {
    let config = &base.config;
    let control: Arc<dyn ControlHandler> = Arc::new(ControlHost::new(services.ctx.clone()));
    let proxy = Arc::new(Proxy::with_settings(proxy_settings(config)));
    let dispatch = |redirect_plain: bool, https_port_suffix: String, acme| {
        Arc::new(Dispatch {
            routes: services.routes.clone(),
            proxy: proxy.clone(),
            control: control.clone(),
            acme,
            redirect_plain,
            https_port_suffix,
            waking: crate::dispatch::Waking::of(&config.sleep),
        })
    };
    let visitors = dispatch(
        config.tls.mode != TlsMode::Off,
        sockets
            .bound
            .https
            .map(|a| crate::urls::port_suffix(a.port(), 443))
            .unwrap_or_default(),
        services.tls.clone(),
    );
    let limits = ConnectionLimits::from_config(&config.limits);
    let budget = ConnectionBudget::new(BudgetLimits::from_config(&config.limits));
    // Visitors are served by the router threads (`server::threads`); the API's own listener,
    // when configured, by the main runtime like the rest of the control plane.
    let visitor = |socket: TcpListener, kind| -> std::io::Result<_> {
        Ok(Listener {
            socket: socket.into_std()?,
            kind,
            dispatch: visitors.clone(),
        })
    };
    let mut listeners = vec![visitor(sockets.http, ListenerKind::Plain)?];
    if let (Some(listener), Some(tls)) = (sockets.https, &services.tls) {
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
        listeners.push(visitor(listener, ListenerKind::Tls(acceptor))?);
        shutdown.spawn(tls.clone().run_renewals(shutdown.root.child_token()));
    }
    shutdown.spawn(
        services
            .ctx
            .domains
            .clone()
            .run_rechecks(shutdown.root.child_token()),
    );
    let shared = Shared {
        budget: budget.clone(),
        limits,
        shutdown: shutdown.root.clone(),
        drain: shutdown.drain,
        load: services.daemon_metrics.router_load.clone(),
    };
    let mut router =
        RouterThreads::start(listeners, shared).context("starting the router threads")?;
    shutdown.spawn(router.drained());
    if let Some(listener) = sockets.api {
        // The extra API listener is plain HTTP without redirects.
        shutdown.spawn(crate::server::serve(
            listener,
            ListenerKind::Plain,
            dispatch(false, String::new(), None),
            budget,
            limits,
            shutdown.root.clone(),
            shutdown.drain,
        ));
    }
    start_control_tasks(base, services, sockets.metrics, shutdown)?;
    Ok(Serving { proxy, router })
}

fn proxy_settings(config: &Config) -> ProxySettings {
    let limits = &config.limits;
    ProxySettings {
        connect_timeout: Duration::from_secs(limits.proxy_connect_timeout_s),
        response_timeout: Duration::from_secs(limits.proxy_response_timeout_s),
        max_tunnels: limits.max_websockets,
        max_tunnels_per_client: limits.max_websockets_per_client,
        tunnel_idle_timeout: Duration::from_secs(limits.websocket_idle_timeout_s),
        ..ProxySettings::STANDARD
    }
}

/// The metrics listener, notification deliveries, the admin socket, the add-ons' disk watch,
/// the usage history's sampler and maintenance.
fn start_control_tasks(
    base: &Base,
    services: &Services,
    metrics: Option<TcpListener>,
    shutdown: &Shutdown,
) -> anyhow::Result<()> {
    let config = &base.config;
    if let Some(listener) = metrics {
        shutdown.spawn(crate::usage::server::serve(
            listener,
            services.observatory.clone(),
            shutdown.root.clone(),
        ));
    }
    shutdown.spawn(crate::notifications::delivery::run(
        services.ctx.notifier.clone(),
        base.secrets.clone(),
        crate::notifications::RetryPolicy::from_config(&config.notifications),
        shutdown.root.clone(),
    ));
    let admin_listener =
        crate::admin::bind(&config.data_dir).context("binding the admin socket")?;
    shutdown.spawn(crate::admin::serve(
        admin_listener,
        admin_state(base, services),
        shutdown.root.clone(),
    ));
    shutdown.spawn(
        services
            .jobs
            .clone()
            .run_scheduler(shutdown.root.child_token()),
    );
    let disk_watch = crate::addons::watch::DiskWatch::new(
        services.addons.clone(),
        services.ctx.notifier.clone(),
        services.daemon_metrics.clone(),
    );
    shutdown.spawn(disk_watch.run(
        Duration::from_secs(config.addons.disk_check_interval_s),
        shutdown.root.child_token(),
    ));
    spawn_sleeper(services, shutdown);
    shutdown.spawn(crate::usage::history::run(
        services.observatory.clone(),
        crate::usage::history::Sampler::new(
            base.store.clone(),
            crate::usage::history::Clock::System,
        ),
        shutdown.root.clone(),
    ));
    shutdown.spawn(maintain(
        base.store.clone(),
        base.tokens.clone(),
        shutdown.root.clone(),
    ));
    Ok(())
}

/// The idle tick and the wake calls of sleeping routes (`sleep::Sleeper::run`).
fn spawn_sleeper(services: &Services, shutdown: &Shutdown) {
    if let Some(calls) = services.routes.take_wake_calls() {
        let sleeper = services.ctx.sleeper.clone();
        shutdown.spawn(sleeper.run(calls, shutdown.root.child_token()));
    }
}

fn admin_state(base: &Base, services: &Services) -> Arc<crate::admin::AdminState> {
    let (admin_tls, domains_tls) = (services.tls.clone(), services.tls.clone());
    Arc::new(crate::admin::AdminState {
        tokens: base.tokens.clone(),
        supervisor: services.supervisor.clone(),
        addons: services.addons.clone(),
        store: base.store.clone(),
        data_dir: base.config.data_dir.clone(),
        ca_root_pem: Box::new(move || admin_tls.as_ref().and_then(|tls| tls.root_pem())),
        domains_root_pem: Box::new(move || {
            domains_tls
                .as_ref()
                .filter(|tls| tls.mode() == TlsMode::Internal)
                .and_then(|tls| tls.domains_root_pem())
        }),
    })
}

/// Every 30 s: token use times written; every 10 minutes: the audit log's retention and
/// expired idempotency keys purged.
async fn maintain(
    store: crate::store::Store,
    tokens: Arc<crate::auth::Tokens>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut rounds: u64 = 0;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_secs(30)) => {}
        }
        rounds += 1;
        if rounds % 20 == 1 {
            let purged = store
                .call(|s| {
                    let now = crate::ids::now_ms();
                    Ok::<_, crate::store::StoreError>((
                        s.purge_audit(now)?,
                        s.purge_idempotency(now)?,
                    ))
                })
                .await;
            if let Err(error) = purged {
                tracing::warn!(%error, "could not purge old audit entries and idempotency keys");
            }
        }
        let flushed = tokens.clone();
        if let Err(error) = store.call(move |_| flushed.flush_uses()).await {
            tracing::warn!(%error, "could not record token use times");
        }
    }
}
