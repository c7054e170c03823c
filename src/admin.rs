//! The admin socket `<data_dir>/admin.sock` (mode 0600, root only): lets `slipway token …`,
//! `slipway ca export`, `slipway stop-apps` and `slipway backup` on the host talk to the
//! running daemon. One JSON request per connection, one JSON response; `backup` follows its
//! response with the archive's bytes (`backup/`), so the CLI writes the file and the daemon
//! needs no write access outside its data dir.

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
    /// The root of the custom domains' internal CA.
    CaExportDomains,
    /// Stop every running app (they outlive daemon restarts otherwise).
    StopApps,
    Backup,
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
    /// Backs the add-ons up for the appliance's backup.
    pub addons: Arc<crate::addons::Addons>,
    pub store: crate::store::Store,
    pub data_dir: PathBuf,
    pub ca_root_pem: Box<dyn Fn() -> Option<String> + Send + Sync>,
    pub domains_root_pem: Box<dyn Fn() -> Option<String> + Send + Sync>,
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
    let mut reader = BufReader::new(read.take_limited());
    reader.read_line(&mut line).await?;
    let request = serde_json::from_str::<AdminRequest>(&line);
    if let Ok(AdminRequest::Backup) = request {
        let read = reader.into_inner().into_inner();
        let stream = read.reunite(write).map_err(std::io::Error::other)?;
        return backup(stream, state).await;
    }
    let response = match request {
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

/// How long a write of the archive to the backup's reader may wait.
const BACKUP_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `backup`: snapshot the store, answer with the archive's header, then stream the archive.
async fn backup(stream: UnixStream, state: Arc<AdminState>) -> std::io::Result<()> {
    let stream = stream.into_std()?;
    stream.set_nonblocking(false)?;
    // The backup freezes each volume while it reads it: a reader that stops taking the
    // archive must not keep the apps' writes waiting for long.
    stream.set_write_timeout(Some(BACKUP_WRITE_TIMEOUT))?;
    // The add-ons' data go in as backups taken (and proven) now, their volumes held still
    // until the archive is written.
    let (held, addon_trees) = state.addons.for_appliance_backup().await;
    tokio::task::spawn_blocking(move || {
        let _held = held;
        let mut out = std::io::BufWriter::new(stream);
        let snapshot =
            crate::backup::Snapshot::take(&state.store, &state.data_dir).map(|mut snapshot| {
                snapshot.addon_trees = addon_trees;
                snapshot
            });
        let response = match &snapshot {
            Ok(snapshot) => AdminResponse {
                ok: true,
                result: serde_json::to_value(&snapshot.header).expect("headers serialize"),
                error: None,
            },
            Err(error) => AdminResponse {
                ok: false,
                result: serde_json::Value::Null,
                error: Some(format!("taking the store snapshot: {error}")),
            },
        };
        let mut bytes = serde_json::to_vec(&response).expect("responses serialize");
        bytes.push(b'\n');
        std::io::Write::write_all(&mut out, &bytes)?;
        let Ok(snapshot) = snapshot else {
            return std::io::Write::flush(&mut out);
        };
        match snapshot.write(&state.data_dir, &mut out) {
            Ok(manifest) => {
                tracing::info!(
                    files = manifest.files.len(),
                    projects = snapshot.header.projects,
                    "backup streamed through the admin socket"
                );
                std::io::Write::flush(&mut out)
            }
            Err(error) => {
                // The client sees the archive end without its manifest and says so.
                tracing::error!(%error, "backup failed while streaming");
                Err(std::io::Error::other(error.to_string()))
            }
        }
    })
    .await
    .map_err(std::io::Error::other)?
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
        AdminRequest::Backup => fail("backup is answered by its own stream".into()),
        AdminRequest::CaExport => match (state.ca_root_pem)() {
            Some(pem) => ok(serde_json::Value::String(pem)),
            None => fail("this daemon has no internal CA (tls.mode is not \"internal\")".into()),
        },
        AdminRequest::CaExportDomains => match (state.domains_root_pem)() {
            Some(pem) => ok(serde_json::Value::String(pem)),
            None => fail(
                "no custom-domains CA yet: it is made when the first custom domain is added in tls.mode \"internal\"".into(),
            ),
        },
    }
}

fn to_value(shape: impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(shape).expect("API shapes serialize")
}

/// Client side of `backup`: writes the daemon's archive to `out`; returns its header.
pub async fn request_backup(
    data_dir: &Path,
    out: &mut (impl tokio::io::AsyncWrite + Unpin),
) -> anyhow::Result<crate::backup::Header> {
    let path = socket_path(data_dir);
    let stream = UnixStream::connect(&path).await.map_err(|error| {
        anyhow::anyhow!("cannot reach the daemon at {}: {error} (is `slipway serve` running with this data_dir, and are you root?)", path.display())
    })?;
    let (read, mut write) = stream.into_split();
    let mut bytes = serde_json::to_vec(&AdminRequest::Backup)?;
    bytes.push(b'\n');
    write.write_all(&bytes).await?;
    let mut reader = BufReader::new(read);
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    let response: AdminResponse = serde_json::from_str(&line)?;
    if !response.ok {
        anyhow::bail!(response
            .error
            .unwrap_or_else(|| "the daemon refused the request".into()));
    }
    let header: crate::backup::Header = serde_json::from_value(response.result)?;
    tokio::io::copy(&mut reader, out).await?;
    Ok(header)
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
