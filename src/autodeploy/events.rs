//! What a verified webhook event does (`AutoDeploy::webhook` calls [`AutoDeploy::act`]): a
//! push deploys production or updates its branch's preview once it moves the branch forward,
//! a deleted branch or a closed pull request tears its preview down, an updated pull request
//! builds its preview; anything else is ignored, with the reason.

use super::providers::{GitEvent, PullAction};
use super::{heads, preview, AutoDeploy, AutoDeployError, PullRequestRef, WebhookOutcome};
use crate::store::records::{ProjectRecord, RunRecord, Trigger};

impl AutoDeploy {
    pub(super) async fn act(
        &self,
        project: &ProjectRecord,
        event: GitEvent,
    ) -> Result<WebhookOutcome, AutoDeployError> {
        match event {
            GitEvent::Ping => Ok(WebhookOutcome::ignored("ping: the webhook works")),
            GitEvent::Other(name) => Ok(WebhookOutcome::ignored(format!(
                "{name} events are not acted on"
            ))),
            GitEvent::Push { branch, facts } => self.push(project, branch, facts).await,
            GitEvent::BranchDeleted { branch } => self.branch_deleted(project, &branch).await,
            GitEvent::PullRequest {
                number,
                action: PullAction::Close,
                ..
            } => self.pull_request_closed(project, number).await,
            GitEvent::PullRequest {
                number,
                action: PullAction::Update,
                branch,
                commit,
                fork,
            } => {
                let pull = PullRequestRef { number, fork };
                self.pull_request_updated(project, pull, &branch, &commit)
                    .await
            }
            GitEvent::PullRequest { number, .. } => Ok(WebhookOutcome::ignored(format!(
                "pull request #{number}: this action changes no code"
            ))),
        }
    }

    /// A push to the production branch, or to another branch when previews are on.
    async fn push(
        &self,
        project: &ProjectRecord,
        branch: String,
        facts: heads::PushFacts,
    ) -> Result<WebhookOutcome, AutoDeployError> {
        let settings = &project.settings;
        if branch != settings.production_branch && !settings.previews {
            return Ok(WebhookOutcome::ignored(format!(
                "push to {branch}: previews are off (set \"previews\": true in the project's settings)"
            )));
        }
        self.forward_push(project, branch, facts).await
    }

    /// A deleted branch tears its preview down.
    async fn branch_deleted(
        &self,
        project: &ProjectRecord,
        branch: &str,
    ) -> Result<WebhookOutcome, AutoDeployError> {
        let name = self.preview_name(project, branch)?;
        Ok(match self.teardown(project, &name).await? {
            true => torn_down(format!("branch {branch} was deleted")),
            false => {
                WebhookOutcome::ignored(format!("branch {branch} was deleted; it had no preview"))
            }
        })
    }

    /// A closed (or merged) pull request tears its preview down.
    async fn pull_request_closed(
        &self,
        project: &ProjectRecord,
        number: u64,
    ) -> Result<WebhookOutcome, AutoDeployError> {
        Ok(
            match self.teardown(project, &format!("pr-{number}")).await? {
                true => torn_down(format!("pull request #{number} was closed")),
                false => WebhookOutcome::ignored(format!(
                    "pull request #{number} was closed; it had no preview"
                )),
            },
        )
    }

    /// A pull request with new code builds its preview, when previews are on (and, for a
    /// fork's, when the project builds forks' code).
    async fn pull_request_updated(
        &self,
        project: &ProjectRecord,
        pull: PullRequestRef,
        branch: &str,
        commit: &str,
    ) -> Result<WebhookOutcome, AutoDeployError> {
        let (settings, number) = (&project.settings, pull.number);
        if !settings.previews {
            return Ok(WebhookOutcome::ignored(format!(
                "pull request #{number}: previews are off (set \"previews\": true in the project's settings)"
            )));
        }
        if pull.fork && !settings.preview_forks {
            return Ok(WebhookOutcome::ignored(format!(
                "pull request #{number} comes from a fork: set \"previewForks\": true to build forks' code"
            )));
        }
        let name = format!("pr-{number}");
        let run = self
            .preview(
                project,
                &name,
                Some(branch),
                Some(pull),
                commit,
                Trigger::Webhook,
            )
            .await?;
        Ok(started(
            "preview",
            format!("pull request #{number} ({branch})"),
            &run,
        ))
    }

    /// A push that moves its branch forward (`heads::judge`) deploys it (production) or
    /// updates its preview; a stale one (a replay) starts nothing. The new head is recorded
    /// before the run starts and put back if the run cannot start.
    async fn forward_push(
        &self,
        project: &ProjectRecord,
        branch: String,
        facts: heads::PushFacts,
    ) -> Result<WebhookOutcome, AutoDeployError> {
        let (id, key, judged) = (project.id.clone(), branch.clone(), facts.clone());
        let advanced = self
            .store
            .call(move |s| {
                s.advance_branch(&id, &key, |known| {
                    match heads::judge(known, &key, &judged, crate::ids::now_ms()) {
                        heads::Verdict::Forward(head) => Ok(head),
                        heads::Verdict::Stale(reason) => Err(reason),
                    }
                })
            })
            .await?;
        let previous = match advanced {
            Ok(previous) => previous,
            Err(reason) => {
                tracing::info!(project = %project.slug, %branch, %reason, "webhook push ignored");
                return Ok(WebhookOutcome::ignored(reason));
            }
        };
        let started = self.start_push(project, &branch, &facts.after).await;
        if started.is_err() {
            let (id, after) = (project.id.clone(), facts.after);
            let undo = self
                .store
                .call(move |s| s.restore_branch(&id, &branch, &after, previous.as_ref()))
                .await;
            if let Err(error) = undo {
                tracing::error!(%error, "could not put a branch's head back");
            }
        }
        started
    }

    async fn start_push(
        &self,
        project: &ProjectRecord,
        branch: &str,
        commit: &str,
    ) -> Result<WebhookOutcome, AutoDeployError> {
        if branch == project.settings.production_branch {
            let run = self
                .deploy(project, branch, Some(commit.to_owned()), Trigger::Webhook)
                .await?;
            return Ok(started(
                "deploy",
                format!("push to {branch}, the production branch"),
                &run,
            ));
        }
        let name = self.preview_name(project, branch)?;
        let run = self
            .preview(project, &name, Some(branch), None, commit, Trigger::Webhook)
            .await?;
        Ok(started("preview", format!("push to {branch}"), &run))
    }

    fn preview_name(
        &self,
        project: &ProjectRecord,
        branch: &str,
    ) -> Result<String, AutoDeployError> {
        preview::preview_name(branch, &project.slug).ok_or_else(|| {
            AutoDeployError::Settings(format!(
                "the slug {} is too long for preview hosts (<branch>--<slug> must fit in 63 characters)",
                project.slug
            ))
        })
    }
}

/// What a torn-down preview's delivery did.
fn torn_down(reason: String) -> WebhookOutcome {
    WebhookOutcome {
        action: "teardown",
        reason,
        run: None,
    }
}

/// What a delivery that started a run did.
fn started(action: &'static str, reason: String, run: &RunRecord) -> WebhookOutcome {
    WebhookOutcome {
        action,
        reason,
        run: Some((run.id.clone(), run.deployment_id.clone())),
    }
}
