//! `GET /api/openapi.json`: an OpenAPI 3.1 document generated from [`super::ROUTES`], so it
//! can only describe routes that exist (a test walks both directions), with request, response
//! and query schemas derived (schemars) from the `api::types` shapes the table names. The
//! document itself is a typed value too ([`OpenApiDocument`]).

use std::collections::BTreeMap;

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::Schema;
use serde::Serialize;

mod operations;

use operations::{
    describe, error_codes, header_parameters, links, path_parameter_schema, required_headers,
};

use super::routes::{RequestBody, ResponseBody, RouteSpec};
use super::types::ErrorEnvelope;
use super::{Route, ROUTES};
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
    /// `[]` for the routes no bearer token opens (webhooks, deploy hooks).
    #[serde(skip_serializing_if = "Option::is_none")]
    security: Option<Vec<BTreeMap<&'static str, Vec<String>>>>,
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
    let parameters = parameters(spec, generators);
    let mut responses =
        BTreeMap::from([(spec.success.as_u16().to_string(), success(spec, generators))]);
    let error_codes = codes_by_status(spec);
    for (status, codes) in &error_codes {
        responses.insert(status.clone(), error_response(status, codes, envelope));
    }
    Operation {
        operation_id: format!("{:?}", spec.route),
        summary: spec.summary,
        parameters,
        request_body: request_body(spec, generators),
        responses,
        error_codes,
        security: spec.public.then(Vec::new),
    }
}

/// The path's parameters, the query's, the route's headers, and `Idempotency-Key` on a POST.
fn parameters(spec: &RouteSpec, generators: &mut Generators) -> Vec<Parameter> {
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
    for (name, description, schema) in required_headers(spec.route) {
        parameters.push(Parameter {
            name: name.into(),
            location: Location::Header,
            required: true,
            description: Some(description.into()),
            schema: Schema::try_from(schema).unwrap_or_default(),
        });
    }
    for (name, description, schema) in header_parameters(spec.route) {
        parameters.push(Parameter {
            name: name.into(),
            location: Location::Header,
            required: false,
            description: Some(description.into()),
            schema: Schema::try_from(schema).unwrap_or_default(),
        });
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
    parameters
}

/// The answer with the route's success status.
fn success(spec: &RouteSpec, generators: &mut Generators) -> ResponseObject {
    match spec.response {
        ResponseBody::Json(shape) => ResponseObject {
            description: "Success".into(),
            content: media(JSON, shape(&mut generators.responses)),
            links: links(spec.route),
        },
        ResponseBody::Binary => ResponseObject {
            description: "The file's bytes (application/octet-stream)".into(),
            content: upload_content(),
            links: BTreeMap::new(),
        },
        ResponseBody::PrometheusText => ResponseObject {
            description: "The Prometheus text exposition format, version 0.0.4".into(),
            content: media(
                "text/plain; version=0.0.4",
                generators.responses.subschema_for::<String>(),
            ),
            links: BTreeMap::new(),
        },
        ResponseBody::WebSocket => ResponseObject {
            description: match spec.route {
                Route::AddonTunnel => {
                    "Switching Protocols: a WebSocket carrying one TCP connection to the \
                     add-on: binary frames both ways; either side's end closes both"
                }
                _ => {
                    "Switching Protocols: a WebSocket. Binary frames carry the terminal's \
                     bytes both ways; the client's text frame {\"resize\": [cols, rows]} \
                     resizes it; the last server text frame is {\"exit\", \"state\", \
                     \"message\"}"
                }
            }
            .into(),
            content: BTreeMap::new(),
            links: BTreeMap::new(),
        },
        ResponseBody::EventStream => ResponseObject {
            description: "Server-sent events: `log` (data: a LogLine, id: its seq), `status` \
                          (data: a ProvisionStatus) and `end` (data: {})"
                .into(),
            content: media("text/event-stream", sse_event_schema()),
            links: BTreeMap::new(),
        },
    }
}

/// One server-sent event as schema checkers read it: its `event` name, its `data` (a JSON
/// text whose shape the description gives), and the `id` of a `log` event.
fn sse_event_schema() -> Schema {
    Schema::try_from(serde_json::json!({
        "type": "object",
        "properties": {
            "event": {"type": "string", "enum": ["log", "status", "end"]},
            "data": {"type": "string"},
            "id": {"type": "string", "pattern": "^[0-9]+$"},
            "retry": {"type": "integer", "minimum": 0}
        }
    }))
    .unwrap_or_default()
}

/// Status → the error codes the route can answer with it.
fn codes_by_status(spec: &RouteSpec) -> BTreeMap<String, Vec<ErrorCode>> {
    let mut by_status: BTreeMap<String, Vec<ErrorCode>> = BTreeMap::new();
    for code in error_codes(spec) {
        by_status
            .entry(code.status().as_u16().to_string())
            .or_default()
            .push(code);
    }
    by_status
}

/// The error envelope answered with `status`, its description naming the codes.
fn error_response(status: &str, codes: &[ErrorCode], envelope: &Schema) -> ResponseObject {
    let names: Vec<&str> = codes.iter().map(|code| code.as_str()).collect();
    ResponseObject {
        description: format!(
            "{} ({})",
            describe(status.parse().unwrap_or(500)),
            names.join(", ")
        ),
        content: media(JSON, envelope.clone()),
        links: BTreeMap::new(),
    }
}

fn request_body(spec: &RouteSpec, generators: &mut Generators) -> Option<RequestBodyObject> {
    let content = match spec.request.as_ref()? {
        RequestBody::Json(shape) => media(JSON, shape(&mut generators.requests)),
        RequestBody::Upload => upload_content(),
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
    Some(RequestBodyObject {
        required: true,
        content,
    })
}

/// Any bytes, as `application/octet-stream`.
fn upload_content() -> BTreeMap<&'static str, MediaType> {
    let binary = Schema::try_from(serde_json::json!({
        "type": "string", "format": "binary", "contentMediaType": "application/octet-stream"
    }))
    .unwrap_or_default();
    media("application/octet-stream", binary)
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
mod tests;
