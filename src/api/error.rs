//! The one place where errors become HTTP statuses and the contract's envelope
//! `{"error":{"code","message","status"}}`.

use http::{HeaderValue, Response};

pub use crate::error_code::ErrorCode;
use crate::http_util::{full, Body};

#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Extra headers (e.g. `Allow`, `Retry-After`).
    pub headers: Vec<(&'static str, String)>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            headers: Vec::new(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::NotFound, message)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            ErrorCode::Unauthorized,
            "missing or invalid API token: send `Authorization: Bearer <token>` with a token from the dashboard or `slipway token create`",
        )
    }

    /// A server-side failure: the details go to the log under the request id, never to the
    /// client.
    pub fn internal(error: impl std::fmt::Display) -> ApiError {
        tracing::error!(%error, "internal error");
        ApiError::new(
            ErrorCode::InternalError,
            "internal error; the X-Request-Id header identifies it in the server log",
        )
    }

    pub fn with_header(mut self, name: &'static str, value: String) -> ApiError {
        self.headers.push((name, value));
        self
    }

    pub fn into_response(self) -> Response<Body> {
        let status = self.code.status();
        let body = super::types::ErrorEnvelope {
            error: super::types::ErrorBody {
                code: self.code.into(),
                message: self.message,
                status: status.as_u16(),
            },
        };
        let body = serde_json::to_vec(&body).expect("the envelope serializes");
        let mut response = Response::new(full(body));
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
