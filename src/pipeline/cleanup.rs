//! A deleted project's clean-up outside the store: its run in flight, its apps, workspaces and
//! app data, its log channels, its certificate and the archives no other project uses. The
//! store's records are gone already (`Store::delete_project`); called by the API's delete.

use super::Pipeline;
use crate::store::DeletedProject;

impl Pipeline {
    pub async fn project_deleted(&self, deleted: &DeletedProject) {
        self.cancel_project(&deleted.project.id);
        for deployment_id in &deleted.deployment_ids {
            self.supervisor.stop(deployment_id).await;
            self.hub.remove(deployment_id);
            self.remove_deployment_files(deployment_id).await;
        }
        if let Some(tls) = &self.tls {
            let name = format!("{}.{}", deleted.project.slug, self.config.apps_domain);
            if let Err(error) = tls.forget(&name).await {
                tracing::warn!(%error, %name, "could not drop the certificate of a deleted project");
            }
        }
        let app_data = crate::disk::Volume::app_data(&self.app_data_dir(&deleted.project.id), 0);
        let volumes = self.volumes.clone();
        let _ = tokio::task::spawn_blocking(move || volumes.remove(&app_data)).await;
        for sha in &deleted.source_sha256s {
            let sha2 = sha.clone();
            if let Ok(false) = self.store.call(move |s| s.source_hash_in_use(&sha2)).await {
                let _ = self.sources.remove(sha);
            }
        }
    }
}
