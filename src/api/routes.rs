//! What a route of the API is (`RouteSpec`) and `route_table!`, which makes the whole table
//! from one listing in `api/mod.rs`: each route written once — method, path template, scope,
//! target, success status, summary, request and response shapes, query parameters and its
//! handler call — becomes a `Route` variant, a `ROUTES` entry and an arm of the handler match.
//! The router (`request::find_route`), the OpenAPI document (`api::openapi`) and their tests
//! walk `ROUTES`, so the document can only describe routes that exist, with the handlers' own
//! types and the status the dispatcher sends.

use http::{Method, StatusCode};
use schemars::{JsonSchema, Schema, SchemaGenerator};

pub use crate::auth::Scope;

use super::Route;

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
    /// The status of a success: the dispatcher sends a handler's `Reply::Json` with it.
    pub success: StatusCode,
    /// A route no bearer token opens: the provider's signature (webhooks) or the secret in
    /// the path (deploy hooks) authenticates it.
    pub public: bool,
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
    /// Any bytes (`application/octet-stream`), spooled to a file rather than held in memory
    /// (`spool.rs`); the handler finds a [`super::spool::Spooled`] in the extensions.
    Upload,
}

pub enum ResponseBody {
    Json(Shape),
    /// Server-sent events, each a [`LogStreamEvent`].
    EventStream,
    /// The Prometheus text format 0.0.4 (`text/plain; version=0.0.4`).
    PrometheusText,
    /// `101 Switching Protocols` to a WebSocket (an interactive run's terminal).
    WebSocket,
    /// A file's bytes (`application/octet-stream`): an add-on's export.
    Binary,
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
pub(super) type AnyObject = serde_json::Map<String, serde_json::Value>;

/// Which project a route acts on: the one its first path parameter names (directly, or
/// through a run or deployment), or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    None,
    Project,
    Run,
    Deployment,
    /// A one-off or cron run (`run_…`).
    JobRun,
    /// An add-on (`adn_…`): the project that made it.
    Addon,
}

/// Makes `enum Route`, `ROUTES` and the two handler matches (`handle_route` for token routes,
/// `handle_public` for public ones) from one listing. The listing starts with the names its
/// handler calls use for the context, the request, the path parameters and the caller; each
/// route ends in `handle: <call>` or, for a public route, `public: <call>` (which gets the
/// unread `Request<Incoming>`), a future of `Result<Reply, ApiError>`.
macro_rules! route_table {
    (
        |$ctx:ident, $request:ident, $params:ident, $caller:ident|
        $(
            $name:ident: $method:ident $template:literal {
                needs: $needs:ident, target: $target:ident, success: $success:ident,
                summary: $summary:expr,
                request: $body:expr,
                response: $response:expr,
                query: $query:expr,
                $kind:ident: $handler:expr $(,)?
            }
        )*
    ) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Route {
            $($name,)*
        }

        /// Every route of the API.
        pub const ROUTES: &[RouteSpec] = &[$(
            RouteSpec {
                method: http::Method::$method,
                template: $template,
                route: Route::$name,
                needs: Scope::$needs,
                target: Target::$target,
                summary: $summary,
                success: http::StatusCode::$success,
                public: route_table!(@public $kind),
                request: $body,
                response: $response,
                query: $query,
            },
        )*];

        /// Runs the handler of a route a token opened.
        #[allow(unused_variables)]
        async fn handle_route(
            route: Route,
            $ctx: &std::sync::Arc<Context>,
            $request: ApiRequest,
            $params: params::Params,
            $caller: &crate::auth::Caller,
        ) -> Result<Reply, ApiError> {
            match route {
                $(Route::$name => route_table!(@token $kind $handler),)*
            }
        }

        /// Runs the handler of a public route (`RouteSpec::public`).
        #[allow(unused_variables)]
        async fn handle_public(
            route: Route,
            $ctx: &std::sync::Arc<Context>,
            $request: http::Request<hyper::body::Incoming>,
            $params: params::Params,
        ) -> Result<Reply, ApiError> {
            match route {
                $(Route::$name => route_table!(@untokened $kind $handler),)*
            }
        }
    };
    (@public handle) => { false };
    (@public public) => { true };
    (@token handle $handler:expr) => { $handler.await };
    (@token public $handler:expr) => {
        unreachable!("`request::handle` sends the public routes to `handle_public`")
    };
    (@untokened public $handler:expr) => { $handler.await };
    (@untokened handle $handler:expr) => {
        unreachable!("`request::handle` sends only public routes to `handle_public`")
    };
}
