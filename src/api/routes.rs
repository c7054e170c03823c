//! The API's route table: every route with its method, path template, the request body it
//! takes, the response it answers and its query parameters, each named by an `api::types`
//! shape. The router (`api::find_route`), the OpenAPI document (`api::openapi`) and their tests
//! walk it, so the document can only describe routes that exist, with the handlers' own types.

use http::{Method, StatusCode};
use schemars::{JsonSchema, Schema, SchemaGenerator};

use super::types::*;

/// One route of the API.
pub struct RouteSpec {
    pub method: Method,
    /// The path, `{name}` for a parameter.
    pub template: &'static str,
    pub route: Route,
    /// One line for the OpenAPI document.
    pub summary: &'static str,
    /// The status of a success.
    pub success: StatusCode,
    pub request: Option<RequestBody>,
    pub response: ResponseBody,
    /// The query parameters, as the fields of a shape ([`fields`]).
    pub query: Option<Shape>,
}

/// The JSON Schema of a shape, made with the OpenAPI document's generator.
pub type Shape = fn(&mut SchemaGenerator) -> Schema;

pub enum RequestBody {
    Json(Shape),
    /// A `.tar.gz` archive as the raw body (`Content-Type: application/gzip`).
    Archive,
}

pub enum ResponseBody {
    Json(Shape),
    /// Server-sent events, each a [`LogStreamEvent`].
    EventStream,
    /// The Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
    PrometheusText,
}

/// A reference to `T`'s schema (a named component, or inline for a simple type).
pub fn shape<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// `T`'s own object schema, whose properties are the route's query parameters.
pub fn fields<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    T::json_schema(generator)
}

/// The OpenAPI document itself: any JSON object.
type AnyObject = serde_json::Map<String, serde_json::Value>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    ListProjects,
    CreateProject,
    GetProject,
    DeleteProject,
    SetEnvVars,
    GetEnvVars,
    DeleteEnvVar,
    CreateToken,
    ListTokens,
    DeleteToken,
    UploadSource,
    Provision,
    ProvisionStatus,
    Deployments,
    Rollback,
    Logs,
    LogStream,
    OpenApi,
    System,
    Metrics,
    ProjectUsage,
    CreateNotification,
    ListNotifications,
    GetNotification,
    DeleteNotification,
    NotificationDeliveries,
}

/// Every route of the API.
pub const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: Method::GET,
        template: "/api/projects",
        route: Route::ListProjects,
        summary: "List projects",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<ProjectList>),
        query: None,
    },
    RouteSpec {
        method: Method::POST,
        template: "/api/projects",
        route: Route::CreateProject,
        summary: "Create a project",
        success: StatusCode::CREATED,
        request: Some(RequestBody::Json(shape::<CreateProject>)),
        response: ResponseBody::Json(shape::<Project>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/projects/{projectId}",
        route: Route::GetProject,
        summary: "Get a project by id or slug",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<Project>),
        query: None,
    },
    RouteSpec {
        method: Method::DELETE,
        template: "/api/projects/{projectId}",
        route: Route::DeleteProject,
        summary: "Delete a project, its app, deployments, logs, env vars and source",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<ProjectDeleted>),
        query: None,
    },
    RouteSpec {
        method: Method::POST,
        template: "/api/projects/{projectId}/env-vars",
        route: Route::SetEnvVars,
        summary: "Set environment variables (all or nothing)",
        success: StatusCode::OK,
        request: Some(RequestBody::Json(shape::<EnvVarsBody>)),
        response: ResponseBody::Json(shape::<EnvVarsUpdated>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/projects/{projectId}/env-vars",
        route: Route::GetEnvVars,
        summary: "Get environment variables",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<EnvVars>),
        query: None,
    },
    RouteSpec {
        method: Method::DELETE,
        template: "/api/projects/{projectId}/env-vars/{key}",
        route: Route::DeleteEnvVar,
        summary: "Delete one environment variable",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<EnvVarDeleted>),
        query: None,
    },
    RouteSpec {
        method: Method::POST,
        template: "/api/tokens",
        route: Route::CreateToken,
        summary: "Create an API token (the secret is shown once)",
        success: StatusCode::CREATED,
        request: Some(RequestBody::Json(shape::<CreateToken>)),
        response: ResponseBody::Json(shape::<CreatedToken>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/tokens",
        route: Route::ListTokens,
        summary: "List API tokens",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<TokenList>),
        query: None,
    },
    RouteSpec {
        method: Method::DELETE,
        template: "/api/tokens/{tokenId}",
        route: Route::DeleteToken,
        summary: "Revoke an API token",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<TokenRevoked>),
        query: None,
    },
    RouteSpec {
        method: Method::POST,
        template: "/api/projects/{projectId}/source",
        route: Route::UploadSource,
        summary: "Upload the project's source as a .tar.gz (Content-Type: application/gzip)",
        success: StatusCode::CREATED,
        request: Some(RequestBody::Archive),
        response: ResponseBody::Json(shape::<SourceUploaded>),
        query: None,
    },
    RouteSpec {
        method: Method::POST,
        template: "/api/projects/{projectId}/provision",
        route: Route::Provision,
        summary: "Start provisioning (install, build, start, switch)",
        success: StatusCode::ACCEPTED,
        request: Some(RequestBody::Json(shape::<ProvisionBody>)),
        response: ResponseBody::Json(shape::<ProvisionAccepted>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/provisioning/{provisioningId}/status",
        route: Route::ProvisionStatus,
        summary: "Check provisioning progress (poll every 2 s)",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<ProvisionStatus>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/projects/{projectId}/deployments",
        route: Route::Deployments,
        summary: "List the project's deployments, newest first",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<DeploymentList>),
        query: None,
    },
    RouteSpec {
        method: Method::POST,
        template: "/api/projects/{projectId}/rollback",
        route: Route::Rollback,
        summary: "Re-activate an earlier successful deployment without rebuilding",
        success: StatusCode::ACCEPTED,
        request: Some(RequestBody::Json(shape::<RollbackBody>)),
        response: ResponseBody::Json(shape::<ProvisionAccepted>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/deployments/{deploymentId}/logs",
        route: Route::Logs,
        summary: "Get deployment logs (since, limit, stream)",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<LogPage>),
        query: Some(fields::<LogQuery>),
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/deployments/{deploymentId}/logs/stream",
        route: Route::LogStream,
        summary: "Stream deployment logs as Server-Sent Events (events log, status, end)",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::EventStream,
        query: Some(fields::<LogQuery>),
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/openapi.json",
        route: Route::OpenApi,
        summary: "This document",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<AnyObject>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/system",
        route: Route::System,
        summary: "What the daemon runs as: version, sandbox mode in force, TLS mode, domains",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<SystemInfo>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/metrics",
        route: Route::Metrics,
        summary:
            "Every metric in the Prometheus text format 0.0.4 (as GET /metrics on metrics_listen)",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::PrometheusText,
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/projects/{projectId}/usage",
        route: Route::ProjectUsage,
        summary: "One project's traffic, app memory and CPU, build cache and certificates",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<ProjectUsage>),
        query: None,
    },
    RouteSpec {
        method: Method::POST,
        template: "/api/notifications",
        route: Route::CreateNotification,
        summary: "Subscribe a webhook to events (the signing secret is shown once)",
        success: StatusCode::CREATED,
        request: Some(RequestBody::Json(shape::<CreateNotification>)),
        response: ResponseBody::Json(shape::<CreatedNotification>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/notifications",
        route: Route::ListNotifications,
        summary: "List webhook subscriptions",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<NotificationList>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/notifications/{notificationId}",
        route: Route::GetNotification,
        summary: "Get a webhook subscription",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<Notification>),
        query: None,
    },
    RouteSpec {
        method: Method::DELETE,
        template: "/api/notifications/{notificationId}",
        route: Route::DeleteNotification,
        summary: "Delete a webhook subscription and its queued deliveries",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<NotificationDeleted>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/notifications/{notificationId}/deliveries",
        route: Route::NotificationDeliveries,
        summary: "The last 100 delivery attempts of a subscription, newest first",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<DeliveryList>),
        query: None,
    },
];
