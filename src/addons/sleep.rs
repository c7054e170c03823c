//! Add-ons sleep with their apps (issue 35): once every project linked to an add-on has its
//! production app asleep, the add-on is stopped through the supervisor (after the app), and
//! it is started again — accepting connections — before any linked app's process starts
//! (a wake, a deploy, a run). Its record says so: state `stopped`, message [`ASLEEP`]; so
//! start-up leaves it stopped like the app. The pipeline calls in through
//! `pipeline::LinkedAddons` (`pipeline/sleep.rs`, `pipeline/links.rs`).
//!
//! Architecture invariant: an add-on sleeps only while every linked project's route is a
//! sleeping target not being woken; sleeps and wakes of add-ons take one lock (`sleeping`),
//! so a wake that starts while another app falls asleep finds the add-on running.

use futures_util::future::BoxFuture;

use super::Addons;
use crate::router::Target;
use crate::store::addons::{AddonRecord, AddonState};

/// The message of an add-on asleep with its app(s).
pub const ASLEEP: &str = "asleep with its app(s)";

/// Whether `addon` was stopped because its apps sleep (an upgrade's old add-on, also
/// stopped, is not).
pub fn is_asleep(addon: &AddonRecord) -> bool {
    addon.state == AddonState::Stopped && addon.message.as_deref() == Some(ASLEEP)
}

impl crate::pipeline::LinkedAddons for Addons {
    fn wake_for<'a>(&'a self, project_id: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.wake_linked(project_id))
    }

    fn app_slept<'a>(&'a self, project_id: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(self.sleep_linked(project_id))
    }
}

impl Addons {
    /// Starts every add-on linked to `project_id` that sleeps, each until it accepts
    /// connections; why one did not.
    async fn wake_linked(&self, project_id: &str) -> Result<(), String> {
        let _one_at_a_time = self.sleeping.lock().await;
        for addon in self.linked(project_id).await? {
            if !is_asleep(&addon) {
                continue;
            }
            let owner = addon.project_id.clone();
            let project = self
                .store
                .call(move |s| s.find_project(&owner))
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("the add-on {} has no project", addon.id))?;
            let hub = self.pipeline.hub();
            hub.system(
                &addon.id,
                "wake: a linked app starts; the add-on starts first",
            );
            if let Err(message) = self.run(&project, &addon, None).await {
                return Err(format!(
                    "the linked add-on {} did not start: {message}",
                    addon.id
                ));
            }
            self.set_state(&addon, AddonState::Running, None)
                .await
                .map_err(|e| e.to_string())?;
            tracing::info!(addon = %addon.id, project = %project_id, "add-on woke for its app");
        }
        Ok(())
    }

    /// Stops every running add-on linked to `project_id` whose linked projects all sleep.
    async fn sleep_linked(&self, project_id: &str) {
        let _one_at_a_time = self.sleeping.lock().await;
        let linked = match self.linked(project_id).await {
            Ok(linked) => linked,
            Err(error) => {
                tracing::warn!(project = %project_id, %error, "sleep: cannot read the linked add-ons");
                return;
            }
        };
        for addon in linked {
            if addon.state != AddonState::Running || !self.all_asleep(&addon.links).await {
                continue;
            }
            // Recorded first: a start-up from here on leaves it stopped.
            let stopped = self
                .set_state(&addon, AddonState::Stopped, Some(ASLEEP.to_owned()))
                .await;
            if let Err(error) = stopped {
                tracing::warn!(addon = %addon.id, %error, "sleep: the add-on keeps running");
                continue;
            }
            let hub = self.pipeline.hub();
            hub.system(
                &addon.id,
                "sleep: every linked app sleeps; the add-on stops",
            );
            self.supervisor.stop_deployment(&addon.id, None).await;
            tracing::info!(addon = %addon.id, "add-on asleep with its app(s)");
        }
    }

    /// Whether every project in `links` has its production app asleep, and not waking.
    async fn all_asleep(&self, links: &[String]) -> bool {
        let ids = links.to_vec();
        let Ok(projects) = self
            .store
            .call(move |s| {
                ids.iter()
                    .map(|id| s.find_project(id))
                    .collect::<Result<Vec<_>, _>>()
            })
            .await
        else {
            return false;
        };
        let table = self.pipeline.routes().snapshot();
        projects.iter().all(|project| {
            let Some(project) = project else {
                return true;
            };
            matches!(
                table.apps.get(&project.slug),
                Some(Some(Target::Asleep(asleep))) if !asleep.waking()
            )
        })
    }

    async fn linked(&self, project_id: &str) -> Result<Vec<AddonRecord>, String> {
        let id = project_id.to_owned();
        self.store
            .call(move |s| s.addons_linked_to(&id))
            .await
            .map_err(|e| e.to_string())
    }
}
