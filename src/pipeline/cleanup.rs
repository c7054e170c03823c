//! A deleted project's clean-up outside the store: its run in flight, its apps, workspaces and
//! app data, its log channels, its certificate and the archives no other project uses. The
//! store's records are gone already (`Store::delete_project`); called by the API's delete.

use super::Pipeline;
use crate::store::DeletedProject;

impl Pipeline {
    pub async fn project_deleted(&self, deleted: &DeletedProject) {
        self.cancel_project(&deleted.project.id, None);
        for deployment_id in &deleted.deployment_ids {
            self.stop_app(deployment_id, None).await;
            self.hub.remove(deployment_id);
            self.workspaces.remove_deployment_files(deployment_id).await;
        }
        for run_id in &deleted.run_ids {
            self.hub.remove(run_id);
        }
        if let Some(tls) = &self.tls {
            let name = format!("{}.{}", deleted.project.slug, self.config.apps_domain);
            if let Err(error) = tls.forget(&name).await {
                tracing::warn!(%error, %name, "could not drop the certificate of a deleted project");
            }
        }
        self.clear_build_cache(&deleted.project.id).await;
        let app_data =
            crate::disk::Volume::app_data(&self.workspaces.app_data_dir(&deleted.project.id), 0);
        let volumes = self.workspaces.volumes().clone();
        let _ = tokio::task::spawn_blocking(move || volumes.remove(&app_data)).await;
        for sha in &deleted.source_sha256s {
            let sha2 = sha.clone();
            if let Ok(false) = self.store.call(move |s| s.source_hash_in_use(&sha2)).await {
                let _ = self.sources.remove(sha);
            }
        }
    }
}

impl Pipeline {
    /// A preview was removed from the store (branch deleted, pull request closed, the 11th
    /// preview, or `DELETE …/previews/{name}`): its run in flight is canceled, its host answers
    /// 404 from the next request, its app stops, its build, data volume, build cache and
    /// certificate go.
    pub async fn teardown_preview(
        &self,
        project: &crate::store::records::ProjectRecord,
        preview: &crate::store::records::PreviewRecord,
    ) {
        self.cancel_project(&project.id, Some(&preview.name));
        let target = crate::store::records::DeployTarget {
            environment: crate::store::records::Environment::Preview,
            preview: Some(preview.name.clone()),
            ..Default::default()
        };
        let label = super::host_label(&project.slug, &target);
        self.routes.remove_preview(&label);
        if let Some(deployment_id) = &preview.deployment_id {
            self.stop_app(deployment_id, None).await;
            self.hub.system(deployment_id, "preview torn down");
            self.hub.end(deployment_id);
            self.workspaces.remove_deployment_files(deployment_id).await;
        }
        if let Some(tls) = &self.tls {
            let name = format!("{label}.{}", self.config.apps_domain);
            if let Err(error) = tls.forget(&name).await {
                tracing::warn!(%error, %name, "could not drop a preview's certificate");
            }
        }
        let data = crate::disk::Volume::app_data(
            &self
                .workspaces
                .app_data_dir(&format!("{}--{}", project.id, preview.name)),
            0,
        );
        let volumes = self.workspaces.volumes().clone();
        let _ = tokio::task::spawn_blocking(move || volumes.remove(&data)).await;
        self.remove_preview_cache(&project.id, &preview.name).await;
        tracing::info!(project = %project.slug, preview = %preview.name, "preview torn down");
    }
}
