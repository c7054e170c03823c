//! Scale to zero's two moves on a project's production app (issue 35), under the same locks
//! and through the same path as a deploy: [`Pipeline::put_to_sleep`] switches the route to a
//! sleeping target first, records the sleep (start-up does not start a sleeping app:
//! `restore.rs`), then stops every instance of every type with its grace period;
//! [`Pipeline::wake`] brings the app back exactly as start-up restore does (`serve_again`:
//! prepare until healthy, then switch). When to do either is `sleep/`'s business.

use super::Pipeline;
use crate::store::records::ProjectRecord;

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

impl Pipeline {
    /// Puts the live server app of `project_id` to sleep, unless `still_idle` (asked once
    /// its route is already switched, so no new request can reach the app) says it was used
    /// meanwhile; returns the deployment now asleep.
    pub async fn put_to_sleep(
        &self,
        project_id: &str,
        still_idle: impl Fn() -> bool,
    ) -> Result<String, SleepRefusal> {
        let lock = self.deploy_locks.of(project_id);
        let _guard = lock.lock().await;
        let project = self.project(project_id).await?;
        let deployment = self
            .live_server(&project)
            .await?
            .ok_or_else(|| nothing("the project has no live server deployment"))?;
        let strategy = project.settings.sleep.map(|s| s.strategy);
        let asleep =
            self.routes
                .asleep(&project.slug, &deployment.id, strategy.unwrap_or_default());
        let Some(previous) = self.routes.swap_live(&project.slug, &deployment.id, asleep) else {
            return Err(nothing(
                "the app is not running (asleep already, or starting)",
            ));
        };
        if !still_idle() {
            self.routes
                .swap_live(&project.slug, &deployment.id, previous);
            return Err(SleepRefusal::Used);
        }
        let dpl = deployment.id.clone();
        self.store
            .call(move |s| s.update_project(&project.id, |p| p.sleeping = Some(dpl)))
            .await?;
        self.hub.system(
            &deployment.id,
            "sleep: the app stops; the next request wakes it",
        );
        self.supervisor.stop_deployment(&deployment.id, None).await;
        Ok(deployment.id)
    }

    /// Starts the sleeping app of `project_id` until healthy and serves it again; the
    /// deployment that woke, or why it did not.
    pub async fn wake(&self, project_id: &str) -> Result<String, String> {
        let project = self
            .project(project_id)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let deployment = self
            .live_server(&project)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("the project has no live server deployment")?;
        self.hub
            .system(&deployment.id, "wake: a request arrived; the app starts");
        self.serve_again(&project, &deployment)
            .await
            .map_err(|failure| format!("{}: {}", failure.code, failure.message))?;
        let dpl = deployment.id.clone();
        self.store
            .call(move |s| {
                s.update_project(&project.id, |p| {
                    if p.sleeping.as_deref() == Some(dpl.as_str()) {
                        p.sleeping = None;
                    }
                })
            })
            .await
            .map_err(|e| e.to_string())?;
        Ok(deployment.id)
    }

    /// The route table it switches.
    pub fn routes(&self) -> &std::sync::Arc<crate::router::Routes> {
        &self.routes
    }

    /// A sleep another deployment ended (it went live meanwhile) is forgotten.
    pub async fn forget_sleep(&self, project_id: &str) -> Result<(), crate::store::StoreError> {
        let id = project_id.to_owned();
        self.store
            .call(move |s| s.update_project(&id, |p| p.sleeping = None))
            .await
            .map(drop)
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
