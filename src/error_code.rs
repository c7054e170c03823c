//! Every error code Slipway puts in front of a client, in one enum: the API's error envelope
//! (`api/error.rs` turns a code into its HTTP status here and nowhere else) and the failure codes
//! of a provisioning run (`pipeline/`, `supervisor.rs`), which travel in status bodies and
//! deployment records. A code written as a string literal anywhere else is a bug.

use http::StatusCode;
use serde::{Deserialize, Serialize};

/// One error code of the contract. Serialized as its `SCREAMING_SNAKE_CASE` name, which is also
/// how run records store it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    // 400: the request is wrong; the message names the field.
    InvalidBody,
    InvalidJson,
    InvalidContentType,
    InvalidQuery,
    InvalidSlugFormat,
    InvalidSlugReserved,
    InvalidSlugMismatch,
    InvalidSourceArchive,
    InvalidSourceMissing,
    InvalidGitUrl,
    InvalidEnvKey,
    InvalidEnvValue,
    InvalidIdempotencyKey,
    InvalidDomain,
    InvalidDomainTaken,
    // The other API statuses.
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    Conflict,
    PayloadTooLarge,
    // A public route's body did not arrive within its deadline.
    RequestTimeout,
    RateLimited,
    InternalError,
    InsufficientStorage,
    // Why a provisioning run failed (HTTP 200 status bodies, not API errors).
    SourceFailed,
    InstallFailed,
    BuildFailed,
    // The release command exited non-zero; the live deployment stays.
    ReleaseFailed,
    // A one-off or cron run exited non-zero (or could not start).
    RunFailed,
    // A one-off or cron run passed its timeoutS and was stopped.
    RunTimedOut,
    // An add-on did not start (or its setup failed).
    AddonFailed,
    // A sleeping app did not come back up when a request woke it (HTTP 503 to visitors).
    WakeFailed,
    StartFailed,
    // A server project (detection says so) with no start command: never served as files.
    StartCommandMissing,
    HealthcheckFailed,
    CertificateFailed,
    Timeout,
    Interrupted,
    Canceled,
}

impl ErrorCode {
    /// Every code, for the table test and the OpenAPI document.
    pub const ALL: [ErrorCode; 40] = [
        ErrorCode::InvalidBody,
        ErrorCode::InvalidJson,
        ErrorCode::InvalidContentType,
        ErrorCode::InvalidQuery,
        ErrorCode::InvalidSlugFormat,
        ErrorCode::InvalidSlugReserved,
        ErrorCode::InvalidSlugMismatch,
        ErrorCode::InvalidSourceArchive,
        ErrorCode::InvalidSourceMissing,
        ErrorCode::InvalidGitUrl,
        ErrorCode::InvalidEnvKey,
        ErrorCode::InvalidEnvValue,
        ErrorCode::InvalidIdempotencyKey,
        ErrorCode::InvalidDomain,
        ErrorCode::InvalidDomainTaken,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::Conflict,
        ErrorCode::PayloadTooLarge,
        ErrorCode::RequestTimeout,
        ErrorCode::RateLimited,
        ErrorCode::InternalError,
        ErrorCode::InsufficientStorage,
        ErrorCode::SourceFailed,
        ErrorCode::InstallFailed,
        ErrorCode::BuildFailed,
        ErrorCode::ReleaseFailed,
        ErrorCode::RunFailed,
        ErrorCode::RunTimedOut,
        ErrorCode::AddonFailed,
        ErrorCode::WakeFailed,
        ErrorCode::StartFailed,
        ErrorCode::StartCommandMissing,
        ErrorCode::HealthcheckFailed,
        ErrorCode::CertificateFailed,
        ErrorCode::Timeout,
        ErrorCode::Interrupted,
        ErrorCode::Canceled,
    ];

    /// The code as the contract spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidBody => "INVALID_BODY",
            ErrorCode::InvalidJson => "INVALID_JSON",
            ErrorCode::InvalidContentType => "INVALID_CONTENT_TYPE",
            ErrorCode::InvalidQuery => "INVALID_QUERY",
            ErrorCode::InvalidSlugFormat => "INVALID_SLUG_FORMAT",
            ErrorCode::InvalidSlugReserved => "INVALID_SLUG_RESERVED",
            ErrorCode::InvalidSlugMismatch => "INVALID_SLUG_MISMATCH",
            ErrorCode::InvalidSourceArchive => "INVALID_SOURCE_ARCHIVE",
            ErrorCode::InvalidSourceMissing => "INVALID_SOURCE_MISSING",
            ErrorCode::InvalidGitUrl => "INVALID_GIT_URL",
            ErrorCode::InvalidEnvKey => "INVALID_ENV_KEY",
            ErrorCode::InvalidEnvValue => "INVALID_ENV_VALUE",
            ErrorCode::InvalidIdempotencyKey => "INVALID_IDEMPOTENCY_KEY",
            ErrorCode::InvalidDomain => "INVALID_DOMAIN",
            ErrorCode::InvalidDomainTaken => "INVALID_DOMAIN_TAKEN",
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::Forbidden => "FORBIDDEN",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ErrorCode::Conflict => "CONFLICT",
            ErrorCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorCode::RequestTimeout => "REQUEST_TIMEOUT",
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::InternalError => "INTERNAL_ERROR",
            ErrorCode::InsufficientStorage => "INSUFFICIENT_STORAGE",
            ErrorCode::SourceFailed => "SOURCE_FAILED",
            ErrorCode::InstallFailed => "INSTALL_FAILED",
            ErrorCode::BuildFailed => "BUILD_FAILED",
            ErrorCode::ReleaseFailed => "RELEASE_FAILED",
            ErrorCode::RunFailed => "RUN_FAILED",
            ErrorCode::RunTimedOut => "RUN_TIMED_OUT",
            ErrorCode::AddonFailed => "ADDON_FAILED",
            ErrorCode::WakeFailed => "WAKE_FAILED",
            ErrorCode::StartFailed => "START_FAILED",
            ErrorCode::StartCommandMissing => "START_COMMAND_MISSING",
            ErrorCode::HealthcheckFailed => "HEALTHCHECK_FAILED",
            ErrorCode::CertificateFailed => "CERTIFICATE_FAILED",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::Interrupted => "INTERRUPTED",
            ErrorCode::Canceled => "CANCELED",
        }
    }

    /// The HTTP status of an API error with this code. Run failure codes are reported inside a
    /// 200 status body; should one ever reach the API's error path it is a server error.
    pub const fn status(self) -> StatusCode {
        match self {
            ErrorCode::InvalidBody
            | ErrorCode::InvalidJson
            | ErrorCode::InvalidContentType
            | ErrorCode::InvalidQuery
            | ErrorCode::InvalidSlugFormat
            | ErrorCode::InvalidSlugReserved
            | ErrorCode::InvalidSlugMismatch
            | ErrorCode::InvalidSourceArchive
            | ErrorCode::InvalidSourceMissing
            | ErrorCode::InvalidGitUrl
            | ErrorCode::InvalidEnvKey
            | ErrorCode::InvalidEnvValue
            | ErrorCode::InvalidIdempotencyKey
            | ErrorCode::InvalidDomain
            | ErrorCode::InvalidDomainTaken => StatusCode::BAD_REQUEST,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::Conflict => StatusCode::CONFLICT,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::WakeFailed => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::InternalError
            | ErrorCode::SourceFailed
            | ErrorCode::InstallFailed
            | ErrorCode::BuildFailed
            | ErrorCode::ReleaseFailed
            | ErrorCode::RunFailed
            | ErrorCode::RunTimedOut
            | ErrorCode::AddonFailed
            | ErrorCode::StartFailed
            | ErrorCode::StartCommandMissing
            | ErrorCode::HealthcheckFailed
            | ErrorCode::CertificateFailed
            | ErrorCode::Timeout
            | ErrorCode::Interrupted
            | ErrorCode::Canceled => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole table: code → spelling → status. A new code must be added here too.
    #[test]
    fn every_code_has_its_spelling_and_status() {
        let table: &[(ErrorCode, &str, u16)] = &[
            (ErrorCode::InvalidBody, "INVALID_BODY", 400),
            (ErrorCode::InvalidJson, "INVALID_JSON", 400),
            (ErrorCode::InvalidContentType, "INVALID_CONTENT_TYPE", 400),
            (ErrorCode::InvalidQuery, "INVALID_QUERY", 400),
            (ErrorCode::InvalidSlugFormat, "INVALID_SLUG_FORMAT", 400),
            (ErrorCode::InvalidSlugReserved, "INVALID_SLUG_RESERVED", 400),
            (ErrorCode::InvalidSlugMismatch, "INVALID_SLUG_MISMATCH", 400),
            (
                ErrorCode::InvalidSourceArchive,
                "INVALID_SOURCE_ARCHIVE",
                400,
            ),
            (
                ErrorCode::InvalidSourceMissing,
                "INVALID_SOURCE_MISSING",
                400,
            ),
            (ErrorCode::InvalidGitUrl, "INVALID_GIT_URL", 400),
            (ErrorCode::InvalidEnvKey, "INVALID_ENV_KEY", 400),
            (ErrorCode::InvalidEnvValue, "INVALID_ENV_VALUE", 400),
            (
                ErrorCode::InvalidIdempotencyKey,
                "INVALID_IDEMPOTENCY_KEY",
                400,
            ),
            (ErrorCode::InvalidDomain, "INVALID_DOMAIN", 400),
            (ErrorCode::InvalidDomainTaken, "INVALID_DOMAIN_TAKEN", 400),
            (ErrorCode::Unauthorized, "UNAUTHORIZED", 401),
            (ErrorCode::Forbidden, "FORBIDDEN", 403),
            (ErrorCode::NotFound, "NOT_FOUND", 404),
            (ErrorCode::MethodNotAllowed, "METHOD_NOT_ALLOWED", 405),
            (ErrorCode::Conflict, "CONFLICT", 409),
            (ErrorCode::PayloadTooLarge, "PAYLOAD_TOO_LARGE", 413),
            (ErrorCode::RequestTimeout, "REQUEST_TIMEOUT", 408),
            (ErrorCode::RateLimited, "RATE_LIMITED", 429),
            (ErrorCode::InternalError, "INTERNAL_ERROR", 500),
            (ErrorCode::InsufficientStorage, "INSUFFICIENT_STORAGE", 507),
            (ErrorCode::SourceFailed, "SOURCE_FAILED", 500),
            (ErrorCode::InstallFailed, "INSTALL_FAILED", 500),
            (ErrorCode::BuildFailed, "BUILD_FAILED", 500),
            (ErrorCode::ReleaseFailed, "RELEASE_FAILED", 500),
            (ErrorCode::RunFailed, "RUN_FAILED", 500),
            (ErrorCode::RunTimedOut, "RUN_TIMED_OUT", 500),
            (ErrorCode::AddonFailed, "ADDON_FAILED", 500),
            (ErrorCode::WakeFailed, "WAKE_FAILED", 503),
            (ErrorCode::StartFailed, "START_FAILED", 500),
            (ErrorCode::StartCommandMissing, "START_COMMAND_MISSING", 500),
            (ErrorCode::HealthcheckFailed, "HEALTHCHECK_FAILED", 500),
            (ErrorCode::CertificateFailed, "CERTIFICATE_FAILED", 500),
            (ErrorCode::Timeout, "TIMEOUT", 500),
            (ErrorCode::Interrupted, "INTERRUPTED", 500),
            (ErrorCode::Canceled, "CANCELED", 500),
        ];
        assert_eq!(table.len(), ErrorCode::ALL.len());
        for (code, spelling, status) in table {
            assert_eq!(code.as_str(), *spelling);
            assert_eq!(code.status().as_u16(), *status, "{spelling}");
            // serde spells it the same way, so stored records and bodies agree.
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::Value::String(spelling.to_string())
            );
            assert!(ErrorCode::ALL.contains(code));
        }
        for code in ErrorCode::ALL {
            assert_eq!(code.as_str().starts_with("INVALID_"), code.status() == 400);
        }
    }
}
