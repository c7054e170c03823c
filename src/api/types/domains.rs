//! The shapes of `/api/projects/{projectId}/domains`: custom domains and their certificates.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `POST /api/projects/{projectId}/domains`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateDomain {
    /// A DNS name such as `www.example.com` (stored lowercase; IDNA names in punycode).
    pub domain: String,
    /// Send this domain's visitors (308, path and query kept) to another domain of the
    /// project or to its slug host.
    #[serde(default)]
    pub redirect_to: Option<String>,
}

/// Whether a custom domain is served: `unverified` until its ownership is proven (neither
/// routed nor certified; `verification` names the TXT record to create, `lastError` what the
/// last check found), `pending` while its certificate is being issued, `active` once it is
/// served (over HTTPS, or plain HTTP when TLS is off), `failed` when it is not and
/// `lastError` says why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DomainStatus {
    Unverified,
    Pending,
    Active,
    Failed,
}

/// The certificate served for a domain.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainCertificate {
    pub issuer: String,
    pub not_before: String,
    pub not_after: String,
}

/// A custom domain.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Domain {
    pub domain: String,
    pub project_id: String,
    pub status: DomainStatus,
    pub redirect_to: Option<String>,
    pub certificate: Option<DomainCertificate>,
    pub last_error: Option<String>,
    pub created_at: String,
    pub verification: DomainVerification,
}

/// The proof of ownership of a domain: the TXT record that proves it for its project (the
/// same value for every domain of the project), unless the name is under an operator-trusted
/// suffix.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainVerification {
    /// Always `TXT`.
    pub record_type: String,
    /// `_slipway-challenge.<domain>`.
    pub record_name: String,
    /// `slipway-verify=<token>`.
    pub record_value: String,
    /// When ownership was proven; null while `unverified`.
    pub verified_at: Option<String>,
    /// While `unverified`: when the daemon checks the record again by itself.
    pub next_check_at: Option<String>,
}

/// `GET /api/projects/{projectId}/domains`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainList {
    pub project_id: String,
    pub domains: Vec<Domain>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// `DELETE /api/projects/{projectId}/domains/{domain}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DomainDeleted {
    pub domain: String,
    pub deleted: bool,
}

impl super::RequestFields for CreateDomain {
    const FIELDS: &'static [&'static str] = &["domain", "redirectTo"];
}
