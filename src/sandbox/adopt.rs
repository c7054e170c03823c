//! Apps outlive the daemon: what a daemon records about an app's running sandbox so that the
//! next daemon can adopt it, and the process-identity checks that make adoption safe.
//!
//! An app's `sandbox-exec` helper is the app's anchor: it ignores the daemon's death, holds
//! the read ends of the app's log pipes (named pipes next to its exit file, so the app never
//! writes into a pipe nobody holds; while no daemon reads, a full 1 MiB pipe makes the app's
//! writes wait), and records the command's exit in a file. A new daemon finds the helper by
//! pid, proves it is the same process by its start time (a reused pid has another) through a
//! pidfd, opens the named pipes again, and waits for its exit through the pidfd. (Named pipes,
//! not `pidfd_getfd`: a hardened unit denies that call with the rest of `@debug`.)
//! Called by [`super::ns`]; the supervisor stores the [`AppHandle`] the runner hands out.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{fcntl, FcntlArg};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use serde::{Deserialize, Serialize};

use super::init::ExitReport;
use super::Exit;

/// Everything the next daemon needs to adopt a running app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppHandle {
    /// The app's `slipway sandbox-exec` helper.
    pub helper_pid: i32,
    /// The helper's start time (clock ticks after boot, `/proc/<pid>/stat` field 22).
    pub start_time: u64,
    /// The step cgroup's name in the runner instance.
    pub cgroup: String,
    /// The /30 link's index in `sandbox.subnet`.
    pub link_index: u32,
    /// Where the helper writes how the command ended.
    pub exit_file: PathBuf,
    /// The link was the step's pinned one (`StepSpec::link`): it stays taken when the
    /// adopted step ends.
    #[serde(default)]
    pub pinned_link: bool,
    /// The step's `StepSpec::serve_port`: its endpoint stays in the host's served set.
    #[serde(default)]
    pub serve_port: Option<u16>,
}

impl AppHandle {
    /// Whether the helper still runs (the same process, not a reuse of its pid).
    pub fn is_alive(&self) -> bool {
        start_time(self.helper_pid) == Some(self.start_time)
    }
}

/// A process's start time, or `None` when there is no such process or it has exited (a
/// zombie that its new parent has not reaped yet is not alive).
pub(super) fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// A pidfd for the handle's helper, opened only if it is the same process.
pub(super) fn open_identified(handle: &AppHandle) -> io::Result<OwnedFd> {
    let gone = || {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("the app's sandbox (pid {}) is gone", handle.helper_pid),
        )
    };
    if !handle.is_alive() {
        return Err(gone());
    }
    let pidfd = crate::sys::process::pidfd_open(handle.helper_pid)?;
    // Checked again with the pidfd held: the pid cannot be reused from here on.
    if !handle.is_alive() {
        return Err(gone());
    }
    Ok(pidfd)
}

/// The named pipe of an app's `stream` (`stdout` or `stderr`), next to its exit file.
pub(super) fn fifo_path(exit_file: &Path, stream: &str) -> PathBuf {
    exit_file.with_extension(stream)
}

/// Makes a fresh named pipe (0600) and opens it: (read end, write end).
pub(super) fn make_fifo(path: &Path) -> io::Result<(OwnedFd, OwnedFd)> {
    let _ = std::fs::remove_file(path);
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))?;
    // The read end first (non-blocking, so the open returns); then the write end opens at once.
    let read = open_fifo(path)?;
    let write = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)?;
    Ok((read, OwnedFd::from(write)))
}

/// Opens an app's named pipe for reading (a daemon adopting it).
pub(super) fn open_fifo(path: &Path) -> io::Result<OwnedFd> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    Ok(OwnedFd::from(file))
}

/// Stops apps left running when no daemon runs (`slipway stop-apps`): SIGTERM to each
/// helper (which passes it on to the app), up to `grace` for them to exit, then the sandbox
/// is killed. Returns how many were still running.
pub fn stop_outliving(handles: &[AppHandle], grace: std::time::Duration) -> usize {
    use nix::sys::signal::Signal;
    let pidfds: Vec<OwnedFd> = handles
        .iter()
        .filter_map(|handle| open_identified(handle).ok())
        .collect();
    let wait_all = |within: std::time::Duration| {
        let deadline = std::time::Instant::now() + within;
        while pidfds.iter().any(|fd| !exited(fd)) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    for pidfd in &pidfds {
        let _ = crate::sys::process::pidfd_send_signal(pidfd.as_fd(), Signal::SIGTERM);
    }
    wait_all(grace);
    // SIGUSR1: the helper kills the sandbox init and reports; SIGKILL if even that hangs.
    for signal in [Signal::SIGUSR1, Signal::SIGKILL] {
        for pidfd in pidfds.iter().filter(|fd| !exited(fd)) {
            let _ = crate::sys::process::pidfd_send_signal(pidfd.as_fd(), signal);
        }
        wait_all(std::time::Duration::from_secs(2));
    }
    pidfds.len()
}

/// Whether the process behind `pidfd` has exited (its pidfd polls readable).
fn exited(pidfd: &OwnedFd) -> bool {
    let mut entry = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    poll(&mut entry, PollTimeout::ZERO).is_ok_and(|ready| ready > 0)
}

/// How an adopted app ended, from its helper's exit file (taken: the file is removed).
pub(super) fn take_exit(path: &Path) -> Exit {
    let report = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| ExitReport::from_text(&text));
    let _ = std::fs::remove_file(path);
    match report {
        Some(ExitReport::Code(code)) => Exit::Code(code),
        Some(ExitReport::Signal(signal)) => Exit::Signal(signal),
        // The helper itself was killed before it could write.
        None => Exit::Signal(libc::SIGKILL),
    }
}

/// Makes a pipe's buffer `bytes` large (at most the system's `pipe-max-size`), so that an app
/// keeps running through a daemon restart while it logs.
pub(super) fn grow_pipe(fd: &OwnedFd, bytes: i32) {
    // Failure leaves the default size.
    let _ = fcntl(fd, FcntlArg::F_SETPIPE_SZ(bytes));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_start_time_is_read_and_a_wrong_one_is_not_us() {
        let pid = std::process::id() as i32;
        let ours = start_time(pid).expect("our own /proc/self/stat");
        let handle = AppHandle {
            helper_pid: pid,
            start_time: ours,
            cgroup: "x".into(),
            link_index: 0,
            exit_file: "/nonexistent".into(),
            pinned_link: false,
            serve_port: None,
        };
        assert!(handle.is_alive());
        assert!(open_identified(&handle).is_ok());
        let reused = AppHandle {
            start_time: ours + 1,
            ..handle
        };
        assert!(!reused.is_alive(), "another start time is another process");
        assert!(open_identified(&reused).is_err());
        assert_eq!(start_time(i32::MAX), None);
    }

    #[test]
    fn a_missing_exit_file_reads_as_killed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.exit");
        std::fs::write(&path, ExitReport::Code(3).to_text()).unwrap();
        assert_eq!(take_exit(&path), Exit::Code(3));
        assert!(!path.exists(), "the report is taken");
        assert_eq!(take_exit(&path), Exit::Signal(libc::SIGKILL));
    }
}
