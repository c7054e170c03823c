//! The second step: the parts of the control plane, built once and shared — the route table,
//! log hub, supervisor, TLS, volumes, pipeline, domains and the API's context — and then
//! everything that was routed or live before brought back.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::base::Base;
use super::Bound;
use crate::api::Context;
use crate::config::{Config, SandboxMode, TlsMode};
use crate::logs::{LogHub, LogLimits};
use crate::metrics::DaemonMetrics;
use crate::notifications::Notifier;
use crate::pipeline::{Pipeline, PipelineParts};
use crate::router::Routes;
use crate::store::Store;
use crate::supervisor::local::LocalBackend;
use crate::supervisor::Supervisor;
use crate::tls::TlsManager;
use crate::urls::PublicUrls;

/// The control plane's parts.
pub(super) struct Services {
    pub routes: Arc<Routes>,
    pub daemon_metrics: Arc<DaemonMetrics>,
    pub hub: Arc<LogHub>,
    pub supervisor: Arc<Supervisor>,
    pub tls: Option<Arc<TlsManager>>,
    pub pipeline: Arc<Pipeline>,
    pub jobs: Arc<crate::jobs::Jobs>,
    pub addons: Arc<crate::addons::Addons>,
    pub observatory: Arc<crate::usage::Observatory>,
    pub ctx: Arc<Context>,
}

impl Services {
    /// `runs` ends the builds in flight (a child of the daemon's shutdown).
    pub async fn build(
        base: &Base,
        bound: &Bound,
        runs: CancellationToken,
    ) -> anyhow::Result<Services> {
        let config = &base.config;
        let store = &base.store;
        let urls = public_urls(config, bound);
        let routes = route_table(base);
        let daemon_metrics = Arc::new(DaemonMetrics::new(
            crate::ids::now_ms() / 1000,
            config.limits.router_threads,
        ));
        let notifier = Notifier::new(store.clone(), &config.notifications);
        let hub = log_hub(config, store);
        let runner: Arc<dyn crate::sandbox::Runner> = base.sandbox.clone();
        let supervisor = supervisor(base, &runner, &hub, &routes, &notifier);
        let sources = source_store(config)?;
        let task_readings = Arc::new(crate::cluster::readings::TaskReadings::default());
        let parts = ClusterParts {
            routes: &routes,
            hub: &hub,
            notifier: &notifier,
            readings: &task_readings,
        };
        let cluster = cluster_backend(config, parts, runs.clone()).await?;
        let tls = start_tls(config, store, &notifier).await?;
        let pipeline = Pipeline::new(PipelineParts {
            config: config.clone(),
            store: store.clone(),
            hub: hub.clone(),
            runner: runner.clone(),
            routes: routes.clone(),
            // Without namespaces every app shares the host's ports.
            local: LocalBackend::new(supervisor.clone(), config.sandbox.mode == SandboxMode::None),
            cluster,
            sources: sources.clone(),
            secrets: base.secrets.clone(),
            tls: tls.clone(),
            https_addr: bound.https,
            urls: urls.clone(),
            volumes: detect_volumes(config).await?,
            shutdown: runs,
            notifier: notifier.clone(),
            metrics: daemon_metrics.clone(),
        });
        let observatory = Arc::new(crate::usage::Observatory {
            routes: routes.clone(),
            runner,
            supervisor: supervisor.clone(),
            backends: pipeline.backends(),
            tls: tls.clone(),
            daemon: daemon_metrics.clone(),
            store: store.clone(),
            data_dir: config.data_dir.clone(),
            task_readings,
        });
        let domains = domains(base, &routes, &tls, &notifier, bound);
        let (jobs, addons) = jobs_and_addons(base, &pipeline, &hub, &supervisor, &notifier);
        let sleeper = sleeper(base, &pipeline, &jobs, &notifier, &daemon_metrics);
        let ctx = api_context(
            base,
            &pipeline,
            &observatory,
            &hub,
            ForApi {
                routes: routes.clone(),
                jobs: jobs.clone(),
                addons: addons.clone(),
                notifier,
                domains,
                sources,
                urls,
                sleeper,
            },
        );
        Ok(Services {
            routes,
            daemon_metrics,
            hub,
            supervisor,
            tls,
            pipeline,
            jobs,
            addons,
            observatory,
            ctx,
        })
    }

    /// Routes every project and custom domain, starts the log flusher (ended by `logs`), and
    /// serves again everything that was live, before the daemon says it is ready.
    pub async fn bring_back(
        &self,
        survivors: HashMap<String, crate::sandbox::AppHandle>,
        logs: CancellationToken,
    ) -> anyhow::Result<JoinHandle<()>> {
        let projects = self.ctx.store.call(|store| store.list_projects()).await?;
        self.routes
            .add_projects(projects.iter().map(|project| project.slug.as_str()));
        let restored_domains = self.ctx.domains.restore().await?;
        if restored_domains > 0 {
            tracing::info!(domains = restored_domains, "custom domains routed");
        }
        let flusher = tokio::spawn(self.hub.clone().run_flusher(logs.clone()));
        // Add-ons (`adn_…:postgres.1`) are the add-on service's to adopt; the rest are apps.
        let (addons, apps): (HashMap<_, _>, HashMap<_, _>) = survivors
            .into_iter()
            .partition(|(key, _)| key.starts_with("adn_"));
        let restored = self.addons.restore(addons).await?;
        if restored > 0 {
            tracing::info!(addons = restored, "add-ons running");
        }
        tokio::spawn(
            self.addons
                .clone()
                .schedule_backups(self.ctx.config.addons.backup_interval_h, logs.clone()),
        );
        tokio::spawn(self.addons.clone().ship_wal_forever(logs));
        self.pipeline.restore(apps).await?;
        let ended = self.jobs.recover().await?;
        if ended > 0 {
            tracing::info!(
                runs = ended,
                "runs left unfinished by the last daemon marked failed"
            );
        }
        Ok(flusher)
    }
}

fn public_urls(config: &Config, bound: &Bound) -> PublicUrls {
    PublicUrls::new(
        bound.https.map(|a| a.port()),
        bound.http.port(),
        &config.control_host,
        &config.apps_domain,
    )
}

/// The jobs service (told when a deployment goes live) and the add-on service (told when an
/// app sleeps, asked before one starts).
fn jobs_and_addons(
    base: &Base,
    pipeline: &Arc<Pipeline>,
    hub: &Arc<LogHub>,
    supervisor: &Arc<Supervisor>,
    notifier: &Notifier,
) -> (Arc<crate::jobs::Jobs>, Arc<crate::addons::Addons>) {
    let (config, store) = (&base.config, &base.store);
    let jobs = crate::jobs::Jobs::new(
        pipeline.clone(),
        store.clone(),
        hub.clone(),
        notifier.clone(),
        config.jobs.clone(),
    );
    pipeline.on_live(jobs.live_hook());
    let addons = crate::addons::Addons::new(
        store.clone(),
        base.secrets.clone(),
        base.sandbox.clone(),
        supervisor.clone(),
        pipeline.clone(),
        crate::addons::Place {
            data_dir: config.data_dir.clone(),
            loopback: base.sandbox.mode() == SandboxMode::None,
            backup_keep: config.addons.backup_keep,
            deleted_keep_ms: config.addons.deleted_keep_days * 24 * 3600 * 1000,
            memory_reserve_mb: config.limits.memory_reserve_mb,
        },
    );
    // Linked add-ons sleep with their apps and wake first (issue 35).
    let linked: Arc<dyn crate::pipeline::LinkedAddons> = addons.clone();
    pipeline.with_linked_addons(Arc::downgrade(&linked));
    (jobs, addons)
}

/// Puts idle apps to sleep and wakes them (its task is started by `serve::start`).
fn sleeper(
    base: &Base,
    pipeline: &Arc<Pipeline>,
    jobs: &Arc<crate::jobs::Jobs>,
    notifier: &Notifier,
    metrics: &Arc<DaemonMetrics>,
) -> Arc<crate::sleep::Sleeper> {
    crate::sleep::Sleeper::new(crate::sleep::SleeperParts {
        pipeline: pipeline.clone(),
        jobs: jobs.clone(),
        store: base.store.clone(),
        routes: pipeline.routes().clone(),
        notifier: notifier.clone(),
        metrics: metrics.clone(),
        tick: base.config.sleep.tick,
        previews_default: base.config.sleep.previews,
    })
}

/// What the API's context takes that the daemon's other parts do not keep.
struct ForApi {
    routes: Arc<Routes>,
    jobs: Arc<crate::jobs::Jobs>,
    addons: Arc<crate::addons::Addons>,
    notifier: Notifier,
    domains: Arc<crate::domains::Domains>,
    sources: Arc<crate::source::SourceStore>,
    urls: PublicUrls,
    sleeper: Arc<crate::sleep::Sleeper>,
}

fn api_context(
    base: &Base,
    pipeline: &Arc<Pipeline>,
    observatory: &Arc<crate::usage::Observatory>,
    hub: &Arc<LogHub>,
    api: ForApi,
) -> Arc<Context> {
    let (config, store) = (&base.config, &base.store);
    Arc::new(Context {
        config: config.clone(),
        store: store.clone(),
        tokens: base.tokens.clone(),
        limiter: crate::ratelimit::RateLimiter::new(
            config.rate_limits.requests_per_minute,
            config.rate_limits.posts_per_minute_per_endpoint,
        ),
        secrets: base.secrets.clone(),
        routes: api.routes,
        pipeline: pipeline.clone(),
        jobs: api.jobs,
        addons: api.addons,
        observatory: observatory.clone(),
        notifier: api.notifier,
        domains: api.domains,
        autodeploy: Arc::new(crate::autodeploy::AutoDeploy::new(
            store.clone(),
            pipeline.clone(),
            base.secrets.clone(),
        )),
        hub: hub.clone(),
        sources: api.sources,
        urls: api.urls,
        sleeper: api.sleeper,
        public_bodies: crate::api::PublicBodies::new(&config.limits),
        idempotency: Default::default(),
        unauthenticated_failures: Default::default(),
    })
}

/// The route table, empty until `bring_back` fills it.
fn route_table(base: &Base) -> Arc<Routes> {
    let config = &base.config;
    Arc::new(
        Routes::new(config.control_host.clone(), config.apps_domain.clone())
            .with_request_metrics(config.metrics.requests)
            // Affinity cookies stay valid across restarts: their key comes from the daemon's
            // secret key.
            .with_affinity_key(base.secrets.tag("slipway instance affinity cookie")),
    )
}

fn log_hub(config: &Config, store: &Store) -> Arc<LogHub> {
    LogHub::new(
        store.clone(),
        LogLimits {
            retention_bytes: config.limits.log_retention_mb * 1024 * 1024,
            rate_bytes_per_second: config.limits.log_rate_kb_s * 1024,
            burst_bytes: config.limits.log_burst_kb * 1024,
        },
    )
}

fn supervisor(
    base: &Base,
    runner: &Arc<dyn crate::sandbox::Runner>,
    hub: &Arc<LogHub>,
    routes: &Arc<Routes>,
    notifier: &Notifier,
) -> Arc<Supervisor> {
    let limits = &base.config.limits;
    Supervisor::new(
        runner.clone(),
        hub.clone(),
        routes.clone(),
        base.store.clone(),
        notifier.clone(),
        Duration::from_secs(limits.app_stop_grace_s),
        Duration::from_secs(limits.health_interval_s),
    )
}

fn source_store(config: &Config) -> anyhow::Result<Arc<crate::source::SourceStore>> {
    Ok(Arc::new(
        crate::source::SourceStore::open(config.data_dir.join("sources"))
            .context("opening the source archive store")?,
    ))
}

/// What the cluster backend is given besides the config.
struct ClusterParts<'a> {
    routes: &'a Arc<Routes>,
    hub: &'a Arc<LogHub>,
    notifier: &'a Notifier,
    /// Where the tasks' usage reports go (the metrics read them too).
    readings: &'a Arc<crate::cluster::readings::TaskReadings>,
}

/// The Swarm backend with its build server, when `[cluster] engine` names one.
async fn cluster_backend(
    config: &Config,
    parts: ClusterParts<'_>,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<Option<Arc<dyn crate::supervisor::backend::AppBackend>>> {
    let ClusterParts {
        routes,
        hub,
        notifier,
        readings,
    } = parts;
    let (Some(_), Some(listen)) = (config.cluster.engine, config.cluster.fetch_listen) else {
        return Ok(None);
    };
    let fetch = crate::cluster::fetch::FetchServer::bind(
        listen,
        &config.data_dir.join("cluster"),
        readings.clone(),
        shutdown.clone(),
    )
    .await
    .with_context(|| format!("binding cluster.fetch_listen {listen}"))?;
    let docker = crate::cluster::docker::Docker::new(&config.cluster.docker_socket);
    let image = &config.cluster.runtime_image;
    match crate::cluster::image::ensure(&docker, image).await {
        Ok(true) => tracing::info!(image = %image, "made the runtime image on this node's engine"),
        Ok(false) => {}
        // Deploys say it again; the daemon still serves everything else.
        Err(error) => tracing::error!(%error, image = %image, "cannot make the runtime image"),
    }
    let nodes = crate::cluster::nodes::NodeBook::default();
    crate::cluster::nodes::watch_down(docker.clone(), nodes.clone(), notifier.clone(), shutdown);
    Ok(Some(crate::cluster::Swarm::new(
        docker,
        nodes,
        config.cluster.runtime_image.clone(),
        fetch,
        routes.clone(),
        hub.clone(),
        config.data_dir.join("cluster").join("builds"),
    )))
}

fn domains(
    base: &Base,
    routes: &Arc<Routes>,
    tls: &Option<Arc<TlsManager>>,
    notifier: &Notifier,
    bound: &Bound,
) -> Arc<crate::domains::Domains> {
    let config = &base.config;
    crate::domains::Domains::new(crate::domains::DomainsParts {
        store: base.store.clone(),
        routes: routes.clone(),
        tls: tls.clone(),
        notifier: notifier.clone(),
        names: crate::domains::OwnNames {
            apps_domain: config.apps_domain.clone(),
            control_host: config.control_host.clone(),
        },
        https_addr: bound.https,
        proofs: crate::domains::Proofs::new(&config.domains, base.secrets.clone()),
    })
}

/// The certificate manager for `tls.mode` (none when off); its failures become notifications.
async fn start_tls(
    config: &Arc<Config>,
    store: &Store,
    notifier: &Notifier,
) -> anyhow::Result<Option<Arc<TlsManager>>> {
    if config.tls.mode == TlsMode::Off {
        return Ok(None);
    }
    let tls_config = config.clone();
    let tls_store: Arc<dyn crate::tls::TlsStore> = Arc::new(StoreTls(store.clone()));
    let manager = tokio::task::spawn_blocking(move || {
        TlsManager::new(
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
    Ok(Some(manager))
}

/// Whether volumes (disk limits) are on, and volumes a killed backup left frozen thawed.
async fn detect_volumes(config: &Config) -> anyhow::Result<crate::disk::Volumes> {
    let (reserve, data_dir) = (config.limits.disk_reserve_mb, config.data_dir.clone());
    let want = config.sandbox.mode == SandboxMode::Namespaces;
    Ok(tokio::task::spawn_blocking(move || {
        let volumes = crate::disk::Volumes::detect(reserve, want, &data_dir);
        if volumes.limited() {
            crate::disk::thaw_all_under(&data_dir);
        }
        volumes
    })
    .await?)
}

/// The TLS module's persistence, over the store's `tls` table.
struct StoreTls(Store);

impl crate::tls::TlsStore for StoreTls {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>, crate::tls::TlsError> {
        self.0.tls_get(key).map_err(store_error)
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), crate::tls::TlsError> {
        self.0.tls_put(key, value).map_err(store_error)
    }
    fn delete(&self, key: &str) -> Result<(), crate::tls::TlsError> {
        self.0.tls_delete(key).map_err(store_error)
    }
    fn list(&self, prefix: &str) -> Result<Vec<String>, crate::tls::TlsError> {
        self.0.tls_list(prefix).map_err(store_error)
    }
}

fn store_error(error: crate::store::StoreError) -> crate::tls::TlsError {
    crate::tls::TlsError::Store(error.to_string())
}
