//! Volumes as a backup sees them: their contents, never their images. [`Frozen`] holds a
//! mounted volume's filesystem still (`fsfreeze`) while `backup/write.rs` reads it through the
//! mount, so all of an app's files are read as of one moment; [`Volumes::rebuild_restored`]
//! turns a restored directory back into a disk-limited volume on the machine that serves it.
//!
//! Why contents and not images: an image copied while it is mounted is not what the mount
//! holds (dirty pages are not in it yet, its journal says "unclean"), it is as large as its
//! limit unless every tool on the way keeps its holes, and a machine without loop devices
//! cannot read it at all. A directory restores anywhere; the daemon that serves it decides,
//! from its own disk limits, whether it becomes an image again. `mkfs.ext4 -d` fills the new
//! image from the directory without mounting it and skips zero blocks, so the image is as
//! sparse as the data is small.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{is_mount_point, mount_points_under, run, Volume, Volumes};

/// A volume's filesystem frozen for reading; thawed when dropped.
pub struct Frozen {
    dir: PathBuf,
}

impl Frozen {
    /// Freezes the filesystem mounted on a volume's directory `dir`. `None` when nothing is
    /// mounted there (disk limits off: a plain directory, read as it is) or when freezing
    /// failed (logged; the volume is read through its mount unfrozen). Writers to the volume
    /// wait until the guard is dropped, so the caller must bound how long it holds it.
    pub fn volume(dir: &Path) -> Option<Frozen> {
        if !is_mount_point(dir) {
            return None;
        }
        match run(Command::new("fsfreeze").arg("--freeze").arg(dir)) {
            Ok(()) => Some(Frozen {
                dir: dir.to_owned(),
            }),
            Err(error) => {
                tracing::warn!(dir = %dir.display(), %error, "backup: cannot freeze a volume; reading it as it changes");
                None
            }
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Err(error) = run(Command::new("fsfreeze").arg("--unfreeze").arg(&self.dir)) {
            tracing::error!(dir = %self.dir.display(), %error, "could not thaw a volume after a backup");
        }
    }
}

/// Thaws every volume mounted under `data_dir`: a daemon killed while a backup read a volume
/// left it frozen, and its app's writes waiting. Thawing a filesystem that is not frozen
/// fails harmlessly.
pub fn thaw_all_under(data_dir: &Path) {
    let data_dir = data_dir
        .canonicalize()
        .unwrap_or_else(|_| data_dir.to_owned());
    for mount_point in mount_points_under(&data_dir) {
        if mount_point != data_dir {
            let _ = run(Command::new("fsfreeze").arg("--unfreeze").arg(&mount_point));
        }
    }
}

impl Volume {
    /// The file `slipway restore` leaves beside a volume's directory: these contents were a
    /// volume in the backup; where disk limits are on they become one again.
    pub fn restored_marker(&self) -> PathBuf {
        let mut name = self.image.clone().into_os_string();
        name.push(".restored");
        PathBuf::from(name)
    }
}

impl Volumes {
    /// Where disk limits are on and `volume` was restored from a backup (its marker is there)
    /// and is not mounted yet: its directory's contents move into a new sparse image of the
    /// volume's size, the emptied directory becomes the image's mount point, and the marker
    /// goes. Contents larger than this machine's limit stay a plain directory, with a warning.
    /// Where disk limits are off, the directory is used as it is. Safe to repeat after a crash
    /// at any point: the image is renamed into place only once it is complete.
    pub(super) fn rebuild_restored(&self, volume: &Volume) -> io::Result<()> {
        let marker = volume.restored_marker();
        if !self.images || !marker.exists() || is_mount_point(&volume.dir) {
            return Ok(());
        }
        let root = std::fs::symlink_metadata(&volume.dir)?;
        if !volume.image.exists() {
            if let Err(error) = image_from_dir(volume, &root) {
                tracing::warn!(
                    dir = %volume.dir.display(), %error,
                    "a restored volume does not fit its {} MB disk limit here; it stays a plain directory without one",
                    volume.size_mb
                );
                return std::fs::remove_file(&marker);
            }
        }
        // The image holds the contents now: the directory becomes its empty mount point.
        std::fs::remove_dir_all(&volume.dir)?;
        std::fs::create_dir(&volume.dir)?;
        self.mount(volume)?;
        let _ = std::fs::remove_dir(volume.dir.join("lost+found"));
        std::fs::set_permissions(&volume.dir, root.permissions())?;
        std::fs::remove_file(&marker)
    }
}

/// Makes `volume.image` holding the files of `volume.dir` (owners, modes and times kept; the
/// root owned like `root`), through a partial file renamed into place when complete.
fn image_from_dir(volume: &Volume, root: &std::fs::Metadata) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mut partial = volume.image.clone().into_os_string();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let made = super::make_filesystem(
        volume,
        &partial,
        (root.uid(), root.gid()),
        Some(&volume.dir),
    )
    .and_then(|()| std::fs::File::open(&partial)?.sync_all());
    match made {
        Ok(()) => std::fs::rename(&partial, &volume.image),
        Err(error) => {
            let _ = std::fs::remove_file(&partial);
            Err(error)
        }
    }
}
