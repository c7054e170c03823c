//! Copies and removes directory trees the project's own code wrote (its workspace, its build
//! cache), for `node_modules.rs`. The daemon may run as root while the project's code can
//! still change those trees (a concurrent build of the same project), so every step goes
//! through directory file descriptors opened with `O_NOFOLLOW` from a directory the daemon
//! made: a symlink planted anywhere in a tree is copied as a symlink, never followed.
//! Regular files are hard-linked when `link` is set and the two trees share a filesystem
//! (mount), and copied otherwise.

use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::fs_at::{names, open_dir};
use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag, AT_FDCWD};
use nix::sys::stat::{fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{fchownat, linkat, symlinkat, unlinkat, Gid, Uid, UnlinkatFlags};

/// What happens to one top-level entry of a copied tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TopLevel {
    /// Hard-linked where possible (the files are shared, never written through).
    Link,
    /// Copied even where a link is possible (tools write into these files in place).
    Copy,
    Skip,
}

/// How a tree is copied.
pub(super) struct CopyRules<'a> {
    /// Hard links instead of copies where the two trees share a mount.
    pub link: bool,
    /// In a sandbox, the project's uid: what the copy makes (directories, symlinks, copied
    /// files) becomes its. Linked files keep their owner (they are the same inode).
    pub owner: Option<u32>,
    /// The rule for each entry directly under the copied directory.
    pub top_level: &'a dyn Fn(&OsStr) -> TopLevel,
}

/// What a copy did. `linked` maps each hard-linked file's inode to its modification time
/// when it was linked, so a later write through the link can be told (`written_through`).
#[derive(Debug, Default)]
pub(super) struct Copied {
    pub entries: u64,
    pub linked: HashMap<u64, (i64, i64)>,
}

/// Copies `base/from` (a directory, not followed if it is a symlink) to `to_base/to`, which
/// must not exist yet. `base` and `to_base` are directories the daemon trusts.
pub(super) fn copy_tree(
    (base, from): (&Path, &str),
    (to_base, to): (&Path, &str),
    rules: &CopyRules<'_>,
) -> io::Result<Copied> {
    let source_parent = open_dir(AT_FDCWD, base.as_os_str())?;
    let source = open_dir(&source_parent, OsStr::new(from))?;
    let target_parent = open_dir(AT_FDCWD, to_base.as_os_str())?;
    let name = c_name(OsStr::new(to))?;
    let mode = fstat_at(&source_parent, &c_name(OsStr::new(from))?)?.st_mode;
    mkdirat(&target_parent, name.as_c_str(), permissions(mode))?;
    chown(&target_parent, &name, rules.owner)?;
    let target = open_dir(&target_parent, OsStr::new(to))?;
    let mut copied = Copied::default();
    copy_dir(&source, &target, rules, true, &mut copied)?;
    Ok(copied)
}

/// Removes `base/name` and everything under it without following symlinks; a missing entry
/// is not an error.
pub(super) fn remove_tree(base: &Path, name: &str) -> io::Result<()> {
    let parent = open_dir(AT_FDCWD, base.as_os_str())?;
    match remove_at(&parent, &c_name(OsStr::new(name))?) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Writes a new file `name` into the directory `base/dir`.
pub(super) fn write_file(base: &Path, dir: &str, name: &str, contents: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let parent = open_dir(AT_FDCWD, base.as_os_str())?;
    let dir = open_dir(&parent, OsStr::new(dir))?;
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW;
    let file = openat(
        &dir,
        name,
        flags | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o644),
    )?;
    std::fs::File::from(file).write_all(contents)
}

/// Sets the modification time of the directory `base/name` to now.
pub(super) fn set_modified_now(base: &Path, name: &str) -> io::Result<()> {
    let parent = open_dir(AT_FDCWD, base.as_os_str())?;
    let dir = std::fs::File::from(open_dir(&parent, OsStr::new(name))?);
    dir.set_modified(std::time::SystemTime::now())
}

/// The first file under `dir` that was hard-linked by `copy_tree` and has been modified
/// since: whoever wrote it wrote into every tree sharing it. Reads metadata only.
pub(super) fn written_through(
    dir: &Path,
    linked: &HashMap<u64, (i64, i64)>,
) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let entries = std::fs::read_dir(dir).ok()?;
    for entry in entries.flatten() {
        let Ok(metadata) = std::fs::symlink_metadata(entry.path()) else {
            continue;
        };
        if metadata.is_dir() {
            if let Some(found) = written_through(&entry.path(), linked) {
                return Some(found);
            }
        } else if metadata.is_file() {
            let changed = linked
                .get(&metadata.ino())
                .is_some_and(|&when| when != (metadata.mtime(), metadata.mtime_nsec()));
            if changed {
                return Some(entry.path());
            }
        }
    }
    None
}

fn copy_dir(
    source: &OwnedFd,
    target: &OwnedFd,
    rules: &CopyRules<'_>,
    top: bool,
    copied: &mut Copied,
) -> io::Result<()> {
    for name in names(source)? {
        let rule = match top {
            true => (rules.top_level)(OsStr::from_bytes(name.to_bytes())),
            false => TopLevel::Link,
        };
        let link = match rule {
            TopLevel::Skip => continue,
            TopLevel::Link => rules.link,
            TopLevel::Copy => false,
        };
        let rules = CopyRules { link, ..*rules };
        copy_entry(source, target, &name, &rules, copied)?;
    }
    Ok(())
}

fn copy_entry(
    source: &OwnedFd,
    target: &OwnedFd,
    name: &CStr,
    rules: &CopyRules<'_>,
    copied: &mut Copied,
) -> io::Result<()> {
    let stat = fstat_at(source, name)?;
    let kind = SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits());
    copied.entries += 1;
    if kind == SFlag::S_IFDIR {
        mkdirat(target, name, permissions(stat.st_mode))?;
        chown(target, name, rules.owner)?;
        let from = open_dir(source, OsStr::from_bytes(name.to_bytes()))?;
        let to = open_dir(target, OsStr::from_bytes(name.to_bytes()))?;
        return copy_dir(&from, &to, rules, false, copied);
    }
    if kind == SFlag::S_IFLNK {
        let points_to = readlinkat(source, name)?;
        symlinkat(points_to.as_os_str(), target, name)?;
        return chown(target, name, rules.owner);
    }
    if kind != SFlag::S_IFREG {
        return Ok(()); // Sockets, pipes and devices have no place in a package tree.
    }
    if rules.link {
        match linkat(source, name, target, name, AtFlags::empty()) {
            Ok(()) => {
                copied
                    .linked
                    .insert(stat.st_ino, (stat.st_mtime, stat.st_mtime_nsec));
                return Ok(());
            }
            // Another filesystem (a disk-limit image), or a link count at its maximum.
            Err(Errno::EXDEV | Errno::EMLINK | Errno::EPERM) => {}
            Err(error) => return Err(error.into()),
        }
    }
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut from = std::fs::File::from(openat(source, name, flags, Mode::empty())?);
    let create = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW;
    let to = openat(
        target,
        name,
        create | OFlag::O_CLOEXEC,
        permissions(stat.st_mode),
    )?;
    let mut to = std::fs::File::from(to);
    io::copy(&mut from, &mut to)?;
    chown(target, name, rules.owner)
}

fn remove_at(parent: &OwnedFd, name: &CStr) -> io::Result<()> {
    let stat = fstat_at(parent, name)?;
    if SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFDIR {
        return Ok(unlinkat(parent, name, UnlinkatFlags::NoRemoveDir)?);
    }
    let dir = open_dir(parent, OsStr::from_bytes(name.to_bytes()))?;
    for child in names(&dir)? {
        remove_at(&dir, &child)?;
    }
    Ok(unlinkat(parent, name, UnlinkatFlags::RemoveDir)?)
}

fn fstat_at(parent: &OwnedFd, name: &CStr) -> io::Result<FileStat> {
    Ok(fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW)?)
}

fn chown(parent: &OwnedFd, name: &CStr, owner: Option<u32>) -> io::Result<()> {
    let Some(owner) = owner else {
        return Ok(());
    };
    let (uid, gid) = (Some(Uid::from_raw(owner)), Some(Gid::from_raw(owner)));
    Ok(fchownat(
        parent,
        name,
        uid,
        gid,
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )?)
}

/// The permission bits of a mode, without set-id bits.
fn permissions(mode: u32) -> Mode {
    Mode::from_bits_truncate(mode & 0o1777)
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn tree(root: &Path) {
        std::fs::create_dir_all(root.join("pkg/lib")).unwrap();
        std::fs::write(root.join("pkg/lib/index.js"), "module.exports = 1\n").unwrap();
        std::fs::write(root.join(".package-lock.json"), "{}").unwrap();
        std::fs::create_dir_all(root.join(".cache/x")).unwrap();
        std::os::unix::fs::symlink("../pkg/lib/index.js", root.join("pkg/bin")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("pkg/lib/etc")).unwrap();
    }

    fn rules(link: bool) -> impl Fn(&OsStr) -> TopLevel {
        move |name: &OsStr| match name.as_bytes() {
            b".cache" => TopLevel::Skip,
            b".package-lock.json" => TopLevel::Copy,
            _ if link => TopLevel::Link,
            _ => TopLevel::Copy,
        }
    }

    #[test]
    fn links_files_copies_the_rest_and_never_follows_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        tree(&dir.path().join("from"));
        let top_level = rules(true);
        let rules = CopyRules {
            link: true,
            owner: None,
            top_level: &top_level,
        };
        let copied = copy_tree((dir.path(), "from"), (dir.path(), "to"), &rules).unwrap();
        let (from, to) = (dir.path().join("from"), dir.path().join("to"));
        let ino = |path: &Path| std::fs::metadata(path).unwrap().ino();
        assert_eq!(
            ino(&from.join("pkg/lib/index.js")),
            ino(&to.join("pkg/lib/index.js"))
        );
        assert_ne!(
            ino(&from.join(".package-lock.json")),
            ino(&to.join(".package-lock.json")),
            "copied, not linked"
        );
        assert!(!to.join(".cache").exists());
        assert_eq!(
            std::fs::read_link(to.join("pkg/lib/etc")).unwrap(),
            Path::new("/etc")
        );
        assert_eq!(copied.linked.len(), 1);
        assert_eq!(written_through(&to, &copied.linked), None);

        // A write into a linked file in place is seen; replacing the file is not.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(to.join(".package-lock.json"), "{\"x\":1}").unwrap();
        assert_eq!(written_through(&to, &copied.linked), None);
        std::fs::write(to.join("pkg/lib/index.js"), "module.exports = 2\n").unwrap();
        assert_eq!(
            written_through(&to, &copied.linked),
            Some(to.join("pkg/lib/index.js"))
        );

        remove_tree(dir.path(), "to").unwrap();
        assert!(!to.exists());
        assert!(
            from.join("pkg/lib/index.js").exists(),
            "the source stays; /etc through the symlink was never touched"
        );
        remove_tree(dir.path(), "to").unwrap();
    }

    #[test]
    fn copies_when_asked_and_refuses_a_symlinked_root() {
        let dir = tempfile::tempdir().unwrap();
        tree(&dir.path().join("from"));
        let top_level = rules(false);
        let rules = CopyRules {
            link: false,
            owner: None,
            top_level: &top_level,
        };
        let copied = copy_tree((dir.path(), "from"), (dir.path(), "to"), &rules).unwrap();
        assert!(copied.linked.is_empty());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("to/pkg/lib/index.js")).unwrap(),
            "module.exports = 1\n"
        );
        std::os::unix::fs::symlink(dir.path().join("from"), dir.path().join("planted")).unwrap();
        assert!(copy_tree((dir.path(), "planted"), (dir.path(), "again"), &rules).is_err());
    }
}
