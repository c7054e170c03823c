//! `sandbox.mode = "none"`: the command runs as a plain child of the daemon, in a process group
//! of its own, with the spec's environment and nothing else. No isolation: the daemon warns
//! loudly at start. Grandchildren that call `setsid` escape the group kill; only the namespaced
//! runner can promise to end a whole tree. A step with a terminal leads a session of its
//! own on it instead (see `sandbox::tty`); its group is the same.
//! Links do not exist here: [`Runner::allocate_link`] and [`Runner::claim_link`] answer
//! 127.0.0.1 (steps that serve must differ by port), `StepSpec::link`, `reach` and
//! `serve_port` change nothing (every step reaches every port on the host anyway).

use std::net::{IpAddr, Ipv4Addr};
use std::process::Stdio;
use std::time::Duration;

use futures_util::future::BoxFuture;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::{Exit, Runner, Running, RunningProcess, StepKind, StepSpec};

pub struct DirectRunner;

impl Runner for DirectRunner {
    fn spawn(&self, spec: StepSpec) -> std::io::Result<Running> {
        for limited in &spec.limited_dirs {
            let found = std::os::unix::fs::MetadataExt::dev(&std::fs::metadata(&limited.path)?);
            limited.check(found)?;
        }
        let cwd = match &spec.kind {
            StepKind::Build { workspace, .. } => workspace.clone(),
            StepKind::App { output, data_dir } | StepKind::OneOff { output, data_dir } => {
                std::fs::create_dir_all(data_dir)?;
                output.clone()
            }
        };
        let terminal = super::tty::open_for(&spec)?;
        let mut command = tokio::process::Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(&spec.command)
            .current_dir(cwd)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .kill_on_drop(true);
        let tty = match terminal {
            Some((terminal, slave)) => {
                command
                    .stdin(Stdio::from(slave.try_clone()?))
                    .stdout(Stdio::from(slave.try_clone()?))
                    .stderr(Stdio::from(slave));
                // A session of its own (and so a group): setsid + TIOCSCTTY before exec.
                crate::sys::pty::controlling_terminal_at_exec(command.as_std_mut());
                Some(terminal)
            }
            None => {
                command
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .process_group(0);
                None
            }
        };
        if !spec.env.iter().any(|(k, _)| k == "HOME") {
            // A home of the step's own next to its workspace (npm and friends write caches there).
            let home = match &spec.kind {
                StepKind::Build { workspace, .. } => workspace.with_file_name("home"),
                StepKind::App { output, .. } | StepKind::OneOff { output, .. } => {
                    output.with_file_name("home")
                }
            };
            std::fs::create_dir_all(&home)?;
            command.env("HOME", home);
        }
        if !spec.env.iter().any(|(k, _)| k == "PATH") {
            command.env("PATH", "/usr/local/bin:/usr/bin:/bin");
        }
        let mut child = command.spawn()?;
        // The child has its copies of the slave: only they keep the terminal's output open.
        drop(command);
        let pid = child.id().map(|id| Pid::from_raw(id as i32));
        let pipe =
            |fd: std::io::Result<std::os::fd::OwnedFd>| fd.and_then(super::LogPipe::from_owned_fd);
        let stdout = child.stdout.take().map(|s| pipe(s.into_owned_fd()));
        let stderr = child.stderr.take().map(|s| pipe(s.into_owned_fd()));
        Ok(Running {
            stdout: stdout.transpose()?,
            stderr: stderr.transpose()?,
            tty,
            address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            reachable: super::Reachable::now(),
            inner: Box::new(DirectProcess {
                child,
                pgid: pid,
                exited: None,
            }),
        })
    }

    // No network of its own in this mode: every step is on the host's loopback, and
    // `reach`/`serve_port` open nothing because nothing is closed.
    fn allocate_link(&self) -> Option<(u32, Ipv4Addr)> {
        Some((0, Ipv4Addr::LOCALHOST))
    }

    fn claim_link(&self, _index: u32) -> Ipv4Addr {
        Ipv4Addr::LOCALHOST
    }

    fn release_link(&self, _index: u32) {}
}

struct DirectProcess {
    child: tokio::process::Child,
    pgid: Option<Pid>,
    exited: Option<Exit>,
}

impl DirectProcess {
    fn kill_group(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, signal);
        }
    }

    async fn wait_main(&mut self) -> std::io::Result<Exit> {
        if let Some(exit) = &self.exited {
            return Ok(exit.clone());
        }
        let status = self.child.wait().await?;
        use std::os::unix::process::ExitStatusExt;
        let exit = match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(signal)) => Exit::Signal(signal),
            (None, None) => Exit::Code(-1),
        };
        self.exited = Some(exit.clone());
        Ok(exit)
    }
}

impl RunningProcess for DirectProcess {
    fn wait(&mut self) -> BoxFuture<'_, std::io::Result<Exit>> {
        Box::pin(async move {
            let exit = self.wait_main().await?;
            // The step is over: whatever it left behind in its group goes too.
            self.kill_group(Signal::SIGKILL);
            Ok(exit)
        })
    }

    fn stop(&mut self, grace: Duration) -> BoxFuture<'_, std::io::Result<Exit>> {
        Box::pin(async move {
            self.kill_group(Signal::SIGTERM);
            let exit = match tokio::time::timeout(grace, self.wait_main()).await {
                Ok(result) => result?,
                Err(_) => {
                    self.kill_group(Signal::SIGKILL);
                    self.wait_main().await?
                }
            };
            self.kill_group(Signal::SIGKILL);
            Ok(exit)
        })
    }

    fn kill(&mut self) {
        self.kill_group(Signal::SIGKILL);
    }
}

impl Drop for DirectProcess {
    fn drop(&mut self) {
        self.kill_group(Signal::SIGKILL);
    }
}
