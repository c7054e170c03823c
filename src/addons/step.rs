//! A short-lived sandbox next to an add-on: the same uid, limits and data as its server, for
//! the work done on it — `initdb`, a dump, the throw-away restore that proves a backup, a
//! restore. Its standard output is the answer; its standard error the reason when it fails.

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::engine::{self, AddonKind};
use super::Addons;
use crate::sandbox::{StepKind, StepSpec};
use crate::store::addons::AddonRecord;

/// One piece of work on an add-on.
pub(super) struct Step<'a> {
    pub addon: &'a AddonRecord,
    /// For the sandbox's name (`slipway-adn_…-<what>`) and the error messages.
    pub what: &'a str,
    pub uid: u32,
    /// What the step sees at `/data` (the add-on's volume or its backups volume).
    pub data_dir: PathBuf,
    pub command: String,
    /// Added to PATH, LANG and the postgres programs' directory.
    pub env: Vec<(String, String)>,
    /// The add-on's server when the step talks to it.
    pub reach: Option<SocketAddrV4>,
    pub timeout: Duration,
}

/// What a step printed.
pub(super) struct Output {
    pub stdout: String,
}

impl Addons {
    /// Runs `step` to its end: its output when it exits 0, else why (with its stderr).
    pub(super) async fn run_step(&self, step: Step<'_>) -> Result<Output, String> {
        let kind = AddonKind::parse(&step.addon.kind).unwrap_or(AddonKind::Postgres);
        let mut env = vec![
            (
                "PATH".into(),
                format!(
                    "{}:{}",
                    engine::postgres_bin_dir(super::engine::postgres_major(step.addon)),
                    crate::pipeline::STEP_PATH
                ),
            ),
            ("LANG".into(), "C.UTF-8".into()),
        ];
        env.extend(step.env);
        let memory_mb = step.addon.memory_mb.max(128);
        let spec = StepSpec {
            name: format!("slipway-{}-{}", step.addon.id, step.what),
            kind: StepKind::OneOff {
                output: self.empty_app_dir(step.addon),
                data_dir: step.data_dir,
            },
            command: step.command,
            env,
            project_uid: step.uid,
            memory_mb,
            pids: match kind {
                AddonKind::Postgres => engine::postgres_pids(memory_mb),
                AddonKind::Redis => 64,
            },
            cpus: 1.0,
            stop_grace: Duration::from_secs(5),
            limited_dirs: Vec::new(),
            tty: None,
            reach: step.reach.into_iter().collect(),
            serve_port: None,
            link: None,
        };
        let what = step.what;
        let runner = self.runner.clone();
        let mut running = tokio::task::spawn_blocking(move || runner.spawn(spec))
            .await
            .expect("blocking task")
            .map_err(|e| format!("{what} could not start: {e}"))?;
        let (mut stdout, mut stderr) = (running.stdout.take(), running.stderr.take());
        let read = async {
            let (mut out, mut err) = (String::new(), String::new());
            let out_read = async {
                if let Some(pipe) = stdout.as_mut() {
                    let _ = pipe.read_to_string(&mut out).await;
                }
            };
            let err_read = async {
                if let Some(pipe) = stderr.as_mut() {
                    let _ = pipe.read_to_string(&mut err).await;
                }
            };
            tokio::join!(out_read, err_read);
            let exit = running.wait().await;
            (out, err, exit)
        };
        match tokio::time::timeout(step.timeout, read).await {
            Ok((stdout, _, Ok(exit))) if exit.success() => Ok(Output { stdout }),
            Ok((_, stderr, Ok(exit))) => Err(format!(
                "{what} {}: {}",
                exit.describe(),
                last_lines(&stderr)
            )),
            Ok((_, _, Err(error))) => Err(format!("{what} could not be waited for: {error}")),
            Err(_) => {
                running.kill();
                Err(format!(
                    "{what} took more than {} s",
                    step.timeout.as_secs()
                ))
            }
        }
    }
}

/// The end of a program's error output (what says why), at most 2 KB.
fn last_lines(text: &str) -> String {
    let text = text.trim();
    let start = text.len().saturating_sub(2048);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].to_owned()
}
