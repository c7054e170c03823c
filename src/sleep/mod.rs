//! Scale to zero (issue 35): when to put apps to sleep and the one task that wakes them.
//! An app is a project's production app or one of its previews (`pipeline::SleepingApp`;
//! a preview sleeps by its project's setting, or else by the operator's default for
//! previews). [`Sleeper::run`] is a task of `app::serve`: every `[sleep] tick_ms` it reads
//! each sleep-enabled app's activity from the route snapshot (requests, streams and tunnels
//! open; last use: `upstreams::Activity`) and puts the app to sleep once nothing was open for
//! its `idleTimeoutS` and no run or cron job of it is running (a running one counts as use);
//! and it takes the wake calls sleeping routes send (`router::Asleep`: one per sleep) and
//! starts those apps, telling their held requests the outcome. The moves themselves are the
//! pipeline's (`pipeline/sleep.rs`). Each sends its event: `app.slept`, `app.woke`,
//! `app.wake_failed`.
//!
//! Architecture invariant: one sleep or wake of an app at a time (`locks`), and a wake
//! call acts only while its sleeping target is still the route's (a late call is told
//! "woke" and its requests find the route as it is).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::formation::sleep::SleepSettings;
use crate::jobs::Jobs;
use crate::metrics::DaemonMetrics;
use crate::notifications::{Event, EventKind, Notifier};
use crate::pipeline::{sleep_settings, Pipeline, SleepRefusal, SleepingApp};
use crate::router::{clock_ms, Activity, Routes, Target, WakeCall, WakeOutcome};
use crate::store::records::ProjectRecord;
use crate::store::Store;

/// Puts idle apps to sleep and wakes them.
pub struct Sleeper {
    pipeline: Arc<Pipeline>,
    jobs: Arc<Jobs>,
    store: Store,
    routes: Arc<Routes>,
    notifier: Notifier,
    metrics: Arc<DaemonMetrics>,
    tick: Duration,
    /// `[sleep] previews_idle_timeout_s`: how previews of projects without a setting sleep.
    previews_default: Option<SleepSettings>,
    /// One sleep or wake per app at a time, by route key.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// What a `Sleeper` works with.
pub struct SleeperParts {
    pub pipeline: Arc<Pipeline>,
    pub jobs: Arc<Jobs>,
    pub store: Store,
    pub routes: Arc<Routes>,
    pub notifier: Notifier,
    pub metrics: Arc<DaemonMetrics>,
    /// `[sleep] tick_ms`.
    pub tick: Duration,
    /// `[sleep] previews_idle_timeout_s` and `previews_strategy`.
    pub previews_default: Option<SleepSettings>,
}

/// Why `POST …/sleep` did nothing.
pub use crate::pipeline::SleepRefusal as Refusal;

impl Sleeper {
    pub fn new(parts: SleeperParts) -> Arc<Sleeper> {
        Arc::new(Sleeper {
            pipeline: parts.pipeline,
            jobs: parts.jobs,
            store: parts.store,
            routes: parts.routes,
            notifier: parts.notifier,
            metrics: parts.metrics,
            tick: parts.tick,
            previews_default: parts.previews_default,
            locks: Mutex::default(),
        })
    }

    /// The idle tick and the wake calls, until `shutdown`.
    pub async fn run(
        self: Arc<Self>,
        mut calls: UnboundedReceiver<WakeCall>,
        shutdown: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(self.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                Some(call) = calls.recv() => {
                    tokio::spawn(self.clone().wake(call));
                }
                _ = tick.tick() => self.tick().await,
            }
        }
    }

    /// Puts `app` of `project` (production, or a preview) to sleep now (`POST …/sleep`),
    /// whatever is open to it.
    pub async fn sleep_now(
        self: &Arc<Self>,
        project: &ProjectRecord,
        app: SleepingApp,
    ) -> Result<(), Refusal> {
        let label = app.label(&project.slug);
        let lock = self.lock(&label);
        let _guard = lock.lock().await;
        let deployment = self.pipeline.put_to_sleep(&app, || true).await?;
        self.slept(project, &label, &deployment, "asked through the API");
        Ok(())
    }

    /// One look at every sleep-enabled app; each idle one is put to sleep in a task of its
    /// own (stopping takes the apps' grace periods).
    async fn tick(self: &Arc<Self>) {
        let listed = self
            .store
            .call(|s| Ok::<_, crate::store::StoreError>((s.list_projects()?, s.all_previews()?)))
            .await;
        let (projects, previews) = match listed {
            Ok(listed) => listed,
            Err(error) => {
                tracing::warn!(%error, "sleep: cannot list the projects");
                return;
            }
        };
        let table = self.routes.snapshot();
        for project in &projects {
            let production = (
                SleepingApp::production(&project.id),
                project.sleeping.clone(),
            );
            let of_project = previews.iter().filter(|p| p.project_id == project.id);
            let previews = of_project.map(|preview| {
                let app = SleepingApp {
                    project_id: project.id.clone(),
                    preview: Some(preview.name.clone()),
                };
                (app, preview.sleeping.clone())
            });
            for (app, sleeping) in std::iter::once(production).chain(previews) {
                self.look_at(&table, project, app, sleeping.is_some());
            }
        }
    }

    /// One app at the tick: a recorded sleep its route no longer has is forgotten; an app
    /// idle for its timeout is put to sleep.
    fn look_at(
        self: &Arc<Self>,
        table: &crate::router::RouteTable,
        project: &ProjectRecord,
        app: SleepingApp,
        recorded_asleep: bool,
    ) {
        let label = app.label(&project.slug);
        let live = table.apps.get(&label);
        if recorded_asleep && !matches!(live, Some(Some(Target::Asleep(_)))) {
            self.forget_ended_sleep(&label, app.clone());
        }
        let settings = sleep_settings(project, &app, self.previews_default);
        let serving = matches!(live, Some(Some(Target::Proxy { .. })));
        let (Some(settings), true) = (settings, serving) else {
            return;
        };
        let Some(activity) = table.activity.get(&label).cloned() else {
            return;
        };
        // A run or cron job works with production's app: it keeps that one awake.
        if app.preview.is_none() && self.jobs.is_running(&project.id, None) {
            activity.touch();
            return;
        }
        if activity.idle_for(clock_ms()) < Duration::from_secs(settings.idle_timeout_s) {
            return;
        }
        let idle = Idle {
            project: project.clone(),
            app,
            label,
            activity,
            reason: format!("no visitor for {} s", settings.idle_timeout_s),
        };
        tokio::spawn(self.clone().sleep_idle(idle));
    }

    /// Puts an app judged idle to sleep, unless it was used since (or a sleep or wake of it
    /// is under way).
    async fn sleep_idle(self: Arc<Self>, idle: Idle) {
        let lock = self.lock(&idle.label);
        let Ok(_guard) = lock.try_lock() else {
            return;
        };
        let activity = &idle.activity;
        let seen = activity.last_ms();
        let still_idle = || activity.open() == 0 && activity.last_ms() == seen;
        match self.pipeline.put_to_sleep(&idle.app, still_idle).await {
            Ok(deployment) => self.slept(&idle.project, &idle.label, &deployment, &idle.reason),
            Err(SleepRefusal::Used | SleepRefusal::Nothing(_)) => {}
            Err(SleepRefusal::Store(error)) => {
                tracing::warn!(app = %idle.label, %error, "sleep: not put to sleep");
            }
        }
    }

    fn slept(&self, project: &ProjectRecord, label: &str, deployment: &str, reason: &str) {
        tracing::info!(app = %label, deployment, reason, "app asleep");
        self.notifier.emit(
            Event::new(EventKind::AppSlept)
                .project(&project.slug)
                .deployment(deployment)
                .error(reason),
        );
    }

    /// A recorded sleep whose route is no longer asleep (a deploy made another deployment
    /// live) is forgotten, unless a sleep or wake of the app is under way.
    fn forget_ended_sleep(self: &Arc<Self>, label: &str, app: SleepingApp) {
        let lock = self.lock(label);
        let this = self.clone();
        tokio::spawn(async move {
            let Ok(_guard) = lock.try_lock() else {
                return;
            };
            if let Err(error) = this.pipeline.forget_sleep(&app).await {
                tracing::warn!(project = %app.project_id, %error, "sleep: cannot forget an ended sleep");
            }
        });
    }

    /// Answers one wake call: starts the app, and tells the requests held on it.
    async fn wake(self: Arc<Self>, call: WakeCall) {
        let started = Instant::now();
        let outcome = self.wake_app(&call).await;
        match &outcome {
            Ok(Some((project, deployment))) => {
                self.metrics.wakes.woke(started.elapsed());
                tracing::info!(project = %project.slug, deployment, elapsed_ms = started.elapsed().as_millis() as u64, "app woke");
                self.notifier.emit(
                    Event::new(EventKind::AppWoke)
                        .project(&project.slug)
                        .deployment(deployment)
                        .error(&format!("started in {} ms", started.elapsed().as_millis())),
                );
            }
            Ok(None) => {}
            Err((project, reason)) => {
                self.metrics.wakes.failed();
                tracing::warn!(project = %call.label, reason, "app did not wake");
                let mut event = Event::new(EventKind::AppWakeFailed).error(reason);
                if let Some(project) = project {
                    event = event.project(&project.slug);
                }
                self.notifier
                    .emit(event.deployment(call.asleep.deployment_id()));
            }
        }
        call.asleep.finish(match outcome {
            Ok(_) => WakeOutcome::Woke,
            Err((_, reason)) => WakeOutcome::Failed(reason.into()),
        });
    }

    /// `Some((project, deployment))` when the app woke; `None` when the call came late (the
    /// route no longer sleeps on it); why it did not.
    async fn wake_app(
        &self,
        call: &WakeCall,
    ) -> Result<Option<(ProjectRecord, String)>, (Option<ProjectRecord>, String)> {
        let dpl = call.asleep.deployment_id().to_owned();
        let found = self
            .store
            .call(move |s| -> crate::store::Result<_> {
                let Some(deployment) = s.deployment(&dpl)? else {
                    return Ok(None);
                };
                let project = s.find_project(&deployment.project_id)?;
                Ok(project.map(|p| (p, deployment.target.preview)))
            })
            .await;
        let (project, preview) = match found {
            Ok(Some(found)) => found,
            Ok(None) => return Err((None, "the project was deleted".into())),
            Err(error) => return Err((None, error.to_string())),
        };
        let lock = self.lock(&call.label);
        let _guard = lock.lock().await;
        let current = self.routes.snapshot().apps.get(&call.label).cloned();
        if !matches!(&current, Some(Some(Target::Asleep(a))) if Arc::ptr_eq(a, &call.asleep)) {
            return Ok(None);
        }
        let app = SleepingApp {
            project_id: project.id.clone(),
            preview,
        };
        match self.pipeline.wake(&app).await {
            Ok(deployment) => Ok(Some((project, deployment))),
            Err(reason) => {
                // Asleep again, on a new target: the next request tries once more.
                let strategy = call.asleep.strategy();
                let again = self
                    .routes
                    .asleep(&call.label, call.asleep.deployment_id(), strategy);
                self.routes.swap_asleep(&call.label, &call.asleep, again);
                Err((Some(project), reason))
            }
        }
    }

    fn lock(&self, label: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().expect("sleep locks poisoned");
        locks.entry(label.to_owned()).or_default().clone()
    }
}

/// An app the tick found idle.
struct Idle {
    project: ProjectRecord,
    app: SleepingApp,
    label: String,
    activity: Arc<Activity>,
    reason: String,
}
