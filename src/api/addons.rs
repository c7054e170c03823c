//! Add-on services (issue 34): `POST/GET /api/projects/{projectId}/addons`,
//! `GET/DELETE /api/addons/{addonId}` (DELETE with `?confirm=<addonId>`),
//! `PUT/DELETE /api/addons/{addonId}/links/{projectId}`, `GET …/credentials`, `GET …/tunnel`
//! (a WebSocket carrying one TCP connection to it); `PATCH` and the logs are `addon_ops.rs`'s.
//! The work is the `addons` module's; this file checks bodies and shapes answers.

use std::sync::Arc;

use super::json::read_json_object;
use super::projects::find;
use super::reply::Reply;
use super::{types, ApiError, ApiRequest, Context, ErrorCode};
use crate::addons::{AddonError, AddonKind, AddonRequest, RedisMode};
use crate::store::addons::AddonRecord;

pub async fn create(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: ApiRequest,
) -> Result<Reply, ApiError> {
    let body = read_json_object(&request)?;
    let create: types::CreateAddon = serde_json::from_value(serde_json::Value::Object(body))
        .map_err(|error| {
            ApiError::new(
                ErrorCode::InvalidBody,
                format!("{error}; expected {{\"kind\", \"memoryMb\", \"diskMb\", \"envName\", \"mode\", \"pitr\"}}"),
            )
        })?;
    let kind = AddonKind::parse(&create.kind).ok_or_else(|| {
        ApiError::new(
            ErrorCode::InvalidBody,
            "`kind` must be \"postgres\" or \"redis\"",
        )
    })?;
    let (mode, pitr) = mode_and_pitr(kind, &create)?;
    let memory_mb = create.memory_mb.map_or(256, u64::from);
    let disk_mb = create.disk_mb.map_or(1024, u64::from);
    if !(64..=65536).contains(&memory_mb) || !(64..=1_048_576).contains(&disk_mb) {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "`memoryMb` must be from 64 to 65536 and `diskMb` from 64 to 1048576",
        ));
    }
    let env_name_ok = |name: &str| {
        let mut chars = name.chars();
        name != "PORT"
            && name.len() <= 64
            && chars
                .next()
                .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
            && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    };
    if create
        .env_name
        .as_deref()
        .is_some_and(|name| !env_name_ok(name))
    {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "`envName` must be upper-case letters, digits and _ (not first a digit, not PORT)",
        ));
    }
    let project = find(ctx, id_or_slug).await?;
    let env_name = create
        .env_name
        .clone()
        .unwrap_or_else(|| kind.default_env_name().to_owned());
    env_name_free(ctx, &project.id, &env_name, "").await?;
    let request = AddonRequest {
        kind,
        memory_mb,
        disk_mb,
        env_name: create.env_name,
        mode,
        link: true,
        pitr,
        password: None,
        major: None,
    };
    let addon = ctx
        .addons
        .create(&project, request)
        .await
        .map_err(addon_error)?;
    if addon.pitr {
        // The first base backup: point-in-time recovery reaches moments from its end on.
        ctx.addons
            .start_base_backup(&addon, "pitr")
            .await
            .map_err(addon_error)?;
    }
    Ok(Reply::json(&view(ctx, addon).await))
}

/// The Redis mode and whether PITR is on, as asked (each only for its kind: 409).
fn mode_and_pitr(
    kind: AddonKind,
    create: &types::CreateAddon,
) -> Result<(RedisMode, bool), ApiError> {
    let mode = match create.mode.as_deref() {
        None | Some("persistent") => RedisMode::Persistent,
        Some("cache") if kind == AddonKind::Redis => RedisMode::Cache,
        Some("cache") => {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                "`mode` \"cache\" is for redis; a postgres add-on always keeps its data",
            ))
        }
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidBody,
                format!("`mode` {other:?} must be \"persistent\" or \"cache\""),
            ))
        }
    };
    let pitr = create.pitr.unwrap_or(false);
    if pitr && kind != AddonKind::Postgres {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "`pitr` (point-in-time recovery) is for postgres; redis has RDB backups",
        ));
    }
    Ok((mode, pitr))
}

pub(super) fn addon_error(error: AddonError) -> ApiError {
    match error {
        AddonError::Unavailable(message)
        | AddonError::Busy(message)
        | AddonError::Refused(message) => ApiError::new(ErrorCode::Conflict, message),
        AddonError::Failed(message) => ApiError::new(ErrorCode::AddonFailed, message),
        AddonError::Store(error) => ApiError::internal(error),
    }
}

pub async fn list(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: &ApiRequest,
) -> Result<Reply, ApiError> {
    let page = super::paging::parse(request.uri().query())?;
    let project = find(ctx, id_or_slug).await?;
    let id = project.id.clone();
    let addons = ctx.store.call(move |s| s.addons_of(&id)).await?;
    let (addons, next_cursor) = super::paging::paginate(
        addons,
        |addon| (addon.created_ms, addon.id.clone()),
        super::paging::Order::OldestFirst,
        &page,
    );
    let mut views = Vec::with_capacity(addons.len());
    for addon in addons {
        views.push(view(ctx, addon).await);
    }
    Ok(Reply::json(&types::AddonList {
        addons: views,
        next_cursor,
    }))
}

pub(super) async fn record(ctx: &Context, id: &str) -> Result<AddonRecord, ApiError> {
    let key = id.to_owned();
    let (addon, deleted) = ctx
        .store
        .call(move |s| Ok::<_, crate::store::StoreError>((s.addon(&key)?, s.deleted_addon(&key)?)))
        .await?;
    match (addon, deleted) {
        (Some(addon), _) => Ok(addon),
        (None, Some(deleted)) => Err(ApiError::not_found(format!(
            "add-on {id} was deleted at {}; its backups are kept until {}: `GET \
             /api/addons/{id}/backups` lists them, `POST /api/addons/{id}/restore \
             {{\"backupId\", \"target\": \"new\"}}` brings one back",
            crate::ids::rfc3339(deleted.deleted_ms),
            crate::ids::rfc3339(deleted.purge_ms)
        ))),
        (None, None) => Err(ApiError::not_found(format!("no add-on {id:?}"))),
    }
}

/// The add-on, or a deleted one whose backups are kept (true): what its backups belong to.
pub(super) async fn record_kept(ctx: &Context, id: &str) -> Result<(AddonRecord, bool), ApiError> {
    let key = id.to_owned();
    let deleted = ctx.store.call(move |s| s.deleted_addon(&key)).await?;
    match deleted {
        Some(deleted) => Ok((deleted.addon, true)),
        None => record(ctx, id).await.map(|addon| (addon, false)),
    }
}

pub async fn get(ctx: &Arc<Context>, id: &str) -> Result<Reply, ApiError> {
    let addon = record(ctx, id).await?;
    Ok(Reply::json(&view(ctx, addon).await))
}

pub async fn delete(ctx: &Arc<Context>, id: &str, request: &ApiRequest) -> Result<Reply, ApiError> {
    let confirm = request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("confirm="));
    let Some(confirm) = confirm else {
        return Err(ApiError::new(
            ErrorCode::InvalidQuery,
            format!("deleting an add-on deletes its data: confirm with ?confirm={id}"),
        ));
    };
    let addon = record(ctx, id).await?;
    if confirm != addon.id {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("?confirm={confirm} names another add-on; confirm with ?confirm={id}"),
        ));
    }
    let final_backup = match request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("finalBackup="))
    {
        None | Some("true") => true,
        Some("false") => false,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidQuery,
                format!("finalBackup={other}: true (the default) or false"),
            ))
        }
    };
    let kept = ctx
        .addons
        .retire(&addon, final_backup)
        .await
        .map_err(addon_error)?;
    Ok(Reply::json(&types::AddonDeleted {
        id: addon.id,
        deleted: true,
        final_backup_id: kept.final_backup,
        backups_kept_until: crate::ids::rfc3339(kept.purge_ms),
    }))
}

/// `PUT` (`link: true`) or `DELETE` a link; the answer is the add-on. It takes effect at the
/// project's next deployment.
pub async fn set_link(
    ctx: &Arc<Context>,
    id: &str,
    project_id_or_slug: &str,
    link: bool,
) -> Result<Reply, ApiError> {
    let project = find(ctx, project_id_or_slug).await?;
    let addon = record(ctx, id).await?;
    if link {
        env_name_free(ctx, &project.id, &addon.env_name, &addon.id).await?;
    }
    let (key, project_id) = (addon.id.clone(), project.id.clone());
    let updated = ctx
        .store
        .call(move |s| s.set_addon_link(&key, &project_id, link))
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no add-on {id:?}")))?;
    Ok(Reply::json(&view(ctx, updated).await))
}

/// 409 when another add-on linked to `project_id` gives its apps `env_name` already.
async fn env_name_free(
    ctx: &Context,
    project_id: &str,
    env_name: &str,
    addon_id: &str,
) -> Result<(), ApiError> {
    let project = project_id.to_owned();
    let linked = ctx
        .store
        .call(move |s| s.addons_linked_to(&project))
        .await?;
    match linked
        .iter()
        .find(|other| other.env_name == env_name && other.id != addon_id)
    {
        Some(other) => Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "the project's apps get {env_name} from {} already: unlink it first, or give \
                 this add-on another envName",
                other.id
            ),
        )),
        None => Ok(()),
    }
}

pub async fn credentials(ctx: &Arc<Context>, id: &str) -> Result<Reply, ApiError> {
    let addon = record(ctx, id).await?;
    let password = ctx
        .secrets
        .open(
            &crate::pipeline::password_context(&addon.id),
            &addon.sealed_password,
        )
        .map_err(ApiError::internal)?;
    let password = String::from_utf8_lossy(&password).into_owned();
    let postgres = addon.kind == "postgres";
    Ok(Reply::json(&types::AddonCredentials {
        url: crate::pipeline::addon_url(&addon, &password),
        user: postgres.then(|| "slipway".to_owned()),
        password,
        host: addon.address.to_string(),
        port: addon.port,
        database: postgres.then(|| "app".to_owned()),
    }))
}

/// `GET /api/addons/{addonId}/tunnel`: connects to the add-on first (409 when it does not
/// accept connections), then upgrades to a WebSocket carrying that connection
/// (`addons::tunnel`).
pub async fn tunnel(
    ctx: &Arc<Context>,
    id: &str,
    mut request: ApiRequest,
) -> Result<Reply, ApiError> {
    let key = super::websocket::key(&request)?;
    let addon = record(ctx, id).await?;
    let tcp = crate::addons::tunnel::connect(&addon)
        .await
        .map_err(|why| {
            let state = format!("{:?}", addon.state).to_lowercase();
            ApiError::new(
                ErrorCode::Conflict,
                format!(
                    "add-on {id} ({}) is not accepting connections (state: {state}; {why})",
                    addon.kind
                ),
            )
        })?;
    let upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let io = hyper_util::rt::TokioIo::new(upgraded);
                let role = tokio_tungstenite::tungstenite::protocol::Role::Server;
                let config = Some(crate::addons::tunnel::socket_config());
                let socket =
                    tokio_tungstenite::WebSocketStream::from_raw_socket(io, role, config).await;
                crate::addons::tunnel::pump(socket, tcp).await;
            }
            Err(error) => tracing::debug!(%error, "an add-on tunnel's upgrade failed"),
        }
    });
    Ok(super::websocket::switching_protocols(&key))
}

pub(super) async fn view(ctx: &Context, addon: AddonRecord) -> types::Addon {
    let used = ctx.addons.disk_used_bytes(&addon).await;
    let window = ctx.addons.pitr_window(&addon).await;
    types::Addon {
        id: addon.id,
        kind: addon.kind,
        version: addon.version,
        project_id: addon.project_id,
        state: addon.state,
        memory_mb: addon.memory_mb,
        disk_mb: addon.disk_mb,
        disk_used_bytes: used,
        env_name: addon.env_name,
        mode: addon.mode,
        links: addon.links,
        host: addon.address.to_string(),
        port: addon.port,
        created_at: crate::ids::rfc3339(addon.created_ms),
        message: addon.message,
        pitr: addon.pitr,
        pitr_window: window.map(|w| types::PitrWindow {
            from: crate::ids::rfc3339(w.from_ms),
            to: crate::ids::rfc3339(w.to_ms),
        }),
        upgraded_from: addon.upgraded_from,
        upgraded_to: addon.upgraded_to,
    }
}
