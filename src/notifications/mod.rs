//! Outbound webhooks: subscriptions (`POST /api/notifications`), the events the daemon emits
//! (deployments, release commands, runs and cron jobs, app crashes, certificate failures,
//! active domains, add-ons' failed backups and filling disks) and their delivery.
//!
//! [`Notifier::emit`] turns an event into one queued delivery per subscription that wants it,
//! with the body fixed at that moment (`format.rs`), in the store; each subscription's queue
//! holds at most `queue_per_subscription` (the oldest dropped and counted). The worker
//! ([`delivery::run`]) posts them, signed, one at a time per subscription but subscriptions
//! side by side, and retries failures with backoff. Nothing is lost across a restart: a
//! delivery leaves the queue only after a 2xx, its last attempt, or being dropped from a full
//! queue (at least once; `X-Slipway-Delivery` lets a receiver drop a repeat).
//! `destination.rs` keeps webhooks away from internal addresses.
//! Callers: the pipeline (deployment events), the supervisor (`app.crashed`), `app.rs` (the
//! TLS failure hook), the API handlers (subscriptions), the add-ons (`addon.backup_failed`,
//! `addon.disk_full` from `addons::watch`).

pub mod delivery;
pub mod destination;
mod format;

use std::sync::Arc;

use crate::secrets::SecretBox;
use crate::store::notifications::{NotificationRecord, QueuedDelivery};
use crate::store::{Store, StoreError};

pub use delivery::RetryPolicy;
pub use destination::{DestinationError, Destinations};
pub use format::{json_body, signature, slack_body};

/// Subscriptions at most.
pub const MAX_SUBSCRIPTIONS: u64 = 100;
/// Longest subscription URL.
pub const MAX_URL_BYTES: usize = 2048;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    DeploymentStarted,
    DeploymentSucceeded,
    DeploymentFailed,
    DeploymentCanceled,
    AppCrashed,
    CertificateFailed,
    DomainActive,
    ReleaseFailed,
    RunFailed,
    CronFailed,
    CronTimedOut,
    AddonBackupFailed,
    AddonDiskFull,
    AppSlept,
    AppWoke,
    AppWakeFailed,
    // A cluster node stopped answering its manager (issue 36).
    NodeDown,
}

impl EventKind {
    pub const ALL: [EventKind; 17] = [
        EventKind::DeploymentStarted,
        EventKind::DeploymentSucceeded,
        EventKind::DeploymentFailed,
        EventKind::DeploymentCanceled,
        EventKind::AppCrashed,
        EventKind::CertificateFailed,
        EventKind::DomainActive,
        EventKind::ReleaseFailed,
        EventKind::RunFailed,
        EventKind::CronFailed,
        EventKind::CronTimedOut,
        EventKind::AddonBackupFailed,
        EventKind::AddonDiskFull,
        EventKind::AppSlept,
        EventKind::AppWoke,
        EventKind::AppWakeFailed,
        EventKind::NodeDown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::DeploymentStarted => "deployment.started",
            EventKind::DeploymentSucceeded => "deployment.succeeded",
            EventKind::DeploymentFailed => "deployment.failed",
            EventKind::DeploymentCanceled => "deployment.canceled",
            EventKind::AppCrashed => "app.crashed",
            EventKind::CertificateFailed => "certificate.failed",
            EventKind::DomainActive => "domain.active",
            EventKind::ReleaseFailed => "release.failed",
            EventKind::RunFailed => "run.failed",
            EventKind::CronFailed => "cron.failed",
            EventKind::CronTimedOut => "cron.timed_out",
            EventKind::AddonBackupFailed => "addon.backup_failed",
            EventKind::AddonDiskFull => "addon.disk_full",
            EventKind::AppSlept => "app.slept",
            EventKind::AppWoke => "app.woke",
            EventKind::AppWakeFailed => "app.wake_failed",
            EventKind::NodeDown => "node.down",
        }
    }

    pub fn parse(name: &str) -> Option<EventKind> {
        EventKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }
}

/// One event: `{event, at, project, deployment, url, error}` in the json format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub at_ms: u64,
    /// The project's slug.
    pub project: Option<String>,
    pub deployment: Option<String>,
    /// The app's URL, or the domain's for certificate and domain events.
    pub url: Option<String>,
    pub error: Option<String>,
    /// The one-off or cron run (`run_…`) and its cron job (`crn_…`), for run events.
    pub run: Option<String>,
    pub job: Option<String>,
    /// The add-on (`adn_…`), for add-on events.
    pub addon: Option<String>,
}

impl Event {
    pub fn new(kind: EventKind) -> Event {
        Event {
            kind,
            at_ms: crate::ids::now_ms(),
            project: None,
            deployment: None,
            url: None,
            error: None,
            run: None,
            job: None,
            addon: None,
        }
    }

    pub fn addon(mut self, id: &str) -> Event {
        self.addon = Some(id.to_owned());
        self
    }

    pub fn project(mut self, slug: &str) -> Event {
        self.project = Some(slug.to_owned());
        self
    }

    pub fn deployment(mut self, id: &str) -> Event {
        self.deployment = Some(id.to_owned());
        self
    }

    pub fn url(mut self, url: &str) -> Event {
        self.url = Some(url.to_owned());
        self
    }

    /// The run (and its cron job, if any) a run event is about.
    pub fn run(mut self, id: &str, job: Option<&str>) -> Event {
        self.run = Some(id.to_owned());
        self.job = job.map(str::to_owned);
        self
    }

    pub fn error(mut self, error: &str) -> Event {
        self.error = Some(error.to_owned());
        self
    }
}

/// The payload format of a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Slack,
}

impl Format {
    pub fn parse(name: &str) -> Option<Format> {
        match name {
            "json" => Some(Format::Json),
            "slack" => Some(Format::Slack),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Slack => "slack",
        }
    }
}

/// The handle everything that emits events holds: cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    store: Store,
    wake: Arc<tokio::sync::Notify>,
    destinations: Arc<Destinations>,
    queue_per_subscription: u64,
}

/// A subscription as created: its record and the secret, shown this once.
pub struct Created {
    pub record: NotificationRecord,
    pub secret: String,
}

impl Notifier {
    pub fn new(store: Store, config: &crate::config::NotificationsConfig) -> Notifier {
        Notifier {
            store,
            wake: Arc::new(tokio::sync::Notify::new()),
            destinations: Arc::new(Destinations::new(config.allow_destinations.clone())),
            queue_per_subscription: config.queue_per_subscription,
        }
    }

    /// Queues the event for every subscription that wants it, in the background; a store
    /// failure is logged.
    pub fn emit(&self, event: Event) {
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(error) = this.enqueue(event.clone()).await {
                tracing::error!(%error, event = event.kind.as_str(), "could not queue notifications");
            }
        });
    }

    /// `domain.active`: a custom domain of `project` now serves it over HTTPS.
    pub fn domain_active(&self, project: &str, domain: &str) {
        self.emit(
            Event::new(EventKind::DomainActive)
                .project(project)
                .url(&format!("https://{domain}")),
        );
    }

    /// `certificate.failed` for `domain` (of `project` when it is an app's).
    pub fn certificate_failed(&self, domain: &str, project: Option<&str>, error: &str) {
        let mut event = Event::new(EventKind::CertificateFailed)
            .url(&format!("https://{domain}"))
            .error(error);
        event.project = project.map(str::to_owned);
        self.emit(event);
    }

    /// Queues the event now; returns how many deliveries it made.
    pub async fn enqueue(&self, event: Event) -> Result<usize, StoreError> {
        let cap = self.queue_per_subscription;
        let queued = self
            .store
            .call(move |store| {
                let deliveries: Vec<QueuedDelivery> = store
                    .list_notifications()?
                    .into_iter()
                    .filter(|n| n.events.iter().any(|e| e == event.kind.as_str()))
                    .map(|n| QueuedDelivery {
                        v: 1,
                        id: crate::ids::new_id("dlv_"),
                        body: match Format::parse(&n.format) {
                            Some(Format::Slack) => slack_body(&event),
                            _ => json_body(&event),
                        },
                        notification_id: n.id,
                        event: event.kind.as_str().to_owned(),
                        attempts: 0,
                        created_ms: event.at_ms,
                        next_ms: event.at_ms,
                    })
                    .collect();
                if !deliveries.is_empty() {
                    store.enqueue_deliveries(&deliveries, cap)?;
                }
                Ok::<_, StoreError>(deliveries.len())
            })
            .await?;
        if queued > 0 {
            self.wake.notify_one();
        }
        Ok(queued)
    }

    /// Stores a new subscription (already validated) with a fresh secret, sealed.
    pub async fn subscribe(
        &self,
        secrets: &SecretBox,
        url: String,
        events: Vec<EventKind>,
        format: Format,
    ) -> Result<Created, StoreError> {
        let id = crate::ids::new_id("ntf_");
        let secret = format!(
            "whsec_{}",
            crate::ids::base32(&crate::ids::random_bytes::<32>())
        );
        let sealed = secrets.seal(&secret_context(&id), secret.as_bytes());
        let record = NotificationRecord {
            v: 1,
            id,
            url,
            events: events.iter().map(|e| e.as_str().to_owned()).collect(),
            format: format.as_str().to_owned(),
            secret_sealed: crate::ids::hex(&sealed),
            created_ms: crate::ids::now_ms(),
            dropped: 0,
        };
        let stored = record.clone();
        self.store
            .call(move |store| store.insert_notification(&stored))
            .await?;
        Ok(Created { record, secret })
    }

    /// A subscription URL's host, checked as deliveries will check it: an IP literal or a
    /// name resolving to a refused address is refused; a name that does not resolve now is
    /// accepted (every attempt resolves and checks it again).
    pub async fn check_destination(&self, url: &str) -> Result<(), DestinationError> {
        let Ok(uri) = url.parse::<http::Uri>() else {
            return Ok(());
        };
        let (Some(host), Some(port)) = (uri.host(), uri.port_u16().or(default_port(&uri))) else {
            return Ok(());
        };
        match self.destinations.resolve(host, port).await {
            Err(refused @ DestinationError::Refused { .. }) => Err(refused),
            _ => Ok(()),
        }
    }

    pub(crate) fn destinations(&self) -> &Destinations {
        &self.destinations
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn wake(&self) -> &tokio::sync::Notify {
        &self.wake
    }
}

/// 443 for `https`, 80 for `http`.
fn default_port(uri: &http::Uri) -> Option<u16> {
    match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    }
}

/// Associated data binding a sealed signing secret to its subscription.
fn secret_context(notification_id: &str) -> String {
    format!("notification/{notification_id}")
}

/// Checks a subscription URL: absolute `http` or `https` with a host, at most
/// [`MAX_URL_BYTES`], no whitespace or control characters.
pub fn validate_url(url: &str) -> Result<(), String> {
    if url.len() > MAX_URL_BYTES {
        return Err(format!("field `url` is longer than {MAX_URL_BYTES} bytes"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("field `url` must not contain spaces or control characters".into());
    }
    let uri: http::Uri = url
        .parse()
        .map_err(|_| format!("field `url` is not a URL: {url:?}"))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err("field `url` must start with http:// or https://".into()),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("field `url` has no host".into());
    }
    let authority = uri.authority().map_or("", |a| a.as_str());
    if authority.contains('@') {
        return Err(
            "field `url` must not hold credentials (user@); the signature authenticates deliveries"
                .into(),
        );
    }
    // After an IPv6 literal's `]`, if any: `:port`, 1 to 65535.
    let after_host = &authority[authority.rfind(']').map_or(0, |i| i + 1)..];
    if let Some((_, port)) = after_host.rsplit_once(':') {
        if port.parse::<u16>().map_or(true, |port| port == 0) {
            return Err(format!(
                "field `url` has no valid port (1 to 65535): {url:?}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_round_trip() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(EventKind::parse("deployment.*"), None);
    }

    #[test]
    fn urls_are_checked() {
        assert!(validate_url("https://hooks.slack.com/services/T/B/X").is_ok());
        assert!(validate_url("http://127.0.0.1:9000/hook").is_ok());
        assert!(validate_url("ftp://example.com/").is_err());
        assert!(validate_url("/relative").is_err());
        assert!(validate_url("http://exa mple.com/").is_err());
        assert!(validate_url("http://x/\n").is_err());
        assert!(validate_url(&format!("http://x/{}", "a".repeat(3000))).is_err());
    }
}
