//! The `slipway sandbox-exec` helper: a single-threaded process the daemon execs for every
//! sandboxed step (a multi-threaded tokio process must not build namespaces after `fork`).
//!
//! It reads the [`HelperSpec`] from stdin (the pipe then stays open as the daemon's lifeline),
//! clones the host trees the sandbox will see, `clone()`s the sandbox init (see
//! [`super::init`]) into new user, mount, pid, net, ipc and uts namespaces, writes its uid/gid
//! maps, puts it in the step's cgroups, wires its veth, installs the firewall inside its
//! network namespace ([`super::firewall`]), lets it go, and tells the daemon that the
//! sandbox's address can be reached (one byte on [`spec::REACHABLE_FD`]). Then it relays
//! signals (SIGTERM/SIGINT/SIGHUP forwarded, SIGUSR1 = kill) and mirrors the command's exit as
//! its own.
//! A step under a terminal gets its slave at [`spec::TTY_FD`] (the helper's stdout and
//! stderr are that terminal too); the init gives it to the command.
//! If the daemon dies (stdin hangs up) a build's sandbox is killed, while an app's goes on
//! (its spec names an exit file): the helper keeps holding the app's log pipes so that the
//! next daemon can adopt it, and records the command's exit in that file. If the helper dies,
//! the init's parent-death signal kills the sandbox.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sched::CloneFlags;
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{Gid, Pid};

use super::init::{self, ChildContext, ExitReport, SETUP_FAILED};
use super::spec::{self, HelperSpec, SANDBOX_ID};
use super::{firewall, mounts, net, seccomp};

/// Entry point of the hidden `slipway sandbox-exec` subcommand. Call it before anything
/// starts a thread (no tokio runtime, no tracing worker).
pub fn sandbox_exec_main() -> ! {
    let report = match run() {
        Ok(report) => report,
        Err(error) => {
            let _ = writeln!(io::stderr(), "slipway sandbox: {error}");
            ExitReport::Code(SETUP_FAILED)
        }
    };
    mirror(report)
}

fn run() -> io::Result<ExitReport> {
    // Keep the spec pipe as the lifeline; the sandbox gets /dev/null as stdin.
    // A close-on-exec duplicate numbered 3 or above (`F_DUPFD_CLOEXEC`).
    let lifeline = io::stdin().as_fd().try_clone_to_owned()?;
    let reachable = take_reachable_fd()?;
    let spec = spec::decode(File::from(lifeline.try_clone()?))?;
    // The slave of the step's terminal, for the command: the sandbox init keeps it.
    let terminal = spec.tty.then(take_tty_fd).transpose()?;
    let null = File::open("/dev/null")?;
    nix::unistd::dup2_stdin(&null).map_err(io::Error::from)?;
    drop(null);

    if !nix::unistd::geteuid().is_root() {
        return Err(io::Error::other(
            "sandbox-exec must run as root (it is started by the daemon)",
        ));
    }
    // The sandbox must not inherit the host root's supplementary groups: with setgroups
    // denied inside, it could never drop them.
    nix::unistd::setgroups(&[] as &[Gid]).map_err(io::Error::from)?;

    let plan = mounts::plan(&spec)?;
    let filters =
        seccomp::compile().map_err(|error| io::Error::other(format!("seccomp: {error}")))?;
    let (go_read, go_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (status_read, status_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;

    let signals = relayed_signals()?;

    // An app's helper holds the read ends of its log pipes: the sandbox must not.
    let mut helper_only = vec![
        go_write.as_raw_fd(),
        status_read.as_raw_fd(),
        lifeline.as_raw_fd(),
        signals.as_fd().as_raw_fd(),
        reachable.as_raw_fd(),
    ];
    if spec.exit_file.is_some() {
        helper_only.extend(spec::HELD_LOG_FDS);
    }
    let mut context = ChildContext {
        spec,
        plan: Some(plan),
        filters,
        go_read,
        status_write,
        terminal,
    };
    let pid = clone_sandbox(&mut context, helper_only)?;
    let ChildContext {
        spec,
        plan,
        go_read,
        status_write,
        terminal,
        ..
    } = context;
    drop((plan, go_read, status_write, terminal));

    if let Err(error) = release(&spec, pid, go_write.as_fd()) {
        let _ = kill(pid, Signal::SIGKILL);
        let _ = waitpid(pid, None);
        return Err(error);
    }
    // The link is up and the firewall in place: the daemon may probe the sandbox's address
    // now. A daemon that already went away does not matter here.
    let _ = nix::unistd::write(&reachable, b"r");
    drop(reachable);
    let detached = spec.exit_file.is_some();
    let report = supervise(pid, &signals, &lifeline, detached, status_read, go_write)?;
    if let Some(path) = &spec.exit_file {
        write_exit_file(path, report)?;
    }
    Ok(report)
}

/// The signals the helper relays to the sandbox (and SIGCHLD), blocked and read from a
/// signalfd.
fn relayed_signals() -> io::Result<SignalFd> {
    let mut relayed = SigSet::empty();
    for signal in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR1,
        Signal::SIGCHLD,
    ] {
        relayed.add(signal);
    }
    relayed.thread_block().map_err(io::Error::from)?;
    Ok(SignalFd::with_flags(
        &relayed,
        SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK,
    )?)
}

/// The sandbox's init, in new user, mount, pid, network, IPC and UTS namespaces; it closes
/// `helper_only` first.
fn clone_sandbox(context: &mut ChildContext, helper_only: Vec<i32>) -> io::Result<Pid> {
    let flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    let mut stack = vec![0u8; 1 << 20];
    // This process is single-threaded (see `sandbox_exec_main`); the init ends in execve or
    // _exit.
    crate::sys::process::clone_single_threaded(flags, &mut stack, helper_only, || {
        init::sandbox_main(context)
    })
    .map_err(|errno| io::Error::other(format!("clone the sandbox: {errno}")))
}

/// The write end of the "reachable" pipe the daemon passed at [`spec::REACHABLE_FD`], made
/// close-on-exec so that neither `ip`, `nft` nor the sandbox inherit it.
fn take_reachable_fd() -> io::Result<OwnedFd> {
    // The daemon dup'ed this descriptor for the helper alone; nothing else owns it.
    crate::sys::fd::claim_inherited(spec::REACHABLE_FD).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("the daemon passed no reachable pipe: {error}"),
        )
    })
}

/// The slave of the step's terminal the daemon passed at [`spec::TTY_FD`], made
/// close-on-exec: the sandbox init hands it to the command (and only to it) as its
/// stdin, stdout, stderr and controlling terminal.
fn take_tty_fd() -> io::Result<OwnedFd> {
    // The daemon dup'ed this descriptor for the helper alone; nothing else owns it.
    crate::sys::fd::claim_inherited(spec::TTY_FD).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("the daemon passed no terminal: {error}"),
        )
    })
}

/// Records how an app's command ended, for a daemon that is not the helper's parent. Written
/// to a temporary name and renamed, so a reader never sees half a report.
fn write_exit_file(path: &std::path::Path, report: ExitReport) -> io::Result<()> {
    let temporary = path.with_extension("tmp");
    std::fs::write(&temporary, report.to_text())?;
    std::fs::rename(&temporary, path)
}

/// Makes the clone a sandbox: uid/gid maps, cgroups, network; then the go byte.
fn release(spec: &HelperSpec, pid: Pid, go: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    let proc_dir = format!("/proc/{pid}");
    let map = format!("{SANDBOX_ID} {} 1\n", spec.host_id);
    write_file(&format!("{proc_dir}/setgroups"), "deny")?;
    write_file(&format!("{proc_dir}/uid_map"), &map)?;
    write_file(&format!("{proc_dir}/gid_map"), &map)?;
    for procs in &spec.cgroup_procs {
        std::fs::write(procs, pid.to_string()).map_err(|error| {
            io::Error::new(error.kind(), format!("join {}: {error}", procs.display()))
        })?;
    }
    let netns = File::open(format!("{proc_dir}/ns/net"))?;
    net::setup_veth(&spec.network, pid.as_raw(), &netns)?;
    // The sandbox's own table, in its own namespace: it holds whatever the host's ruleset
    // goes through, and the sandbox (no capabilities) cannot change it.
    let rules = firewall::sandbox_ruleset(
        &spec.network.firewall,
        spec.network.host_address,
        &spec.nameservers,
    );
    firewall::nft_apply(&rules, Some(netns.as_fd()))
        .map_err(|error| io::Error::other(format!("the sandbox's firewall: {error}")))?;
    nix::unistd::write(go, b"g")?;
    Ok(())
}

fn write_file(path: &str, contents: &str) -> io::Result<()> {
    std::fs::write(path, contents)
        .map_err(|error| io::Error::new(error.kind(), format!("write {path}: {error}")))
}

/// Relays signals until the sandbox init exits, then reports how the command ended. `_go`
/// stays open: the init treats its hang-up as the helper's death.
fn supervise(
    pid: Pid,
    signals: &SignalFd,
    lifeline: &OwnedFd,
    outlives_daemon: bool,
    status_read: OwnedFd,
    _go: OwnedFd,
) -> io::Result<ExitReport> {
    let mut status_pipe = File::from(status_read);
    let mut report_bytes = Vec::new();
    let mut lifeline_open = true;
    let mut status_open = true;
    loop {
        let mut fds = vec![poll_entry(signals.as_fd())];
        if lifeline_open {
            fds.push(poll_entry(lifeline.as_fd()));
        }
        if status_open {
            fds.push(poll_entry(status_pipe.as_fd()));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(errno) => return Err(errno.into()),
        }
        // Any event at all (revents != 0), bits nix does not name included.
        let has_events = |entry: &PollFd<'_>| entry.revents().is_none_or(|flags| !flags.is_empty());
        if has_events(&fds[0]) {
            relay_signals(signals, pid);
        }
        let ready: Vec<RawFd> = fds[1..]
            .iter()
            .filter(|entry| has_events(entry))
            .map(|entry| entry.as_fd().as_raw_fd())
            .collect();
        drop(fds);
        for fd in ready {
            if fd == lifeline.as_raw_fd() {
                // The daemon is gone or dropped the step: a build may not outlive it; an app
                // waits for the next daemon to adopt it.
                if !outlives_daemon {
                    let _ = kill(pid, Signal::SIGKILL);
                }
                lifeline_open = false;
            } else {
                let mut buffer = [0u8; 64];
                match status_pipe.read(&mut buffer) {
                    Ok(0) | Err(_) => status_open = false,
                    Ok(count) => report_bytes.extend_from_slice(&buffer[..count]),
                }
            }
        }
        let ended = match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(_, code)) => ExitReport::Code(code),
            Ok(WaitStatus::Signaled(_, signal, _)) => ExitReport::Signal(signal as i32),
            Ok(_) => continue,
            Err(errno) => return Err(errno.into()),
        };
        return Ok(finish(&mut status_pipe, status_open, report_bytes, ended));
    }
}

/// Passes SIGTERM, SIGINT and SIGHUP on to the sandbox's init; SIGUSR1 kills it.
fn relay_signals(signals: &SignalFd, pid: Pid) {
    while let Ok(Some(info)) = signals.read_signal() {
        match Signal::try_from(info.ssi_signo as i32) {
            Ok(Signal::SIGUSR1) => {
                let _ = kill(pid, Signal::SIGKILL);
            }
            Ok(signal @ (Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP)) => {
                let _ = kill(pid, signal);
            }
            _ => {}
        }
    }
}

/// The init reports the command's exit before it exits itself; without a report (setup
/// failed, or the init was killed) the init's own exit stands.
fn finish(
    status_pipe: &mut File,
    open: bool,
    mut bytes: Vec<u8>,
    fallback: ExitReport,
) -> ExitReport {
    if open {
        // Every writer is gone once the init (and with it its pid namespace) has exited.
        let _ = status_pipe.read_to_end(&mut bytes);
    }
    ExitReport::decode(&bytes).unwrap_or(fallback)
}

fn poll_entry(fd: BorrowedFd<'_>) -> PollFd<'_> {
    PollFd::new(fd, PollFlags::POLLIN)
}

/// Ends the helper the way the command ended, so the daemon sees the same exit status.
fn mirror(report: ExitReport) -> ! {
    match report {
        ExitReport::Code(code) => std::process::exit(code),
        ExitReport::Signal(number) => {
            // No core dump for a relay.
            let _ = nix::sys::prctl::set_dumpable(false);
            crate::sys::signal::restore_default(number);
            if let Ok(signal) = Signal::try_from(number) {
                let mut set = SigSet::empty();
                set.add(signal);
                let _ = set.thread_unblock();
                let _ = nix::sys::signal::raise(signal);
            }
            let _ = nix::sys::signal::sigprocmask(
                SigmaskHow::SIG_SETMASK,
                Some(&SigSet::empty()),
                None,
            );
            std::process::exit(128 + number)
        }
    }
}
