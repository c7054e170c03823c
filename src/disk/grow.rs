//! Growing a volume while it is in use (an add-on's `PATCH … {"diskMb"}`): the sparse image
//! file is made longer, the loop device it is attached to reads its new size
//! (`LOOP_SET_CAPACITY`), and `resize2fs` grows the mounted ext4 online — the program writing
//! to it never stops. The kernel grows a mounted ext4 only for a process with
//! `CAP_SYS_RESOURCE` (the systemd unit grants it); without it [`Volumes::grow`] answers
//! `PermissionDenied` and the caller may stop what uses the volume and
//! [`Volumes::grow_unmounted`] instead. Shrinking is not offered (ext4 cannot shrink while
//! mounted, and a smaller image would cut files).

use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{loopdev, Volume, Volumes};
use crate::sys::loopdev as ioctl;

/// How long an unmounted image's loop device may take to be let go (auto-clear).
const DETACH_WAIT: Duration = Duration::from_secs(5);

impl Volumes {
    /// Grows `volume` (its image, when disk limits hold it) to `size_mb` while it stays
    /// mounted; a plain directory has nothing to grow, an image already that large keeps its
    /// size. `PermissionDenied` when the kernel refuses to grow a mounted filesystem for this
    /// process (no `CAP_SYS_RESOURCE`).
    pub fn grow(&self, volume: &Volume, size_mb: u64) -> io::Result<()> {
        if !self.images || !volume.image.exists() {
            return Ok(());
        }
        let backing = lengthen(&volume.image, size_mb)?;
        let Some((device, path)) = loopdev::attached(&backing)? else {
            drop(backing);
            return grow_image(&volume.image);
        };
        ioctl::set_capacity(device.as_fd()).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "{} did not take its image's new size: {error}",
                    path.display()
                ),
            )
        })?;
        let output = Command::new("resize2fs")
            .arg(&path)
            .stdin(Stdio::null())
            .output()?;
        if output.status.success() {
            return Ok(());
        }
        let said = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        let kind = match said.contains("Permission denied") {
            true => io::ErrorKind::PermissionDenied,
            false => io::ErrorKind::Other,
        };
        Err(io::Error::new(
            kind,
            format!("resize2fs {} (online) failed: {said}", path.display()),
        ))
    }

    /// Grows `volume` to `size_mb` with nothing using it: unmounted here, its loop device let
    /// go, the image checked and grown, mounted again. Fails (and mounts it again as it was)
    /// when the device stays attached — a mount in another namespace still holds it.
    pub fn grow_unmounted(&self, volume: &Volume, size_mb: u64) -> io::Result<()> {
        if !self.images || !volume.image.exists() {
            return Ok(());
        }
        let grown = self.unmount_and_grow(volume, size_mb);
        let resized = Volume {
            size_mb: size_mb.max(volume.size_mb),
            ..volume.clone()
        };
        self.ensure_mounted(&resized)?;
        grown
    }

    fn unmount_and_grow(&self, volume: &Volume, size_mb: u64) -> io::Result<()> {
        if super::is_mount_point(&volume.dir) {
            nix::mount::umount(&volume.dir).map_err(|error| {
                io::Error::other(format!(
                    "cannot unmount {} to grow it: {error}",
                    volume.dir.display()
                ))
            })?;
        }
        let backing = lengthen(&volume.image, size_mb)?;
        let deadline = Instant::now() + DETACH_WAIT;
        while loopdev::attached(&backing)?.is_some() {
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "{} is still attached to a loop device after its unmount (mounted in                      another mount namespace): it cannot be grown offline",
                    volume.image.display()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(backing);
        grow_image(&volume.image)
    }
}

/// Opens the image and makes it `size_mb` long if it is shorter (sparse).
fn lengthen(image: &Path, size_mb: u64) -> io::Result<std::fs::File> {
    let backing = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(image)?;
    let bytes = size_mb.saturating_mul(1 << 20);
    if backing.metadata()?.len() < bytes {
        backing.set_len(bytes)?;
    }
    Ok(backing)
}

/// Checks an image no device holds and grows its filesystem to the file's size.
fn grow_image(image: &Path) -> io::Result<()> {
    // resize2fs wants a freshly checked filesystem when it is not mounted.
    let checked = Command::new("e2fsck")
        .args(["-f", "-y"])
        .arg(image)
        .stdin(Stdio::null())
        .output()?;
    // 0: clean; 1: errors corrected.
    if !matches!(checked.status.code(), Some(0 | 1)) {
        return Err(io::Error::other(format!(
            "e2fsck {} failed: {}",
            image.display(),
            String::from_utf8_lossy(&checked.stdout).trim()
        )));
    }
    let output = Command::new("resize2fs")
        .arg(image)
        .stdin(Stdio::null())
        .output()?;
    if output.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "resize2fs {} failed: {}",
        image.display(),
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mounted volume with a file open for writing grows (online where this process may,
    /// else unmounted): the filesystem shows the new size, the file is still there, and more
    /// can be written than fitted before.
    #[test]
    fn a_mounted_volume_grows_online() {
        let dir = tempfile::tempdir().unwrap();
        let volumes = Volumes::detect(0, true, dir.path());
        if !volumes.limited() {
            eprintln!("SKIP a_mounted_volume_grows_online: disk limits are off here");
            return;
        }
        let volume = Volume::app_data(&dir.path().join("data"), 16);
        volumes.create(&volume, 0).unwrap();
        let size = |v: &Volume| {
            let stat = nix::sys::statvfs::statvfs(&v.dir).unwrap();
            stat.blocks() * stat.fragment_size()
        };
        let before = size(&volume);
        let mut open = std::fs::File::create(volume.dir.join("kept")).unwrap();
        std::io::Write::write_all(&mut open, &vec![7u8; 8 << 20]).unwrap();
        match volumes.grow(&volume, 48) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => {
                eprintln!("online growth refused here ({error}); growing it unmounted");
                drop(open);
                volumes.grow_unmounted(&volume, 48).unwrap();
                open = std::fs::OpenOptions::new()
                    .append(true)
                    .open(volume.dir.join("kept"))
                    .unwrap();
            }
            Err(error) => panic!("{error}"),
        }
        let after = size(&volume);
        assert!(after > 40 << 20 && after > before, "{before} → {after}");
        std::io::Write::write_all(&mut open, &vec![8u8; 24 << 20]).unwrap();
        open.sync_all().unwrap();
        assert_eq!(
            std::fs::metadata(volume.dir.join("kept")).unwrap().len(),
            32 << 20
        );
        // A smaller size is no change.
        volumes.grow(&volume, 16).unwrap();
        assert_eq!(size(&volume), after);
        drop(open);
        volumes.remove(&volume);
    }

    #[test]
    fn a_plain_directory_has_nothing_to_grow() {
        let dir = tempfile::tempdir().unwrap();
        let volumes = Volumes::detect(0, false, dir.path());
        let volume = Volume::app_data(&dir.path().join("data"), 16);
        volumes.create(&volume, 0).unwrap();
        volumes.grow(&volume, 64).unwrap();
        assert!(!volume.image.exists());
    }
}
