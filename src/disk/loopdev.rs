//! Loop mounts without `mount -o loop`: the daemon asks `/dev/loop-control` for a free loop
//! device, makes its node when the machine's `/dev` does not have it (a container's static
//! `/dev` only holds the nodes that existed when it started; devtmpfs makes them itself),
//! attaches the image with auto-clear (the device is let go when the filesystem is unmounted)
//! and mounts it. When a step cannot be done the error says which resource ran out and what
//! to do about it. Called by [`super::Volumes`]; the ioctls themselves are `sys::loopdev`'s.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::sys::loopdev::{self as ioctl, LoopConfig, LoopInfo64, LO_FLAGS_AUTOCLEAR};

const LOOP_MAJOR: u64 = 7;

/// Another attach took the free device between asking and attaching: ask again.
const ATTACH_ATTEMPTS: u32 = 8;

/// Mounts the ext4 `image` on `dir` (`nodev,nosuid,noatime`) through a free loop device.
pub(super) fn mount_image(image: &Path, dir: &Path) -> io::Result<()> {
    let backing = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(image)?;
    // An image that is attached already (mounted in another mount namespace: the one the
    // previous daemon's unit had, which its apps still hold) is mounted through the same
    // device. A second device over the same file would be a second, unsynchronised cache of
    // one filesystem: each would read stale blocks and overwrite the other's.
    let (device, path, ours) = match attached(&backing)? {
        Some((device, path)) => (device, path, false),
        None => {
            let (device, path) = attach(&backing, image)?;
            (device, path, true)
        }
    };
    use nix::mount::MsFlags;
    let flags = MsFlags::MS_NODEV | MsFlags::MS_NOSUID | MsFlags::MS_NOATIME;
    let mounted = nix::mount::mount(Some(&path), dir, Some("ext4"), flags, None::<&str>);
    if let Err(error) = mounted {
        if ours {
            // A loop device we opened and attached.
            let _ = ioctl::clear_fd(device.as_fd());
        }
        return Err(io::Error::other(format!(
            "mounting {} (through {}) on {}: {error}",
            image.display(),
            path.display(),
            dir.display()
        )));
    }
    // The mount holds the device now; auto-clear lets it go at the unmount.
    Ok(())
}

/// Attaches `backing` to a free loop device: (the device, its path).
fn attach(backing: &File, image: &Path) -> io::Result<(File, PathBuf)> {
    let control = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/loop-control")
        .map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "cannot open /dev/loop-control ({error}): loop devices are not available here"
                ),
            )
        })?;
    let mut last_error = None;
    for _ in 0..ATTACH_ATTEMPTS {
        let index = ioctl::get_free(control.as_fd()).map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "no free loop device ({error}; {} in use): the kernel's limit of loop \
                     devices is reached; raise it (the loop module's max_loop, or \
                     loop.max_loop= on the kernel command line) or remove unused deployments",
                    in_use()
                ),
            )
        })?;
        let path = PathBuf::from(format!("/dev/loop{index}"));
        let device = open_or_make(&path, u64::from(index))?;
        match configure(&device, backing, image) {
            Ok(()) => return Ok((device, path)),
            // Taken by someone else since we asked: ask again.
            Err(error) if error.raw_os_error() == Some(libc::EBUSY) => last_error = Some(error),
            Err(error) => {
                return Err(io::Error::new(
                    error.kind(),
                    format!(
                        "attaching {} to {}: {error}",
                        image.display(),
                        path.display()
                    ),
                ))
            }
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::other("every free loop device was taken")))
}

/// The loop device `backing` is attached to already (whole file, from offset 0), if any.
pub(super) fn attached(backing: &File) -> io::Result<Option<(File, PathBuf)>> {
    use std::os::unix::fs::MetadataExt;
    let meta = backing.metadata()?;
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Ok(None);
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(index) = name
            .strip_prefix("loop")
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        if !entry.path().join("loop/backing_file").exists() {
            continue;
        }
        let path = PathBuf::from(format!("/dev/{name}"));
        let Ok(device) = open_or_make(&path, index) else {
            continue;
        };
        let Ok(info) = ioctl::get_status(device.as_fd()) else {
            continue; // detached meanwhile
        };
        // The kernel's encoding of a device number is glibc's `st_dev` for every real disk.
        if info.device == meta.dev()
            && info.inode == meta.ino()
            && info.offset == 0
            && info.size_limit == 0
        {
            return Ok(Some((device, path)));
        }
    }
    Ok(None)
}

/// Opens a loop device's node, making it first where `/dev` does not have it.
fn open_or_make(path: &Path, index: u64) -> io::Result<File> {
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
    };
    match open() {
        Err(error) if error.kind() == io::ErrorKind::NotFound => {}
        other => return other,
    }
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    let mode = Mode::from_bits_truncate(0o660);
    match mknod(path, SFlag::S_IFBLK, mode, makedev(LOOP_MAJOR, index)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => open(),
        Err(error) => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "the kernel's free loop device is {}, but this /dev has no node for it and \
                 one cannot be made ({error}): /dev holds {} loop nodes, {} of them in use. \
                 This /dev does not get new device nodes (a container's static /dev, or a \
                 device policy): make nodes ahead (`for i in $(seq 0 255); do [ -e /dev/loop$i ] \
                 || mknod -m 0660 /dev/loop$i b 7 $i; done` on the host, then bind them in), or \
                 give the daemon CAP_MKNOD with access to block-loop devices",
                path.display(),
                nodes(),
                in_use()
            ),
        )),
    }
}

/// Attaches with auto-clear: `LOOP_CONFIGURE`, or `LOOP_SET_FD` + `LOOP_SET_STATUS64` on a
/// kernel before 5.8.
fn configure(device: &File, backing: &File, image: &Path) -> io::Result<()> {
    let mut info = LoopInfo64 {
        flags: LO_FLAGS_AUTOCLEAR,
        ..LoopInfo64::zeroed()
    };
    // The name `losetup -l` shows (truncated to what the kernel keeps).
    let name = image.as_os_str().as_encoded_bytes();
    let kept = name.len().min(info.file_name.len() - 1);
    info.file_name[..kept].copy_from_slice(&name[..kept]);
    let config = LoopConfig {
        fd: backing.as_raw_fd() as u32,
        block_size: 0,
        info,
        reserved: [0; 8],
    };
    let error = match ioctl::configure(device.as_fd(), &config) {
        Ok(()) => return Ok(()),
        Err(error) => error,
    };
    if error.raw_os_error() != Some(libc::EINVAL) && error.raw_os_error() != Some(libc::ENOTTY) {
        return Err(error);
    }
    ioctl::set_fd(device.as_fd(), backing.as_fd())?;
    if let Err(error) = ioctl::set_status(device.as_fd(), &config.info) {
        // Detach what we just attached.
        let _ = ioctl::clear_fd(device.as_fd());
        return Err(error);
    }
    Ok(())
}

/// How many `/dev/loopN` nodes there are.
fn nodes() -> usize {
    std::fs::read_dir("/dev").map_or(0, |entries| {
        entries
            .flatten()
            .filter(|e| is_loop_name(&e.file_name().to_string_lossy()))
            .count()
    })
}

/// How many loop devices have a backing file (in use, by anyone on the machine).
fn in_use() -> usize {
    std::fs::read_dir("/sys/block").map_or(0, |entries| {
        entries
            .flatten()
            .filter(|e| is_loop_name(&e.file_name().to_string_lossy()))
            .filter(|e| e.path().join("loop/backing_file").exists())
            .count()
    })
}

fn is_loop_name(name: &str) -> bool {
    name.strip_prefix("loop")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_device_names_are_told_from_the_control_node() {
        assert!(is_loop_name("loop0"));
        assert!(is_loop_name("loop127"));
        assert!(!is_loop_name("loop-control"));
        assert!(!is_loop_name("loop"));
    }

    /// An image mounted twice (as a restarted daemon does in its unit's new mount namespace,
    /// while apps hold the old one) shares one device: what one mount wrote, the other reads.
    #[test]
    fn an_attached_image_is_mounted_through_its_device_again() {
        let Some((dir, image)) =
            small_image("an_attached_image_is_mounted_through_its_device_again")
        else {
            return;
        };
        let (first, second) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir(&first).unwrap();
        std::fs::create_dir(&second).unwrap();
        mount_image(&image, &first).unwrap();
        std::fs::write(first.join("written"), b"through the first mount").unwrap();
        mount_image(&image, &second).unwrap();
        use std::os::unix::fs::MetadataExt;
        let device = |p: &Path| std::fs::metadata(p).unwrap().dev();
        assert_eq!(device(&first), device(&second), "one device for one image");
        assert_eq!(
            std::fs::read(second.join("written")).unwrap(),
            b"through the first mount"
        );
        for mount in [&second, &first] {
            nix::mount::umount2(mount, nix::mount::MntFlags::MNT_DETACH).unwrap();
        }
    }

    /// An 8 MB ext4 image in a temp dir, or `None` (with the reason printed) without root,
    /// loop devices or mkfs.ext4.
    fn small_image(test: &str) -> Option<(tempfile::TempDir, PathBuf)> {
        if !nix::unistd::geteuid().is_root() || !Path::new("/dev/loop-control").exists() {
            eprintln!("SKIP {test}: needs root and loop devices");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("img");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(8 << 20)
            .unwrap();
        let made = std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F"])
            .arg(&image)
            .status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("SKIP {test}: mkfs.ext4 failed");
            return None;
        }
        Some((dir, image))
    }

    /// A node missing from `/dev` is made, as in a container whose `/dev` was filled once:
    /// the image is attached and mounted through a node made for the occasion.
    #[test]
    fn a_missing_node_is_made_and_the_image_mounts() {
        let Some((dir, image)) = small_image("a_missing_node_is_made_and_the_image_mounts") else {
            return;
        };
        // A private mount namespace of this thread's would be cleaner; instead the node the
        // kernel hands out next is removed from /dev (if it has one) before mounting.
        let control = File::open("/dev/loop-control").unwrap();
        let index = ioctl::get_free(control.as_fd()).unwrap();
        let node = PathBuf::from(format!("/dev/loop{index}"));
        let _ = std::fs::remove_file(&node);
        let mount_point = dir.path().join("mnt");
        std::fs::create_dir(&mount_point).unwrap();
        mount_image(&image, &mount_point).unwrap();
        assert!(node.exists(), "{} was made", node.display());
        std::fs::write(mount_point.join("f"), b"x").unwrap();
        nix::mount::umount2(&mount_point, nix::mount::MntFlags::MNT_DETACH).unwrap();
        // Auto-clear: the device is free again once unmounted (or already taken by another
        // image: loop devices are the machine's, and other tests attach them meanwhile). The
        // kernel clears it after the detached unmount ends, later on a loaded machine.
        let backing = format!("/sys/block/loop{index}/loop/backing_file");
        let ours = |text: String| Path::new(text.trim()) == image.as_path();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::fs::read_to_string(&backing).is_ok_and(ours) {
            assert!(
                std::time::Instant::now() < deadline,
                "loop{index} not cleared"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
