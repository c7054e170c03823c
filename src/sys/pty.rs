//! Pseudo-terminals: a master/slave pair opened without any path to the slave
//! (`TIOCGPTPEER`), the window size (`TIOCSWINSZ`), and making the slave a process's
//! controlling terminal in a new session (`setsid` + `TIOCSCTTY`) between `fork` and `exec`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;

use nix::fcntl::OFlag;

/// Opens a new pseudo-terminal of `cols` × `rows`: its master and its slave, both
/// close-on-exec from the start (no other thread's `fork` can inherit them) and neither the
/// caller's controlling terminal (`O_NOCTTY`). The slave is opened from the master
/// (`TIOCGPTPEER`, Linux 4.13), never by its `/dev/pts` path.
pub fn open_pair(cols: u16, rows: u16) -> io::Result<(OwnedFd, OwnedFd)> {
    let flags = OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let master = nix::pty::posix_openpt(flags)?;
    nix::pty::grantpt(&master)?;
    nix::pty::unlockpt(&master)?;
    let master = OwnedFd::from(master);
    // SAFETY: TIOCGPTPEER takes an int of open flags and returns a new descriptor of the
    // master's slave, or -1; it reads no memory of ours.
    let slave = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags.bits()) };
    if slave < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    let slave = unsafe { OwnedFd::from_raw_fd(slave as RawFd) };
    set_window_size(master.as_fd(), cols, rows)?;
    Ok((master, slave))
}

/// The window size of the terminal `fd` is (`None` when it is not a terminal): (cols, rows).
pub fn window_size(fd: BorrowedFd<'_>) -> Option<(u16, u16)> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into `size`, which outlives the call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut size) } < 0 {
        return None;
    }
    (size.ws_col > 0 && size.ws_row > 0).then_some((size.ws_col, size.ws_row))
}

/// Sets the window size of the terminal `fd` (a master or a slave); the kernel sends
/// SIGWINCH to the terminal's foreground process group when it changes.
pub fn set_window_size(fd: BorrowedFd<'_>, cols: u16, rows: u16) -> io::Result<()> {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize`, which `size` is, for the duration of the call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &size) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes the calling process the leader of a new session whose controlling terminal is the
/// terminal `fd`, with `fd` as its stdin, stdout and stderr. Async-signal-safe (no
/// allocation): for the child between `fork` and `exec`. The caller must not be a process
/// group leader (`setsid` would fail).
pub(super) fn enter_terminal_session(fd: RawFd) -> io::Result<()> {
    // SAFETY: setsid, ioctl(TIOCSCTTY, 0) and dup2 take and return integers only; TIOCSCTTY
    // with 0 never steals a terminal that is another session's.
    unsafe {
        if libc::setsid() < 0 || libc::ioctl(fd, libc::TIOCSCTTY, 0) < 0 {
            return Err(io::Error::last_os_error());
        }
        for target in 0..3 {
            if fd != target && libc::dup2(fd, target) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Makes `command`'s child the leader of a new session whose controlling terminal is its
/// stdin, which must be a terminal (the caller sets stdin, stdout and stderr to it). The
/// command must not also ask for a process group (`process_group`): the new session is one.
pub fn controlling_terminal_at_exec(command: &mut std::process::Command) {
    // SAFETY: between fork and exec only setsid, ioctl and dup2 (async-signal-safe) run,
    // with no allocation; std has put the terminal at 0 before this hook.
    unsafe {
        command.pre_exec(|| enter_terminal_session(0));
    }
}
