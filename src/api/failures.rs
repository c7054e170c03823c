//! Failures of the public routes (webhooks, deploy hooks) before anything authenticated the
//! request: counted in memory, never stored one by one, so that nobody without a secret can
//! push token holders' entries out of the audit log (`audit.rs` shows the counts).

use std::sync::atomic::{AtomicU64, Ordering};

use super::Route;
use super::{types, ApiError};
use crate::error_code::ErrorCode;

/// Failures of the public routes before authentication, by route, since the daemon started.
#[derive(Debug, Default)]
pub struct UnauthenticatedFailures {
    webhook: AtomicU64,
    deploy_hook: AtomicU64,
    last_ms: AtomicU64,
}

impl UnauthenticatedFailures {
    /// Settles a finished public-route request: true when its entry is to be stored (it
    /// succeeded, or failed after its signature or secret was checked); false when it failed
    /// before anything authenticated it (`UNAUTHORIZED`, an unknown project or hook secret:
    /// `NOT_FOUND`, or a body that was never read whole — too large, too slow, or over the
    /// shared budget — so its signature was never checked), and was counted instead.
    pub fn settle(&self, route: Route, error: Option<&ApiError>, now_ms: u64) -> bool {
        let unauthenticated = error.is_some_and(|error| {
            matches!(
                error.code,
                ErrorCode::Unauthorized
                    | ErrorCode::NotFound
                    | ErrorCode::PayloadTooLarge
                    | ErrorCode::RequestTimeout
                    | ErrorCode::RateLimited
            )
        });
        if !unauthenticated {
            return true;
        }
        self.count(route, now_ms);
        false
    }

    /// Counts one failure of `route` before authentication.
    pub fn count(&self, route: Route, now_ms: u64) {
        let counter = match route {
            Route::Webhook => &self.webhook,
            _ => &self.deploy_hook,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.last_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    pub fn counts(&self) -> types::UnauthenticatedFailureCounts {
        let last_ms = self.last_ms.load(Ordering::Relaxed);
        types::UnauthenticatedFailureCounts {
            webhook: self.webhook.load(Ordering::Relaxed),
            deploy_hook: self.deploy_hook.load(Ordering::Relaxed),
            last_at: (last_ms > 0).then(|| crate::ids::rfc3339(last_ms)),
        }
    }
}
