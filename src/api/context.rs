//! The API's state: everything its handlers need, and nothing the router needs. Built once by
//! `app.rs` and reached only through `control::ControlHost`.

use std::sync::Arc;

use crate::auth::Tokens;
use crate::config::Config;
use crate::ratelimit::RateLimiter;
use crate::secrets::SecretBox;
use crate::store::Store;

/// What the API's handlers share: the store, tokens, rate limits and the parts of the daemon
/// they drive. Built once by `app.rs`; the app-host request path never holds it.
pub struct Context {
    pub config: Arc<Config>,
    pub store: Store,
    pub tokens: Arc<Tokens>,
    pub limiter: RateLimiter,
    pub secrets: Arc<SecretBox>,
    pub routes: Arc<crate::router::Routes>,
    pub pipeline: Arc<crate::pipeline::Pipeline>,
    /// One-off runs and cron jobs.
    pub jobs: Arc<crate::jobs::Jobs>,
    /// PostgreSQL and Redis add-ons.
    pub addons: Arc<crate::addons::Addons>,
    pub hub: Arc<crate::logs::LogHub>,
    pub sources: Arc<crate::source::SourceStore>,
    /// Figures for `GET /api/metrics` and `…/usage`.
    pub observatory: Arc<crate::usage::Observatory>,
    /// Webhook subscriptions.
    pub notifier: crate::notifications::Notifier,
    /// Custom domains.
    pub domains: Arc<crate::domains::Domains>,
    /// Webhooks from git providers, deploy hooks, previews.
    pub autodeploy: Arc<crate::autodeploy::AutoDeploy>,
    /// The control host's and apps' public URLs.
    pub urls: crate::urls::PublicUrls,
    /// Sleeping apps: `POST …/sleep` and `…/wake`.
    pub sleeper: Arc<crate::sleep::Sleeper>,
    /// The cap, deadline and shared budget of webhook bodies.
    pub public_bodies: super::PublicBodies,
    /// `Idempotency-Key`s whose first request is still running.
    pub idempotency: super::idempotency::InFlight,
    /// The public routes' failures before authentication, counted instead of audited.
    pub unauthenticated_failures: super::failures::UnauthenticatedFailures,
}

impl Context {
    /// `https://<control host>[:port]`: where the API (and so webhooks) is reached.
    pub fn control_url(&self) -> String {
        self.urls.control()
    }

    pub fn app_url(&self, slug: &str) -> String {
        self.urls.app(slug)
    }
}
