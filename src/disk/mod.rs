//! Disk limits. A build's workspace (`deployments/<dpl>/app`) and an app's writable data dir
//! (`appdata/<project>`) are each a filesystem of their own: a sparse ext4 image next to the
//! directory (`workspace.img`, `<project>.img`), loop-mounted on it (`nodev,nosuid`). A build
//! that writes past `limits.build_disk_mb` gets ENOSPC inside its image, and never fills the
//! disk the store lives on. Images stay mounted while their deployment may serve (live or a
//! rollback target) and are mounted again after a reboot. The daemon also refuses new uploads
//! and runs when the data dir's filesystem is short of room for them plus a reserve, so the
//! store stays writable.
//!
//! Without root or `mkfs.ext4` (`sandbox.mode = "none"` on a laptop), volumes are plain
//! directories and only the reserve check applies. Called by the pipeline and the API;
//! `portable.rs` is what backups need of volumes (freezing, rebuilding restored ones);
//! `grow.rs` grows a volume in use (an add-on's disk).

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error_code::ErrorCode;

mod grow;
mod loopdev;
mod portable;
pub use portable::{thaw_all_under, Frozen};

/// How volumes are made on this machine.
#[derive(Debug, Clone)]
pub struct Volumes {
    /// Loop-mounted images (root with `mkfs.ext4` and `/dev/loop-control`), or directories.
    images: bool,
    /// Free space the data dir keeps for the store, in bytes.
    reserve_bytes: u64,
}

/// A volume: a directory, and the image behind it when disk limits are on.
#[derive(Debug, Clone)]
pub struct Volume {
    pub dir: PathBuf,
    pub image: PathBuf,
    pub size_mb: u64,
    /// Journaled for data that must survive a crash (an app's `/data`); a build's workspace
    /// is rebuilt instead.
    pub journal: bool,
}

impl Volume {
    /// A deployment's workspace: `<deployment_dir>/app` backed by `<deployment_dir>/workspace.img`.
    pub fn workspace(deployment_dir: &Path, size_mb: u64) -> Volume {
        Volume {
            dir: deployment_dir.join("app"),
            image: deployment_dir.join("workspace.img"),
            size_mb,
            journal: false,
        }
    }

    /// A project's app data: `appdata/<project>` backed by `appdata/<project>.img`.
    pub fn app_data(dir: &Path, size_mb: u64) -> Volume {
        Volume {
            dir: dir.to_owned(),
            image: dir.with_extension("img"),
            size_mb,
            journal: true,
        }
    }
}

impl Volumes {
    /// Disk limits are on only when a loop-mounted image is proven to work here: a 16 MB
    /// probe image under `probe_dir` is made, mounted and checked (`statvfs` must show the
    /// image's size, not the host disk's). A machine where `mount -o loop` quietly does
    /// something else (a container without loop devices) runs without limits, and says so,
    /// rather than claiming limits it does not enforce.
    pub fn detect(reserve_mb: u64, want_images: bool, probe_dir: &Path) -> Volumes {
        let reserve_bytes = reserve_mb.saturating_mul(1 << 20);
        let mut volumes = Volumes {
            images: false,
            reserve_bytes,
        };
        if !want_images {
            return volumes;
        }
        let missing = if !nix::unistd::geteuid().is_root() {
            Some("root".to_owned())
        } else if !Path::new("/dev/loop-control").exists() {
            Some("/dev/loop-control (loop devices)".to_owned())
        } else if !which("mkfs.ext4") {
            Some("mkfs.ext4 (e2fsprogs)".to_owned())
        } else {
            volumes.images = true;
            volumes.probe(probe_dir).err().map(|error| {
                volumes.images = false;
                format!("a working loop mount (the probe failed: {error})")
            })
        };
        if let Some(missing) = missing {
            tracing::warn!(
                "disk limits (limits.build_disk_mb, limits.app_disk_mb) need {missing}; builds \
                 and apps share the data dir's disk instead"
            );
        }
        volumes
    }

    /// Makes, mounts, checks and removes a small volume.
    fn probe(&self, dir: &Path) -> io::Result<()> {
        let volume = Volume::workspace(&dir.join(".disk-limit-probe"), 16);
        let result = self.create(&volume, 0);
        self.remove(&volume);
        remove_dir_all_quiet(&dir.join(".disk-limit-probe"));
        result
    }

    pub fn limited(&self) -> bool {
        self.images
    }

    /// A new, empty volume (whatever was there before is removed), owned by `owner`.
    pub fn create(&self, volume: &Volume, owner: u32) -> io::Result<()> {
        self.remove(volume);
        std::fs::create_dir_all(&volume.dir)?;
        if !self.images {
            return Ok(());
        }
        make_filesystem(volume, &volume.image, (owner, owner), None)?;
        self.mount(volume)?;
        // Nothing of the filesystem's own shows in the workspace.
        let _ = std::fs::remove_dir(volume.dir.join("lost+found"));
        Ok(())
    }

    /// Mounts an existing volume's image if it is not mounted (after a reboot, or a volume
    /// made before disk limits were on: then its directory is used as it is).
    pub fn ensure_mounted(&self, volume: &Volume) -> io::Result<()> {
        self.rebuild_restored(volume)?;
        if !self.images || !volume.image.exists() || is_mount_point(&volume.dir) {
            return Ok(());
        }
        std::fs::create_dir_all(&volume.dir)?;
        self.mount(volume)
    }

    /// Makes the app data volume if it does not exist yet, else mounts it.
    pub fn ensure_app_data(&self, volume: &Volume, owner: u32) -> io::Result<()> {
        self.rebuild_restored(volume)?;
        if self.images && !volume.image.exists() {
            // Data an app kept before disk limits were on stays where it is, unlimited.
            let had_data = std::fs::read_dir(&volume.dir).is_ok_and(|mut d| d.next().is_some());
            if !had_data {
                return self.create(volume, owner);
            }
        }
        std::fs::create_dir_all(&volume.dir)?;
        self.ensure_mounted(volume)
    }

    /// The device (`st_dev`) a volume's directory must be on for its limit to hold, checked
    /// now: `None` for a plain directory (disk limits off here, or data kept from before they
    /// were on), an error when the volume has an image but something else is at its
    /// directory. A step gets it with the directory ([`crate::sandbox::LimitedDir`]).
    pub fn limited_device(&self, volume: &Volume) -> io::Result<Option<u64>> {
        if !self.images || !volume.image.exists() {
            return Ok(None);
        }
        mounted_device(volume).map(Some)
    }

    /// Loop-mounts the image on the directory, then checks the limit really holds there.
    fn mount(&self, volume: &Volume) -> io::Result<()> {
        loopdev::mount_image(&volume.image, &volume.dir)?;
        match mounted_device(volume) {
            Ok(_) => Ok(()),
            Err(error) => {
                let _ = nix::mount::umount2(&volume.dir, nix::mount::MntFlags::MNT_DETACH);
                Err(io::Error::other(format!(
                    "mounting {} did not take effect: {error}",
                    volume.image.display()
                )))
            }
        }
    }

    /// Unmounts (lazily: a sandbox may still hold it) and removes the directory and the image.
    pub fn remove(&self, volume: &Volume) {
        if is_mount_point(&volume.dir) {
            if let Err(error) = nix::mount::umount2(&volume.dir, nix::mount::MntFlags::MNT_DETACH) {
                tracing::warn!(dir = %volume.dir.display(), %error, "could not unmount a volume");
            }
        }
        remove_dir_all_quiet(&volume.dir);
        let _ = std::fs::remove_file(&volume.image);
        let _ = std::fs::remove_file(volume.restored_marker());
    }

    /// Unmounts every volume under `dir` and removes the tree (a deployment's directory).
    pub fn remove_tree(&self, dir: &Path) {
        unmount_all_under(dir);
        remove_dir_all_quiet(dir);
    }

    /// Refuses work that needs `needed_bytes` of the data dir's disk when that would eat into
    /// the reserve the store keeps.
    pub fn check_room(
        &self,
        data_dir: &Path,
        needed_bytes: u64,
        what: &str,
    ) -> Result<(), RoomError> {
        let available = available_bytes(data_dir).map_err(|error| RoomError {
            code: ErrorCode::InternalError,
            message: format!(
                "cannot read the free space of {}: {error}",
                data_dir.display()
            ),
        })?;
        if available >= needed_bytes.saturating_add(self.reserve_bytes) {
            return Ok(());
        }
        Err(RoomError {
            code: ErrorCode::InsufficientStorage,
            message: format!(
                "not enough disk space for {what}: {} MB free in {}, {} MB needed plus the {} MB \
                 the store keeps (limits.disk_reserve_mb); free some space or delete old projects",
                available >> 20,
                data_dir.display(),
                needed_bytes.div_ceil(1 << 20),
                self.reserve_bytes >> 20
            ),
        })
    }
}

/// Why there is no room.
#[derive(Debug, Clone)]
pub struct RoomError {
    pub code: ErrorCode,
    pub message: String,
}

/// The device of the filesystem mounted on a volume's directory, if it is a mount point of
/// no more than the volume's size (the image's filesystem, not the disk under it).
fn mounted_device(volume: &Volume) -> io::Result<u64> {
    let size = nix::sys::statvfs::statvfs(&volume.dir)
        .map(|s| s.blocks().saturating_mul(s.fragment_size()))
        .map_err(io::Error::from)?;
    let limit = volume.size_mb.saturating_mul(1 << 20);
    if is_mount_point(&volume.dir) && size > 0 && size <= limit {
        return Ok(std::os::unix::fs::MetadataExt::dev(&std::fs::metadata(
            &volume.dir,
        )?));
    }
    Err(io::Error::other(format!(
        "{} is not its {} MB disk-limited filesystem (a {} MB filesystem is there)",
        volume.dir.display(),
        volume.size_mb,
        size >> 20
    )))
}

/// Mounts an ext4 image on `dir` through a free loop device (made where `/dev` lacks its
/// node), as volumes are mounted; for tools and tests that need a small filesystem.
pub fn mount_image(image: &Path, dir: &Path) -> io::Result<()> {
    loopdev::mount_image(image, dir)
}

/// Unmounts every volume under `dir` (`slipway stop-apps` with no daemon running).
pub fn unmount_all_under(dir: &Path) {
    for mount_point in mount_points_under(dir) {
        if let Err(error) = nix::mount::umount2(&mount_point, nix::mount::MntFlags::MNT_DETACH) {
            tracing::warn!(dir = %mount_point.display(), %error, "could not unmount a volume");
        }
    }
}

/// Whether a volume's filesystem is (nearly) full: a failed build's likely reason.
pub fn is_full(dir: &Path) -> bool {
    nix::sys::statvfs::statvfs(dir).is_ok_and(|stat| {
        let total = stat.blocks();
        total > 0 && stat.blocks_available() * 100 < total
    })
}

/// Removes a directory tree; a missing one is fine, other errors are logged.
pub fn remove_dir_all_quiet(dir: &Path) {
    if let Err(error) = std::fs::remove_dir_all(dir) {
        if error.kind() != io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), %error, "could not remove a directory");
        }
    }
}

pub fn available_bytes(path: &Path) -> io::Result<u64> {
    let stat = nix::sys::statvfs::statvfs(path)?;
    Ok((stat.blocks_available() as u64).saturating_mul(stat.fragment_size() as u64))
}

pub(super) fn is_mount_point(dir: &Path) -> bool {
    let Ok(canonical) = dir.canonicalize() else {
        return false;
    };
    mount_points_under(&canonical).contains(&canonical)
}

/// Mount points at or under `dir`, deepest first (from `/proc/self/mountinfo`).
fn mount_points_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(dir) = dir.canonicalize() else {
        return Vec::new();
    };
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(field.replace("\\040", " ")))
        .filter(|point| point.starts_with(&dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

/// Makes a sparse ext4 image of the volume's size at `image` (root directory owned by
/// `owner`), filled with the files of `contents` when given (`mkfs.ext4 -d`, no mount needed).
fn make_filesystem(
    volume: &Volume,
    image: &Path,
    owner: (u32, u32),
    contents: Option<&Path>,
) -> io::Result<()> {
    let file = std::fs::File::create(image)?;
    file.set_len(volume.size_mb.saturating_mul(1 << 20))?;
    drop(file);
    let features = if volume.journal {
        "has_journal"
    } else {
        "^has_journal"
    };
    let (uid, gid) = owner;
    let extended = format!("lazy_itable_init=1,lazy_journal_init=1,root_owner={uid}:{gid}");
    let mut command = Command::new("mkfs.ext4");
    command.args(["-q", "-F", "-m", "0", "-O", features, "-E", &extended]);
    if let Some(contents) = contents {
        command.arg("-d").arg(contents);
    }
    run(command.arg(image))
}

fn which(tool: &str) -> bool {
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|dir| Path::new(dir).join(tool).exists())
}

fn run(command: &mut Command) -> io::Result<()> {
    let output = command.stdin(Stdio::null()).output()?;
    if output.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_kept_and_the_error_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let free = available_bytes(dir.path()).unwrap();
        let volumes = Volumes {
            images: false,
            reserve_bytes: 1 << 20,
        };
        assert!(volumes.check_room(dir.path(), 0, "an upload").is_ok());
        let error = volumes
            .check_room(dir.path(), free, "an upload")
            .unwrap_err();
        assert_eq!(error.code, ErrorCode::InsufficientStorage);
        assert!(
            error.message.contains("limits.disk_reserve_mb"),
            "{}",
            error.message
        );
    }

    /// Where loop mounts work (root, loop devices, e2fsprogs), the probe turns limits on and a
    /// volume's filesystem is the image's size; elsewhere limits are off, never claimed.
    #[test]
    fn limits_are_on_only_where_a_probe_mount_proves_them() {
        let dir = tempfile::tempdir().unwrap();
        let volumes = Volumes::detect(0, true, dir.path());
        let possible = nix::unistd::geteuid().is_root()
            && Path::new("/dev/loop-control").exists()
            && which("mkfs.ext4");
        if !possible {
            assert!(!volumes.limited());
            eprintln!("SKIP the mounted half: needs root, loop devices and mkfs.ext4");
            return;
        }
        assert!(volumes.limited(), "loop mounts work here");
        assert!(
            !dir.path().join(".disk-limit-probe").exists(),
            "the probe cleans up"
        );
        let volume = Volume::workspace(&dir.path().join("dpl"), 32);
        volumes.create(&volume, 0).unwrap();
        let stat = nix::sys::statvfs::statvfs(&volume.dir).unwrap();
        let size = stat.blocks() * stat.fragment_size();
        assert!(size <= 32 << 20 && size > 16 << 20, "{size}");
        let device = volumes.limited_device(&volume).unwrap();
        let parent = std::fs::metadata(dir.path()).unwrap();
        assert!(device.is_some_and(|d| d != std::os::unix::fs::MetadataExt::dev(&parent)));
        // Unmounted behind the daemon's back: the volume is refused, never used unlimited.
        nix::mount::umount2(&volume.dir, nix::mount::MntFlags::MNT_DETACH).unwrap();
        let error = volumes.limited_device(&volume).unwrap_err().to_string();
        assert!(
            error.contains("not its 32 MB disk-limited filesystem"),
            "{error}"
        );
        volumes.remove(&volume);
        assert!(!Volumes::detect(0, false, dir.path()).limited());
    }

    #[test]
    fn plain_volumes_are_directories() {
        let dir = tempfile::tempdir().unwrap();
        let volumes = Volumes {
            images: false,
            reserve_bytes: 0,
        };
        let volume = Volume::workspace(dir.path(), 16);
        std::fs::create_dir_all(volume.dir.join("old")).unwrap();
        volumes.create(&volume, 0).unwrap();
        assert!(volume.dir.is_dir());
        assert!(!volume.dir.join("old").exists(), "a new volume is empty");
        assert!(!volume.image.exists());
        volumes.remove(&volume);
        assert!(!volume.dir.exists());
    }
}
