//! The `POST …/env-vars` body checked: names and values (Part one), and where they apply (the
//! contract's Part three, "Environments"): the flat and the scoped form, turned into names,
//! values and a validated scope; and the scope as `GET …/env-vars` shows it. `projects.rs`
//! calls it; the pipeline applies the scope (`EnvScope::applies_to`).

use super::{types, ApiError};
use crate::error_code::ErrorCode;
use crate::store::records::{EnvScope, Environment};
use crate::store::MAX_ENV_VARS;

pub const MAX_ENV_KEY_LEN: usize = 256;
pub const MAX_ENV_VALUE_BYTES: usize = 64 * 1024;

/// Both environments: what a variable without a scope means.
const EVERYWHERE: [Environment; 2] = [Environment::Production, Environment::Preview];

/// The body's variables and their scope. `{"KEY": "value"}` (the flat form) applies
/// everywhere; `{"vars": {…}, "environments"?: [...], "branch"?: "…"}` (the scoped form, told
/// apart by `vars` being an object) to what it names. A scope that covers everything is
/// stored as none, so it means what a variable set without one means.
pub(super) fn env_vars_request(
    body: serde_json::Map<String, serde_json::Value>,
) -> Result<(types::EnvVarsBody, Option<EnvScope>), ApiError> {
    if !body.get("vars").is_some_and(serde_json::Value::is_object) {
        return Ok((env_vars_body(body)?, None));
    }
    let invalid = |message: String| ApiError::new(ErrorCode::InvalidBody, message);
    for optional in ["environments", "branch"] {
        if body.get(optional).is_some_and(serde_json::Value::is_null) {
            return Err(invalid(format!(
                "field `{optional}` may be left out, not null"
            )));
        }
    }
    let scoped: types::ScopedEnvVarsBody =
        serde_json::from_value(serde_json::Value::Object(body)).map_err(|error| {
            invalid(format!(
                "a scoped body is {{\"vars\": {{\"KEY\": \"value\"}}, \"environments\": [\"production\" | \"preview\"], \"branch\": \"…\"}}: {error}"
            ))
        })?;
    let vars = env_vars_body(scoped.vars)?;
    let mut environments = scoped.environments.unwrap_or_else(|| EVERYWHERE.to_vec());
    environments.sort();
    environments.dedup();
    if environments.is_empty() {
        return Err(invalid(
            "field `environments` must name production, preview or both".into(),
        ));
    }
    if let Some(branch) = &scoped.branch {
        if branch.is_empty() {
            return Err(invalid("field `branch` must name a branch".into()));
        }
        crate::source::git_clone_command("https://example.invalid/r.git", Some(branch))
            .map_err(|error| invalid(format!("field `branch`: {error}")))?;
        if !environments.contains(&Environment::Preview) {
            return Err(invalid(
                "field `branch` names whose previews get the variables: add \"preview\" to `environments`".into(),
            ));
        }
    }
    let scope = match (environments == EVERYWHERE, &scoped.branch) {
        (true, None) => None,
        _ => Some(EnvScope {
            v: 1,
            environments,
            branch: scoped.branch,
        }),
    };
    Ok((vars, scope))
}

/// A stored scope as the API shows it; none is both environments.
pub(super) fn shown(scope: Option<&EnvScope>) -> types::EnvVarScope {
    match scope {
        Some(scope) => types::EnvVarScope {
            environments: scope.environments.clone(),
            branch: scope.branch.clone(),
        },
        None => types::EnvVarScope {
            environments: EVERYWHERE.to_vec(),
            branch: None,
        },
    }
}

/// The env-vars body as [`types::EnvVarsBody`]: 1 to `MAX_ENV_VARS` valid names with string
/// values (each checked in name order, the first fault refused).
pub(super) fn env_vars_body(
    body: serde_json::Map<String, serde_json::Value>,
) -> Result<types::EnvVarsBody, ApiError> {
    let mut vars = types::EnvVarsBody::new();
    for (key, value) in body {
        validate_env_key(&key)?;
        let serde_json::Value::String(value) = value else {
            return Err(ApiError::new(
                ErrorCode::InvalidEnvValue,
                format!("value of {key:?} must be a string"),
            ));
        };
        if value.len() > MAX_ENV_VALUE_BYTES {
            return Err(ApiError::new(
                ErrorCode::InvalidEnvValue,
                format!(
                    "value of {key:?} is {} bytes; the limit is {MAX_ENV_VALUE_BYTES}",
                    value.len()
                ),
            ));
        }
        if value.contains('\0') {
            return Err(ApiError::new(
                ErrorCode::InvalidEnvValue,
                format!("value of {key:?} contains a NUL byte"),
            ));
        }
        vars.insert(key, value);
    }
    if vars.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "body must name at least one variable, e.g. {\"API_KEY\": \"value\"}",
        ));
    }
    if vars.len() > MAX_ENV_VARS {
        return Err(ApiError::new(
            ErrorCode::InvalidEnvKey,
            format!("at most {MAX_ENV_VARS} variables per project"),
        ));
    }
    Ok(vars)
}

fn validate_env_key(key: &str) -> Result<(), ApiError> {
    let mut chars = key.chars();
    let well_formed = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !well_formed || key.len() > MAX_ENV_KEY_LEN {
        return Err(ApiError::new(ErrorCode::InvalidEnvKey,
            format!("{key:?} is not a valid name: use letters, digits and _ (not first a digit), at most {MAX_ENV_KEY_LEN} characters"),
        ));
    }
    if key == "PORT" {
        return Err(ApiError::new(
            ErrorCode::InvalidEnvKey,
            "PORT is reserved: Slipway sets it for the app's start command",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: serde_json::Value) -> Result<Option<EnvScope>, ErrorCode> {
        let serde_json::Value::Object(map) = body else {
            panic!("an object")
        };
        env_vars_request(map)
            .map(|(_, scope)| scope)
            .map_err(|e| e.code)
    }

    #[test]
    fn both_forms_and_their_scopes() {
        let flat = parse(serde_json::json!({"A": "1", "vars": "a flat variable named vars"}));
        assert_eq!(flat, Ok(None));
        let both = parse(serde_json::json!({"vars": {"A": "1"}}));
        assert_eq!(both, Ok(None), "both environments is the flat meaning");
        let preview =
            parse(serde_json::json!({"vars": {"A": "1"}, "environments": ["preview", "preview"]}));
        assert_eq!(
            preview.unwrap().unwrap().environments,
            [Environment::Preview]
        );
        let branch = parse(serde_json::json!({"vars": {"A": "1"}, "environments": ["preview"], "branch": "feature/x"}))
            .unwrap()
            .unwrap();
        assert_eq!(branch.branch.as_deref(), Some("feature/x"));
        for bad in [
            serde_json::json!({"vars": {"A": "1"}, "environments": []}),
            serde_json::json!({"vars": {"A": "1"}, "environments": ["staging"]}),
            serde_json::json!({"vars": {"A": "1"}, "environments": ["production"], "branch": "x"}),
            serde_json::json!({"vars": {"A": "1"}, "branch": "../x"}),
            serde_json::json!({"vars": {"A": "1"}, "other": 1}),
            serde_json::json!({"vars": {"A": "1"}, "environments": null}),
            serde_json::json!({"vars": {"A": "1"}, "branch": ""}),
            serde_json::json!({"vars": {"A": "1"}, "environments": ["preview"], "branch": null}),
        ] {
            assert_eq!(parse(bad.clone()), Err(ErrorCode::InvalidBody), "{bad}");
        }
        let bad_key =
            parse(serde_json::json!({"vars": {"PORT": "1"}, "environments": ["preview"]}));
        assert_eq!(bad_key, Err(ErrorCode::InvalidEnvKey));
    }
}
