//! `slipway run -it`: the client's end of an interactive run's terminal. It opens its own
//! connection to the control host (TLS like the API's), upgrades `GET /api/runs/{id}/tty` to
//! a WebSocket with the token, puts the local terminal in raw mode (restored however the
//! session ends), and copies bytes both ways; a window change (SIGWINCH) is sent as
//! `{"resize": [cols, rows]}`. The session ends when the server closes it after the
//! command's end (its last text frame says how it ended).

use std::io::Write as _;
use std::os::fd::AsFd;

use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncReadExt;
use tokio_tungstenite::tungstenite::Message;

use super::http::ApiClient;
use super::ClientError;

/// The local terminal in raw mode until dropped (nothing when stdin is not a terminal).
struct RawMode {
    saved: Option<nix::sys::termios::Termios>,
}

impl RawMode {
    fn enter() -> RawMode {
        let stdin = std::io::stdin();
        let Ok(saved) = nix::sys::termios::tcgetattr(stdin.as_fd()) else {
            return RawMode { saved: None };
        };
        let mut raw = saved.clone();
        nix::sys::termios::cfmakeraw(&mut raw);
        let set =
            nix::sys::termios::tcsetattr(stdin.as_fd(), nix::sys::termios::SetArg::TCSANOW, &raw);
        RawMode {
            saved: set.is_ok().then_some(saved),
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let stdin = std::io::stdin();
            let _ = nix::sys::termios::tcsetattr(
                stdin.as_fd(),
                nix::sys::termios::SetArg::TCSANOW,
                saved,
            );
        }
    }
}

/// The local terminal's size (80 × 24 when stdout is not a terminal).
fn local_size() -> (u16, u16) {
    crate::sys::pty::window_size(std::io::stdout().as_fd()).unwrap_or((80, 24))
}

/// Attaches to run `run_id` and runs the session to its end.
pub async fn attach(api: &ApiClient, run_id: &str) -> Result<(), ClientError> {
    let (cols, rows) = local_size();
    let path = format!("/api/runs/{run_id}/tty?cols={cols}&rows={rows}");
    let socket = api.websocket(&path, None).await?;
    let _raw = RawMode::enter();
    let (mut sink, mut stream) = socket.split();
    let mut resized = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
        .map_err(|error| ClientError::Io(format!("watching the window size: {error}")))?;
    let mut stdin = tokio::io::stdin();
    let mut buffer = vec![0u8; 4096];
    let mut stdin_open = true;
    loop {
        tokio::select! {
            read = stdin.read(&mut buffer), if stdin_open => match read {
                Ok(0) | Err(_) => stdin_open = false,
                Ok(n) => {
                    if sink.send(Message::binary(buffer[..n].to_vec())).await.is_err() {
                        break;
                    }
                }
            },
            _ = resized.recv() => {
                let (cols, rows) = local_size();
                let resize = serde_json::json!({"resize": [cols, rows]}).to_string();
                let _ = sink.send(Message::text(resize)).await;
            }
            message = stream.next() => match message {
                Some(Ok(Message::Binary(bytes))) => {
                    let mut stdout = std::io::stdout();
                    let _ = stdout.write_all(&bytes).and_then(|()| stdout.flush());
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
        }
    }
    Ok(())
}
