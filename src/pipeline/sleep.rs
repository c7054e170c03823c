//! Scale to zero's two moves on an app (issue 35): a project's production app or one of its
//! previews ([`SleepingApp`]), under the same locks and through the same path as a deploy:
//! [`Pipeline::put_to_sleep`] switches the route to a sleeping target first, records the
//! sleep (start-up does not start a sleeping app: `restore.rs`), then stops every instance
//! of every type with its grace period; [`Pipeline::wake`] brings the app back exactly as
//! start-up restore does (`serve_again`: prepare until healthy, then switch). When to do
//! either is `sleep/`'s business. Linked add-ons sleep with their app and wake first
//! ([`LinkedAddons`], `addons/sleep.rs`): told after a production app stopped, and asked
//! before any production process starts with its links' variables (`links.rs`).

use std::sync::{Arc, Weak};

use futures_util::future::BoxFuture;

use super::Pipeline;
use crate::formation::sleep::SleepSettings;
use crate::store::records::{DeploymentMode, DeploymentRecord, ProjectRecord};

/// Why an app was not put to sleep; nothing changed.
#[derive(Debug)]
pub enum SleepRefusal {
    /// Nothing to sleep: no live server app serving (the message says what).
    Nothing(String),
    /// It was used after it was judged idle.
    Used,
    Store(crate::store::StoreError),
}

impl From<crate::store::StoreError> for SleepRefusal {
    fn from(error: crate::store::StoreError) -> Self {
        SleepRefusal::Store(error)
    }
}

/// The add-ons linked to production apps, as sleeping sees them (issue 35). `addons/sleep.rs`
/// implements it; the pipeline holds it weakly (the add-ons hold the pipeline).
pub trait LinkedAddons: Send + Sync {
    /// Before a production process of `project_id` starts: its linked add-ons that sleep
    /// are started and accept connections; why one did not.
    fn wake_for<'a>(&'a self, project_id: &'a str) -> BoxFuture<'a, Result<(), String>>;
    /// `project_id`'s production app fell asleep (its instances stopped): each linked add-on
    /// whose every linked project sleeps now stops too.
    fn app_slept<'a>(&'a self, project_id: &'a str) -> BoxFuture<'a, ()>;
}

/// An app that sleeps on its own: a project's production app, or one of its previews.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SleepingApp {
    pub project_id: String,
    /// The preview's name; `None`: production.
    pub preview: Option<String>,
}

impl SleepingApp {
    pub fn production(project_id: &str) -> SleepingApp {
        SleepingApp {
            project_id: project_id.to_owned(),
            preview: None,
        }
    }

    /// Its route key: the slug, or `<name>--<slug>` for a preview.
    pub fn label(&self, slug: &str) -> String {
        match &self.preview {
            Some(name) => format!("{name}--{slug}"),
            None => slug.to_owned(),
        }
    }
}

/// How an app of `project` sleeps: production by the project's `sleep` setting; a preview by
/// it too, or else by the operator's default for previews (`[sleep] previews_idle_timeout_s`).
pub fn sleep_settings(
    project: &ProjectRecord,
    app: &SleepingApp,
    previews_default: Option<SleepSettings>,
) -> Option<SleepSettings> {
    match app.preview {
        None => project.settings.sleep,
        Some(_) => project.settings.sleep.or(previews_default),
    }
}

impl Pipeline {
    /// Puts the live server app `app` to sleep, unless `still_idle` (asked once its route is
    /// already switched, so no new request can reach the app) says it was used meanwhile;
    /// returns the deployment now asleep.
    pub async fn put_to_sleep(
        &self,
        app: &SleepingApp,
        still_idle: impl Fn() -> bool,
    ) -> Result<String, SleepRefusal> {
        let lock = self.deploy_locks.of(&app.project_id);
        let _guard = lock.lock().await;
        let project = self.project(&app.project_id).await?;
        let deployment = self
            .served(&project, app)
            .await?
            .ok_or_else(|| nothing("the app has no live server deployment"))?;
        let settings = sleep_settings(&project, app, self.config.sleep.previews);
        let label = app.label(&project.slug);
        let strategy = settings.map(|s| s.strategy).unwrap_or_default();
        let asleep = self.routes.asleep(&label, &deployment.id, strategy);
        let Some(previous) = self.routes.swap_live(&label, &deployment.id, asleep) else {
            return Err(nothing(
                "the app is not running (asleep already, or starting)",
            ));
        };
        if !still_idle() {
            self.routes.swap_live(&label, &deployment.id, previous);
            return Err(SleepRefusal::Used);
        }
        self.record_sleep(app, Some(deployment.id.clone())).await?;
        self.hub.system(
            &deployment.id,
            "sleep: the app stops; the next request wakes it",
        );
        self.stop_app(&deployment.id, None).await;
        if app.preview.is_none() {
            if let Some(addons) = self.linked_addons() {
                addons.app_slept(&app.project_id).await;
            }
        }
        Ok(deployment.id)
    }

    /// Who sleeps and wakes the linked add-ons (once, at start-up).
    pub fn with_linked_addons(&self, addons: Weak<dyn LinkedAddons>) {
        let _ = self.linked_addons.set(addons);
    }

    pub(super) fn linked_addons(&self) -> Option<Arc<dyn LinkedAddons>> {
        self.linked_addons.get().and_then(Weak::upgrade)
    }

    /// Starts the sleeping app `app` until healthy and serves it again; the deployment that
    /// woke, or why it did not.
    pub async fn wake(&self, app: &SleepingApp) -> Result<String, String> {
        let project = self
            .project(&app.project_id)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let deployment = self
            .served(&project, app)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the app has no live server deployment")?;
        self.hub
            .system(&deployment.id, "wake: a request arrived; the app starts");
        self.serve_again(&project, &deployment)
            .await
            .map_err(|failure| format!("{}: {}", failure.code, failure.message))?;
        self.end_sleep(app, &deployment.id)
            .await
            .map_err(|e| e.to_string())?;
        Ok(deployment.id)
    }

    /// The route table it switches.
    pub fn routes(&self) -> &std::sync::Arc<crate::router::Routes> {
        &self.routes
    }

    /// A sleep another deployment ended (it went live meanwhile) is forgotten.
    pub async fn forget_sleep(&self, app: &SleepingApp) -> Result<(), crate::store::StoreError> {
        self.record_sleep(app, None).await
    }

    /// The sleep of `deployment_id` ended (it woke); a later sleep's record stays.
    async fn end_sleep(
        &self,
        app: &SleepingApp,
        deployment_id: &str,
    ) -> Result<(), crate::store::StoreError> {
        let dpl = deployment_id.to_owned();
        self.change_sleep(app, move |sleeping| {
            if sleeping.as_deref() == Some(dpl.as_str()) {
                *sleeping = None;
            }
        })
        .await
    }

    async fn record_sleep(
        &self,
        app: &SleepingApp,
        sleeping: Option<String>,
    ) -> Result<(), crate::store::StoreError> {
        self.change_sleep(app, move |recorded| *recorded = sleeping)
            .await
    }

    /// Changes the recorded sleep of `app` (the project's or its preview's `sleeping`).
    async fn change_sleep(
        &self,
        app: &SleepingApp,
        change: impl FnOnce(&mut Option<String>) + Send + 'static,
    ) -> Result<(), crate::store::StoreError> {
        let id = app.project_id.clone();
        match app.preview.clone() {
            None => self
                .store
                .call(move |s| s.update_project(&id, |p| change(&mut p.sleeping)))
                .await
                .map(drop),
            Some(name) => self
                .store
                .call(move |s| s.update_preview(&id, &name, |p| change(&mut p.sleeping)))
                .await
                .map(drop),
        }
    }

    /// The server deployment `app` serves now, if any.
    async fn served(
        &self,
        project: &ProjectRecord,
        app: &SleepingApp,
    ) -> Result<Option<DeploymentRecord>, crate::store::StoreError> {
        let Some(name) = app.preview.clone() else {
            return self.live_server(project).await;
        };
        let id = project.id.clone();
        let deployment = self
            .store
            .call(move |s| -> crate::store::Result<Option<DeploymentRecord>> {
                let preview = s.previews_of(&id)?.into_iter().find(|p| p.name == name);
                match preview.and_then(|p| p.deployment_id) {
                    Some(dpl) => s.deployment(&dpl),
                    None => Ok(None),
                }
            })
            .await?;
        Ok(deployment.filter(|d| d.mode == Some(DeploymentMode::Server)))
    }

    async fn project(&self, project_id: &str) -> Result<ProjectRecord, SleepRefusal> {
        let id = project_id.to_owned();
        self.store
            .call(move |s| s.find_project(&id))
            .await?
            .ok_or_else(|| nothing("the project was deleted"))
    }
}

fn nothing(message: &str) -> SleepRefusal {
    SleepRefusal::Nothing(message.to_owned())
}
