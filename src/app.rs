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
    let sandbox = Arc::new(start_sandbox(&config)?);
    // From here on the config names the mode in force, never `auto`.
    config.sandbox.mode = sandbox.mode();
    let config = Arc::new(config);
    let store = Store::open(&config.data_dir)?;
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
    let bound = Bound {
        http: http_listener.local_addr()?,
        https: https_listener
            .as_ref()
            .map(|l| l.local_addr())
            .transpose()?,
        api: api_listener.as_ref().map(|l| l.local_addr()).transpose()?,
    };

    let (public_scheme, public_port) = match bound.https {
        Some(addr) => ("https", port_suffix(addr.port(), 443)),
        None => ("http", port_suffix(bound.http.port(), 80)),
    };
    let routes = Arc::new(crate::router::Routes::new(
        config.control_host.clone(),
        config.apps_domain.clone(),
    ));
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
    let supervisor = crate::supervisor::Supervisor::new(
        runner.clone(),
        hub.clone(),
        routes.clone(),
        Duration::from_secs(config.limits.app_stop_grace_s),
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
            Some(manager)
        }
    };
    let runs_shutdown = CancellationToken::new();
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
        scheme: public_scheme,
        port_suffix: public_port.clone(),
        shutdown: runs_shutdown.clone(),
    });
    let ctx = Arc::new(Context {
        config: config.clone(),
        store: store.clone(),
        tokens: tokens.clone(),
        limiter: crate::ratelimit::RateLimiter::new(
            config.rate_limits.requests_per_minute,
            config.rate_limits.posts_per_minute_per_endpoint,
        ),
        secrets,
        routes: routes.clone(),
        pipeline: pipeline.clone(),
        hub: hub.clone(),
        sources,
        public_scheme,
        public_port_suffix: public_port,
    });
    load_routes(&ctx).await?;
    let hub_shutdown = CancellationToken::new();
    let flusher = tokio::spawn(hub.clone().run_flusher(hub_shutdown.clone()));
    // Everything that was live is served again before the daemon says it is ready.
    pipeline.restore().await?;

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
            .map(|a| port_suffix(a.port(), 443))
            .unwrap_or_default(),
    });
    let tracker = TaskTracker::new();
    let limits = ConnectionLimits::from_config(&config.limits);
    let budget = ConnectionBudget::new(BudgetLimits::from_config(&config.limits));
    let drain_deadline = Duration::from_secs(config.limits.shutdown_drain_s);
    tracker.spawn(crate::server::serve(
        http_listener,
        ListenerKind::Plain,
        dispatch.clone(),
        budget.clone(),
        limits,
        shutdown.clone(),
        drain_deadline,
    ));
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
    if let (Some(listener), Some(tls)) = (https_listener, &tls) {
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
        tracker.spawn(crate::server::serve(
            listener,
            ListenerKind::Tls(acceptor),
            dispatch.clone(),
            budget.clone(),
            limits,
            shutdown.clone(),
            drain_deadline,
        ));
        tracker.spawn(tls.clone().run_renewals(shutdown.child_token()));
    }

    let admin_listener =
        crate::admin::bind(&config.data_dir).context("binding the admin socket")?;
    let admin_tls = tls.clone();
    let admin_state = Arc::new(crate::admin::AdminState {
        tokens: tokens.clone(),
        store: store.clone(),
        data_dir: config.data_dir.clone(),
        ca_root_pem: Box::new(move || admin_tls.as_ref().and_then(|tls| tls.root_pem())),
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
        loop {
            tokio::select! {
                _ = flush_shutdown.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_secs(30)) => {}
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
    supervisor.stop_all().await;
    sandbox.shutdown();
    hub_shutdown.cancel();
    let _ = flusher.await;
    let tokens_for_flush = tokens.clone();
    store.call(move |_| tokens_for_flush.flush_uses()).await?;
    let _ = std::fs::remove_file(crate::admin::socket_path(&config.data_dir));
    tracing::info!("stopped");
    Ok(())
}

/// Starts the sandbox runner. Without `--dev` a machine that cannot sandbox stops the daemon:
/// a production host must never silently lose its sandbox.
fn start_sandbox(config: &Config) -> anyhow::Result<crate::sandbox::Sandbox> {
    let exe = std::path::PathBuf::from("/proc/self/exe");
    crate::sandbox::Sandbox::start(&config.sandbox, exe).map_err(|error| {
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

fn port_suffix(port: u16, default: u16) -> String {
    if port == default {
        String::new()
    } else {
        format!(":{port}")
    }
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
