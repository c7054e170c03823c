//! Where deployments and apps keep their files under the data dir: each deployment's
//! directory and workspace (a volume of its own where disk limits are on), each project's app
//! data, and the room check before a build.

use std::path::{Path, PathBuf};

use crate::disk::{Volume, Volumes};

pub struct Workspaces {
    data_dir: PathBuf,
    build_disk_mb: u64,
    volumes: Volumes,
}

impl Workspaces {
    pub fn new(data_dir: &Path, build_disk_mb: u64, volumes: Volumes) -> Workspaces {
        Workspaces {
            data_dir: data_dir.to_owned(),
            build_disk_mb,
            volumes,
        }
    }

    /// Workspaces and app data as filesystems of their own (disk limits), or plain dirs.
    pub fn volumes(&self) -> &Volumes {
        &self.volumes
    }

    pub fn deployment_dir(&self, deployment_id: &str) -> PathBuf {
        self.data_dir.join("deployments").join(deployment_id)
    }

    pub fn workspace(&self, deployment_id: &str) -> PathBuf {
        self.workspace_volume(deployment_id).dir
    }

    /// The deployment's workspace as a volume (`limits.build_disk_mb`).
    pub fn workspace_volume(&self, deployment_id: &str) -> Volume {
        Volume::workspace(&self.deployment_dir(deployment_id), self.build_disk_mb)
    }

    /// Removes a deployment's files (its workspace volume unmounted first).
    pub async fn remove_deployment_files(&self, deployment_id: &str) {
        let dir = self.deployment_dir(deployment_id);
        let volumes = self.volumes.clone();
        let _ = tokio::task::spawn_blocking(move || volumes.remove_tree(&dir)).await;
    }

    pub fn app_data_dir(&self, project_id: &str) -> PathBuf {
        self.data_dir.join("appdata").join(project_id)
    }

    /// Refuses a build when its workspace could eat the store's reserve.
    pub fn check_room_for_a_build(&self) -> Result<(), crate::disk::RoomError> {
        self.volumes
            .check_room(&self.data_dir, self.build_disk_mb << 20, "a build")
    }
}
