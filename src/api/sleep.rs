//! Sleeping apps (issue 35): `POST /api/projects/{projectId}/sleep` and `…/wake`, both 202
//! with the project (its `appState`). The work is `crate::sleep`'s and the route table's.

use std::sync::Arc;

use super::projects::{find, project_of};
use super::reply::Reply;
use super::{ApiError, Context, ErrorCode};
use crate::router::Target;
use crate::sleep::Refusal;

/// Puts the app to sleep now, whatever is open to it; asleep already: nothing changes.
pub async fn sleep(ctx: &Arc<Context>, id_or_slug: &str) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    if !matches!(live_target(ctx, &project.slug), Some(Target::Asleep(_))) {
        match ctx.sleeper.sleep_now(&project).await {
            Ok(()) => {}
            Err(Refusal::Nothing(message)) => {
                return Err(ApiError::new(ErrorCode::Conflict, message))
            }
            Err(Refusal::Used) => {}
            Err(Refusal::Store(error)) => return Err(error.into()),
        }
    }
    Ok(Reply::json(&project_of(ctx, &find(ctx, id_or_slug).await?)))
}

/// Wakes a sleeping app through the same single start its first request would make; a
/// running one: nothing changes.
pub async fn wake(ctx: &Arc<Context>, id_or_slug: &str) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    match live_target(ctx, &project.slug) {
        Some(Target::Asleep(asleep)) => {
            asleep.wake();
        }
        Some(Target::Proxy { .. }) => {}
        Some(Target::Static { .. }) | None => {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                "the project has no live server deployment to wake",
            ))
        }
    }
    Ok(Reply::json(&project_of(ctx, &project)))
}

fn live_target(ctx: &Context, slug: &str) -> Option<Target> {
    ctx.routes.snapshot().apps.get(slug).cloned().flatten()
}
