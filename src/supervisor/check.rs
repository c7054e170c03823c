//! A process type's `healthCommand` (issue 32): a type without a port is healthy while it runs,
//! or — when the type names a command — while that command exits 0. The command runs in a
//! sandbox of its own beside the instance: the same build, uid, environment and `/data`, no
//! port, small limits and a 10 s deadline. That is what a worker's health usually needs: a
//! heartbeat file in `/data`, a ping of its queue's broker. Three failures in a row restart the
//! instance, like three unanswered probes of a `web` one.

use std::sync::Arc;
use std::time::Duration;

use super::{AppSpec, Supervisor};
use crate::sandbox::{StepKind, StepSpec};

/// How long one run of the command may take.
pub(super) const CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// A starting instance's command is tried this often until it passes or `health_timeout`.
const START_POLL: Duration = Duration::from_millis(500);

/// Runs the instance's health command once: whether it exited 0 within [`CHECK_TIMEOUT`].
pub(super) async fn passes(supervisor: &Arc<Supervisor>, spec: &AppSpec, command: &str) -> bool {
    let mut env = spec.env.clone();
    env.push(("SLIPWAY_HEALTH_CHECK".into(), "1".into()));
    let step = StepSpec {
        // Not `…-app-…`: its cgroup must not count towards the instance's own usage.
        name: format!("slipway-{}-check-{}", spec.deployment_id, spec.instance),
        kind: StepKind::OneOff {
            output: spec.root.clone(),
            data_dir: spec.data_dir.clone(),
        },
        command: command.to_owned(),
        env,
        project_uid: spec.uid,
        memory_mb: spec.memory_mb.min(256),
        pids: 64,
        cpus: spec.cpus.min(0.5),
        stop_grace: Duration::from_secs(1),
        limited_dirs: Vec::new(),
        tty: None,
        reach: Vec::new(),
        serve_port: None,
        link: None,
    };
    let Ok(mut running) = supervisor.runner.spawn(step) else {
        return false;
    };
    // Its output is not kept: drained so that a talkative check never blocks on a full pipe.
    for pipe in [running.stdout.take(), running.stderr.take()]
        .into_iter()
        .flatten()
    {
        tokio::spawn(async move {
            let mut pipe = pipe;
            let _ = tokio::io::copy(&mut pipe, &mut tokio::io::sink()).await;
        });
    }
    match tokio::time::timeout(CHECK_TIMEOUT, running.wait()).await {
        Ok(Ok(exit)) => exit.success(),
        Ok(Err(_)) => false,
        Err(_) => {
            running.kill();
            let _ = running.stop(Duration::from_millis(100)).await;
            false
        }
    }
}

/// Tries the command until it passes (true) or `timeout` ends (false).
pub(super) async fn passes_within(
    supervisor: &Arc<Supervisor>,
    spec: &AppSpec,
    command: &str,
    timeout: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if passes(supervisor, spec, command).await {
            return true;
        }
        if tokio::time::Instant::now() + START_POLL >= deadline {
            return false;
        }
        tokio::time::sleep(START_POLL).await;
    }
}

/// Runs the command every `interval`; returns once it failed three times in a row.
pub(super) async fn failing(supervisor: &Arc<Supervisor>, spec: &AppSpec, command: &str) {
    let mut misses = 0;
    loop {
        tokio::time::sleep(supervisor.health_interval).await;
        if passes(supervisor, spec, command).await {
            misses = 0;
        } else {
            misses += 1;
            if misses >= super::health::UNRESPONSIVE_PROBES {
                return;
            }
        }
    }
}
