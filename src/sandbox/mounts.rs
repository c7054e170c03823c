//! The sandbox's filesystem, in two halves.
//!
//! [`plan`] runs in the helper, still host root: it clones the host trees the sandbox sees
//! (`/usr`, an allow-list of `/etc`, the project's directories, a few device nodes) as detached mounts
//! with `open_tree`, already read-only/nosuid/nodev where they must be. The project's uid
//! could not even reach a workspace below a `0700` directory, so this cannot wait.
//!
//! [`build_root`] runs in the sandbox init, inside its own user and mount namespaces: a tmpfs
//! root, the planned trees attached with `move_mount`, generated `/etc` files, tmpfs `/tmp`, a
//! minimal `/dev`, a fresh `/proc`, then `pivot_root` and a read-only root. Nothing else of the
//! host (the store, `/root`, `/home`, `/run`, other projects) exists in that tree.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use super::detached::{clone_project_dir, clone_tree};
use super::spec::{FilesystemView, HelperSpec, SANDBOX_ID};

/// Host directories a sandbox sees whole (read-only). Not `/opt`: what operators install
/// there (vendor agents, tools with their own keys and tokens) is no business of tenants';
/// build toolchains come from `/usr` (distribution packages, `/usr/local`).
const SYSTEM_DIRS: &[&str] = &["usr"];

/// The host directory through which every sandbox would see `path` (read-only), if any:
/// `/usr` or an allowed entry of `/etc`.
pub fn visible_to_sandboxes(path: &Path) -> Option<PathBuf> {
    let system = SYSTEM_DIRS.iter().map(|dir| Path::new("/").join(dir));
    let etc = ETC_ALLOWED.iter().map(|name| Path::new("/etc").join(name));
    system.chain(etc).find(|visible| path.starts_with(visible))
}

/// What a sandbox sees of the host's `/etc`: what programs need to run, resolve names, speak
/// TLS and find their defaults — never the rest, where operators keep keys and credentials
/// (e.g. `/etc/slipway/`). `hosts`, `resolv.conf`, `passwd` and `group` are generated.
pub const ETC_ALLOWED: &[&str] = &[
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "host.conf",
    "gai.conf",
    "hosts",
    "resolv.conf",
    "passwd",
    "group",
    "os-release",
    "debian_version",
    "mime.types",
    "protocols",
    "services",
    "networks",
    "rpc",
    "environment",
    "profile",
    "bash.bashrc",
    "inputrc",
    "locale.alias",
    "magic",
    "magic.mime",
    "fonts",
    "gitconfig",
    "npmrc",
    "pip.conf",
    "python3",
    "perl",
    "java-17-openjdk",
    "java-21-openjdk",
];
const ROOT_LINK_CANDIDATES: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];
/// The device nodes a sandbox gets. No `tty`, no `ptmx` and no `pts`: a step's terminal, when
/// it has one, reaches it only as inherited descriptors (`super::tty`), and nothing in the
/// sandbox can open one of the host's.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom"];

/// A detached host tree and where it goes in the sandbox (relative to the new root).
pub(crate) struct Tree {
    target: PathBuf,
    fd: OwnedFd,
    is_dir: bool,
}

/// Everything the sandbox init needs to assemble its root.
pub(crate) struct RootPlan {
    trees: Vec<Tree>,
    devices: Vec<Tree>,
    symlinks: Vec<(PathBuf, PathBuf)>,
    /// Generated files: absolute path inside the sandbox, contents.
    files: Vec<(PathBuf, String)>,
}

/// Helper side: clones the host trees. Project paths may not contain symlinks (the project
/// controls its workspace, and a symlinked output dir must not pull in the host).
pub(crate) fn plan(spec: &HelperSpec) -> io::Result<RootPlan> {
    let mut trees = Vec::new();
    let mut symlinks = Vec::new();
    plan_host_trees(&mut trees, &mut symlinks)?;
    plan_project_trees(spec, &mut trees)?;
    let mut devices = Vec::new();
    for device in DEVICES {
        let host = Path::new("/dev").join(device);
        if host.exists() {
            let fd = clone_tree(
                &host,
                libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NOEXEC,
                false,
            )?;
            devices.push(Tree {
                target: Path::new("dev").join(device),
                fd,
                is_dir: false,
            });
        }
    }
    Ok(RootPlan {
        trees,
        devices,
        symlinks,
        files: generated_files(spec),
    })
}

const READ_ONLY: u64 = libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
const WRITABLE: u64 = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;

/// The host's system directories, the allowed files of `/etc` and the root's links
/// (`/lib` → `usr/lib`), read-only; a host symlink is recreated as a link.
fn plan_host_trees(
    trees: &mut Vec<Tree>,
    symlinks: &mut Vec<(PathBuf, PathBuf)>,
) -> io::Result<()> {
    for dir in SYSTEM_DIRS {
        let host = Path::new("/").join(dir);
        if host.is_dir() {
            trees.push(Tree {
                target: dir.into(),
                fd: clone_tree(&host, READ_ONLY, false)?,
                is_dir: true,
            });
        }
    }
    for name in ETC_ALLOWED {
        let host = Path::new("/etc").join(name);
        let target = Path::new("etc").join(name);
        match std::fs::symlink_metadata(&host) {
            Ok(meta) if meta.file_type().is_symlink() => {
                symlinks.push((target, std::fs::read_link(&host)?))
            }
            Ok(meta) => trees.push(Tree {
                target,
                fd: clone_tree(&host, READ_ONLY, false)?,
                is_dir: meta.is_dir(),
            }),
            Err(_) => {}
        }
    }
    for name in ROOT_LINK_CANDIDATES {
        let host = Path::new("/").join(name);
        match std::fs::symlink_metadata(&host) {
            Ok(meta) if meta.file_type().is_symlink() => {
                symlinks.push((name.into(), std::fs::read_link(&host)?))
            }
            Ok(meta) if meta.is_dir() => trees.push(Tree {
                target: name.into(),
                fd: clone_tree(&host, READ_ONLY, false)?,
                is_dir: true,
            }),
            _ => {}
        }
    }
    Ok(())
}

/// The project's own directories: a build's workspace at `/app` and cache at `/cache`
/// (writable), or an app's output at `/app` (read-only) and data at `/data`.
fn plan_project_trees(spec: &HelperSpec, trees: &mut Vec<Tree>) -> io::Result<()> {
    let limited = &spec.limited_dirs;
    let mut add = |target: &str, dir: &Path, attributes: u64| -> io::Result<()> {
        trees.push(Tree {
            target: target.into(),
            fd: clone_project_dir(dir, attributes, limited)?,
            is_dir: true,
        });
        Ok(())
    };
    match &spec.view {
        FilesystemView::Build { workspace, cache } => {
            add("app", workspace, WRITABLE)?;
            if let Some(cache) = cache {
                add("cache", cache, WRITABLE)?;
            }
        }
        FilesystemView::App { output, data_dir } => {
            add("app", output, READ_ONLY)?;
            add("data", data_dir, WRITABLE)?;
        }
    }
    Ok(())
}

fn generated_files(spec: &HelperSpec) -> Vec<(PathBuf, String)> {
    let id = SANDBOX_ID;
    let hostname = &spec.hostname;
    let hosts = format!(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n{}\t{hostname}\n",
        spec.network.sandbox_address
    );
    let resolv: String = spec
        .nameservers
        .iter()
        .map(|server| format!("nameserver {server}\n"))
        .collect();
    let resolv = format!("{resolv}options timeout:2 attempts:2\n");
    let passwd = format!(
        "root:x:0:0:root:/root:/usr/sbin/nologin\napp:x:{id}:{id}:app:/tmp:/bin/sh\n\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    );
    let group = format!("root:x:0:\napp:x:{id}:\nnogroup:x:65534:\n");
    vec![
        ("/etc/hosts".into(), hosts),
        ("/etc/resolv.conf".into(), resolv),
        ("/etc/passwd".into(), passwd),
        ("/etc/group".into(), group),
    ]
}

/// Sandbox side: assembles the root and pivots into it; the cwd is `/` afterwards.
pub(crate) fn build_root(plan: RootPlan) -> io::Result<()> {
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    step(
        "make mounts private",
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        ),
    )?;
    // The new root covers /tmp of this (private) mount namespace while it is assembled.
    let root = Path::new("/tmp");
    tmpfs(
        root,
        nosuid_nodev,
        "mode=0755,size=16m",
        "mount the root tmpfs",
    )?;
    std::env::set_current_dir(root)?;

    for tree in plan.trees {
        attach(&tree)?;
    }
    for (link, target) in &plan.symlinks {
        if let Some(parent) = link.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        std::os::unix::fs::symlink(target, link)?;
    }
    std::fs::create_dir("tmp")?;
    tmpfs(Path::new("tmp"), nosuid_nodev, "mode=1777", "mount /tmp")?;
    build_dev(plan.devices)?;
    std::fs::create_dir("proc")?;
    let proc_flags = nosuid_nodev | MsFlags::MS_NOEXEC;
    step(
        "mount /proc",
        mount(Some("proc"), "proc", Some("proc"), proc_flags, None::<&str>),
    )?;

    std::fs::create_dir(".generated")?;
    for (path, contents) in &plan.files {
        place_generated(path, contents)?;
    }
    std::fs::remove_dir(".generated")?;
    enter_read_only()
}

/// A tmpfs mounted on `dir` (relative to the root being built, or absolute).
fn tmpfs(dir: &Path, flags: MsFlags, options: &str, what: &str) -> io::Result<()> {
    step(
        what,
        mount(Some("tmpfs"), dir, Some("tmpfs"), flags, Some(options)),
    )
}

/// `/dev`: a small noexec tmpfs with the planned device nodes bound in, the standard links
/// and a `/dev/shm`.
fn build_dev(devices: Vec<Tree>) -> io::Result<()> {
    std::fs::create_dir("dev")?;
    let dev_flags = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;
    tmpfs(
        Path::new("dev"),
        dev_flags,
        "mode=0755,size=64k",
        "mount /dev",
    )?;
    for device in devices {
        attach(&device)?;
    }
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, Path::new("dev").join(name))?;
    }
    std::fs::create_dir("dev/shm")?;
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    tmpfs(
        Path::new("dev/shm"),
        nosuid_nodev,
        "mode=1777",
        "mount /dev/shm",
    )
}

/// The built tree becomes `/`, the host's root is detached, and `/` and `/dev` are made
/// read-only.
fn enter_read_only() -> io::Result<()> {
    step("pivot_root", nix::unistd::pivot_root(".", "."))?;
    step("detach the host root", umount2(".", MntFlags::MNT_DETACH))?;
    std::env::set_current_dir("/")?;
    let nosuid_nodev = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let read_only = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | nosuid_nodev;
    step(
        "make / read-only",
        mount(None::<&str>, "/", None::<&str>, read_only, None::<&str>),
    )?;
    step(
        "make /dev read-only",
        mount(
            None::<&str>,
            "/dev",
            None::<&str>,
            read_only | MsFlags::MS_NOEXEC,
            None::<&str>,
        ),
    )
}

/// Puts a generated file at `path` inside the new root (the cwd): bound read-only over the
/// host's file, or, when the host's entry is a symlink to a place that only exists on the
/// host (`/etc/resolv.conf` → `/run/...`), written where the link points.
fn place_generated(path: &Path, contents: &str) -> io::Result<()> {
    let mut target = path.strip_prefix("/").unwrap_or(path).to_owned();
    for _ in 0..8 {
        match std::fs::symlink_metadata(&target) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link = std::fs::read_link(&target)?;
                let base = target.parent().map(Path::to_owned).unwrap_or_default();
                target = match link.strip_prefix("/") {
                    Ok(absolute) => absolute.to_owned(),
                    Err(_) => base.join(link),
                };
            }
            Ok(_) => {
                let source = Path::new(".generated").join(path.file_name().unwrap_or_default());
                std::fs::write(&source, contents)?;
                step(
                    "bind a generated file",
                    mount(
                        Some(&source),
                        &target,
                        None::<&str>,
                        MsFlags::MS_BIND,
                        None::<&str>,
                    ),
                )?;
                let flags = MsFlags::MS_REMOUNT
                    | MsFlags::MS_BIND
                    | MsFlags::MS_RDONLY
                    | MsFlags::MS_NOSUID
                    | MsFlags::MS_NODEV;
                step(
                    "make a generated file read-only",
                    mount(None::<&str>, &target, None::<&str>, flags, None::<&str>),
                )?;
                return std::fs::remove_file(&source);
            }
            Err(_) => {
                // The link points into the tmpfs root (e.g. /run): create it there. A file
                // the host lacks inside a read-only tree is left out: nothing can expect it.
                let created = target.parent().map_or(Ok(()), std::fs::create_dir_all);
                let _ = created.and_then(|()| std::fs::write(&target, contents));
                return Ok(());
            }
        }
    }
    Err(io::Error::other(format!(
        "{} is a symlink loop",
        path.display()
    )))
}

/// Creates the mount point and moves a detached tree onto it.
fn attach(tree: &Tree) -> io::Result<()> {
    if tree.is_dir {
        std::fs::create_dir_all(&tree.target)?;
    } else {
        if let Some(parent) = tree.target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&tree.target, b"")?;
    }
    let target = CString::new(tree.target.as_os_str().as_bytes()).map_err(io::Error::other)?;
    crate::sys::mount::attach(tree.fd.as_fd(), &target).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("attach /{}: {error}", tree.target.display()),
        )
    })
}

fn step<T>(what: &str, result: nix::Result<T>) -> io::Result<T> {
    result
        .map_err(|errno| io::Error::new(io::Error::from(errno).kind(), format!("{what}: {errno}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_dirs_that_sandboxes_would_see_are_named() {
        let seen = |p: &str| visible_to_sandboxes(Path::new(p));
        assert_eq!(seen("/usr/local/slipway"), Some(PathBuf::from("/usr")));
        assert_eq!(seen("/etc/ssl/slipway"), Some(PathBuf::from("/etc/ssl")));
        assert_eq!(seen("/var/lib/slipway"), None);
        assert_eq!(
            seen("/etc/slipway"),
            None,
            "/etc/slipway is not in the allow-list"
        );
        assert_eq!(seen("/opt/slipway"), None, "/opt is not shown to sandboxes");
        assert_eq!(
            seen("/etc/sslx"),
            None,
            "a prefix of a name is not the name"
        );
    }
}
