//! The sandbox init: PID 1 of the sandbox's pid namespace, cloned by the helper
//! ([`super::exec`]).
//!
//! It waits for the helper's go (maps, cgroups and network are in place), becomes uid/gid
//! 1000, arms its parent-death signal, enters a fresh cgroup namespace, builds its root
//! ([`super::mounts`]), drops every capability, sets no_new_privs and installs the seccomp
//! filters. Then it runs `sh -c <command>` as its only child (under a terminal: in a session
//! of its own whose controlling terminal is the step's, its stdin, stdout and stderr),
//! forwards SIGTERM/SIGINT/SIGHUP to that child's process group, reaps orphans, and when the
//! command exits reports its status to the helper and exits, which makes the kernel kill
//! everything else in the sandbox. After a forwarded signal (a stop) it waits for every
//! process to exit first, so an app under `sh -c` finishes its own graceful shutdown within
//! the helper's grace period.

use std::ffi::CString;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sched::CloneFlags;
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{Gid, Pid, Uid};

use super::mounts::{self, RootPlan};
use super::seccomp::{self, Filters};
use super::spec::{HelperSpec, SANDBOX_ID};
use crate::sys::process::GroupCommand;

/// The exit code of a sandbox that could not be built (the reason is on stderr): the
/// helper's ([`super::exec`]) and this init's alike.
pub const SETUP_FAILED: i32 = 125;

/// What the clone needs; it owns its copy of the helper's memory.
pub(crate) struct ChildContext {
    pub spec: HelperSpec,
    pub plan: Option<RootPlan>,
    pub filters: Filters,
    pub go_read: OwnedFd,
    pub status_write: OwnedFd,
    /// The slave of the step's terminal ([`super::spec::TTY_FD`]), for the command.
    pub terminal: Option<OwnedFd>,
}

/// How the command ended, as the init reports it to the helper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExitReport {
    Code(i32),
    Signal(i32),
}

impl ExitReport {
    fn encode(self) -> [u8; 5] {
        let (kind, value) = match self {
            ExitReport::Code(code) => (b'c', code),
            ExitReport::Signal(signal) => (b's', signal),
        };
        let mut bytes = [kind, 0, 0, 0, 0];
        bytes[1..].copy_from_slice(&value.to_le_bytes());
        bytes
    }

    /// `code N` or `signal N`: the exit file's format.
    pub(crate) fn to_text(self) -> String {
        match self {
            ExitReport::Code(code) => format!("code {code}\n"),
            ExitReport::Signal(signal) => format!("signal {signal}\n"),
        }
    }

    pub(crate) fn from_text(text: &str) -> Option<ExitReport> {
        let (kind, value) = text.trim().split_once(' ')?;
        let value = value.parse().ok()?;
        match kind {
            "code" => Some(ExitReport::Code(value)),
            "signal" => Some(ExitReport::Signal(value)),
            _ => None,
        }
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<ExitReport> {
        let value = i32::from_le_bytes(bytes.get(1..5)?.try_into().ok()?);
        match bytes[0] {
            b'c' => Some(ExitReport::Code(value)),
            b's' => Some(ExitReport::Signal(value)),
            _ => None,
        }
    }
}

/// Runs in the clone (which has closed the helper's own descriptors first); never returns
/// on success.
pub(crate) fn sandbox_main(context: &mut ChildContext) -> isize {
    if let Err(error) = prepare(context) {
        let _ = writeln!(io::stderr(), "slipway sandbox: {error}");
        return SETUP_FAILED as isize;
    }
    run_init(context)
}

fn prepare(context: &mut ChildContext) -> io::Result<()> {
    SigSet::empty().thread_set_mask()?;
    let mut go = [0u8; 1];
    if nix::unistd::read(context.go_read.as_fd(), &mut go)? != 1 {
        return Err(io::Error::other(
            "the helper exited before the sandbox started",
        ));
    }
    let id = SANDBOX_ID;
    nix::unistd::setresgid(Gid::from_raw(id), Gid::from_raw(id), Gid::from_raw(id))?;
    nix::unistd::setresuid(Uid::from_raw(id), Uid::from_raw(id), Uid::from_raw(id))?;
    // Credential changes reset the parent-death signal: arm it after the last one, then make
    // sure the helper did not die in between (its end of the go pipe would hang up).
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    let mut lifeline = [PollFd::new(context.go_read.as_fd(), PollFlags::POLLIN)];
    let hung_up = |entry: &PollFd<'_>| {
        entry
            .revents()
            .is_some_and(|flags| flags.contains(PollFlags::POLLHUP))
    };
    if poll(&mut lifeline, PollTimeout::ZERO).is_ok_and(|ready| ready > 0) && hung_up(&lifeline[0])
    {
        return Err(io::Error::other("the helper died"));
    }
    nix::sched::unshare(CloneFlags::CLONE_NEWCGROUP)?;
    let plan = context
        .plan
        .take()
        .ok_or_else(|| io::Error::other("no root plan"))?;
    mounts::build_root(plan)?;
    nix::unistd::sethostname(&context.spec.hostname)?;
    drop_privileges(&context.filters)
}

/// Capabilities are not cleared by the uid change in this layout (the process was never uid
/// 0 inside), so every set is emptied explicitly; then no_new_privs and seccomp.
fn drop_privileges(filters: &Filters) -> io::Result<()> {
    crate::sys::caps::drop_all()?;
    nix::sys::prctl::set_no_new_privs().map_err(|errno| {
        let error = io::Error::from(errno);
        io::Error::new(error.kind(), format!("set no_new_privs: {error}"))
    })?;
    seccomp::install(filters).map_err(|error| io::Error::other(format!("install seccomp: {error}")))
}

const FORWARDED: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];

fn run_init(context: &ChildContext) -> isize {
    // A session of its own: no controlling terminal, so nothing in the sandbox can reach the
    // terminal an operator started the daemon from (TIOCSTI would type into a root shell).
    if let Err(error) = nix::unistd::setsid() {
        let _ = writeln!(io::stderr(), "slipway sandbox: setsid: {error}");
        return SETUP_FAILED as isize;
    }
    // No core dumps: the host's core handler would run as root on sandbox memory.
    if let Err(error) =
        nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0)
    {
        let _ = writeln!(io::stderr(), "slipway sandbox: RLIMIT_CORE: {error}");
        return SETUP_FAILED as isize;
    }
    // The kernel drops signals a namespace init has no handler for; install one, keep the
    // signals blocked and collect them synchronously.
    let mut waited = SigSet::empty();
    for signal in FORWARDED {
        let _ = crate::sys::signal::install_noop_handler(signal);
        waited.add(signal);
    }
    waited.add(Signal::SIGCHLD);
    if let Err(error) = waited.thread_block() {
        let _ = writeln!(io::stderr(), "slipway sandbox: block signals: {error}");
        return SETUP_FAILED as isize;
    }
    let (program, argv, envp) = match command_line(&context.spec) {
        Ok(parts) => parts,
        Err(error) => {
            let _ = writeln!(io::stderr(), "slipway sandbox: {error}");
            return SETUP_FAILED as isize;
        }
    };
    let shell = GroupCommand {
        program: &program,
        argv: &argv,
        envp: &envp,
        dir: "/app",
        exec_failed: b"slipway sandbox: cannot run /bin/sh\n",
        terminal: context.terminal.as_ref().map(|slave| slave.as_raw_fd()),
    };
    // The init is single-threaded.
    let command = match crate::sys::process::fork_exec_in_new_group(&shell) {
        Ok(child) => child,
        Err(error) => {
            let _ = writeln!(io::stderr(), "slipway sandbox: fork: {error}");
            return SETUP_FAILED as isize;
        }
    };
    // Under a terminal the command made itself a session (and group) leader; a setpgid
    // from here could come first and make its setsid fail.
    if context.terminal.is_none() {
        let _ = nix::unistd::setpgid(command, command);
    }
    supervise(context, command, &waited)
}

/// Forwards the stop signals to the command's process group and reaps every child until the
/// command ended (and, after a stop, everything it started); then [`finish`]es.
fn supervise(context: &ChildContext, command: Pid, waited: &SigSet) -> ! {
    // Once a stop was asked for (a forwarded signal), the command's exit does not end the
    // sandbox at once: what it started (`sh -c` leaves the app as its child) gets to finish
    // its own shutdown, until nothing is left or the helper's grace period kills it all.
    let mut stopping = false;
    let mut ended: Option<ExitReport> = None;
    loop {
        let Ok(signal) = waited.wait() else { continue };
        if signal != Signal::SIGCHLD {
            stopping = true;
            if killpg(command, signal).is_err() {
                let _ = nix::sys::signal::kill(command, signal);
            }
            continue;
        }
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == command => {
                    ended = Some(ExitReport::Code(code))
                }
                Ok(WaitStatus::Signaled(pid, signal, _)) if pid == command => {
                    ended = Some(ExitReport::Signal(signal as i32))
                }
                Ok(WaitStatus::StillAlive) => break,
                Err(nix::errno::Errno::ECHILD) => {
                    if let Some(report) = ended.take() {
                        finish(context, report);
                    }
                    break;
                }
                Err(_) => break,
                Ok(_) => continue,
            }
            if let (Some(report), false) = (ended, stopping) {
                finish(context, report);
            }
        }
    }
}

/// Reports how the command ended and leaves: leaving the init ends the pid namespace, and the
/// kernel kills whatever is left.
fn finish(context: &ChildContext, report: ExitReport) -> ! {
    let _ = nix::unistd::write(context.status_write.as_fd(), &report.encode());
    crate::sys::process::exit_immediately(0)
}

type CommandLine = (CString, Vec<CString>, Vec<CString>);

fn command_line(spec: &HelperSpec) -> io::Result<CommandLine> {
    let c_string = |text: &str| {
        CString::new(text).map_err(|_| io::Error::other("a NUL byte in the command or environment"))
    };
    let argv = vec![c_string("sh")?, c_string("-c")?, c_string(&spec.command)?];
    let mut envp = Vec::with_capacity(spec.env.len() + 2);
    for (name, value) in &spec.env {
        envp.push(c_string(&format!("{name}={value}"))?);
    }
    if !spec.env.iter().any(|(name, _)| name == "PATH") {
        envp.push(c_string("PATH=/usr/local/bin:/usr/bin:/bin")?);
    }
    if !spec.env.iter().any(|(name, _)| name == "HOME") {
        envp.push(c_string("HOME=/tmp")?);
    }
    Ok((c_string("/bin/sh")?, argv, envp))
}

#[cfg(test)]
mod tests {
    use super::ExitReport;

    #[test]
    fn exit_files_round_trip() {
        for report in [
            ExitReport::Code(0),
            ExitReport::Code(3),
            ExitReport::Signal(9),
        ] {
            assert_eq!(ExitReport::from_text(&report.to_text()), Some(report));
        }
        assert_eq!(ExitReport::from_text("exited"), None);
    }

    #[test]
    fn exit_reports_round_trip() {
        for report in [
            ExitReport::Code(0),
            ExitReport::Code(137),
            ExitReport::Signal(9),
        ] {
            assert_eq!(ExitReport::decode(&report.encode()), Some(report));
        }
        assert_eq!(ExitReport::decode(b"x"), None);
    }
}
