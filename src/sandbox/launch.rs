//! Starting one `slipway sandbox-exec` helper, for [`super::ns`]: what it is told on its
//! stdin pipe ([`helper_spec`]), where its output goes (plain pipes for a build, named pipes
//! for an app — see [`super::adopt`] — or the slave of the step's terminal, see
//! [`super::tty`]) and the descriptors it starts with at fixed numbers
//! ([`spec::pass_fds`]). Everything else the daemon holds, the terminal's master included,
//! is close-on-exec.

use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::adopt;
use super::firewall::FirewallSpec;
use super::net;
use super::shared::Shared;
use super::spec::{self, FilesystemView, HelperSpec, NetworkSpec};
use super::step::StepResources;
use super::tty::Terminal;
use super::{StepKind, StepSpec};

/// A started helper: the daemon's ends of its pipes.
pub(super) struct Launched {
    pub child: tokio::process::Child,
    /// Readable once the sandbox's link and firewall are up (see [`super::Reachable`]).
    pub reachable: OwnedFd,
    pub lifeline: OwnedFd,
    /// The read ends of the step's stdout and stderr; `None` under a terminal.
    pub logs: Option<[OwnedFd; 2]>,
    pub tty: Option<Terminal>,
    pub exit_file: Option<PathBuf>,
}

/// Writes the spec into a pipe and execs the helper with that pipe as its stdin. The write
/// end is kept: closing it (drop, or the daemon's death) makes a build's helper kill the
/// sandbox. An app's helper also gets the read ends of its log pipes to hold (see
/// [`super::adopt`]) and an exit file; a step under a terminal its slave.
pub(super) fn launch(
    shared: &Shared,
    spec: &StepSpec,
    resources: &StepResources,
) -> io::Result<Launched> {
    let (helper_spec, exit_file) = helper_spec(shared, spec, resources)?;
    let (read_end, write_end) = spec_pipe(&helper_spec)?;
    let output = Output::open(spec, exit_file.as_deref())?;
    let [helper_stdout, helper_stderr] = output.helper;
    let mut command = tokio::process::Command::new(&shared.daemon_exe);
    command
        .arg("sandbox-exec")
        .env_clear()
        .stdin(Stdio::from(read_end))
        .stdout(Stdio::from(helper_stdout))
        .stderr(Stdio::from(helper_stderr))
        // Its own process group: a Ctrl-C meant for a daemon run from a terminal is not the
        // sandbox's.
        .process_group(0)
        // An app's helper must survive this daemon; a build's dies with its lifeline.
        .kill_on_drop(exit_file.is_none());
    // Every helper tells through a pipe of its own when the sandbox's network is up.
    let (reachable_read, reachable_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let mut held = vec![(reachable_write.as_raw_fd(), spec::REACHABLE_FD)];
    if let (Some(logs), Some(_)) = (&output.logs, &exit_file) {
        for pipe in logs {
            adopt::grow_pipe(pipe, APP_LOG_PIPE_BYTES);
        }
        held.push((logs[0].as_raw_fd(), spec::HELD_LOG_FDS[0]));
        held.push((logs[1].as_raw_fd(), spec::HELD_LOG_FDS[1]));
    }
    if let Some((_, slave)) = &output.terminal {
        held.push((slave.as_raw_fd(), spec::TTY_FD));
    }
    spec::pass_fds(command.as_std_mut(), held);
    let child = command.spawn()?;
    // Only the helper holds the write end and the slave now: its exit reads as end-of-file
    // (and the terminal's output ends with the last of the sandbox's processes).
    drop((reachable_write, command));
    Ok(Launched {
        child,
        reachable: reachable_read,
        lifeline: write_end,
        logs: output.logs,
        tty: output.terminal.map(|(terminal, _slave)| terminal),
        exit_file,
    })
}

/// The pipe the framed spec is written into (whole, before the helper starts): its read
/// end for the helper's stdin, its write end the lifeline.
fn spec_pipe(helper_spec: &HelperSpec) -> io::Result<(OwnedFd, OwnedFd)> {
    let framed = spec::encode(helper_spec)?;
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    if framed.len() > 60 * 1024 {
        let size = nix::fcntl::FcntlArg::F_SETPIPE_SZ(framed.len() as libc::c_int);
        nix::fcntl::fcntl(&write_end, size)?;
    }
    std::fs::File::from(write_end.try_clone()?).write_all(&framed)?;
    Ok((read_end, write_end))
}

/// Where a helper's stdout and stderr go.
struct Output {
    /// The helper's stdout and stderr: the write ends of the log pipes, or the slave.
    helper: [OwnedFd; 2],
    /// The daemon's read ends of the log pipes; none under a terminal.
    logs: Option<[OwnedFd; 2]>,
    /// The step's terminal and its slave (passed at [`spec::TTY_FD`]).
    terminal: Option<(Terminal, OwnedFd)>,
}

impl Output {
    /// An app's output goes through named pipes next to its exit file, which a later daemon
    /// opens again to adopt it; a build's through plain pipes, or its terminal.
    fn open(spec: &StepSpec, exit_file: Option<&Path>) -> io::Result<Output> {
        if let Some((terminal, slave)) = super::tty::open_for(spec)? {
            return Ok(Output {
                helper: [slave.try_clone()?, slave.try_clone()?],
                logs: None,
                terminal: Some((terminal, slave)),
            });
        }
        let ((stdout_read, stdout_write), (stderr_read, stderr_write)) = match exit_file {
            Some(exit_file) => (
                adopt::make_fifo(&adopt::fifo_path(exit_file, "stdout"))?,
                adopt::make_fifo(&adopt::fifo_path(exit_file, "stderr"))?,
            ),
            None => (
                nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?,
                nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?,
            ),
        };
        Ok(Output {
            helper: [stdout_write, stderr_write],
            logs: Some([stdout_read, stderr_read]),
            terminal: None,
        })
    }
}

/// What the helper is told (its spec on stdin): the step's command, filesystem view, cgroup
/// `/data` for the project's uid (lchown: a symlink is not followed here, and is refused when
/// the tree is cloned).
fn prepare_data_dir(data_dir: &Path, uid: u32) -> io::Result<()> {
    std::fs::create_dir_all(data_dir)?;
    std::os::unix::fs::lchown(data_dir, Some(uid), Some(uid))
}

/// and network; an app's exit file, where its helper records how it ended.
fn helper_spec(
    shared: &Shared,
    spec: &StepSpec,
    resources: &StepResources,
) -> io::Result<(HelperSpec, Option<PathBuf>)> {
    let (view, exit_file) = match &spec.kind {
        StepKind::Build { workspace, cache } => (
            FilesystemView::Build {
                workspace: workspace.clone(),
                cache: cache.clone(),
            },
            None,
        ),
        StepKind::OneOff { output, data_dir } => {
            prepare_data_dir(data_dir, spec.project_uid)?;
            let view = FilesystemView::App {
                output: output.clone(),
                data_dir: data_dir.clone(),
            };
            (view, None)
        }
        StepKind::App { output, data_dir } => {
            prepare_data_dir(data_dir, spec.project_uid)?;
            std::fs::create_dir_all(&shared.run_dir)?;
            let exit_file = shared
                .run_dir
                .join(format!("{}.exit", resources.cgroup_name));
            let _ = std::fs::remove_file(&exit_file);
            let view = FilesystemView::App {
                output: output.clone(),
                data_dir: data_dir.clone(),
            };
            (view, Some(exit_file))
        }
    };
    let helper_spec = HelperSpec {
        command: spec.command.clone(),
        env: spec.env.clone(),
        host_id: spec.project_uid,
        view,
        limited_dirs: spec.limited_dirs.clone(),
        cgroup_procs: resources.cgroup.procs_files.clone(),
        network: NetworkSpec {
            host_interface: net::interface_name(&shared.interface_prefix, &resources.link),
            host_address: resources.link.host,
            sandbox_address: resources.link.sandbox,
            firewall: FirewallSpec {
                // Read at every spawn: the host's addresses can change while the daemon runs.
                host_addresses: net::host_addresses(shared.subnet)?,
                subnet: shared.subnet,
                allow_smtp: shared.allow_smtp,
                reach: spec.reach.clone(),
                serve_port: spec.serve_port,
            },
        },
        hostname: "sandbox".into(),
        nameservers: shared.nameservers.clone(),
        exit_file: exit_file.clone(),
        tty: spec.tty.is_some(),
    };
    Ok((helper_spec, exit_file))
}

/// The buffer of an app's log pipes: output an app writes while no daemon reads.
const APP_LOG_PIPE_BYTES: i32 = 1 << 20;
