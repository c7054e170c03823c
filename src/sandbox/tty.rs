//! A step's terminal, for interactive one-off runs (`python manage.py shell`): when
//! [`super::StepSpec::tty`] is set, the runner opens a pseudo-terminal (`crate::sys::pty`),
//! the step's command gets its slave as stdin, stdout, stderr and controlling terminal (a
//! session of its own, so ^C and job control reach its foreground group), and the daemon
//! keeps the master as a [`Terminal`]: asynchronous reads and writes on the tokio reactor,
//! and [`Terminal::resize`].
//!
//! The slave reaches a namespaced step only as an inherited descriptor
//! ([`super::spec::TTY_FD`]): no `/dev/pts` is mounted in the sandbox, and TIOCSTI stays
//! refused by seccomp. The master is close-on-exec from its creation: no child inherits it.
//! Only builds and one-off steps get one: an app outlives the daemon, its terminal would not.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use serde::{Deserialize, Serialize};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{StepKind, StepSpec};

/// A terminal's window size, in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtySize {
    pub cols: u16,
    pub rows: u16,
}

/// The daemon's end (the master) of a step's terminal. Reading it gives what the step
/// writes (with the terminal's own echo of the input); writing it types into the step.
/// Reading ends (EOF) once every holder of the slave, the step's processes, has exited.
/// Both directions work through a shared reference too, so one task can read while
/// another writes: `AsyncRead` and `AsyncWrite` are implemented for `&Terminal`.
pub struct Terminal {
    master: AsyncFd<OwnedFd>,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal").finish_non_exhaustive()
    }
}

impl Terminal {
    /// A new terminal of `size` and its slave, for the step. Inside a tokio runtime.
    pub(crate) fn open(size: TtySize) -> io::Result<(Terminal, OwnedFd)> {
        let (master, slave) = crate::sys::pty::open_pair(size.cols, size.rows)?;
        let flags = nix::fcntl::fcntl(&master, nix::fcntl::FcntlArg::F_GETFL)?;
        let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&master, nix::fcntl::FcntlArg::F_SETFL(flags))?;
        let master = crate::sys::fd::async_fd(master)?;
        Ok((Terminal { master }, slave))
    }

    /// Changes the window size; the kernel sends SIGWINCH to the step's foreground group.
    pub fn resize(&self, size: TtySize) -> io::Result<()> {
        crate::sys::pty::set_window_size(self.master.get_ref().as_fd(), size.cols, size.rows)
    }

    fn poll_read_master(
        &self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.master.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|master| Ok(nix::unistd::read(master.get_ref(), unfilled)?)) {
                Ok(Ok(count)) => {
                    buf.advance(count);
                    return Poll::Ready(Ok(()));
                }
                // Linux answers EIO once no slave is open any more: the end of the output.
                Ok(Err(error)) if error.raw_os_error() == Some(libc::EIO) => {
                    return Poll::Ready(Ok(()))
                }
                Ok(Err(error)) => return Poll::Ready(Err(error)),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_write_master(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.master.poll_write_ready(cx))?;
            match guard.try_io(|master| Ok(nix::unistd::write(master.get_ref(), buf)?)) {
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncRead for &Terminal {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.poll_read_master(cx, buf)
    }
}

impl AsyncWrite for &Terminal {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_master(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncRead for Terminal {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.poll_read_master(cx, buf)
    }
}

impl AsyncWrite for Terminal {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_master(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The terminal `spec` asks for, if any, and the slave to hand its command. Refused for an
/// app: it outlives the daemon, which holds the master.
pub(crate) fn open_for(spec: &StepSpec) -> io::Result<Option<(Terminal, OwnedFd)>> {
    let Some(size) = spec.tty else {
        return Ok(None);
    };
    if let StepKind::App { .. } = spec.kind {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an app never runs under a terminal (it outlives the daemon that would hold it)",
        ));
    }
    Terminal::open(size).map(Some)
}
