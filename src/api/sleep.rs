//! Sleeping apps (issue 35): `POST /api/projects/{projectId}/sleep` and `…/wake`, both 202
//! with the project (its `appState`), and the same for a preview
//! (`…/previews/{name}/sleep`, `…/wake`: 202 with the preview). The work is `crate::sleep`'s
//! and the route table's.

use std::sync::Arc;

use super::projects::{find, project_of};
use super::reply::Reply;
use super::{ApiError, Context, ErrorCode};
use crate::pipeline::SleepingApp;
use crate::router::Target;
use crate::sleep::Refusal;
use crate::store::records::{PreviewRecord, ProjectRecord};

/// Puts the app to sleep now, whatever is open to it; asleep already: nothing changes.
pub async fn sleep(ctx: &Arc<Context>, id_or_slug: &str) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    put_to_sleep(ctx, &project, SleepingApp::production(&project.id)).await?;
    Ok(Reply::json(&project_of(ctx, &find(ctx, id_or_slug).await?)))
}

/// [`sleep`] for a preview of the project.
pub async fn sleep_preview(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    name: &str,
) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    preview(ctx, &project, name).await?;
    let app = SleepingApp {
        project_id: project.id.clone(),
        preview: Some(name.to_owned()),
    };
    put_to_sleep(ctx, &project, app).await?;
    let view = super::git::preview_view(ctx, &project, preview(ctx, &project, name).await?);
    Ok(Reply::json(&view.await?))
}

/// [`wake`] for a preview of the project.
pub async fn wake_preview(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    name: &str,
) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let record = preview(ctx, &project, name).await?;
    wake_target(ctx, &format!("{name}--{}", project.slug), "the preview")?;
    Ok(Reply::json(
        &super::git::preview_view(ctx, &project, record).await?,
    ))
}

/// The preview `name` of `project`, or 404.
async fn preview(
    ctx: &Context,
    project: &ProjectRecord,
    name: &str,
) -> Result<PreviewRecord, ApiError> {
    let (id, wanted) = (project.id.clone(), name.to_owned());
    ctx.store
        .call(move |s| s.previews_of(&id))
        .await?
        .into_iter()
        .find(|p| p.name == wanted)
        .ok_or_else(|| {
            ApiError::not_found(format!("project {} has no preview {name:?}", project.slug))
        })
}

/// Puts `app` to sleep unless its route sleeps already.
async fn put_to_sleep(
    ctx: &Arc<Context>,
    project: &ProjectRecord,
    app: SleepingApp,
) -> Result<(), ApiError> {
    if matches!(
        live_target(ctx, &app.label(&project.slug)),
        Some(Target::Asleep(_))
    ) {
        return Ok(());
    }
    match ctx.sleeper.sleep_now(project, app).await {
        Ok(()) | Err(Refusal::Used) => Ok(()),
        Err(Refusal::Nothing(message)) => Err(ApiError::new(ErrorCode::Conflict, message)),
        Err(Refusal::Store(error)) => Err(error.into()),
    }
}

/// Wakes a sleeping app through the same single start its first request would make; a
/// running one: nothing changes.
pub async fn wake(ctx: &Arc<Context>, id_or_slug: &str) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    wake_target(ctx, &project.slug, "the project")?;
    Ok(Reply::json(&project_of(ctx, &project)))
}

/// Wakes the app behind route `label` if it sleeps; 409 when it has no server to wake.
fn wake_target(ctx: &Context, label: &str, what: &str) -> Result<(), ApiError> {
    match live_target(ctx, label) {
        Some(Target::Asleep(asleep)) => {
            asleep.wake();
            Ok(())
        }
        Some(Target::Proxy { .. }) => Ok(()),
        Some(Target::Static { .. }) | None => Err(ApiError::new(
            ErrorCode::Conflict,
            format!("{what} has no live server deployment to wake"),
        )),
    }
}

fn live_target(ctx: &Context, slug: &str) -> Option<Target> {
    ctx.routes.snapshot().apps.get(slug).cloned().flatten()
}
