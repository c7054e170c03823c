//! Processes: `clone` into new namespaces and `fork` + `exec` of one command (both only for a
//! single-threaded caller: the `sandbox-exec` helper and the sandbox init), `_exit`, pidfds,
//! and the two jobs the daemon does between `fork` and `exec` of a helper (descriptors at
//! fixed numbers, entering a network namespace).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;

use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, Signal};
use nix::unistd::{ForkResult, Pid};

/// Clones the calling process into the new namespaces `namespaces` (`CLONE_NEW*` flags only;
/// any other flag is refused with `EINVAL`). The child runs on `stack` with its own copy of
/// memory and descriptors: it closes `close_first` (descriptors only the parent may hold),
/// then runs `child`, whose return value is its exit code. The parent gets `SIGCHLD` when
/// it exits.
///
/// Contract: the calling process is single-threaded (so the child's copy of memory holds no
/// lock another thread held), `child` fits in `stack`, and the child ends in `execve` or
/// [`exit_immediately`] or by returning (no destructor of the parent's values runs there).
pub fn clone_single_threaded(
    namespaces: CloneFlags,
    stack: &mut [u8],
    close_first: Vec<RawFd>,
    mut child: impl FnMut() -> isize,
) -> nix::Result<Pid> {
    let only_namespaces = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWCGROUP
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNET;
    if !only_namespaces.contains(namespaces) {
        return Err(Errno::EINVAL);
    }
    let run = move || {
        for fd in &close_first {
            // SAFETY: the child has its own descriptor table (no CLONE_FILES): closing its
            // copy leaves the parent's open, and no value that owns this number is ever
            // dropped in the child (it ends in execve or _exit).
            unsafe { libc::close(*fd) };
        }
        child()
    };
    // SAFETY: the caller is single-threaded (contract); without CLONE_VM the child runs on
    // its own copy of memory, on `stack`, and the flags are namespace flags only (checked).
    unsafe { nix::sched::clone(Box::new(run), stack, namespaces, Some(libc::SIGCHLD)) }
}

/// A command for [`fork_exec_in_new_group`]: `program` with `argv` and `envp`, started in
/// `dir`; if it cannot be executed, `exec_failed` is written to stderr and the child exits
/// with 127.
pub struct GroupCommand<'a> {
    pub program: &'a CStr,
    pub argv: &'a [CString],
    pub envp: &'a [CString],
    pub dir: &'a str,
    pub exec_failed: &'a [u8],
    /// A terminal for the command: instead of a process group of its own, the child leads a
    /// new session with this terminal as its controlling terminal, stdin, stdout and stderr.
    pub terminal: Option<RawFd>,
}

/// Forks a child that becomes the leader of a new process group (with `command.terminal`:
/// of a new session on that terminal, see [`super::pty`]), unblocks every signal, changes
/// to `command.dir` and executes `command.program`. Returns its pid. With a terminal the
/// caller must not `setpgid` the child (the child's `setsid` would then fail).
///
/// Contract: the calling process is single-threaded (the sandbox init), so the child may
/// allocate before `execve`.
pub fn fork_exec_in_new_group(command: &GroupCommand<'_>) -> nix::Result<Pid> {
    // SAFETY: the caller is single-threaded (contract); the child runs only the fixed code
    // below and ends in execve or _exit.
    match unsafe { nix::unistd::fork() }? {
        ForkResult::Child => {
            match command.terminal {
                None => {
                    let _ = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0));
                }
                Some(terminal) => {
                    if super::pty::enter_terminal_session(terminal).is_err() {
                        let message = b"slipway sandbox: cannot take the step's terminal\n";
                        // SAFETY: as below.
                        unsafe {
                            libc::write(2, message.as_ptr().cast(), message.len());
                            libc::_exit(126)
                        }
                    }
                }
            }
            let _ = SigSet::empty().thread_set_mask();
            let _ = nix::unistd::chdir(command.dir);
            let _ = nix::unistd::execve(command.program, command.argv, command.envp);
            let message = command.exec_failed;
            // SAFETY: write and _exit are async-signal-safe; `message` is a valid buffer of
            // its length.
            unsafe {
                libc::write(2, message.as_ptr().cast(), message.len());
                libc::_exit(127)
            }
        }
        ForkResult::Parent { child } => Ok(child),
    }
}

/// Which side of [`fork_detached`] the caller is on.
#[derive(Debug, PartialEq, Eq)]
pub enum Detached {
    /// The calling process, once the intermediate child is reaped.
    Caller,
    /// The detached grandchild.
    Detached,
}

/// Starts a detached copy of the calling process: a child forks a grandchild and exits at
/// once (reaped here), so the grandchild is never a child of the caller nor of what the
/// caller later `exec`s. It is re-parented to the init of its PID namespace (in a container:
/// the engine's init, which reaps it, and whose end ends it), and leads a session of its own
/// (a signal to the caller's process group does not reach it). The caller goes on even when
/// a fork fails (then there is no grandchild).
///
/// Contract: the calling process is single-threaded (the grandchild's copy of memory holds
/// no lock another thread held); the grandchild runs on as a whole process and ends with
/// [`exit_immediately`] (it shares the caller's unflushed stdio buffers).
pub fn fork_detached() -> Detached {
    // SAFETY: the caller is single-threaded (contract).
    match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Parent { child }) => {
            while nix::sys::wait::waitpid(child, None) == Err(Errno::EINTR) {}
            Detached::Caller
        }
        Err(_) => Detached::Caller,
        Ok(ForkResult::Child) => {
            // SAFETY: the child is single-threaded too (only the forking thread is copied).
            match unsafe { nix::unistd::fork() } {
                Ok(ForkResult::Child) => {
                    let _ = nix::unistd::setsid();
                    Detached::Detached
                }
                _ => exit_immediately(0),
            }
        }
    }
}

/// Ends the process at once with `code`: no exit handlers, no flushing of stdio buffers, no
/// destructors (`_exit`).
pub fn exit_immediately(code: i32) -> ! {
    // SAFETY: _exit takes a status and never returns; skipping destructors is safe.
    unsafe { libc::_exit(code) }
}

/// A pidfd of the process `pid` (`pidfd_open`), close-on-exec.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `signal` to the process behind `pidfd` (`pidfd_send_signal`), which cannot hit a
/// reused pid.
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, signal: Signal) -> io::Result<()> {
    // SAFETY: pidfd_send_signal with a null siginfo sends a plain signal.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal as i32,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `command`'s child start with each `(fd, number)` of `held` (at most three; more
/// are ignored) open at `number`, not close-on-exec. `fd` must stay open until the command
/// is spawned.
pub fn dup_at_exec(command: &mut std::process::Command, held: Vec<(RawFd, RawFd)>) {
    // SAFETY: between fork and exec only fcntl and dup2 (async-signal-safe) run, on a fixed
    // array (no allocation); dup2 clears close-on-exec on the targets.
    unsafe {
        command.pre_exec(move || {
            // Copies above the targets first: a source may itself be numbered like a target.
            let mut copies = [0; 3];
            for (copy, (from, _)) in copies.iter_mut().zip(&held) {
                *copy = libc::fcntl(*from, libc::F_DUPFD_CLOEXEC, 10);
                if *copy < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            for (copy, (_, to)) in copies.into_iter().zip(&held) {
                if libc::dup2(copy, *to) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Makes `command`'s child enter the network namespace `netns` before it executes.
/// `netns` must stay open until the command is spawned.
pub fn enter_netns_at_exec(command: &mut std::process::Command, netns: BorrowedFd<'_>) {
    let raw = netns.as_raw_fd();
    // SAFETY: between fork and exec only setns (async-signal-safe) runs, and it touches only
    // the child's own namespaces.
    unsafe {
        command.pre_exec(move || {
            if libc::setns(raw, libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
