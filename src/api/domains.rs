//! `POST/GET /api/projects/{projectId}/domains`, `GET/DELETE …/domains/{domain}` and
//! `POST …/domains/{domain}/verify`: custom domains. The rules live in `crate::domains`; this file turns requests into its calls and
//! its answers and errors into the contract's shapes (`INVALID_DOMAIN`,
//! `INVALID_DOMAIN_TAKEN`, 404, 409).

use super::reply::Reply;
use std::sync::Arc;

use super::json::read_string_fields;
use super::projects::find;
use super::{types, ApiError, ApiRequest, Context, ErrorCode};
use crate::domains::{DomainError, DomainView};
use crate::ids::rfc3339;
use crate::tls::CertificateState;

pub async fn create(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: ApiRequest,
) -> Result<Reply, ApiError> {
    let body: types::CreateDomain = read_string_fields(&request)?;
    let project = find(ctx, id_or_slug).await?;
    let view = ctx
        .domains
        .add(&project, &body.domain, body.redirect_to.as_deref())
        .await
        .map_err(api_error)?;
    Ok(Reply::json(&domain_of(view)))
}

pub async fn list(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: &ApiRequest,
) -> Result<Reply, ApiError> {
    let page = super::paging::parse(request.uri().query())?;
    let project = find(ctx, id_or_slug).await?;
    let views = ctx.domains.list(&project).await?;
    // Cursor ids are `[A-Za-z0-9_]`: a domain is named by the hash of its name.
    let (views, next_cursor) = super::paging::paginate(
        views,
        |view| {
            (
                view.record.created_ms,
                crate::ids::sha256_hex(view.record.domain.as_bytes()),
            )
        },
        super::paging::Order::OldestFirst,
        &page,
    );
    Ok(Reply::json(&types::DomainList {
        project_id: project.id,
        domains: views.into_iter().map(domain_of).collect(),
        next_cursor,
    }))
}

pub async fn get(ctx: &Arc<Context>, id_or_slug: &str, domain: &str) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let view = ctx.domains.get(&project, domain).await.map_err(api_error)?;
    Ok(Reply::json(&domain_of(view)))
}

pub async fn delete(ctx: &Arc<Context>, id_or_slug: &str, domain: &str) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let record = ctx
        .domains
        .remove(&project, domain)
        .await
        .map_err(api_error)?;
    Ok(Reply::json(&types::DomainDeleted {
        domain: record.domain,
        deleted: true,
    }))
}

pub async fn verify(ctx: &Arc<Context>, id_or_slug: &str, domain: &str) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    let view = ctx
        .domains
        .verify(&project, domain)
        .await
        .map_err(api_error)?;
    Ok(Reply::json(&domain_of(view)))
}

fn api_error(error: DomainError) -> ApiError {
    let code = match &error {
        DomainError::Name(_)
        | DomainError::TooMany { .. }
        | DomainError::BadRedirect { .. }
        | DomainError::NotSignable(_) => ErrorCode::InvalidDomain,
        DomainError::Taken { .. } | DomainError::AlreadyHere { .. } | DomainError::Under { .. } => {
            ErrorCode::InvalidDomainTaken
        }
        DomainError::NotFound { .. } | DomainError::NoProject => ErrorCode::NotFound,
        DomainError::RedirectedTo { .. } => ErrorCode::Conflict,
        DomainError::Store(_) => ErrorCode::InternalError,
    };
    match error {
        DomainError::Store(error) => ApiError::from(error),
        error => ApiError::new(code, error.to_string()),
    }
}

/// The contract's domain record.
fn domain_of(view: DomainView) -> types::Domain {
    let verification = types::DomainVerification {
        record_type: "TXT".to_owned(),
        record_name: view.verification.challenge.record_name,
        record_value: view.verification.challenge.value,
        verified_at: view
            .record
            .verified_ms
            .map(|ms| rfc3339(ms.max(view.record.created_ms))),
        next_check_at: view.verification.next_check_ms.map(rfc3339),
    };
    if view.record.verified_ms.is_none() {
        return types::Domain {
            domain: view.record.domain,
            project_id: view.record.project_id,
            status: types::DomainStatus::Unverified,
            redirect_to: view.record.redirect_to,
            certificate: None,
            last_error: view.verification.last_error,
            created_at: rfc3339(view.record.created_ms),
            verification,
        };
    }
    let (status, certificate, last_error) = match view.certificate {
        CertificateState::Plain => (types::DomainStatus::Active, None, None),
        CertificateState::Served {
            issuer,
            not_before,
            not_after,
        } => (
            types::DomainStatus::Active,
            Some(types::DomainCertificate {
                issuer,
                not_before: rfc3339(not_before * 1000),
                not_after: rfc3339(not_after * 1000),
            }),
            None,
        ),
        CertificateState::Pending => (types::DomainStatus::Pending, None, None),
        CertificateState::Failed(error) => (types::DomainStatus::Failed, None, Some(error)),
    };
    types::Domain {
        domain: view.record.domain,
        project_id: view.record.project_id,
        status,
        redirect_to: view.record.redirect_to,
        certificate,
        last_error,
        created_at: rfc3339(view.record.created_ms),
        verification,
    }
}
