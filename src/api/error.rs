//! The one place where errors become HTTP statuses and the contract's envelope
//! `{"error":{"code","message","status"}}`.

use http::{HeaderValue, Response, StatusCode};

use crate::http_util::{full, Body};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400 with an `INVALID_*` code.
    Invalid(&'static str),
    Unauthorized,
    NotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    RateLimited,
    /// 409: the request conflicts with the current state (e.g. rollback to a failed build).
    Conflict,
    Internal,
}

impl ErrorKind {
    pub fn status(self) -> StatusCode {
        match self {
            ErrorKind::Invalid(_) => StatusCode::BAD_REQUEST,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Invalid(code) => code,
            ErrorKind::Unauthorized => "UNAUTHORIZED",
            ErrorKind::NotFound => "NOT_FOUND",
            ErrorKind::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ErrorKind::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorKind::RateLimited => "RATE_LIMITED",
            ErrorKind::Conflict => "CONFLICT",
            ErrorKind::Internal => "INTERNAL_ERROR",
        }
    }
}

#[derive(Debug)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    /// Extra headers (e.g. `Allow`, `Retry-After`).
    pub headers: Vec<(&'static str, String)>,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError {
            kind,
            message: message.into(),
            headers: Vec::new(),
        }
    }

    pub fn invalid(code: &'static str, message: impl Into<String>) -> ApiError {
        debug_assert!(code.starts_with("INVALID_"));
        ApiError::new(ErrorKind::Invalid(code), message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::NotFound, message)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            ErrorKind::Unauthorized,
            "missing or invalid API token: send `Authorization: Bearer <token>` with a token from the dashboard or `slipway token create`",
        )
    }

    /// A server-side failure: the details go to the log under the request id, never to the
    /// client.
    pub fn internal(error: impl std::fmt::Display) -> ApiError {
        tracing::error!(%error, "internal error");
        ApiError::new(
            ErrorKind::Internal,
            "internal error; the X-Request-Id header identifies it in the server log",
        )
    }

    pub fn with_header(mut self, name: &'static str, value: String) -> ApiError {
        self.headers.push((name, value));
        self
    }

    pub fn into_response(self) -> Response<Body> {
        let status = self.kind.status();
        let body = serde_json::json!({
            "error": {"code": self.kind.code(), "message": self.message, "status": status.as_u16()}
        });
        let mut response = Response::new(full(body.to_string()));
        *response.status_mut() = status;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        for (name, value) in self.headers {
            if let Ok(value) = HeaderValue::from_str(&value) {
                response.headers_mut().insert(name, value);
            }
        }
        response
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(error: crate::store::StoreError) -> ApiError {
        ApiError::internal(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_maps_to_its_status_and_code() {
        let table = [
            (
                ErrorKind::Invalid("INVALID_SLUG_FORMAT"),
                400,
                "INVALID_SLUG_FORMAT",
            ),
            (ErrorKind::Unauthorized, 401, "UNAUTHORIZED"),
            (ErrorKind::NotFound, 404, "NOT_FOUND"),
            (ErrorKind::MethodNotAllowed, 405, "METHOD_NOT_ALLOWED"),
            (ErrorKind::PayloadTooLarge, 413, "PAYLOAD_TOO_LARGE"),
            (ErrorKind::RateLimited, 429, "RATE_LIMITED"),
            (ErrorKind::Conflict, 409, "CONFLICT"),
            (ErrorKind::Internal, 500, "INTERNAL_ERROR"),
        ];
        for (kind, status, code) in table {
            assert_eq!(kind.status().as_u16(), status);
            assert_eq!(kind.code(), code);
        }
    }
}
