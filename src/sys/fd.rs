//! Descriptors: claiming one the process was started with by its number (systemd's listeners,
//! the sandbox helper's pipes) and handing an owned one to the tokio reactor.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use tokio::io::unix::AsyncFd;

/// Every number claimed so far: a second claim on one would make two owners.
static CLAIMED: Mutex<Vec<RawFd>> = Mutex::new(Vec::new());

/// Takes ownership of the descriptor `fd` (3 or above, open) that this process was started
/// with, and marks it close-on-exec so that no child inherits it. A number is claimed at
/// most once; a second claim is refused. Only for descriptors a parent passed on purpose
/// (systemd's `LISTEN_FDS`, the helper's fixed numbers), claimed before anything else in
/// the process could have opened that number.
pub fn claim_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 3 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("fd {fd} is not an inherited descriptor (they start at 3)"),
        ));
    }
    let mut claimed = CLAIMED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if claimed.contains(&fd) {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("fd {fd} was already taken"),
        ));
    }
    // SAFETY: F_GETFD/F_SETFD only read and set the descriptor's flags; an fd that is not
    // open fails with EBADF, which is returned.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    claimed.push(fd);
    // SAFETY: the fd is open (checked above), was handed to this process by its parent for
    // it to own (the caller's contract), and is claimed at most once (CLAIMED).
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Registers `fd` with the current tokio runtime (it must be called inside one), for
/// waiting on its readiness.
pub fn async_fd(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    // SAFETY: an `OwnedFd` owns an open descriptor that nothing else closes or replaces,
    // and it always returns the same number, for as long as the `AsyncFd` owns it.
    unsafe { AsyncFd::register(fd) }.map_err(io::Error::from)
}
