//! The audit log: one entry for every API request that changes something (every method but
//! GET and HEAD) or reads an add-on's secrets (its credentials, a tunnel to it: see
//! `request::audits_read`), written in the same store transaction as the change (through
//! [`crate::store::AUDIT`]), or on its own when nothing changed (a refusal, an error) or when the
//! final status differs from the one recorded with the change. `GET /api/audit` (admin) pages
//! through it, newest first. The public routes (webhooks, deploy hooks) are open to anyone:
//! their failures before anything authenticated the request are only counted
//! ([`super::failures::UnauthenticatedFailures`]), so that nobody without a secret can push the entries of
//! token holders out of the log's 100,000.

use super::reply::Reply;
use std::net::SocketAddr;
use std::sync::Arc;

use http::StatusCode;

use super::routes::{RouteSpec, Target};
use super::{paging, types, ApiError, ApiRequest, Context, Params};
use crate::auth::Caller;
use crate::store::records::AuditRecord;

/// The entry a request will leave, before it runs (status: the route's success).
pub async fn draft(
    ctx: &Context,
    caller: &Caller,
    client: SocketAddr,
    method: &http::Method,
    spec: &RouteSpec,
    params: &Params,
) -> AuditRecord {
    let now = crate::ids::now_ms();
    let target = (!params.is_empty()).then(|| params.get(0).to_owned());
    let project_id = project_of(ctx, spec.target, target.as_deref()).await;
    AuditRecord {
        v: 1,
        id: format!("aud_{now:013}{}", crate::ids::new_id("")),
        at_ms: now,
        token_id: caller.token_id.clone(),
        token_name: caller.token_name.clone(),
        ip: client.ip().to_string(),
        method: method.to_string(),
        route: spec.template.to_owned(),
        target,
        project_id,
        status: spec.success.as_u16(),
    }
}

/// Makes sure the entry is stored with the request's final status (and its project, now that
/// a created project exists).
pub async fn finish(ctx: &Context, spec: &RouteSpec, mut entry: AuditRecord, status: StatusCode) {
    entry.status = status.as_u16();
    if entry.project_id.is_none() {
        entry.project_id = project_of(ctx, spec.target, entry.target.as_deref()).await;
    }
    let result = ctx
        .store
        .call(move |store| -> crate::store::Result<()> {
            if store.audit_entry(&entry.id)?.as_ref() != Some(&entry) {
                store.put_audit(&entry)?;
            }
            Ok(())
        })
        .await;
    if let Err(error) = result {
        tracing::error!(%error, "could not write an audit entry");
    }
}

/// The id of the project a route's first parameter names, if it exists.
async fn project_of(ctx: &Context, target: Target, key: Option<&str>) -> Option<String> {
    let key = key?.to_owned();
    if target == Target::None {
        return None;
    }
    ctx.store
        .call(move |store| -> crate::store::Result<Option<String>> {
            let project = match target {
                Target::None => None,
                Target::Project => Some(key),
                Target::Run => store.run(&key)?.map(|run| run.project_id),
                Target::Deployment => store.deployment(&key)?.map(|d| d.project_id),
                Target::JobRun => store.job_run(&key)?.map(|run| run.project_id),
                Target::Addon => store.addon(&key)?.map(|addon| addon.project_id),
            };
            Ok(match project {
                Some(key) => store.find_project(&key)?.map(|p| p.id),
                None => None,
            })
        })
        .await
        .ok()
        .flatten()
}

/// `GET /api/audit?limit&cursor&projectId`.
pub async fn list(ctx: &Arc<Context>, request: &ApiRequest) -> Result<Reply, ApiError> {
    let mut project = None;
    let mut rest = Vec::new();
    for pair in request
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("projectId", value)) => project = Some(value.to_owned()),
            _ => rest.push(pair),
        }
    }
    let rest = rest.join("&");
    let page = paging::parse(Some(&rest))?;
    let before = page.after_id().map(str::to_owned);
    let limit = page.limit;
    // An id filters as it is (entries of a deleted project stay findable); a slug names a
    // current project, and one that names none matches nothing.
    if let Some(key) = &project {
        let id_like = key.len() == 28
            && key.starts_with("prj_")
            && key[4..]
                .bytes()
                .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b));
        if !id_like && super::json::validate_slug(key, "").is_err() {
            return Err(ApiError::new(
                crate::error_code::ErrorCode::InvalidQuery,
                format!("projectId={key:?} must be a project id (prj_…) or slug"),
            ));
        }
    }
    let project_id = match project {
        None => None,
        Some(id) if id.starts_with("prj_") => Some(id),
        Some(slug) => {
            let found = ctx.store.call(move |s| s.find_project(&slug)).await?;
            Some(found.map_or_else(|| "prj_none".to_owned(), |project| project.id))
        }
    };
    let (entries, more) = ctx
        .store
        .call(move |s| s.audit_page(before.as_deref(), limit, project_id.as_deref()))
        .await?;
    let next_cursor = more
        .then(|| entries.last().map(|e| paging::cursor_of(e.at_ms, &e.id)))
        .flatten();
    let entries = entries.into_iter().map(types::AuditEntry::from).collect();
    Ok(Reply::json(&types::AuditLog {
        entries,
        next_cursor,
        unauthenticated_failures: ctx.unauthenticated_failures.counts(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Route;
    use crate::error_code::ErrorCode;
    use crate::store::Store;

    fn entry(id: String, token: &str, route: &str, status: u16) -> AuditRecord {
        AuditRecord {
            v: 1,
            id,
            at_ms: 1,
            token_id: token.into(),
            token_name: token.into(),
            ip: "203.0.113.9".into(),
            method: "POST".into(),
            route: route.into(),
            target: None,
            project_id: None,
            status,
        }
    }

    /// Issue 31 item 7: anyone can send failing webhooks; none pushes an admin's entry out.
    #[test]
    fn an_admins_entries_survive_200000_unauthenticated_failures() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let now = crate::ids::now_ms();
        let admin: Vec<AuditRecord> = (0..3)
            .map(|i| {
                entry(
                    format!("aud_{now:013}admin{i}"),
                    "tok_admin",
                    "/api/tokens",
                    201,
                )
            })
            .collect();
        for record in &admin {
            store.put_audit(record).unwrap();
        }
        let failures = crate::api::failures::UnauthenticatedFailures::default();
        let refusals = [
            (Route::Webhook, ApiError::unauthorized()),
            (
                Route::TriggerDeployHook,
                ApiError::not_found("no such hook"),
            ),
        ];
        for i in 0..200_000u64 {
            let (route, error) = &refusals[(i % 2) as usize];
            // What `dispatch_public` does with a finished request.
            if failures.settle(*route, Some(error), now + i) {
                let id = format!("aud_{:013}flood{i}", now + i);
                store
                    .put_audit(&entry(id, "-", "/api/webhooks/{projectId}", 401))
                    .unwrap();
            }
        }
        let counts = failures.counts();
        assert_eq!((counts.webhook, counts.deploy_hook), (100_000, 100_000));
        assert!(counts.last_at.is_some());
        store.purge_audit(now + 200_000).unwrap();
        let (page, more) = store.audit_page(None, 1000, None).unwrap();
        assert!(!more, "only the admin's entries are in the log");
        assert_eq!(page.iter().rev().cloned().collect::<Vec<_>>(), admin);
        // A signed delivery that failed later (its settings) is an entry like any other.
        let settings = ApiError::new(ErrorCode::InvalidBody, "no gitUrl");
        assert!(failures.settle(Route::Webhook, Some(&settings), now));
        assert!(failures.settle(Route::Webhook, None, now));
        assert_eq!(failures.counts().webhook, 100_000);
    }
}
