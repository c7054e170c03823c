//! `GET/PATCH /api/projects/{projectId}/formation`: the live deployment's process types and
//! their instances; a change names only the types it scales (issue 32). The work is the
//! pipeline's (`pipeline/scale.rs`); this file reads the body and shapes the answer.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::json::read_json_object;
use super::projects::find;
use super::reply::Reply;
use super::{types, ApiError, ApiRequest, Context, ErrorCode};
use crate::formation::{ProcessType, StoredType};
use crate::pipeline::ScaleError;
use crate::store::records::ProjectRecord;

pub async fn get(ctx: &Arc<Context>, id_or_slug: &str) -> Result<Reply, ApiError> {
    let project = find(ctx, id_or_slug).await?;
    Ok(Reply::json(&formation_of(ctx, &project).await?))
}

pub async fn patch(
    ctx: &Arc<Context>,
    id_or_slug: &str,
    request: ApiRequest,
) -> Result<Reply, ApiError> {
    let body = read_json_object(&request)?;
    let patch: types::FormationPatch =
        serde_json::from_value(serde_json::Value::Object(body)).map_err(|error| {
            ApiError::new(
                ErrorCode::InvalidBody,
                format!("{error}; expected {{\"<type>\": {{\"instances\", \"memoryMb\", \"cpus\", \"deploy\", \"affinity\", \"minHealthy\", \"healthCommand\"}}}}"),
            )
        })?;
    let project = find(ctx, id_or_slug).await?;
    let change: BTreeMap<String, StoredType> = patch
        .0
        .into_iter()
        .map(|(name, fields)| {
            let stored = StoredType {
                instances: fields.instances,
                memory_mb: fields.memory_mb.map(u64::from),
                cpus: fields.cpus,
                deploy: fields.deploy,
                affinity: fields.affinity,
                min_healthy: fields.min_healthy,
                health_command: fields.health_command,
            };
            (name, stored)
        })
        .collect();
    ctx.pipeline
        .scale(&project, change)
        .await
        .map_err(|error| match error {
            ScaleError::Invalid(message) => ApiError::new(ErrorCode::InvalidBody, message),
            ScaleError::Conflict(message) => ApiError::new(ErrorCode::Conflict, message),
            ScaleError::Internal(message) => ApiError::new(ErrorCode::InternalError, message),
        })?;
    Ok(Reply::json(&formation_of(ctx, &project).await?))
}

/// The project's formation as it runs: its live deployment's types (none when nothing
/// server-mode is live) with their instances.
async fn formation_of(
    ctx: &Arc<Context>,
    project: &ProjectRecord,
) -> Result<types::Formation, ApiError> {
    let pipeline = &ctx.pipeline;
    let Some(deployment) = pipeline.live_server(project).await? else {
        return Ok(types::Formation {
            project_id: project.id.clone(),
            deployment_id: None,
            types: BTreeMap::new(),
        });
    };
    let process_types = pipeline
        .live_types(&deployment)
        .await
        .map_err(|_| ApiError::new(ErrorCode::InternalError, "cannot read the formation"))?;
    let running = pipeline.running_instances(&deployment.id);
    let types = process_types
        .into_iter()
        .map(|ptype| {
            let instances = running
                .iter()
                .filter(|(view, _)| view.instance.process == ptype.name)
                .map(|(view, memory)| types::RunningInstance {
                    instance: view.instance.to_string(),
                    state: view.status.state,
                    pid: view.status.pid,
                    node: view.node.clone(),
                    address: view.status.address.map(|a| a.to_string()),
                    restarts: view.status.restarts,
                    started_at: crate::ids::rfc3339(view.status.started_ms),
                    memory_bytes: *memory,
                })
                .collect();
            (ptype.name.clone(), view_of(ptype, instances))
        })
        .collect();
    Ok(types::Formation {
        project_id: project.id.clone(),
        deployment_id: Some(deployment.id),
        types,
    })
}

fn view_of(ptype: ProcessType, running: Vec<types::RunningInstance>) -> types::ProcessTypeView {
    let min_healthy = ptype.min_healthy();
    types::ProcessTypeView {
        command: ptype.command,
        instances: ptype.instances,
        memory_mb: ptype.memory_mb,
        cpus: ptype.cpus,
        deploy: ptype.deploy,
        affinity: ptype.affinity,
        min_healthy,
        health_command: ptype.health_command,
        running,
    }
}
