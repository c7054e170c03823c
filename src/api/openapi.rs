//! `GET /api/openapi.json`: an OpenAPI 3.1 document generated from [`super::ROUTES`], so it
//! can only describe routes that exist (a test walks both directions).

use serde_json::{json, Map, Value};

use super::{Route, ROUTES};

fn summary(route: Route) -> (&'static str, &'static str) {
    // (summary, success status)
    match route {
        Route::ListProjects => ("List projects", "200"),
        Route::CreateProject => ("Create a project", "201"),
        Route::GetProject => ("Get a project by id or slug", "200"),
        Route::DeleteProject => (
            "Delete a project, its app, deployments, logs, env vars and source",
            "200",
        ),
        Route::SetEnvVars => ("Set environment variables (all or nothing)", "200"),
        Route::GetEnvVars => ("Get environment variables", "200"),
        Route::DeleteEnvVar => ("Delete one environment variable", "200"),
        Route::CreateToken => ("Create an API token (the secret is shown once)", "201"),
        Route::ListTokens => ("List API tokens", "200"),
        Route::DeleteToken => ("Revoke an API token", "200"),
        Route::UploadSource => (
            "Upload the project's source as a .tar.gz (Content-Type: application/gzip)",
            "201",
        ),
        Route::Provision => ("Start provisioning (install, build, start, switch)", "202"),
        Route::ProvisionStatus => ("Check provisioning progress (poll every 2 s)", "200"),
        Route::Deployments => ("List the project's deployments, newest first", "200"),
        Route::Rollback => (
            "Re-activate an earlier successful deployment without rebuilding",
            "202",
        ),
        Route::Logs => ("Get deployment logs (since, limit, stream)", "200"),
        Route::LogStream => ("Stream deployment logs as Server-Sent Events", "200"),
        Route::OpenApi => ("This document", "200"),
    }
}

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

pub fn openapi_document() -> Value {
    let mut paths: Map<String, Value> = Map::new();
    for (method, template, route) in ROUTES {
        let (summary, success) = summary(*route);
        let parameters: Vec<Value> = template
            .split('/')
            .filter_map(|part| part.strip_prefix('{').and_then(|p| p.strip_suffix('}')))
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        let mut responses = Map::new();
        responses.insert(
            success.into(),
            json!({"description": "Success", "content": {"application/json": {}}}),
        );
        responses.insert(
            "400".into(),
            error_response("Invalid input (code INVALID_*)"),
        );
        responses.insert("401".into(), error_response("Missing or invalid token"));
        responses.insert("404".into(), error_response("Not found"));
        responses.insert("429".into(), error_response("Rate limited"));
        responses.insert("500".into(), error_response("Internal error"));
        let operation = json!({
            "operationId": format!("{route:?}"),
            "summary": summary,
            "parameters": parameters,
            "responses": responses,
        });
        let entry = paths
            .entry(template.to_string())
            .or_insert_with(|| json!({}));
        entry[method.as_str().to_ascii_lowercase()] = operation;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "Slipway API", "version": env!("CARGO_PKG_VERSION")},
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": {
                "type": "object",
                "required": ["error"],
                "properties": {"error": {"type": "object", "required": ["code", "message", "status"], "properties": {
                    "code": {"type": "string"}, "message": {"type": "string"}, "status": {"type": "integer"}
                }}}
            }}
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
}
