//! The OpenAPI document against the route table: every route documented once, typed bodies,
//! error codes per status, plain enums.
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
        // A WebSocket upgrade (101) has no body; every other success has one typed body.
        let bodies = usize::from(!matches!(spec.response, ResponseBody::WebSocket));
        assert_eq!(content.len(), bodies, "{method} {template}");
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
                content
                    .is_some_and(|c| !c.is_empty() && c.values().all(|m| m["schema"].is_object())),
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
        let query: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| *n != "Last-Event-ID")
            .collect();
        assert_eq!(query, ["deploymentId", "limit", "since", "stream"]);
        for parameter in parameters[1..].iter().filter(|p| p["in"] == "query") {
            assert_eq!(parameter["in"], "query");
            assert_eq!(parameter["required"], false);
            assert!(parameter["description"].is_string(), "{parameter}");
        }
    }
}

#[test]
fn the_log_stream_and_the_webhook_declare_the_headers_they_read() {
    let doc = document();
    let names = |template: &str, method: &str| -> Vec<String> {
        doc["paths"][template][method]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["in"] == "header")
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(names("/api/deployments/{deploymentId}/logs/stream", "get")
        .contains(&"Last-Event-ID".to_owned()));
    let webhook = names("/api/webhooks/{projectId}", "post");
    for header in [
        "X-Hub-Signature-256",
        "X-Gitea-Signature",
        "X-Forgejo-Signature",
        "X-Gitlab-Token",
    ] {
        assert!(
            webhook.contains(&header.to_owned()),
            "{header}: {webhook:?}"
        );
    }
}

/// Every link leads to an operation whose path takes each parameter it feeds, from a field
/// the answer has (issue 30: a new deploy hook's `secret` feeds `POST /api/hooks/{secret}`).
#[test]
fn links_feed_path_parameters_from_fields_of_the_answer() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    let mut linked = Vec::new();
    for spec in ROUTES {
        let method = spec.method.as_str().to_ascii_lowercase();
        let success =
            &doc["paths"][spec.template][&method]["responses"][spec.success.as_u16().to_string()];
        let Some(links) = success["links"].as_object() else {
            continue;
        };
        let reference = success["content"]["application/json"]["schema"]["$ref"]
            .as_str()
            .unwrap();
        let shape = &schemas[reference.trim_start_matches("#/components/schemas/")];
        for link in links.values() {
            let operation_id = link["operationId"].as_str().unwrap();
            let target = ROUTES
                .iter()
                .find(|target| format!("{:?}", target.route) == operation_id)
                .unwrap_or_else(|| panic!("{operation_id} is no operation"));
            for (parameter, expression) in link["parameters"].as_object().unwrap() {
                assert!(
                    target.template.contains(&format!("{{{parameter}}}")),
                    "{operation_id} takes no {parameter}"
                );
                let field = expression
                    .as_str()
                    .unwrap()
                    .strip_prefix("$response.body#/")
                    .unwrap();
                assert!(
                    shape["properties"].get(field).is_some(),
                    "{:?}'s answer has no {field}",
                    spec.route
                );
            }
            linked.push(operation_id.to_owned());
        }
    }
    assert!(linked.iter().any(|id| id == "TriggerDeployHook"));
}

#[test]
fn placement_constraints_are_described_with_their_pattern_and_bound() {
    let doc = document();
    let schemas = &doc["components"]["schemas"];
    let patch = &schemas["ProjectSettingsPatch"]["properties"]["placementConstraints"];
    assert_eq!(patch["maxItems"], 10, "{patch}");
    assert_eq!(
        patch["items"]["$ref"], "#/components/schemas/NodeConstraint",
        "{patch}"
    );
    assert_eq!(
        schemas["NodeConstraint"]["pattern"],
        crate::store::records::NODE_CONSTRAINT_PATTERN
    );
}
