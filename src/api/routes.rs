//! The API's route table: every route with its method, path template, the request body it
//! takes, the response it answers and its query parameters, each named by an `api::types`
//! shape. The router (`api::find_route`), the OpenAPI document (`api::openapi`) and their tests
//! walk it, so the document can only describe routes that exist, with the handlers' own types.

use http::{Method, StatusCode};
use schemars::{JsonSchema, Schema, SchemaGenerator};

use super::types::*;
pub use crate::auth::Scope;

/// One route of the API.
pub struct RouteSpec {
    pub method: Method,
    /// The path, `{name}` for a parameter.
    pub template: &'static str,
    pub route: Route,
    /// The least token scope that may use it (`api::authorize` checks).
    pub needs: Scope,
    /// The project it acts on, for tokens limited to some projects.
    pub target: Target,
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

/// Which project a route acts on: the one its first path parameter names (directly, or
/// through a run or deployment), or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    None,
    Project,
    Run,
    Deployment,
}

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
    GetDeployment,
    CancelRun,
    Logs,
    LogStream,
    Audit,
    OpenApi,
    System,
}

/// Every route of the API.
pub const ROUTES: &[RouteSpec] = &[
    RouteSpec {
        method: Method::GET,
        template: "/api/projects",
        route: Route::ListProjects,
        needs: Scope::Read,
        target: Target::None,
        summary: "List projects",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<ProjectList>),
        query: Some(fields::<PageQuery>),
    },
    RouteSpec {
        method: Method::POST,
        template: "/api/projects",
        route: Route::CreateProject,
        needs: Scope::Admin,
        target: Target::None,
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
        needs: Scope::Read,
        target: Target::Project,
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
        needs: Scope::Admin,
        target: Target::Project,
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
        needs: Scope::Deploy,
        target: Target::Project,
        summary: "Set environment variables (all or nothing)",
        success: StatusCode::OK,
        request: Some(RequestBody::Json(env_vars_body_schema)),
        response: ResponseBody::Json(shape::<EnvVarsUpdated>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/projects/{projectId}/env-vars",
        route: Route::GetEnvVars,
        needs: Scope::Read,
        target: Target::Project,
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
        needs: Scope::Deploy,
        target: Target::Project,
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
        needs: Scope::Admin,
        target: Target::None,
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
        needs: Scope::Admin,
        target: Target::None,
        summary: "List API tokens",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<TokenList>),
        query: Some(fields::<PageQuery>),
    },
    RouteSpec {
        method: Method::DELETE,
        template: "/api/tokens/{tokenId}",
        route: Route::DeleteToken,
        needs: Scope::Admin,
        target: Target::None,
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
        needs: Scope::Deploy,
        target: Target::Project,
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
        needs: Scope::Deploy,
        target: Target::Project,
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
        needs: Scope::Read,
        target: Target::Run,
        summary: "Check provisioning progress (poll every 2 s)",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<ProvisionStatus>),
        query: None,
    },
    RouteSpec {
        method: Method::POST,
        template: "/api/provisioning/{provisioningId}/cancel",
        route: Route::CancelRun,
        needs: Scope::Deploy,
        target: Target::Run,
        summary: "Cancel a run in progress (the live deployment is untouched); 409 once it ended",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<ProvisionStatus>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/deployments/{deploymentId}",
        route: Route::GetDeployment,
        needs: Scope::Read,
        target: Target::Deployment,
        summary: "Get one deployment (state, url, error)",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<Deployment>),
        query: None,
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/projects/{projectId}/deployments",
        route: Route::Deployments,
        needs: Scope::Read,
        target: Target::Project,
        summary: "List the project's deployments, newest first",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<DeploymentList>),
        query: Some(fields::<PageQuery>),
    },
    RouteSpec {
        method: Method::POST,
        template: "/api/projects/{projectId}/rollback",
        route: Route::Rollback,
        needs: Scope::Deploy,
        target: Target::Project,
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
        needs: Scope::Read,
        target: Target::Deployment,
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
        needs: Scope::Read,
        target: Target::Deployment,
        summary: "Stream deployment logs as Server-Sent Events (events log, status, end)",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::EventStream,
        query: Some(fields::<LogQuery>),
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/audit",
        route: Route::Audit,
        needs: Scope::Admin,
        target: Target::None,
        summary: "The audit log: every request that changed something, newest first",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<AuditLog>),
        query: Some(fields::<AuditQuery>),
    },
    RouteSpec {
        method: Method::GET,
        template: "/api/openapi.json",
        route: Route::OpenApi,
        needs: Scope::Read,
        target: Target::None,
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
        needs: Scope::Read,
        target: Target::None,
        summary: "What the daemon runs as: version, sandbox mode in force, TLS mode, domains",
        success: StatusCode::OK,
        request: None,
        response: ResponseBody::Json(shape::<SystemInfo>),
        query: None,
    },
];
