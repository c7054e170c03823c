//! Request body reading and input validation shared by the handlers: bounded bodies,
//! content-type and JSON checks, typed request bodies (`api::types`) with field-naming errors,
//! slug rules.

use http::Request;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::types::RequestFields;
use super::{ApiError, ErrorCode};

/// Largest JSON body the API accepts (env vars: 500 × 64 KiB values fit).
pub const MAX_JSON_BYTES: usize = 40 * 1024 * 1024;

/// Reads a body of at most `max` bytes; 413 past it (from `Content-Length` up front when sent).
/// The API reads every request's body this way before routing it to a handler.
pub async fn read_body(request: Request<Incoming>, max: usize) -> Result<bytes::Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("request body is larger than the limit of {max} bytes"),
        )
    };
    if let Some(length) = request.headers().get(http::header::CONTENT_LENGTH) {
        if length
            .to_str()
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n > max as u64)
        {
            return Err(too_large());
        }
    }
    match Limited::new(request.into_body(), max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(error) => Err(ApiError::new(
            ErrorCode::InvalidBody,
            format!("could not read the request body: {error}"),
        )),
    }
}

/// Reads a JSON object body: `Content-Type: application/json`, valid JSON, an object.
pub fn read_json_object(
    request: &super::ApiRequest,
) -> Result<serde_json::Map<String, serde_json::Value>, ApiError> {
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if essence != "application/json" {
        return Err(ApiError::new(
            ErrorCode::InvalidContentType,
            format!(
                "expected Content-Type: application/json, got {:?}",
                if essence.is_empty() {
                    "nothing"
                } else {
                    essence
                }
            ),
        ));
    }
    let value: serde_json::Value = serde_json::from_slice(request.body()).map_err(|error| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!("request body is not valid JSON: {error}"),
        )
    })?;
    match value {
        serde_json::Value::Object(map) => Ok(map),
        _ => Err(ApiError::new(
            ErrorCode::InvalidBody,
            "request body must be a JSON object",
        )),
    }
}

/// Reads a JSON object body into `T`, a request shape of `api::types` whose fields are all
/// strings: an unknown field, a value that is not a string, or a missing required field is
/// refused with `INVALID_BODY` naming the field.
pub fn read_string_fields<T: RequestFields + serde::de::DeserializeOwned>(
    request: &super::ApiRequest,
) -> Result<T, ApiError> {
    string_fields(read_json_object(request)?)
}

/// [`read_string_fields`] once the body is a JSON object. A null field counts as absent.
pub fn string_fields<T: RequestFields + serde::de::DeserializeOwned>(
    mut body: serde_json::Map<String, serde_json::Value>,
) -> Result<T, ApiError> {
    only_fields(&body, T::FIELDS)?;
    for field in T::FIELDS {
        optional_string(&body, field)?;
    }
    body.retain(|_, value| !value.is_null());
    serde_json::from_value(serde_json::Value::Object(body)).map_err(|error| {
        let message = error.to_string();
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split_once('`'));
        let message = match missing {
            Some((field, _)) => T::missing(field),
            None => message,
        };
        ApiError::new(ErrorCode::InvalidBody, message)
    })
}

/// Slug rules: `^[a-z0-9]+(-[a-z0-9]+)*$`, 2 to 63 characters, not the reserved label.
pub fn validate_slug(slug: &str, reserved: &str) -> Result<(), ApiError> {
    let well_formed = (2..=63).contains(&slug.len())
        && slug.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        });
    if !well_formed {
        return Err(ApiError::new(ErrorCode::InvalidSlugFormat,
            format!("slug {slug:?} must be 2 to 63 characters of lowercase letters, digits and single inner hyphens (kebab-case)"),
        ));
    }
    if slug == reserved {
        return Err(ApiError::new(
            ErrorCode::InvalidSlugReserved,
            format!("slug {slug:?} is reserved for the control host"),
        ));
    }
    Ok(())
}

/// An optional string field: absent or null → None; wrong type → INVALID_BODY naming it.
fn optional_string(
    map: &serde_json::Map<String, serde_json::Value>,
    field: &str,
) -> Result<Option<String>, ApiError> {
    match map.get(field) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::new(
            ErrorCode::InvalidBody,
            format!("field `{field}` must be a string"),
        )),
    }
}

/// Refuses fields outside `allowed`, naming the first unknown one.
fn only_fields(
    map: &serde_json::Map<String, serde_json::Value>,
    allowed: &[&str],
) -> Result<(), ApiError> {
    match map.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(ApiError::new(
            ErrorCode::InvalidBody,
            format!(
                "unknown field `{key}`; allowed fields: {}",
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::{CreateProject, ProvisionBody};

    fn body(json: &str) -> serde_json::Map<String, serde_json::Value> {
        serde_json::from_str(json).unwrap()
    }

    fn refusal<T: RequestFields + serde::de::DeserializeOwned + std::fmt::Debug>(
        json: &str,
    ) -> String {
        let error = string_fields::<T>(body(json)).unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidBody, "{json}");
        error.message
    }

    #[test]
    fn typed_bodies_name_the_offending_field() {
        let project: CreateProject = string_fields(body(r#"{"slug": "web"}"#)).unwrap();
        assert_eq!(project.slug, "web");
        assert_eq!(
            refusal::<CreateProject>(r#"{"slug": "web", "name": "x"}"#),
            "unknown field `name`; allowed fields: slug"
        );
        assert_eq!(
            refusal::<CreateProject>(r#"{"slug": 3}"#),
            "field `slug` must be a string"
        );
        for missing in ["{}", r#"{"slug": null}"#] {
            assert_eq!(
                refusal::<CreateProject>(missing),
                "field `slug` is required"
            );
        }
        let provision: ProvisionBody = string_fields(body(
            r#"{"projectSlug": "web", "buildCommand": null, "gitUrl": "https://x/y.git"}"#,
        ))
        .unwrap();
        assert_eq!(provision.build_command, None);
        assert_eq!(provision.git_url.as_deref(), Some("https://x/y.git"));
        assert!(
            refusal::<ProvisionBody>(r#"{"projectSlug": "web", "env": {}}"#)
                .starts_with("unknown field `env`; allowed fields: projectSlug, installCommand")
        );
        assert_eq!(
            refusal::<ProvisionBody>(r#"{"projectSlug": "web", "startCommand": ["node"]}"#),
            "field `startCommand` must be a string"
        );
    }

    #[test]
    fn slug_edges() {
        for good in ["ab", "a1", "my-app", "a-b-c", &"a".repeat(63)] {
            assert!(validate_slug(good, "slipway").is_ok(), "{good}");
        }
        for bad in [
            "a",
            &"a".repeat(64),
            "Ab",
            "-ab",
            "ab-",
            "a--b",
            "a_b",
            "a.b",
            "",
        ] {
            let error = validate_slug(bad, "slipway").unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidSlugFormat, "{bad}");
        }
        assert_eq!(
            validate_slug("slipway", "slipway").unwrap_err().code,
            ErrorCode::InvalidSlugReserved
        );
    }
}
