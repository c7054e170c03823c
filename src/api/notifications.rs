//! `POST/GET /api/notifications`, `GET/DELETE /api/notifications/{notificationId}` and
//! `GET /api/notifications/{notificationId}/deliveries`: webhook subscriptions. A bad body
//! is refused with `INVALID_BODY` naming the field, and nothing is stored.

use super::reply::Reply;
use std::sync::Arc;

use super::json::read_json_object;
use super::{types, ApiError, Context, ErrorCode};
use crate::notifications::{validate_url, EventKind, Format, MAX_SUBSCRIPTIONS};

pub async fn create(ctx: &Arc<Context>, request: super::ApiRequest) -> Result<Reply, ApiError> {
    let object = read_json_object(&request)?;
    let invalid = |message: String| ApiError::new(ErrorCode::InvalidBody, message);
    let body: types::CreateNotification =
        serde_json::from_value(serde_json::Value::Object(object)).map_err(|error| {
            invalid(format!(
                "expected {{\"url\": string, \"events\": [string, ...], \"format\": \"json\"|\"slack\"}}: {error}"
            ))
        })?;
    validate_url(&body.url).map_err(invalid)?;
    if body.events.is_empty() {
        return Err(invalid(format!(
            "field `events` must name at least one of: {}",
            event_names()
        )));
    }
    let mut events = Vec::new();
    for name in &body.events {
        let kind = EventKind::parse(name).ok_or_else(|| {
            invalid(format!(
                "field `events`: unknown event {name:?}; known: {}",
                event_names()
            ))
        })?;
        if !events.contains(&kind) {
            events.push(kind);
        }
    }
    let format = match body.format.as_deref() {
        None => Format::Json,
        Some(name) => Format::parse(name).ok_or_else(|| {
            invalid(format!(
                "field `format` must be \"json\" or \"slack\", not {name:?}"
            ))
        })?,
    };
    ctx.notifier
        .check_destination(&body.url)
        .await
        // 403: the request is well formed; the operator's policy refuses where it points.
        .map_err(|refused| {
            ApiError::new(ErrorCode::Forbidden, format!("field `url`: {refused}"))
        })?;
    let count = ctx.store.call(|s| s.notification_count()).await?;
    if count >= MAX_SUBSCRIPTIONS {
        // 409: a valid request the daemon's state refuses.
        return Err(ApiError::new(ErrorCode::Conflict, format!(
            "there are already {MAX_SUBSCRIPTIONS} subscriptions, the most allowed; delete one first"
        )));
    }
    let created = ctx
        .notifier
        .subscribe(&ctx.secrets, body.url, events, format)
        .await?;
    tracing::info!(notification = %created.record.id, "webhook subscription created");
    let listed = types::Notification::from(&created.record);
    Ok(Reply::json(&types::CreatedNotification {
        id: listed.id,
        url: listed.url,
        events: listed.events,
        format: listed.format,
        created_at: listed.created_at,
        secret: created.secret,
    }))
}

pub async fn list(ctx: &Arc<Context>) -> Result<Reply, ApiError> {
    let records = ctx.store.call(|s| s.list_notifications()).await?;
    let notifications = records.iter().map(types::Notification::from).collect();
    Ok(Reply::json(&types::NotificationList { notifications }))
}

pub async fn get(ctx: &Arc<Context>, id: &str) -> Result<Reply, ApiError> {
    let record = find(ctx, id).await?;
    Ok(Reply::json(&types::Notification::from(&record)))
}

pub async fn delete(ctx: &Arc<Context>, id: &str) -> Result<Reply, ApiError> {
    let owned = id.to_owned();
    let removed = ctx
        .store
        .call(move |s| s.delete_notification(&owned))
        .await?;
    if removed.is_none() {
        return Err(not_found(id));
    }
    tracing::info!(notification = %id, "webhook subscription deleted");
    Ok(Reply::json(&types::NotificationDeleted {
        id: id.to_owned(),
        deleted: true,
    }))
}

pub async fn deliveries(ctx: &Arc<Context>, id: &str) -> Result<Reply, ApiError> {
    let record = find(ctx, id).await?;
    let key = record.id.clone();
    let (attempts, queued) = ctx
        .store
        .call(move |s| {
            Ok::<_, crate::store::StoreError>((s.delivery_attempts(&key)?, s.queued_count(&key)?))
        })
        .await?;
    Ok(Reply::json(&types::DeliveryList {
        queued,
        dropped: record.dropped,
        notification_id: record.id,
        deliveries: attempts.iter().map(types::Delivery::from).collect(),
    }))
}

async fn find(
    ctx: &Arc<Context>,
    id: &str,
) -> Result<crate::store::notifications::NotificationRecord, ApiError> {
    let owned = id.to_owned();
    ctx.store
        .call(move |s| s.notification(&owned))
        .await?
        .ok_or_else(|| not_found(id))
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("no notification subscription with id {id:?}"))
}

fn event_names() -> String {
    EventKind::ALL
        .iter()
        .map(|kind| kind.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
