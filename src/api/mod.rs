//! The REST API under `/api/` on the control host: its route table (`table.rs`: every route
//! once, with its handler; `routes.rs` says what an entry is), a request's way through
//! authentication, rate limit, scope, body and audit (`request.rs`), and one handler module
//! per resource. Every response carries the rate-limit headers; every error is the contract's
//! envelope (`error.rs`); a success is the handler's `Reply` with the route's status.

mod addons;
mod audit;
mod context;
mod cron_jobs;
mod domains;
mod env_scope;
mod error;
mod failures;
mod formation;
mod git;
mod idempotency;
mod json;
mod logs;
mod notifications;
mod observability;
mod openapi;
mod paging;
mod params;
mod projects;
mod provision;
mod public_body;
mod reply;
mod request;
#[macro_use]
mod routes;
mod runs;
mod source;
mod table;
mod tokens;
pub mod types;
mod websocket;

use http::{HeaderValue, Request, Response, StatusCode};

pub use context::Context;
pub use error::{ApiError, ErrorCode};
pub use openapi::{openapi_document, OpenApiDocument};
pub use params::{match_template, Params};
pub use public_body::PublicBodies;
pub use request::handle;
pub use routes::{RouteSpec, Target};
use table::{handle_public, handle_route};
pub use table::{Route, ROUTES};
pub use tokens::parse_create as parse_token_request;

use crate::http_util::{full, Body};

/// A request as handlers see it: the body already read (bounded by the route's limit).
pub type ApiRequest = Request<bytes::Bytes>;

/// What the daemon runs as: version, sandbox mode in force, TLS mode, domains.
pub(super) fn system_info(ctx: &Context) -> types::SystemInfo {
    types::SystemInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        sandbox_mode: ctx.config.sandbox.mode.as_str().into(),
        tls_mode: ctx.config.tls.mode.as_str().into(),
        apps_domain: ctx.config.apps_domain.clone(),
        control_host: ctx.config.control_host.clone(),
        disk_limits: ctx.pipeline.workspaces().volumes().limited(),
    }
}

pub fn json_response(status: StatusCode, value: &impl serde::Serialize) -> Response<Body> {
    let body = serde_json::to_vec(value).expect("API shapes serialize");
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON body already serialized, sent with `status`.
pub fn json_bytes_response(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
