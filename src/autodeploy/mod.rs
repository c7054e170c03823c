//! Deploys that git drives (the contract's "Git-driven deploys, deploy hooks and previews"):
//! a provider's webhook (signature checked on the raw body first, redeliveries recognised)
//! becomes a production run, a preview run, a preview's teardown, or nothing; a deploy hook
//! deploys its branch; previews are runs of their own with their own host, never touching
//! production's route. Runs use the project's saved settings. [`providers`] reads what each
//! provider sends, `events.rs` decides what each event does; the pipeline runs and tears
//! down; the store keeps previews and hooks.

mod events;
pub mod heads;
pub mod preview;
pub mod providers;

use std::sync::Arc;

use http::HeaderMap;

use crate::pipeline::{Pipeline, ProvisionError, RunPlan};
use crate::secrets::SecretBox;
use crate::store::records::{
    DeployTarget, Environment, PreviewRecord, ProjectRecord, ProvisionRequest, RunRecord, Trigger,
};
use crate::store::{Store, StoreError};
use providers::SignatureError;

/// At most this many previews per project; an 11th tears down the least recently updated.
pub const MAX_PREVIEWS: usize = 10;

/// What authenticates a project's webhook deliveries: found before the body is read.
pub struct WebhookKey {
    provider: providers::Provider,
    secret: String,
}

/// What a webhook delivery did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookOutcome {
    /// `deploy`, `preview`, `teardown` or `ignored`.
    pub action: &'static str,
    pub reason: String,
    pub run: Option<(String, String)>,
}

impl WebhookOutcome {
    fn ignored(reason: impl Into<String>) -> WebhookOutcome {
        WebhookOutcome {
            action: "ignored",
            reason: reason.into(),
            run: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AutoDeployError {
    /// 401: nothing happened.
    #[error("{0}")]
    Unauthorized(String),
    /// 409: the project's settings cannot make a run (the message says what to set).
    #[error("{0}")]
    Settings(String),
    #[error("{0:?}")]
    Provision(ProvisionError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<ProvisionError> for AutoDeployError {
    fn from(error: ProvisionError) -> Self {
        AutoDeployError::Provision(error)
    }
}

pub struct AutoDeploy {
    store: Store,
    pipeline: Arc<Pipeline>,
    secrets: Arc<SecretBox>,
}

/// The sealing context of a project's webhook secret.
fn secret_context(project_id: &str) -> String {
    format!("webhook-secret:{project_id}")
}

impl AutoDeploy {
    pub fn new(store: Store, pipeline: Arc<Pipeline>, secrets: Arc<SecretBox>) -> AutoDeploy {
        AutoDeploy {
            store,
            pipeline,
            secrets,
        }
    }

    /// Makes (or replaces) the project's webhook secret and returns it, shown this once.
    pub async fn rotate_secret(&self, project: &ProjectRecord) -> Result<String, StoreError> {
        let secret = format!(
            "whsec_{}",
            crate::ids::base32(&crate::ids::random_bytes::<32>())
        );
        let sealed = crate::ids::hex(
            &self
                .secrets
                .seal(&secret_context(&project.id), secret.as_bytes()),
        );
        let id = project.id.clone();
        self.store
            .call(move |s| s.update_project(&id, |p| p.webhook_secret_sealed = Some(sealed)))
            .await?;
        Ok(secret)
    }

    fn secret_of(&self, project: &ProjectRecord) -> Option<String> {
        let sealed = crate::ids::hex_decode(project.webhook_secret_sealed.as_deref()?)?;
        let plain = self
            .secrets
            .open(&secret_context(&project.id), &sealed)
            .ok()?;
        String::from_utf8(plain).ok()
    }

    /// `POST /api/webhooks/{projectId}`, before its body is read: the provider its headers
    /// name and the project's secret, or why the delivery cannot be authenticated.
    pub fn webhook_key(
        &self,
        project: &ProjectRecord,
        headers: &HeaderMap,
    ) -> Result<WebhookKey, AutoDeployError> {
        let provider = providers::provider(headers).ok_or_else(|| {
            AutoDeployError::Unauthorized(SignatureError::UnknownProvider.to_string())
        })?;
        let secret = self.secret_of(project).ok_or_else(|| {
            AutoDeployError::Unauthorized(format!(
                "project {} has no webhook secret: make one with POST /api/projects/{}/webhook-secret",
                project.slug, project.slug
            ))
        })?;
        Ok(WebhookKey { provider, secret })
    }

    /// `POST /api/webhooks/{projectId}`: checks the signature on the raw body, then acts.
    pub async fn webhook(
        &self,
        project: &ProjectRecord,
        key: WebhookKey,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<WebhookOutcome, AutoDeployError> {
        let WebhookKey { provider, secret } = key;
        providers::verify(provider, headers, body, &secret)
            .map_err(|e| AutoDeployError::Unauthorized(e.to_string()))?;
        if let Some(delivery) = providers::delivery_id(provider, headers) {
            let (id, key) = (project.id.clone(), delivery.clone());
            let first = self
                .store
                .call(move |s| s.first_delivery(&id, &key, crate::ids::now_ms()))
                .await?;
            if !first {
                return Ok(WebhookOutcome::ignored(format!(
                    "redelivery of {} delivery {delivery}: it was handled already",
                    provider.name()
                )));
            }
        }
        let Some(event) = providers::parse(provider, headers, body) else {
            return Ok(WebhookOutcome::ignored(format!(
                "the body is not a {} event this endpoint understands",
                provider.name()
            )));
        };
        tracing::info!(project = %project.slug, provider = provider.name(), ?event, "webhook");
        self.act(project, event).await
    }

    fn request(
        &self,
        project: &ProjectRecord,
        git_ref: String,
        target: DeployTarget,
    ) -> Result<ProvisionRequest, AutoDeployError> {
        let settings = &project.settings;
        let git_url = settings.git_url.clone().ok_or_else(|| {
            AutoDeployError::Settings(format!(
                "project {} has no gitUrl: set it with PATCH /api/projects/{} {{\"gitUrl\": \"https://…\"}}",
                project.slug, project.slug
            ))
        })?;
        Ok(ProvisionRequest {
            project_slug: project.slug.clone(),
            build: settings.build.clone(),
            git_url: Some(git_url),
            git_ref: Some(git_ref),
            target,
            ..Default::default()
        })
    }

    /// A production run of `branch` (at `commit` when given) with the saved settings.
    pub async fn deploy(
        &self,
        project: &ProjectRecord,
        branch: &str,
        commit: Option<String>,
        trigger: Trigger,
    ) -> Result<RunRecord, AutoDeployError> {
        let target = DeployTarget {
            environment: Environment::Production,
            branch: Some(branch.to_owned()),
            commit: commit.clone(),
            trigger,
            ..Default::default()
        };
        let request = self.request(project, commit.unwrap_or_else(|| branch.to_owned()), target)?;
        Ok(self
            .pipeline
            .provision(project, RunPlan::Build(request))
            .await?)
    }

    /// A preview run of `commit` (a commit id, or a branch to build its head); the 11th preview tears down the least recently updated.
    pub async fn preview(
        &self,
        project: &ProjectRecord,
        name: &str,
        branch: Option<&str>,
        pull_request: Option<PullRequestRef>,
        commit: &str,
        trigger: Trigger,
    ) -> Result<RunRecord, AutoDeployError> {
        let target = DeployTarget {
            environment: Environment::Preview,
            preview: Some(name.to_owned()),
            branch: branch.map(str::to_owned),
            commit: is_commit(commit).then(|| commit.to_owned()),
            trigger,
            pull_request: pull_request.map(|pull| pull.number),
            fork: pull_request.is_some_and(|pull| pull.fork),
        };
        let pull_request = pull_request.map(|pull| pull.number);
        let request = self.request(project, commit.to_owned(), target)?;
        let (project_id, key) = (project.id.clone(), name.to_owned());
        let existed = self
            .store
            .call(move |s| {
                s.previews_of(&project_id)
                    .map(|all| all.into_iter().any(|p| p.name == key))
            })
            .await?;
        // Recorded before the run starts, so its switch finds the preview however fast it is.
        let mut record = PreviewRecord {
            v: 1,
            project_id: project.id.clone(),
            name: name.to_owned(),
            branch: branch.map(str::to_owned),
            pull_request,
            deployment_id: None,
            latest_deployment_id: String::new(),
            updated_ms: crate::ids::now_ms(),
            sleeping: None,
        };
        let stored = record.clone();
        let evicted = self
            .store
            .call(move |s| s.start_preview(&stored, MAX_PREVIEWS))
            .await?;
        for old in &evicted {
            tracing::info!(project = %project.slug, preview = %old.name, "an 11th preview tears down the least recently updated");
            self.pipeline.teardown_preview(project, old).await;
        }
        let run = match self
            .pipeline
            .provision(project, RunPlan::Build(request))
            .await
        {
            Ok(run) => run,
            Err(error) => {
                if !existed {
                    let (id, key) = (project.id.clone(), name.to_owned());
                    let _ = self.store.call(move |s| s.remove_preview(&id, &key)).await;
                }
                return Err(error.into());
            }
        };
        record.latest_deployment_id = run.deployment_id.clone();
        self.store
            .call(move |s| s.start_preview(&record, MAX_PREVIEWS))
            .await?;
        Ok(run)
    }

    /// Tears preview `name` down; false when there was none.
    pub async fn teardown(&self, project: &ProjectRecord, name: &str) -> Result<bool, StoreError> {
        let (id, key) = (project.id.clone(), name.to_owned());
        let Some(removed) = self
            .store
            .call(move |s| s.remove_preview(&id, &key))
            .await?
        else {
            return Ok(false);
        };
        self.pipeline.teardown_preview(project, &removed).await;
        Ok(true)
    }
}

/// A full commit id (what providers send), not a branch name.
fn is_commit(git_ref: &str) -> bool {
    git_ref.len() == 40 && git_ref.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The pull request a preview is built for: its number, and whether its code comes from a
/// fork (then the run gets none of the project's variables).
#[derive(Debug, Clone, Copy)]
pub struct PullRequestRef {
    pub number: u64,
    pub fork: bool,
}
