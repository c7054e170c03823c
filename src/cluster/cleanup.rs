//! Removing what the backend made in the engine: a deployment's services and boot secrets,
//! then its project's network once no service uses it. A secret or network stays in use
//! until the removed services' tasks are gone, so those are retried for a while.

use serde_json::{json, Value};

use super::docker::Docker;
use super::spec::{self, DEPLOYMENT_LABEL, PROJECT_LABEL};
use super::tasks::{encode, WATCH_EVERY};

/// Removes every service and secret labelled with the deployment (of type `process`
/// only, when given), then the project's network once nothing uses it.
pub(super) async fn remove(docker: &Docker, deployment_id: &str, process: Option<&str>) {
    let mut labels = vec![format!("{DEPLOYMENT_LABEL}={deployment_id}")];
    if let Some(process) = process {
        labels.push(format!("{}={process}", spec::PROCESS_LABEL));
    }
    let filters = encode(&json!({ "label": labels }).to_string());
    let services: Vec<Value> = docker
        .get(&format!("/services?filters={filters}"))
        .await
        .unwrap_or_default();
    let mut projects = Vec::new();
    for service in &services {
        let id = service["ID"].as_str().unwrap_or_default();
        if let Some(project) = service["Spec"]["Labels"][PROJECT_LABEL].as_str() {
            projects.push(project.to_owned());
        }
        if let Err(error) = docker.delete(&format!("/services/{id}")).await {
            tracing::warn!(%error, service = id, "could not remove a swarm service");
        }
    }
    let secrets: Vec<Value> = docker
        .get(&format!(
            "/secrets?filters={}",
            encode(&json!({ "label": [&labels[0]] }).to_string())
        ))
        .await
        .unwrap_or_default();
    for secret in secrets {
        let name = secret["Spec"]["Name"].as_str().unwrap_or_default();
        let id = secret["ID"].as_str().unwrap_or_default();
        if process.is_none_or(|p| name.ends_with(&format!("-{p}-boot"))) {
            remove_retrying(docker, &format!("/secrets/{id}")).await;
        }
    }
    for project in projects {
        remove_network_if_unused(docker, &project).await;
    }
}

async fn remove_network_if_unused(docker: &Docker, project_id: &str) {
    let filters =
        encode(&json!({ "label": [format!("{PROJECT_LABEL}={project_id}")] }).to_string());
    let left: Vec<Value> = docker
        .get(&format!("/services?filters={filters}"))
        .await
        .unwrap_or_default();
    if left.is_empty() {
        remove_retrying(
            docker,
            &format!("/networks/{}", spec::network_name(project_id)),
        )
        .await;
    }
}

/// A secret or network is in use until the removed service's tasks are gone.
async fn remove_retrying(docker: &Docker, path: &str) {
    for _ in 0..60 {
        match docker.delete(path).await {
            Ok(()) => return,
            Err(error) if error.is_not_found() => return,
            Err(_) => tokio::time::sleep(WATCH_EVERY).await,
        }
    }
    tracing::warn!(path, "a swarm object is still in use after 30 s; left");
}
