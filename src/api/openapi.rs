//! `GET /api/openapi.json`: an OpenAPI 3.1 document generated from [`super::ROUTES`], so it
//! can only describe routes that exist (a test walks both directions), with request, response
//! and query schemas derived (schemars) from the `api::types` shapes the table names. The
//! document itself is a typed value too ([`OpenApiDocument`]).

use std::collections::BTreeMap;

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::Schema;
use serde::Serialize;

use super::routes::{RequestBody, ResponseBody, RouteSpec, ROUTES};
use super::types::ErrorEnvelope;

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
}

#[derive(Debug, Serialize)]
struct RequestBodyObject {
    required: bool,
    /// Media type → schema.
    content: BTreeMap<&'static str, MediaType>,
}

#[derive(Debug, Serialize)]
struct ResponseObject {
    description: &'static str,
    content: BTreeMap<&'static str, MediaType>,
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

/// The error statuses every operation documents, all with the error envelope.
const ERRORS: &[(u16, &str)] = &[
    (400, "Invalid input (code INVALID_*)"),
    (401, "Missing or invalid token"),
    (404, "Not found"),
    (429, "Rate limited"),
    (500, "Internal error"),
];

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
            schema: generators.requests.subschema_for::<String>(),
        })
        .collect();
    if let Some(query) = spec.query {
        parameters.extend(query_parameters(query(&mut generators.requests)));
    }
    let success = match spec.response {
        ResponseBody::Json(shape) => ResponseObject {
            description: "Success",
            content: media(JSON, shape(&mut generators.responses)),
        },
        ResponseBody::PrometheusText => ResponseObject {
            description: "The Prometheus text exposition format, version 0.0.4",
            content: media(
                "text/plain; version=0.0.4",
                generators.responses.subschema_for::<String>(),
            ),
        },
        ResponseBody::EventStream => ResponseObject {
            description: "Server-sent events: `log` (data: a LogLine, id: its seq), `status` \
                          (data: a ProvisionStatus) and `end` (data: {})",
            content: media(
                "text/event-stream",
                generators.responses.subschema_for::<String>(),
            ),
        },
    };
    let mut responses = BTreeMap::from([(spec.success.as_u16().to_string(), success)]);
    for (status, description) in ERRORS {
        let error = ResponseObject {
            description,
            content: media(JSON, envelope.clone()),
        };
        responses.insert(status.to_string(), error);
    }
    let request_body = spec.request.as_ref().map(|request| {
        let content = match request {
            RequestBody::Json(shape) => media(JSON, shape(&mut generators.requests)),
            RequestBody::Archive => {
                let mut schema = generators.requests.subschema_for::<String>();
                schema.insert("contentMediaType".into(), "application/gzip".into());
                media("application/gzip", schema)
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
            for status in ["400", "401", "404", "429", "500"] {
                assert_eq!(
                    responses[status]["content"][JSON]["schema"]["$ref"],
                    "#/components/schemas/ErrorEnvelope",
                    "{method} {template} {status}"
                );
            }
            let request = &item["requestBody"];
            assert_eq!(spec.request.is_some(), request.is_object(), "{template}");
            if *method == http::Method::POST {
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
