//! `GET /api/openapi.json`: an OpenAPI 3.1 document generated from [`super::ROUTES`], so it
//! can only describe routes that exist (a test walks both directions).

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{json, Map, Value};

use super::types::*;
use super::{Route, ROUTES};

/// What the document says of one route: its summary, success status, and the shapes of its
/// request and response bodies (from `api::types`).
struct Operation {
    summary: &'static str,
    success: u16,
    request: Option<Request>,
    response: Response,
    /// Query parameters: (name, JSON type, description).
    query: &'static [(&'static str, &'static str, &'static str)],
}

type Shape = fn(&mut SchemaGenerator) -> Schema;

enum Request {
    Json(Shape),
    /// A `.tar.gz` archive as the raw body.
    Archive,
}

enum Response {
    Json(Shape),
    EventStream,
}

fn shape<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

const LOG_QUERY: &[(&str, &str, &str)] = &[
    ("since", "integer", "only lines with a larger seq"),
    (
        "limit",
        "integer",
        "at most this many lines (default 1000, at most 5000)",
    ),
    (
        "stream",
        "string",
        "one stream only: system, install, build, stdout or stderr",
    ),
];

fn operation(route: Route) -> Operation {
    let op = |summary, success, request, response| Operation {
        summary,
        success,
        request,
        response,
        query: &[],
    };
    match route {
        Route::ListProjects => op(
            "List projects",
            200,
            None,
            Response::Json(shape::<ProjectList>),
        ),
        Route::CreateProject => op(
            "Create a project",
            201,
            Some(Request::Json(shape::<CreateProject>)),
            Response::Json(shape::<Project>),
        ),
        Route::GetProject => op(
            "Get a project by id or slug",
            200,
            None,
            Response::Json(shape::<Project>),
        ),
        Route::DeleteProject => op(
            "Delete a project, its app, deployments, logs, env vars and source",
            200,
            None,
            Response::Json(shape::<ProjectDeleted>),
        ),
        Route::SetEnvVars => op(
            "Set environment variables (all or nothing)",
            200,
            Some(Request::Json(shape::<EnvVarsBody>)),
            Response::Json(shape::<EnvVarsUpdated>),
        ),
        Route::GetEnvVars => op(
            "Get environment variables",
            200,
            None,
            Response::Json(shape::<EnvVars>),
        ),
        Route::DeleteEnvVar => op(
            "Delete one environment variable",
            200,
            None,
            Response::Json(shape::<EnvVarDeleted>),
        ),
        Route::CreateToken => op(
            "Create an API token (the secret is shown once)",
            201,
            Some(Request::Json(shape::<CreateToken>)),
            Response::Json(shape::<CreatedToken>),
        ),
        Route::ListTokens => op(
            "List API tokens",
            200,
            None,
            Response::Json(shape::<TokenList>),
        ),
        Route::DeleteToken => op(
            "Revoke an API token",
            200,
            None,
            Response::Json(shape::<TokenRevoked>),
        ),
        Route::UploadSource => op(
            "Upload the project's source as a .tar.gz (Content-Type: application/gzip)",
            201,
            Some(Request::Archive),
            Response::Json(shape::<SourceUploaded>),
        ),
        Route::Provision => op(
            "Start provisioning (install, build, start, switch)",
            202,
            Some(Request::Json(shape::<ProvisionBody>)),
            Response::Json(shape::<ProvisionAccepted>),
        ),
        Route::ProvisionStatus => op(
            "Check provisioning progress (poll every 2 s)",
            200,
            None,
            Response::Json(shape::<ProvisionStatus>),
        ),
        Route::Deployments => op(
            "List the project's deployments, newest first",
            200,
            None,
            Response::Json(shape::<DeploymentList>),
        ),
        Route::Rollback => op(
            "Re-activate an earlier successful deployment without rebuilding",
            202,
            Some(Request::Json(shape::<RollbackBody>)),
            Response::Json(shape::<ProvisionAccepted>),
        ),
        Route::Logs => Operation {
            query: LOG_QUERY,
            ..op(
                "Get deployment logs (since, limit, stream)",
                200,
                None,
                Response::Json(shape::<LogPage>),
            )
        },
        Route::LogStream => Operation {
            query: LOG_QUERY,
            ..op(
                "Stream deployment logs as Server-Sent Events (events log, status, end)",
                200,
                None,
                Response::EventStream,
            )
        },
        Route::System => op(
            "What the daemon runs as: version, sandbox mode in force, TLS mode, domains",
            200,
            None,
            Response::Json(shape::<SystemInfo>),
        ),
        Route::OpenApi => op(
            "This document",
            200,
            None,
            Response::Json(|_| Schema::from(true)),
        ),
    }
}

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}}})
}

pub fn openapi_document() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.definitions_path = "/components/schemas".into();
            settings.meta_schema = None;
        })
        .for_serialize()
        .into_generator();
    generator.subschema_for::<ErrorEnvelope>();
    let mut paths: Map<String, Value> = Map::new();
    for (method, template, route) in ROUTES {
        let operation = operation(*route);
        let mut parameters: Vec<Value> = template
            .split('/')
            .filter_map(|part| part.strip_prefix('{').and_then(|p| p.strip_suffix('}')))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        parameters.extend(operation.query.iter().map(|(name, kind, description)| {
            json!({"name": name, "in": "query", "required": false, "description": description, "schema": {"type": kind}})
        }));
        let content = match operation.response {
            Response::Json(shape) => json!({"application/json": {"schema": shape(&mut generator)}}),
            Response::EventStream => json!({"text/event-stream": {"schema": {"type": "string"}}}),
        };
        let mut responses = Map::new();
        responses.insert(
            operation.success.to_string(),
            json!({"description": "Success", "content": content}),
        );
        responses.insert(
            "400".into(),
            error_response("Invalid input (code INVALID_*)"),
        );
        responses.insert("401".into(), error_response("Missing or invalid token"));
        responses.insert("404".into(), error_response("Not found"));
        responses.insert("429".into(), error_response("Rate limited"));
        responses.insert("500".into(), error_response("Internal error"));
        let mut item = json!({
            "operationId": format!("{route:?}"),
            "summary": operation.summary,
            "parameters": parameters,
            "responses": responses,
        });
        let request = match operation.request {
            Some(Request::Json(shape)) => {
                Some(json!({"application/json": {"schema": shape(&mut generator)}}))
            }
            Some(Request::Archive) => Some(json!({"application/gzip": {
                "schema": {"type": "string", "contentMediaType": "application/gzip"}
            }})),
            None => None,
        };
        if let Some(content) = request {
            item["requestBody"] = json!({"required": true, "content": content});
        }
        let entry = paths
            .entry(template.to_string())
            .or_insert_with(|| json!({}));
        entry[method.as_str().to_ascii_lowercase()] = item;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Slipway API", "version": env!("CARGO_PKG_VERSION")},
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": generator.take_definitions(true),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_lists_exactly_the_routes() {
        let doc = openapi_document();
        let paths = doc["paths"].as_object().unwrap();
        let mut documented = 0;
        for (path, item) in paths {
            for method in item.as_object().unwrap().keys() {
                documented += 1;
                assert!(
                    ROUTES
                        .iter()
                        .any(|(m, t, _)| t == path && m.as_str().eq_ignore_ascii_case(method)),
                    "{method} {path} is documented but not routed"
                );
            }
        }
        assert_eq!(documented, ROUTES.len(), "every route is documented once");
    }

    #[test]
    fn every_route_has_typed_bodies() {
        let doc = openapi_document();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for name in [
            "Project",
            "ProvisionStatus",
            "ProvisionBody",
            "ErrorEnvelope",
            "LogLine",
        ] {
            assert!(schemas.contains_key(name), "no schema {name}");
        }
        for (method, template, _) in ROUTES {
            let item = &doc["paths"][template][method.as_str().to_ascii_lowercase()];
            let responses = item["responses"].as_object().unwrap();
            let success = responses.keys().find(|k| k.starts_with('2')).unwrap();
            let content = responses[success]["content"].as_object().unwrap();
            assert_eq!(content.len(), 1, "{method} {template}");
            if *method == http::Method::POST {
                let content = item["requestBody"]["content"].as_object();
                assert!(
                    content.is_some_and(|c| c.values().all(|m| m["schema"].is_object())),
                    "{method} {template} has no request body schema"
                );
            }
        }
        let stream = &doc["paths"]["/api/deployments/{deploymentId}/logs/stream"]["get"];
        assert!(stream["responses"]["200"]["content"]["text/event-stream"].is_object());
        let logs = &doc["paths"]["/api/deployments/{deploymentId}/logs"]["get"];
        assert_eq!(logs["parameters"].as_array().unwrap().len(), 4);
    }
}
