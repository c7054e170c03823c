//! The admin socket `<data_dir>/admin.sock` (mode 0600, root only): lets `slipway token …`,
//! `slipway ca export` and `slipway stop-apps` on the host talk to the running daemon. One JSON request per
//! connection, one JSON response.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

use crate::auth::Tokens;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum AdminRequest {
    TokenCreate {
        name: String,
        /// `admin` (default), `deploy` or `read`.
        #[serde(default)]
        scope: Option<crate::auth::Scope>,
        #[serde(default)]
        projects: Option<Vec<String>>,
        #[serde(default)]
        expires_in_days: Option<u32>,
    },
    TokenList,
    TokenRevoke {
        id: String,
    },
    CaExport,
    /// Stop every running app (they outlive daemon restarts otherwise).
    StopApps,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct AdminResponse {
    pub ok: bool,
    pub result: serde_json::Value,
    pub error: Option<String>,
}

pub struct AdminState {
    pub tokens: Arc<Tokens>,
    pub supervisor: Arc<crate::supervisor::Supervisor>,
    pub ca_root_pem: Box<dyn Fn() -> Option<String> + Send + Sync>,
}

pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("admin.sock")
}

/// Binds the socket (replacing a stale one) with mode 0600.
pub fn bind(data_dir: &Path) -> std::io::Result<UnixListener> {
    let path = socket_path(data_dir);
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

pub async fn serve(listener: UnixListener, state: Arc<AdminState>, shutdown: CancellationToken) {
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "admin socket accept failed");
                    continue;
                }
            },
        };
        let state = state.clone();
        tokio::spawn(async move {
            if let Err(error) = handle(stream, state).await {
                tracing::debug!(%error, "admin connection failed");
            }
        });
    }
}

async fn handle(stream: UnixStream, state: Arc<AdminState>) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    BufReader::new(read.take_limited())
        .read_line(&mut line)
        .await?;
    let response = match serde_json::from_str::<AdminRequest>(&line) {
        Err(error) => AdminResponse {
            ok: false,
            result: serde_json::Value::Null,
            error: Some(format!("bad request: {error}")),
        },
        Ok(AdminRequest::StopApps) => {
            let stopped = state.supervisor.stop_all().await;
            tracing::info!(stopped, "stopped every app through the admin socket");
            AdminResponse {
                ok: true,
                result: serde_json::json!({ "stopped": stopped }),
                error: None,
            }
        }
        Ok(request) => {
            let tokens = state.tokens.clone();
            let state2 = state.clone();
            tokio::task::spawn_blocking(move || execute(request, &tokens, &state2))
                .await
                .unwrap_or_else(|error| AdminResponse {
                    ok: false,
                    result: serde_json::Value::Null,
                    error: Some(error.to_string()),
                })
        }
    };
    let mut bytes = serde_json::to_vec(&response).expect("responses serialize");
    bytes.push(b'\n');
    write.write_all(&bytes).await?;
    write.shutdown().await
}

trait TakeLimited: tokio::io::AsyncRead + Sized {
    fn take_limited(self) -> tokio::io::Take<Self> {
        tokio::io::AsyncReadExt::take(self, 64 * 1024)
    }
}
impl<T: tokio::io::AsyncRead> TakeLimited for T {}

fn execute(request: AdminRequest, tokens: &Tokens, state: &AdminState) -> AdminResponse {
    let ok = |result| AdminResponse {
        ok: true,
        result,
        error: None,
    };
    let fail = |error: String| AdminResponse {
        ok: false,
        result: serde_json::Value::Null,
        error: Some(error),
    };
    match request {
        AdminRequest::TokenCreate {
            name,
            scope,
            projects,
            expires_in_days,
        } => {
            // The same rules as `POST /api/tokens`.
            let body = serde_json::json!({
                "name": name, "scope": scope, "projects": projects, "expiresInDays": expires_in_days,
            });
            let mut body = body.as_object().cloned().unwrap_or_default();
            body.retain(|_, value| !value.is_null());
            let now = crate::ids::now_ms();
            let (name, grant) = match crate::api::parse_token_request(body, now) {
                Ok(parsed) => parsed,
                Err(error) => return fail(error.message),
            };
            match tokens.create(&name, grant, now) {
                Ok(token) => {
                    tracing::info!(token = %token.record.id, "API token created through the admin socket");
                    ok(to_value(crate::api::types::CreatedToken::new(
                        &token.record,
                        token.secret,
                    )))
                }
                Err(error) => fail(error.to_string()),
            }
        }
        AdminRequest::TokenList => match tokens.list() {
            Ok(list) => ok(to_value(
                list.iter()
                    .map(crate::api::types::Token::from)
                    .collect::<Vec<_>>(),
            )),
            Err(error) => fail(error.to_string()),
        },
        AdminRequest::TokenRevoke { id } => match tokens.revoke(&id) {
            Ok(true) => ok(to_value(crate::api::types::TokenRevoked {
                id,
                revoked: true,
            })),
            Ok(false) => fail(format!("no token with id {id:?}")),
            Err(error) => fail(error.to_string()),
        },
        AdminRequest::StopApps => fail("stop-apps is handled asynchronously".into()),
        AdminRequest::CaExport => match (state.ca_root_pem)() {
            Some(pem) => ok(serde_json::Value::String(pem)),
            None => fail("this daemon has no internal CA (tls.mode is not \"internal\")".into()),
        },
    }
}

fn to_value(shape: impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(shape).expect("API shapes serialize")
}

/// Client side: sends one request to the daemon's socket.
pub async fn request(data_dir: &Path, request: &AdminRequest) -> anyhow::Result<serde_json::Value> {
    let path = socket_path(data_dir);
    let stream = UnixStream::connect(&path).await.map_err(|error| {
        anyhow::anyhow!("cannot reach the daemon at {}: {error} (is `slipway serve` running with this data_dir, and are you root?)", path.display())
    })?;
    let (read, mut write) = stream.into_split();
    let mut bytes = serde_json::to_vec(request)?;
    bytes.push(b'\n');
    write.write_all(&bytes).await?;
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    let response: AdminResponse = serde_json::from_str(&line)?;
    if !response.ok {
        anyhow::bail!(response
            .error
            .unwrap_or_else(|| "the daemon refused the request".into()));
    }
    Ok(response.result)
}
