//! Interactive runs (`slipway run -it`): the run waits `queued` until a client attaches to
//! `GET /api/runs/{runId}/tty` (a WebSocket on the control host, opened with the token's
//! auth), at most [`ATTACH_WINDOW`]; then its sandbox starts under a terminal of the client's
//! size (`sandbox::Terminal`: the sandbox still sees no host terminal, TIOCSTI stays refused).
//! Binary frames carry the terminal's bytes both ways; a text frame `{"resize": [cols, rows]}`
//! changes the window size. The session ends when the command does (a last text frame
//! `{"exit": code, "state": …}`, then close) or when the client goes (the command is
//! stopped). What the terminal shows is not kept in the logs (it echoes what is typed,
//! passwords at prompts included); the run's log says when it started and how it ended.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::runs::{end, judge, wait};
use super::{ActiveRun, Jobs, StopReason};
use crate::pipeline::OneOff;
use crate::sandbox::{Terminal, TtySize};
use crate::store::jobs::{JobRunRecord, RunState};
use crate::store::records::{DeploymentRecord, ProjectRecord};

/// How long an interactive run waits for its client.
pub const ATTACH_WINDOW: Duration = Duration::from_secs(60);

/// An interactive run waiting for its client.
pub struct PendingTty {
    project: ProjectRecord,
    deployment: DeploymentRecord,
    record: JobRunRecord,
    env: Vec<(String, String)>,
    active: Arc<ActiveRun>,
}

/// What the client sends in a text frame.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Control {
    resize: (u16, u16),
}

impl Jobs {
    /// Keeps an interactive run for its client; canceled if none attaches in time.
    pub(super) fn wait_for_client(
        self: &Arc<Self>,
        project: ProjectRecord,
        deployment: DeploymentRecord,
        record: JobRunRecord,
        env: Vec<(String, String)>,
        active: Arc<ActiveRun>,
    ) {
        let id = record.id.clone();
        self.hub.system(
            &id,
            &format!(
                "run: waiting up to {} s for a terminal to attach",
                ATTACH_WINDOW.as_secs()
            ),
        );
        let pending = PendingTty {
            project,
            deployment,
            record,
            env,
            active,
        };
        self.pending_ttys().insert(id.clone(), pending);
        let jobs = self.clone();
        tokio::spawn(async move {
            let expired = tokio::select! {
                _ = tokio::time::sleep(ATTACH_WINDOW) => jobs.pending_ttys().remove(&id),
                _ = jobs.pending_cancel(&id) => jobs.pending_ttys().remove(&id),
            };
            if let Some(mut pending) = expired {
                let message = match pending.active.reason() {
                    Some(_) => "canceled before a terminal attached".to_owned(),
                    None => format!(
                        "no terminal attached within {} s; canceled",
                        ATTACH_WINDOW.as_secs()
                    ),
                };
                end(&mut pending.record, RunState::Canceled, None, message);
                jobs.finish(&pending.project, pending.record, &pending.active)
                    .await;
            }
        });
    }

    /// Resolves when a pending run is canceled.
    async fn pending_cancel(&self, id: &str) {
        let active = self.active_runs().get(id).cloned();
        match active {
            Some(active) => active.cancel.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// Takes the interactive run `id` for the client attaching now; `None` when it is not
    /// waiting for one (not interactive, attached already, or ended).
    pub fn take_pending_tty(&self, id: &str) -> Option<PendingTty> {
        self.pending_ttys().remove(id)
    }

    /// Runs `pending` under a terminal of `size`, carried over `socket`, to its end.
    pub async fn serve_tty<S>(
        self: Arc<Self>,
        pending: PendingTty,
        socket: WebSocketStream<S>,
        size: TtySize,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let PendingTty {
            project,
            deployment,
            mut record,
            env,
            active,
        } = pending;
        let id = record.id.clone();
        self.hub.system(
            &id,
            &format!(
                "run: $ {} (interactive, {}x{}, in {})",
                record.command, size.cols, size.rows, deployment.id
            ),
        );
        let one_off = OneOff {
            run_id: &id,
            command: &record.command,
            env: &env,
            tty: Some(size),
        };
        let (mut sink, mut stream) = socket.split();
        match self
            .pipeline
            .start_one_off(&project, &deployment, one_off)
            .await
        {
            Err(message) => end(&mut record, RunState::Failed, None, message),
            Ok(mut running) => {
                self.mark_running(&mut record).await;
                let terminal = running.tty.take();
                if let Some(terminal) = &terminal {
                    bridge(terminal, &mut sink, &mut stream, &active).await;
                }
                let outcome = wait(&mut running, record.timeout_s, &active).await;
                judge(&mut record, outcome);
            }
        }
        // Recorded first: a client that reads the run once the session closes sees it final.
        let last = serde_json::json!({"exit": record.exit_code, "state": record.state, "message": record.message});
        self.finish(&project, record, &active).await;
        let _ = sink.send(Message::text(last.to_string())).await;
        let _ = sink.close().await;
    }
}

/// Copies the terminal's output to the client and the client's input to the terminal until
/// the terminal ends (every process of the run exited) or the client goes (then the run is
/// stopped).
async fn bridge<Si, St>(terminal: &Terminal, sink: &mut Si, stream: &mut St, active: &ActiveRun)
where
    Si: futures_util::Sink<Message> + Unpin,
    St: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let mut buffer = vec![0u8; 16 * 1024];
    let mut reader = terminal;
    loop {
        tokio::select! {
            read = reader.read(&mut buffer) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if sink.send(Message::binary(buffer[..n].to_vec())).await.is_err() {
                        active.stop(StopReason::Detached);
                        return;
                    }
                }
            },
            message = stream.next() => match message {
                Some(Ok(Message::Binary(bytes))) => {
                    let mut writer = terminal;
                    if writer.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                Some(Ok(Message::Text(text))) => {
                    if let Ok(Control { resize: (cols, rows) }) = serde_json::from_str(text.as_str()) {
                        let _ = terminal.resize(TtySize { cols, rows });
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => {
                    active.stop(StopReason::Detached);
                    return;
                }
            },
            _ = active.cancel.cancelled() => return,
        }
    }
}

impl Jobs {
    /// An attached client whose connection failed before the WebSocket was up: the run ends
    /// canceled.
    pub async fn abandon_tty(&self, pending: PendingTty, why: &str) {
        let PendingTty {
            project,
            mut record,
            active,
            ..
        } = pending;
        end(
            &mut record,
            RunState::Canceled,
            None,
            format!("the terminal connection failed ({why}); canceled"),
        );
        self.finish(&project, record, &active).await;
    }
}
