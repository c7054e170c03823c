//! `slipway db proxy ADDON [--port N]` and `slipway db connect ADDON [-- ARGS]`: an add-on
//! reached from this machine without a public port. A local listener on 127.0.0.1 carries
//! each connection it accepts over a WebSocket of its own to
//! `GET /api/addons/{addonId}/tunnel` (the daemon connects it to the add-on; the bytes are
//! pumped by `addons::tunnel::pump`, bounded both ways). `connect` runs `psql` or `redis-cli`
//! against such a listener on a free port, the password in its environment (`PGPASSWORD`,
//! `REDISCLI_AUTH`), never on its command line.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::addons::tunnel;
use crate::api::types::{Addon, AddonCredentials};
use crate::cli::DbAction;

use super::http::ApiClient;
use super::{path_segment, ClientError};

/// The most tunnels one proxy keeps open at once; further connections wait to be accepted.
const MAX_TUNNELS: usize = 64;

pub async fn db(api: ApiClient, action: DbAction) -> Result<ExitCode, ClientError> {
    let api = Arc::new(api);
    match action {
        DbAction::Proxy { id, port } => proxy(api, &id, port).await,
        DbAction::Connect { id, args } => connect(api, &id, &args).await,
    }
}

/// What is being reached: the add-on and its credentials.
struct Target {
    addon: Addon,
    credentials: AddonCredentials,
}

impl Target {
    async fn fetch(api: &ApiClient, id: &str) -> Result<Target, ClientError> {
        let path = format!("/api/addons/{}", path_segment(id));
        let addon: Addon = api.get(&path).await?;
        let credentials: AddonCredentials = api.get(&format!("{path}/credentials")).await?;
        Ok(Target { addon, credentials })
    }

    fn is_postgres(&self) -> bool {
        self.addon.kind == "postgres"
    }

    /// The URL to connect to through a local listener on `port`.
    fn local_url(&self, port: u16) -> String {
        let password = &self.credentials.password;
        match self.is_postgres() {
            true => format!(
                "postgres://{}:{password}@127.0.0.1:{port}/{}",
                self.credentials.user.as_deref().unwrap_or("slipway"),
                self.credentials.database.as_deref().unwrap_or("app")
            ),
            false => format!("redis://default:{password}@127.0.0.1:{port}/0"),
        }
    }
}

/// `slipway db proxy`: prints the URL (stdout) and serves until Ctrl-C.
async fn proxy(api: Arc<ApiClient>, id: &str, port: Option<u16>) -> Result<ExitCode, ClientError> {
    let target = Target::fetch(&api, id).await?;
    let port = port.unwrap_or(match target.is_postgres() {
        true => 5432,
        false => 6379,
    });
    let listener = listen(port).await?;
    let port = local_port(&listener)?;
    println!("{}", target.local_url(port));
    eprintln!(
        "Proxying {} ({} {}) on 127.0.0.1:{port} through {}; Ctrl-C stops",
        target.addon.id,
        target.addon.kind,
        target.addon.version,
        api.base_url()
    );
    tokio::select! {
        () = serve(api, target.addon.id.clone(), listener) => {}
        interrupted = tokio::signal::ctrl_c() => {
            interrupted.map_err(|error| ClientError::Io(format!("watching for Ctrl-C: {error}")))?;
            eprintln!("slipway: proxy stopped");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `slipway db connect`: psql or redis-cli against a proxy on a free port; its exit code.
async fn connect(api: Arc<ApiClient>, id: &str, args: &[String]) -> Result<ExitCode, ClientError> {
    let target = Target::fetch(&api, id).await?;
    let listener = listen(0).await?;
    let port = local_port(&listener)?.to_string();
    let (program, package) = match target.is_postgres() {
        true => ("psql", "postgresql-client"),
        false => ("redis-cli", "redis-tools"),
    };
    let mut command = tokio::process::Command::new(program);
    command.args(["-h", "127.0.0.1", "-p", &port]);
    match target.is_postgres() {
        true => {
            let user = target.credentials.user.as_deref().unwrap_or("slipway");
            let database = target.credentials.database.as_deref().unwrap_or("app");
            command
                .args(["-U", user, "-d", database])
                .env("PGPASSWORD", &target.credentials.password);
        }
        false => {
            command.env("REDISCLI_AUTH", &target.credentials.password);
        }
    }
    command.args(args).kill_on_drop(true);
    let mut child = command.spawn().map_err(|error| match error.kind() {
        std::io::ErrorKind::NotFound => ClientError::Config(format!(
            "{program} is not installed here (Debian/Ubuntu: apt-get install {package}); \
             `slipway db proxy {id}` serves any other client"
        )),
        _ => ClientError::Io(format!("cannot start {program}: {error}")),
    })?;
    let server = tokio::spawn(serve(api, target.addon.id.clone(), listener));
    // Ctrl-C is the client's (psql cancels the query); the proxy stays up for it.
    let mut interrupts = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|error| ClientError::Io(format!("watching for Ctrl-C: {error}")))?;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = interrupts.recv() => {}
        }
    };
    server.abort();
    let status =
        status.map_err(|error| ClientError::Io(format!("waiting for {program}: {error}")))?;
    Ok(exit_code(status))
}

/// The exit code of a finished child: its own, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
        (None, Some(signal)) => ExitCode::from((128 + signal).clamp(0, 255) as u8),
        (None, None) => ExitCode::FAILURE,
    }
}

async fn listen(port: u16) -> Result<TcpListener, ClientError> {
    TcpListener::bind(("127.0.0.1", port))
        .await
        .map_err(|error| {
            let hint = match error.kind() {
                std::io::ErrorKind::AddrInUse => " (pass --port 0 for any free port)",
                _ => "",
            };
            ClientError::Io(format!("cannot listen on 127.0.0.1:{port}: {error}{hint}"))
        })
}

fn local_port(listener: &TcpListener) -> Result<u16, ClientError> {
    listener
        .local_addr()
        .map(|address| address.port())
        .map_err(|error| ClientError::Io(format!("the local port: {error}")))
}

/// Accepts local connections for ever, each carried by a tunnel of its own (at most
/// [`MAX_TUNNELS`] at once).
async fn serve(api: Arc<ApiClient>, addon_id: String, listener: TcpListener) {
    let slots = Arc::new(Semaphore::new(MAX_TUNNELS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (local, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, say: try again shortly.
                eprintln!("slipway: accepting a connection: {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        let (api, addon_id) = (api.clone(), addon_id.clone());
        tokio::spawn(async move {
            if let Err(error) = carry(&api, &addon_id, local).await {
                eprintln!("slipway: connection from {peer}: {error}");
            }
            drop(slot);
        });
    }
}

/// Opens the add-on's tunnel for one local connection and pumps until either side ends.
async fn carry(api: &ApiClient, addon_id: &str, local: TcpStream) -> Result<(), ClientError> {
    let _ = local.set_nodelay(true);
    let path = format!("/api/addons/{}/tunnel", path_segment(addon_id));
    let socket = api.websocket(&path, Some(tunnel::socket_config())).await?;
    tunnel::pump(socket, local).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_urls_name_loopback_and_the_credentials() {
        let addon: Addon = serde_json::from_value(serde_json::json!({
            "id": "adn_x", "kind": "postgres", "version": "15.18", "projectId": "prj_1",
            "state": "running", "memoryMb": 256, "diskMb": 1024, "diskUsedBytes": 0,
            "envName": "DATABASE_URL", "mode": "persistent", "links": [],
            "host": "10.1.0.5", "port": 5432, "createdAt": "t"
        }))
        .unwrap();
        let credentials = AddonCredentials {
            url: "postgres://slipway:pw@10.1.0.5:5432/app".into(),
            user: Some("slipway".into()),
            password: "pw".into(),
            host: "10.1.0.5".into(),
            port: 5432,
            database: Some("app".into()),
        };
        let mut target = Target { addon, credentials };
        assert_eq!(
            target.local_url(40000),
            "postgres://slipway:pw@127.0.0.1:40000/app"
        );
        target.addon.kind = "redis".into();
        assert_eq!(
            target.local_url(6379),
            "redis://default:pw@127.0.0.1:6379/0"
        );
    }
}
