//! `GET /api/openapi.json`: an OpenAPI 3.1 document generated from [`super::ROUTES`], so it
//! can only describe routes that exist (a test walks both directions), with request, response
//! and query schemas derived (schemars) from the `api::types` shapes the table names. The
//! document itself is a typed value too ([`OpenApiDocument`]).

use std::collections::BTreeMap;

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::Schema;
use serde::Serialize;

use super::routes::{RequestBody, ResponseBody, Route, RouteSpec, Target, ROUTES};
use super::types::ErrorEnvelope;
use crate::error_code::ErrorCode;

/// The document; serialize it to get the JSON.
#[derive(Debug, Serialize)]
pub struct OpenApiDocument {
    openapi: &'static str,
    info: Info,
    security: Vec<BTreeMap<&'static str, Vec<String>>>,
    /// Template → lowercase method → operation.
    paths: BTreeMap<&'static str, BTreeMap<String, Operation>>,
    components: Components,
}

#[derive(Debug, Serialize)]
struct Info {
    title: &'static str,
    version: &'static str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Operation {
    operation_id: String,
    summary: &'static str,
    parameters: Vec<Parameter>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_body: Option<RequestBodyObject>,
    /// Status → response.
    responses: BTreeMap<String, ResponseObject>,
    /// Status → the error codes this operation can answer with it.
    #[serde(rename = "x-error-codes")]
    error_codes: BTreeMap<String, Vec<ErrorCode>>,
}

#[derive(Debug, Serialize)]
struct Parameter {
    name: String,
    #[serde(rename = "in")]
    location: Location,
    required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    schema: Schema,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
enum Location {
    Path,
    Query,
    Header,
}

#[derive(Debug, Serialize)]
struct RequestBodyObject {
    required: bool,
    /// Media type → schema.
    content: BTreeMap<&'static str, MediaType>,
}

#[derive(Debug, Serialize)]
struct ResponseObject {
    description: String,
    content: BTreeMap<&'static str, MediaType>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    links: BTreeMap<&'static str, Link>,
}

/// How a created resource's id feeds the operations that read it (the stateful tests and
/// client generators follow these).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Link {
    operation_id: &'static str,
    parameters: BTreeMap<&'static str, &'static str>,
}

#[derive(Debug, Serialize)]
struct MediaType {
    schema: Schema,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Components {
    security_schemes: BTreeMap<&'static str, SecurityScheme>,
    schemas: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Serialize)]
struct SecurityScheme {
    #[serde(rename = "type")]
    kind: &'static str,
    scheme: &'static str,
}

const JSON: &str = "application/json";
const BEARER: &str = "bearer";

/// The error codes an operation can answer, from its place in the route table: what every
/// route can answer, what its body, query, method and target add, and its own.
fn error_codes(spec: &RouteSpec) -> Vec<ErrorCode> {
    use ErrorCode::*;
    let mut codes = vec![Unauthorized, Forbidden, RateLimited, InternalError];
    if spec.target != Target::None || spec.template.contains('{') {
        codes.push(NotFound);
    }
    if spec.query.is_some() {
        codes.push(InvalidQuery);
    }
    match spec.request {
        Some(RequestBody::Json(_)) => codes.extend([
            InvalidBody,
            InvalidJson,
            InvalidContentType,
            PayloadTooLarge,
        ]),
        Some(RequestBody::Archive) => codes.extend([InvalidContentType, PayloadTooLarge]),
        None => {}
    }
    if spec.method == http::Method::POST {
        codes.extend([InvalidIdempotencyKey, Conflict]);
    }
    let own: &[ErrorCode] = match spec.route {
        Route::CreateProject => &[InvalidSlugFormat, InvalidSlugReserved, InvalidSlugTaken],
        Route::SetEnvVars => &[InvalidEnvKey, InvalidEnvValue],
        Route::DeleteEnvVar => &[InvalidEnvKey],
        Route::UploadSource => &[
            InvalidSlugFormat,
            InvalidSlugReserved,
            InvalidSourceArchive,
            InsufficientStorage,
        ],
        Route::Provision => &[
            InvalidSlugFormat,
            InvalidSlugReserved,
            InvalidSlugMismatch,
            InvalidSourceMissing,
            InvalidSourceId,
            InvalidGitUrl,
            InsufficientStorage,
        ],
        Route::Rollback => &[InvalidDeploymentId],
        Route::DeleteToken | Route::CancelRun => &[Conflict],
        Route::CreateNotification => &[],
        Route::Metrics
        | Route::ProjectUsage
        | Route::ListNotifications
        | Route::GetNotification
        | Route::DeleteNotification
        | Route::NotificationDeliveries => &[],
        Route::ListProjects
        | Route::GetProject
        | Route::DeleteProject
        | Route::GetEnvVars
        | Route::CreateToken
        | Route::ListTokens
        | Route::ProvisionStatus
        | Route::Deployments
        | Route::GetDeployment
        | Route::Logs
        | Route::LogStream
        | Route::Audit
        | Route::OpenApi
        | Route::System => &[],
    };
    for code in own {
        if !codes.contains(code) {
            codes.push(*code);
        }
    }
    codes
}

/// Links from an operation's success answer to the operations that use what it created.
fn links(route: Route) -> BTreeMap<&'static str, Link> {
    let link = |operation_id, parameter, expression| Link {
        operation_id,
        parameters: BTreeMap::from([(parameter, expression)]),
    };
    let entries: Vec<(&'static str, Link)> = match route {
        Route::CreateProject => vec![
            (
                "GetProject",
                link("GetProject", "projectId", "$response.body#/id"),
            ),
            (
                "GetEnvVars",
                link("GetEnvVars", "projectId", "$response.body#/id"),
            ),
            (
                "SetEnvVars",
                link("SetEnvVars", "projectId", "$response.body#/id"),
            ),
            (
                "Deployments",
                link("Deployments", "projectId", "$response.body#/id"),
            ),
            (
                "UploadSource",
                link("UploadSource", "projectId", "$response.body#/id"),
            ),
            (
                "DeleteProject",
                link("DeleteProject", "projectId", "$response.body#/id"),
            ),
        ],
        Route::UploadSource => vec![(
            "GetProject",
            link("GetProject", "projectId", "$response.body#/projectId"),
        )],
        Route::Provision | Route::Rollback => vec![
            (
                "ProvisionStatus",
                link(
                    "ProvisionStatus",
                    "provisioningId",
                    "$response.body#/provisioningId",
                ),
            ),
            (
                "CancelRun",
                link(
                    "CancelRun",
                    "provisioningId",
                    "$response.body#/provisioningId",
                ),
            ),
            (
                "GetDeployment",
                link(
                    "GetDeployment",
                    "deploymentId",
                    "$response.body#/deploymentId",
                ),
            ),
            (
                "Logs",
                link("Logs", "deploymentId", "$response.body#/deploymentId"),
            ),
        ],
        Route::CreateToken => vec![(
            "DeleteToken",
            link("DeleteToken", "tokenId", "$response.body#/id"),
        )],
        Route::CreateNotification => vec![
            (
                "GetNotification",
                link("GetNotification", "notificationId", "$response.body#/id"),
            ),
            (
                "NotificationDeliveries",
                link(
                    "NotificationDeliveries",
                    "notificationId",
                    "$response.body#/id",
                ),
            ),
            (
                "DeleteNotification",
                link("DeleteNotification", "notificationId", "$response.body#/id"),
            ),
        ],
        _ => Vec::new(),
    };
    entries.into_iter().collect()
}

/// The schema of a path parameter, by its name: the ids' and slugs' shapes.
fn path_parameter_schema(name: &str) -> serde_json::Value {
    let id = |prefix: &str| serde_json::json!({"type": "string", "pattern": format!("^{prefix}_[a-z2-7]{{24}}$")});
    match name {
        "projectId" => serde_json::json!({
            "type": "string",
            "description": "The project's id (prj_…) or slug",
            "pattern": "^(prj_[a-z2-7]{24}|[a-z0-9]+(-[a-z0-9]+)*)$",
            "minLength": 2,
            "maxLength": 63,
        }),
        "deploymentId" => id("dpl"),
        "provisioningId" => id("pvn"),
        "tokenId" => id("tok"),
        "notificationId" => id("ntf"),
        "key" => serde_json::json!({
            "type": "string",
            "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
            "maxLength": 256,
        }),
        _ => serde_json::json!({"type": "string"}),
    }
}

/// What a status means, for the document.
fn describe(status: u16) -> &'static str {
    match status {
        400 => "Invalid input: the message names the field",
        401 => "Missing, invalid or expired token",
        403 => "The token's scope or project list does not cover this",
        404 => "Not found",
        409 => "Conflicts with the resource's state (or an Idempotency-Key in use)",
        413 => "Body too large",
        429 => "Rate limited (see Retry-After)",
        507 => "Not enough disk space on the daemon's data dir",
        _ => "Internal error",
    }
}

/// Schemas of what the server sends (responses) and of what it accepts (request bodies and
/// queries, where an optional field may be absent or null); both put named shapes under
/// `#/components/schemas`.
struct Generators {
    responses: SchemaGenerator,
    requests: SchemaGenerator,
}

impl Generators {
    fn new() -> Generators {
        let settings = SchemaSettings::draft2020_12().with(|settings| {
            settings.definitions_path = "/components/schemas".into();
            settings.meta_schema = None;
        });
        Generators {
            responses: settings.clone().for_serialize().into_generator(),
            requests: settings.for_deserialize().into_generator(),
        }
    }

    /// Every named shape; one that both sides use must look the same to both.
    fn into_schemas(mut self) -> serde_json::Map<String, serde_json::Value> {
        let mut schemas = self.responses.take_definitions(true);
        for (name, schema) in self.requests.take_definitions(true) {
            let existing = schemas
                .entry(name.clone())
                .or_insert_with(|| schema.clone());
            debug_assert_eq!(
                *existing, schema,
                "schema {name} differs between directions"
            );
        }
        schemas
    }
}

pub fn openapi_document() -> OpenApiDocument {
    let mut generators = Generators::new();
    let envelope = generators.responses.subschema_for::<ErrorEnvelope>();
    let mut paths: BTreeMap<&'static str, BTreeMap<String, Operation>> = BTreeMap::new();
    for spec in ROUTES {
        let operation = operation(spec, &mut generators, &envelope);
        paths
            .entry(spec.template)
            .or_default()
            .insert(spec.method.as_str().to_ascii_lowercase(), operation);
    }
    OpenApiDocument {
        openapi: "3.1.0",
        info: Info {
            title: "Slipway API",
            version: env!("CARGO_PKG_VERSION"),
        },
        security: vec![BTreeMap::from([(BEARER, Vec::new())])],
        paths,
        components: Components {
            security_schemes: BTreeMap::from([(
                BEARER,
                SecurityScheme {
                    kind: "http",
                    scheme: "bearer",
                },
            )]),
            schemas: generators.into_schemas(),
        },
    }
}

fn operation(spec: &RouteSpec, generators: &mut Generators, envelope: &Schema) -> Operation {
    let mut parameters: Vec<Parameter> = spec
        .template
        .split('/')
        .filter_map(|part| part.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| Parameter {
            name: name.into(),
            location: Location::Path,
            required: true,
            description: None,
            schema: Schema::try_from(path_parameter_schema(name)).unwrap_or_default(),
        })
        .collect();
    if let Some(query) = spec.query {
        parameters.extend(query_parameters(query(&mut generators.requests)));
    }
    if spec.method == http::Method::POST {
        parameters.push(Parameter {
            name: "Idempotency-Key".into(),
            location: Location::Header,
            required: false,
            description: Some(
                "Replays the first answer to this key (per token) for 24 h instead of doing \
                 the request again"
                    .into(),
            ),
            schema: Schema::try_from(serde_json::json!({
                "type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"
            }))
            .unwrap_or_default(),
        });
    }
    let success = match spec.response {
        ResponseBody::Json(shape) => ResponseObject {
            description: "Success".into(),
            content: media(JSON, shape(&mut generators.responses)),
            links: links(spec.route),
        },
        ResponseBody::PrometheusText => ResponseObject {
            description: "The Prometheus text exposition format, version 0.0.4".into(),
            content: media(
                "text/plain; version=0.0.4",
                generators.responses.subschema_for::<String>(),
            ),
            links: BTreeMap::new(),
        },
        ResponseBody::EventStream => ResponseObject {
            description: "Server-sent events: `log` (data: a LogLine, id: its seq), `status` \
                          (data: a ProvisionStatus) and `end` (data: {})"
                .into(),
            content: media(
                "text/event-stream",
                generators.responses.subschema_for::<String>(),
            ),
            links: BTreeMap::new(),
        },
    };
    let mut responses = BTreeMap::from([(spec.success.as_u16().to_string(), success)]);
    let mut by_status: BTreeMap<String, Vec<ErrorCode>> = BTreeMap::new();
    for code in error_codes(spec) {
        by_status
            .entry(code.status().as_u16().to_string())
            .or_default()
            .push(code);
    }
    for (status, codes) in &by_status {
        let names: Vec<&str> = codes.iter().map(|code| code.as_str()).collect();
        let error = ResponseObject {
            description: format!(
                "{} ({})",
                describe(status.parse().unwrap_or(500)),
                names.join(", ")
            ),
            content: media(JSON, envelope.clone()),
            links: BTreeMap::new(),
        };
        responses.insert(status.clone(), error);
    }
    let request_body = spec.request.as_ref().map(|request| {
        let content = match request {
            RequestBody::Json(shape) => media(JSON, shape(&mut generators.requests)),
            RequestBody::Archive => {
                // The same bytes under either type; generators know `application/octet-stream`.
                let mut gzip = generators.requests.subschema_for::<String>();
                gzip.insert("contentMediaType".into(), "application/gzip".into());
                let binary = Schema::try_from(serde_json::json!({
                    "type": "string", "format": "binary", "contentMediaType": "application/gzip"
                }))
                .unwrap_or_default();
                let mut content = media("application/gzip", gzip);
                content.extend(media("application/octet-stream", binary));
                content
            }
        };
        RequestBodyObject {
            required: true,
            content,
        }
    });
    Operation {
        operation_id: format!("{:?}", spec.route),
        summary: spec.summary,
        parameters,
        request_body,
        responses,
        error_codes: by_status,
    }
}

fn media(media_type: &'static str, schema: Schema) -> BTreeMap<&'static str, MediaType> {
    BTreeMap::from([(media_type, MediaType { schema })])
}

/// One query parameter per property of an object schema, its description lifted out.
fn query_parameters(object: Schema) -> Vec<Parameter> {
    let required: Vec<&str> = object
        .get("required")
        .and_then(|names| names.as_array())
        .map(|names| names.iter().filter_map(|name| name.as_str()).collect())
        .unwrap_or_default();
    let Some(properties) = object.get("properties").and_then(|p| p.as_object()) else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let mut schema = Schema::try_from(property.clone()).unwrap_or_default();
            let description = schema
                .remove("description")
                .and_then(|text| text.as_str().map(str::to_owned));
            Parameter {
                name: name.clone(),
                location: Location::Query,
                required: required.contains(&name.as_str()),
                description,
                schema,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn document() -> Value {
        serde_json::to_value(openapi_document()).unwrap()
    }

    /// Client generators (openapi-python-client) read a `oneOf` of `const`s variant by variant
    /// and fail on the second; enums must be plain `enum`s (no doc comments on variants).
    #[test]
    fn enums_are_plain_string_enums() {
        let doc = document();
        for (name, schema) in doc["components"]["schemas"].as_object().unwrap() {
            let one_of = schema["oneOf"].as_array();
            assert!(
                !one_of.is_some_and(|variants| variants
                    .iter()
                    .any(|v| v.get("const").is_some() || v.get("enum").is_some())),
                "{name} is a oneOf of constants: {schema}"
            );
        }
    }

    #[test]
    fn document_lists_exactly_the_routes() {
        let doc = document();
        let paths = doc["paths"].as_object().unwrap();
        let mut documented = 0;
        for (path, item) in paths {
            for method in item.as_object().unwrap().keys() {
                documented += 1;
                assert!(
                    ROUTES.iter().any(|spec| spec.template == path
                        && spec.method.as_str().eq_ignore_ascii_case(method)),
                    "{method} {path} is documented but not routed"
                );
            }
        }
        assert_eq!(documented, ROUTES.len(), "every route is documented once");
    }

    #[test]
    fn every_route_has_typed_bodies() {
        let doc = document();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for name in [
            "Project",
            "ProvisionStatus",
            "ProvisionBody",
            "ErrorEnvelope",
            "LogLine",
            "ErrorCode",
        ] {
            assert!(schemas.contains_key(name), "no schema {name}");
        }
        for spec in ROUTES {
            let (method, template) = (&spec.method, spec.template);
            let item = &doc["paths"][template][method.as_str().to_ascii_lowercase()];
            let responses = item["responses"].as_object().unwrap();
            let success = &responses[spec.success.as_str()];
            let content = success["content"].as_object().unwrap();
            assert_eq!(content.len(), 1, "{method} {template}");
            for (media_type, body) in content {
                let schema = body["schema"].as_object();
                assert!(
                    schema.is_some_and(|schema| !schema.is_empty()),
                    "{method} {template}: {media_type} has no response schema"
                );
            }
            // Every error code the operation can answer is documented under its status, with
            // the envelope.
            for code in error_codes(spec) {
                let status = code.status().as_u16().to_string();
                assert_eq!(
                    responses[&status]["content"][JSON]["schema"]["$ref"],
                    "#/components/schemas/ErrorEnvelope",
                    "{method} {template} {status}"
                );
                assert!(
                    item["x-error-codes"][&status]
                        .as_array()
                        .is_some_and(|codes| codes.contains(&Value::String(code.as_str().into()))),
                    "{method} {template}: {code} is not listed"
                );
            }
            for status in ["401", "403", "429", "500"] {
                assert!(
                    responses.contains_key(status),
                    "{method} {template} {status}"
                );
            }
            let request = &item["requestBody"];
            assert_eq!(spec.request.is_some(), request.is_object(), "{template}");
            if spec.request.is_some() {
                assert_eq!(request["required"], true, "{method} {template}");
                let content = request["content"].as_object();
                assert!(
                    content.is_some_and(
                        |c| !c.is_empty() && c.values().all(|m| m["schema"].is_object())
                    ),
                    "{method} {template} has no request body schema"
                );
            }
        }
        let stream = &doc["paths"]["/api/deployments/{deploymentId}/logs/stream"]["get"];
        let stream_content = stream["responses"]["200"]["content"].as_object().unwrap();
        assert_eq!(
            stream_content.keys().collect::<Vec<_>>(),
            ["text/event-stream"]
        );
    }

    #[test]
    fn request_schemas_say_what_is_required() {
        let doc = document();
        let schemas = &doc["components"]["schemas"];
        assert_eq!(
            schemas["ProvisionBody"]["required"],
            Value::from(vec!["projectSlug"])
        );
        assert_eq!(schemas["ProvisionBody"]["additionalProperties"], false);
        assert_eq!(
            schemas["CreateProject"]["required"],
            Value::from(vec!["slug"])
        );
        let envelope_code = &schemas["ErrorBody"]["properties"]["code"];
        assert_eq!(envelope_code["$ref"], "#/components/schemas/ErrorCode");
    }

    #[test]
    fn the_log_query_becomes_optional_query_parameters() {
        let doc = document();
        for template in [
            "/api/deployments/{deploymentId}/logs",
            "/api/deployments/{deploymentId}/logs/stream",
        ] {
            let parameters = doc["paths"][template]["get"]["parameters"]
                .as_array()
                .unwrap()
                .clone();
            let names: Vec<&str> = parameters
                .iter()
                .map(|p| p["name"].as_str().unwrap())
                .collect();
            assert_eq!(names, ["deploymentId", "limit", "since", "stream"]);
            for parameter in &parameters[1..] {
                assert_eq!(parameter["in"], "query");
                assert_eq!(parameter["required"], false);
                assert!(parameter["description"].is_string(), "{parameter}");
            }
        }
    }
}
