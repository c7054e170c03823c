//! The daemon side of `slipway backup`: [`Snapshot::take`] copies the store while the daemon
//! serves (one redb read transaction), then [`Snapshot::write`] streams the archive —
//! header, snapshot, `secret.key`, `initial-admin-token`, `sources/`, the live deployments' `deployments/<id>/`,
//! `appdata/`, manifest. A volume goes in as the files its mount shows, read while its
//! filesystem is frozen; its image never does (`mod.rs` says why). Called by `admin.rs` on a
//! blocking thread.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::archive::Archive;
use super::{io, BackupError, Header, Manifest, DATA_PREFIX};
use super::{FORMAT, HEADER_NAME, MANIFEST_NAME};
use crate::store::Store;

/// A store snapshot on disk (removed when dropped) and the header describing it.
pub struct Snapshot {
    path: PathBuf,
    pub header: Header,
    /// The add-ons' backups volumes to archive (`addons/<id>-backups`): each holds a dump
    /// taken for this backup (`Addons::for_appliance_backup`); their data volumes never are.
    pub addon_trees: Vec<String>,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Snapshot {
    /// Copies the store to `<data_dir>/backup-<time>.redb.tmp`.
    pub fn take(store: &Store, data_dir: &Path) -> Result<Snapshot, BackupError> {
        let path = data_dir.join(format!(
            "backup-{}-{}.redb.tmp",
            crate::ids::now_ms(),
            std::process::id()
        ));
        let _ = std::fs::remove_file(&path);
        // Removed on every error path from here on.
        let mut snapshot = Snapshot {
            path,
            header: Header {
                format: FORMAT,
                slipway_version: env!("CARGO_PKG_VERSION").into(),
                schema_version: 0,
                created_at: crate::ids::rfc3339(crate::ids::now_ms()),
                projects: 0,
                live_deployments: Vec::new(),
            },
            addon_trees: Vec::new(),
        };
        let info = store.snapshot_to(&snapshot.path)?;
        snapshot.header.schema_version = info.schema_version;
        snapshot.header.projects = info.projects;
        snapshot.header.live_deployments = info.live_deployments;
        Ok(snapshot)
    }

    /// Streams the archive (gzip) to `out`; returns its manifest.
    pub fn write(&self, data_dir: &Path, out: impl Write) -> Result<Manifest, BackupError> {
        let gzip = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
        let mut archive = Archive::new(
            gzip,
            Manifest {
                format: FORMAT,
                slipway_version: self.header.slipway_version.clone(),
                ..Manifest::default()
            },
        );
        let header = serde_json::to_vec_pretty(&self.header).expect("headers serialize");
        archive.bytes(HEADER_NAME, &header)?;
        archive.file(&self.path, &format!("{DATA_PREFIX}/slipway.redb"))?;
        archive.file(
            &data_dir.join("secret.key"),
            &format!("{DATA_PREFIX}/secret.key"),
        )?;
        // The operator's first token, if its file is still there (its hash is in the store).
        let initial_token = data_dir.join("initial-admin-token");
        if initial_token.exists() {
            archive.file(
                &initial_token,
                &format!("{DATA_PREFIX}/initial-admin-token"),
            )?;
        }
        let mut trees = vec!["sources".to_owned(), "appdata".to_owned()];
        trees.extend(self.addon_trees.iter().cloned());
        for deployment in &self.header.live_deployments {
            trees.push(format!("deployments/{deployment}"));
        }
        for tree in trees {
            let path = data_dir.join(&tree);
            if path.exists() {
                super::walk::tree(&mut archive, &path, &format!("{DATA_PREFIX}/{tree}"))?;
            }
        }
        let manifest_bytes =
            serde_json::to_vec_pretty(&archive.manifest).expect("manifests serialize");
        archive.bytes(MANIFEST_NAME, &manifest_bytes)?;
        let (gzip, manifest) = archive.finish()?;
        gzip.finish().map_err(io("finishing the archive"))?;
        Ok(manifest)
    }
}
