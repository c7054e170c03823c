//! Wiring: opens the store, opens the listeners (`server::listeners`), starts every long-lived task and owns the
//! shutdown tree. `run(config, shutdown)` is the whole daemon; `main` and the tests call it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::Context;
use crate::config::{Config, TlsMode};
use crate::control::ControlHost;
use crate::dispatch::{ControlHandler, Dispatch};
use crate::server::{BudgetLimits, ConnectionBudget, ConnectionLimits, ListenerKind};
use crate::store::Store;

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
    if let Some(visible) = crate::sandbox::visible_to_sandboxes(&config.data_dir) {
        anyhow::bail!(
            "data_dir {} is under {}, which every sandbox sees (read-only); choose a data_dir \
             elsewhere (the default is /var/lib/slipway)",
            config.data_dir.display(),
            visible.display()
        );
    }
    if !config.dev {
        for advice in config.advice() {
            tracing::warn!("{advice}");
        }
    }
    let mut config = config;
    prepare_data_dir(&config)?;
    let store = Store::open(&config.data_dir)?;
    let survivors = surviving_apps(&store)?;
    let handles: Vec<_> = survivors.values().cloned().collect();
    let sandbox = Arc::new(start_sandbox(&config, &handles)?);
    // From here on the config names the mode in force, never `auto`.
    config.sandbox.mode = sandbox.mode();
    let config = Arc::new(config);
    let secrets = crate::secrets::SecretBox::open_or_create(&config.data_dir.join("secret.key"))?;
    let tokens = Arc::new(crate::auth::Tokens::load(store.clone())?);
    let token_path = config.data_dir.join("initial-admin-token");
    if tokens.bootstrap(&token_path, crate::ids::now_ms())? {
        tracing::info!(path = %token_path.display(), "created the initial admin token; read it from this file (mode 0600)");
    }

    // Handed over by systemd (slipway.socket) or bound here.
    let crate::server::listeners::Listeners {
        http: http_listener,
        https: https_listener,
        api: api_listener,
    } = crate::server::listeners::open(&config).await?;
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(crate::server::listeners::bind(addr, "metrics_listen").await?),
        None => None,
    };
    let bound = Bound {
        http: http_listener.local_addr()?,
        https: https_listener
            .as_ref()
            .map(|l| l.local_addr())
            .transpose()?,
        api: api_listener.as_ref().map(|l| l.local_addr()).transpose()?,
        metrics: metrics_listener
            .as_ref()
            .map(|l| l.local_addr())
            .transpose()?,
    };

    let urls = crate::urls::PublicUrls::new(
        bound.https.map(|a| a.port()),
        bound.http.port(),
        &config.control_host,
        &config.apps_domain,
    );
    let routes = Arc::new(
        crate::router::Routes::new(config.control_host.clone(), config.apps_domain.clone())
            .with_request_metrics(config.metrics.requests),
    );
    let daemon_metrics = Arc::new(crate::metrics::DaemonMetrics::new(
        crate::ids::now_ms() / 1000,
        config.limits.router_threads,
    ));
    let router_load = daemon_metrics.router_load.clone();
    let notifier = crate::notifications::Notifier::new(store.clone(), &config.notifications);
    let secrets = Arc::new(secrets);
    let hub = crate::logs::LogHub::new(
        store.clone(),
        crate::logs::LogLimits {
            retention_bytes: config.limits.log_retention_mb * 1024 * 1024,
            rate_bytes_per_second: config.limits.log_rate_kb_s * 1024,
            burst_bytes: config.limits.log_burst_kb * 1024,
        },
    );
    let runner: Arc<dyn crate::sandbox::Runner> = sandbox.clone();
    let runner_for_usage = runner.clone();
    let supervisor = crate::supervisor::Supervisor::new(
        runner.clone(),
        hub.clone(),
        routes.clone(),
        store.clone(),
        notifier.clone(),
        Duration::from_secs(config.limits.app_stop_grace_s),
        Duration::from_secs(config.limits.health_interval_s),
    );
    let sources = Arc::new(
        crate::source::SourceStore::open(config.data_dir.join("sources"))
            .context("opening the source archive store")?,
    );
    let tls = match config.tls.mode {
        TlsMode::Off => None,
        _ => {
            let tls_config = config.clone();
            let tls_store: Arc<dyn crate::tls::TlsStore> = Arc::new(StoreTls(store.clone()));
            let manager = tokio::task::spawn_blocking(move || {
                crate::tls::TlsManager::new(
                    &tls_config.tls,
                    &tls_config.apps_domain,
                    &tls_config.control_host,
                    tls_store,
                    Arc::new(crate::tls::SystemClock),
                )
            })
            .await?
            .context("setting up TLS (tls.mode)")?;
            let tls_notifier = notifier.clone();
            let apps_domain = config.apps_domain.clone();
            manager.on_failure(Box::new(move |name, error| {
                let slug = crate::router::app_slug(name, &apps_domain);
                tls_notifier.certificate_failed(name, slug, error);
            }));
            Some(manager)
        }
    };
    let runs_shutdown = CancellationToken::new();
    let volumes = {
        let (reserve, data_dir) = (config.limits.disk_reserve_mb, config.data_dir.clone());
        let want = config.sandbox.mode == crate::config::SandboxMode::Namespaces;
        tokio::task::spawn_blocking(move || {
            let volumes = crate::disk::Volumes::detect(reserve, want, &data_dir);
            // A daemon killed while a backup read its volumes left them frozen.
            if volumes.limited() {
                crate::disk::thaw_all_under(&data_dir);
            }
            volumes
        })
        .await?
    };
    let pipeline = crate::pipeline::Pipeline::new(crate::pipeline::PipelineParts {
        config: config.clone(),
        store: store.clone(),
        hub: hub.clone(),
        runner,
        routes: routes.clone(),
        supervisor: supervisor.clone(),
        sources: sources.clone(),
        secrets: secrets.clone(),
        tls: tls.clone(),
        https_addr: bound.https,
        urls: urls.clone(),
        volumes,
        shutdown: runs_shutdown.clone(),
        notifier: notifier.clone(),
        metrics: daemon_metrics.clone(),
    });
    let observatory = Arc::new(crate::usage::Observatory {
        routes: routes.clone(),
        runner: runner_for_usage,
        tls: tls.clone(),
        daemon: daemon_metrics,
        store: store.clone(),
        data_dir: config.data_dir.clone(),
    });
    let domains = crate::domains::Domains::new(
        store.clone(),
        routes.clone(),
        tls.clone(),
        notifier.clone(),
        crate::domains::OwnNames {
            apps_domain: config.apps_domain.clone(),
            control_host: config.control_host.clone(),
        },
        bound.https,
    );
    let ctx = Arc::new(Context {
        config: config.clone(),
        store: store.clone(),
        tokens: tokens.clone(),
        limiter: crate::ratelimit::RateLimiter::new(
            config.rate_limits.requests_per_minute,
            config.rate_limits.posts_per_minute_per_endpoint,
        ),
        secrets: secrets.clone(),
        routes: routes.clone(),
        pipeline: pipeline.clone(),
        observatory: observatory.clone(),
        notifier: notifier.clone(),
        domains: domains.clone(),
        autodeploy: Arc::new(crate::autodeploy::AutoDeploy::new(
            store.clone(),
            pipeline.clone(),
            secrets.clone(),
        )),
        hub: hub.clone(),
        sources,
        urls,
        public_bodies: crate::api::PublicBodies::new(&config.limits),
        idempotency: Default::default(),
        unauthenticated_failures: Default::default(),
    });
    load_routes(&ctx).await?;
    let restored_domains = domains.restore().await?;
    if restored_domains > 0 {
        tracing::info!(domains = restored_domains, "custom domains routed");
    }
    let hub_shutdown = CancellationToken::new();
    let flusher = tokio::spawn(hub.clone().run_flusher(hub_shutdown.clone()));
    // Everything that was live is served again before the daemon says it is ready.
    pipeline.restore(survivors).await?;

    let control: Arc<dyn ControlHandler> = Arc::new(ControlHost::new(ctx.clone()));
    let proxy = Arc::new(crate::proxy::Proxy::with_settings(
        crate::proxy::ProxySettings {
            connect_timeout: Duration::from_secs(config.limits.proxy_connect_timeout_s),
            response_timeout: Duration::from_secs(config.limits.proxy_response_timeout_s),
            max_tunnels: config.limits.max_websockets,
            max_tunnels_per_client: config.limits.max_websockets_per_client,
            tunnel_idle_timeout: Duration::from_secs(config.limits.websocket_idle_timeout_s),
            ..crate::proxy::ProxySettings::STANDARD
        },
    ));
    let dispatch = Arc::new(Dispatch {
        routes: routes.clone(),
        proxy: proxy.clone(),
        control: control.clone(),
        acme: tls.clone(),
        redirect_plain: config.tls.mode != TlsMode::Off,
        https_port_suffix: bound
            .https
            .map(|a| crate::urls::port_suffix(a.port(), 443))
            .unwrap_or_default(),
    });
    let tracker = TaskTracker::new();
    let limits = ConnectionLimits::from_config(&config.limits);
    let budget = ConnectionBudget::new(BudgetLimits::from_config(&config.limits));
    let drain_deadline = Duration::from_secs(config.limits.shutdown_drain_s);
    // Visitors are served by the router threads (`server::threads`); the API's own listener,
    // when configured, by the main runtime like the rest of the control plane.
    let visitor = |socket: tokio::net::TcpListener, kind| -> std::io::Result<_> {
        Ok(crate::server::threads::Listener {
            socket: socket.into_std()?,
            kind,
            dispatch: dispatch.clone(),
        })
    };
    let mut listeners = vec![visitor(http_listener, ListenerKind::Plain)?];
    if let (Some(listener), Some(tls)) = (https_listener, &tls) {
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
        listeners.push(visitor(listener, ListenerKind::Tls(acceptor))?);
        tracker.spawn(tls.clone().run_renewals(shutdown.child_token()));
    }
    let shared = crate::server::threads::Shared {
        budget: budget.clone(),
        limits,
        shutdown: shutdown.clone(),
        drain: drain_deadline,
        load: router_load,
    };
    let mut router = crate::server::threads::RouterThreads::start(listeners, shared)
        .context("starting the router threads")?;
    tracker.spawn(router.drained());
    if let Some(listener) = api_listener {
        // The extra API listener is plain HTTP without redirects.
        let api_dispatch = Arc::new(Dispatch {
            routes: routes.clone(),
            proxy: proxy.clone(),
            control,
            redirect_plain: false,
            https_port_suffix: String::new(),
            acme: None,
        });
        tracker.spawn(crate::server::serve(
            listener,
            ListenerKind::Plain,
            api_dispatch,
            budget.clone(),
            limits,
            shutdown.clone(),
            drain_deadline,
        ));
    }

    if let Some(listener) = metrics_listener {
        tracker.spawn(crate::usage::server::serve(
            listener,
            observatory,
            shutdown.clone(),
        ));
    }
    tracker.spawn(crate::notifications::delivery::run(
        notifier,
        secrets,
        crate::notifications::RetryPolicy::from_config(&config.notifications),
        shutdown.clone(),
    ));

    let admin_listener =
        crate::admin::bind(&config.data_dir).context("binding the admin socket")?;
    let admin_tls = tls.clone();
    let domains_tls = tls.clone();
    let admin_state = Arc::new(crate::admin::AdminState {
        tokens: tokens.clone(),
        supervisor: supervisor.clone(),
        store: store.clone(),
        data_dir: config.data_dir.clone(),
        ca_root_pem: Box::new(move || admin_tls.as_ref().and_then(|tls| tls.root_pem())),
        domains_root_pem: Box::new(move || {
            domains_tls
                .as_ref()
                .filter(|tls| tls.mode() == TlsMode::Internal)
                .and_then(|tls| tls.domains_root_pem())
        }),
    });
    tracker.spawn(crate::admin::serve(
        admin_listener,
        admin_state,
        shutdown.clone(),
    ));

    let flush_tokens = tokens.clone();
    let flush_shutdown = shutdown.clone();
    let flush_store = store.clone();
    tracker.spawn(async move {
        let mut rounds: u64 = 0;
        loop {
            tokio::select! {
                _ = flush_shutdown.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_secs(30)) => {}
            }
            // Every 10 minutes: the audit log's retention and expired idempotency keys.
            rounds += 1;
            if rounds % 20 == 1 {
                let purged = flush_store
                    .call(|s| {
                        let now = crate::ids::now_ms();
                        Ok::<_, crate::store::StoreError>((s.purge_audit(now)?, s.purge_idempotency(now)?))
                    })
                    .await;
                if let Err(error) = purged {
                    tracing::warn!(%error, "could not purge old audit entries and idempotency keys");
                }
            }
            let tokens = flush_tokens.clone();
            if let Err(error) = flush_store.call(move |_| tokens.flush_uses()).await {
                tracing::warn!(%error, "could not record token use times");
            }
        }
    });

    tracing::info!(http = %bound.http, https = ?bound.https, api = ?bound.api, control_host = %config.control_host, sandbox = %config.sandbox.mode.as_str(), "slipway is ready");
    on_ready(&bound);
    crate::notify::ready();

    shutdown.cancelled().await;
    tracing::info!("shutting down: draining connections");
    crate::notify::stopping();
    // Runs in flight end INTERRUPTED; then listeners drain; then apps stop; logs flush last.
    runs_shutdown.cancel();
    pipeline.interrupt_all().await;
    tracker.close();
    tracker.wait().await;
    // WebSocket tunnels are not connections the listeners wait for: end them before the apps.
    proxy.close_tunnels();
    let _ = tokio::time::timeout(drain_deadline, proxy.tunnels().wait()).await;
    router.release();
    // Apps outlive the daemon (namespaces mode): they are let go, and the next daemon adopts
    // them; `slipway stop-apps` stops them.
    if supervisor.leave_all().await > 0 {
        sandbox.leave();
    } else {
        sandbox.shutdown();
    }
    hub_shutdown.cancel();
    let _ = flusher.await;
    let tokens_for_flush = tokens.clone();
    store.call(move |_| tokens_for_flush.flush_uses()).await?;
    let _ = std::fs::remove_file(crate::admin::socket_path(&config.data_dir));
    tracing::info!("stopped");
    Ok(())
}

/// `slipway stop-apps` when no daemon runs: stops the apps the last daemon left running and
/// removes what the sandbox had on the host (cgroups, links, the nftables table). Returns how
/// many apps were running.
pub fn stop_apps_offline(config: &Config) -> anyhow::Result<usize> {
    let store = Store::open(&config.data_dir)?;
    let survivors = surviving_apps(&store)?;
    let handles: Vec<_> = survivors.values().cloned().collect();
    let grace = Duration::from_secs(config.limits.app_stop_grace_s);
    let stopped = crate::sandbox::stop_outliving(&handles, grace);
    for deployment_id in survivors.keys() {
        store.remove_app_process(deployment_id)?;
    }
    // Nothing needs the volumes any more (a daemon started later mounts them again).
    crate::disk::unmount_all_under(&config.data_dir);
    if config.sandbox.mode != crate::config::SandboxMode::None {
        let exe = std::path::PathBuf::from("/proc/self/exe");
        let run_dir = config.data_dir.join("run");
        match crate::sandbox::NamespaceRunner::start(&config.sandbox, exe, run_dir, &[]) {
            Ok(runner) => runner.shutdown(),
            Err(error) => tracing::debug!(%error, "no sandbox state to clean up"),
        }
    }
    Ok(stopped)
}

/// Apps an earlier daemon left running that still run (deployment → handle); records of
/// apps that are gone are dropped.
fn surviving_apps(
    store: &Store,
) -> anyhow::Result<std::collections::HashMap<String, crate::sandbox::AppHandle>> {
    let mut alive = std::collections::HashMap::new();
    for (deployment_id, json) in store.app_processes()? {
        let handle = serde_json::from_slice::<crate::sandbox::AppHandle>(&json).ok();
        match handle {
            Some(handle) if handle.is_alive() => {
                alive.insert(deployment_id, handle);
            }
            _ => store.remove_app_process(&deployment_id)?,
        }
    }
    Ok(alive)
}

/// Starts the sandbox runner. Without `--dev` a machine that cannot sandbox stops the daemon:
/// a production host must never silently lose its sandbox.
fn start_sandbox(
    config: &Config,
    survivors: &[crate::sandbox::AppHandle],
) -> anyhow::Result<crate::sandbox::Sandbox> {
    let exe = std::path::PathBuf::from("/proc/self/exe");
    let run_dir = config.data_dir.join("run");
    crate::sandbox::Sandbox::start(&config.sandbox, exe, run_dir, survivors).map_err(|error| {
        let hint = if config.dev {
            ""
        } else {
            ". To try Slipway out on this machine anyway, run `slipway serve --dev`: its sandbox \
             mode \"auto\" falls back to running builds unsandboxed, with a warning"
        };
        anyhow::anyhow!("starting the sandbox: {error}{hint}")
    })
}

fn prepare_data_dir(config: &Config) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = &config.data_dir;
    std::fs::create_dir_all(dir).with_context(|| format!("creating data_dir {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("setting mode 0700 on {}", dir.display()))?;
    Ok(())
}

/// Publishes every project into the route table (no live target until the pipeline runs).
async fn load_routes(ctx: &Arc<Context>) -> anyhow::Result<()> {
    let projects = ctx.store.call(|store| store.list_projects()).await?;
    ctx.routes
        .add_projects(projects.iter().map(|project| project.slug.as_str()));
    Ok(())
}

/// The TLS module's persistence, over the store's `tls` table.
struct StoreTls(Store);

impl crate::tls::TlsStore for StoreTls {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, crate::tls::TlsError> {
        self.0
            .tls_get(key)
            .map_err(|e| crate::tls::TlsError::Store(e.to_string()))
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), crate::tls::TlsError> {
        self.0
            .tls_put(key, value)
            .map_err(|e| crate::tls::TlsError::Store(e.to_string()))
    }
    fn delete(&self, key: &str) -> Result<(), crate::tls::TlsError> {
        self.0
            .tls_delete(key)
            .map_err(|e| crate::tls::TlsError::Store(e.to_string()))
    }
    fn list(&self, prefix: &str) -> Result<Vec<String>, crate::tls::TlsError> {
        self.0
            .tls_list(prefix)
            .map_err(|e| crate::tls::TlsError::Store(e.to_string()))
    }
}
