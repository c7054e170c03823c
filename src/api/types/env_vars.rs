//! The shapes of `/api/projects/{projectId}/env-vars`: the body in its flat and scoped forms
//! (and their schema), the answers, and where each variable applies.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::git::GIT_REF_PATTERN;
use crate::store::records::Environment;

/// `POST …/env-vars`: names to values, set all or nothing (`api::projects` validates names and
/// values and produces it).
pub type EnvVarsBody = BTreeMap<String, String>;

/// The flat form of the env-vars body, [`EnvVarsBody`]: names as `api::projects` accepts them
/// (not `PORT`), string values up to 64 KiB without NUL, 1 to 500 of them.
fn flat_env_vars_schema() -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "minProperties": 1,
        "maxProperties": 500,
        "propertyNames": {
            "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
            "maxLength": 256,
            "not": {"const": "PORT"}
        },
        "additionalProperties": {"type": "string", "maxLength": 65536, "pattern": "^[^\\u0000]*$"}
    })
}

/// The schema of the env-vars body: the flat form (`{"KEY": "value"}`, which applies to
/// production and every preview) or the scoped form [`ScopedEnvVarsBody`].
pub fn env_vars_body_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let flat = flat_env_vars_schema();
    let scoped = schemars::json_schema!({
        "type": "object",
        "required": ["vars"],
        "additionalProperties": false,
        "properties": {
            "vars": flat,
            "environments": {
                "type": "array",
                "minItems": 1,
                "items": {"type": "string", "enum": ["production", "preview"]}
            },
            "branch": {"type": "string", "pattern": GIT_REF_PATTERN}
        },
        "dependentSchemas": {
            "branch": {"properties": {"environments": {"contains": {"const": "preview"}}}}
        }
    });
    schemars::json_schema!({"oneOf": [flat, scoped]})
}

/// The scoped form of `POST …/env-vars`: `vars` apply to `environments` (default both), and
/// with `branch` only to that branch's previews (production, if named, is not narrowed).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScopedEnvVarsBody {
    pub vars: serde_json::Map<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environments: Option<Vec<Environment>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// Where a variable applies, as `GET …/env-vars` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarScope {
    /// `production`, `preview`, or both (a variable set without a scope applies to both).
    pub environments: Vec<Environment>,
    /// Only this branch's previews.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarsUpdated {
    pub project_id: String,
    /// The names set, in order.
    pub updated: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvVars {
    pub project_id: String,
    pub env_vars: BTreeMap<String, String>,
    /// Where each of `envVars` applies, by name.
    #[serde(default)]
    pub scopes: BTreeMap<String, EnvVarScope>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EnvVarDeleted {
    pub project_id: String,
    pub deleted: String,
}
