//! Starting an add-on: its volume and first setup (PostgreSQL's `initdb` and its `app`
//! database, Redis's config file — the password never on a command line), then the server
//! under the supervisor, ready once it answers its own protocol on its address.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::engine::{self, AddonKind, RedisMode};
use super::step::Step;
use super::Addons;
use crate::formation::InstanceId;
use crate::sandbox::AppHandle;
use crate::store::addons::AddonRecord;
use crate::store::records::ProjectRecord;
use crate::supervisor::{AppSpec, FirstFailure};

/// How long a new add-on may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

fn kind(addon: &AddonRecord) -> AddonKind {
    AddonKind::parse(&addon.kind).unwrap_or(AddonKind::Postgres)
}

fn postgres_bin(addon: &AddonRecord, program: &str) -> String {
    format!(
        "{}/{program}",
        engine::postgres_bin_dir(engine::postgres_major(addon))
    )
}

/// Its key in the supervisor and the store (`adn_…:postgres.1`).
pub(super) fn instance_key(addon: &AddonRecord) -> String {
    crate::formation::instance_key(&addon.id, &InstanceId::new(kind(addon).as_str(), 1))
}

/// The server's command (inside the sandbox); `data` is where its volume is (`/data`, or the
/// host path in mode none), `listen` its address (`*`, or 127.0.0.1 in mode none).
fn server_command(addon: &AddonRecord, data: &str, listen: &str) -> String {
    match kind(addon) {
        AddonKind::Postgres => {
            let settings: Vec<String> = engine::postgres_settings(addon.memory_mb)
                .into_iter()
                .map(|(name, value)| format!("-c {name}={value}"))
                .collect();
            let (prepare, archive) = match addon.pitr {
                true => (
                    format!("mkdir -p {data}/{}; ", super::pitr::STAGING),
                    super::pitr::archive_settings(data),
                ),
                false => (String::new(), String::new()),
            };
            format!(
                "{prepare}exec {} -D {data}/pgdata -c listen_addresses='{listen}' -c port={} \
                 -c unix_socket_directories=/tmp {} {archive}",
                postgres_bin(addon, "postgres"),
                addon.port,
                settings.join(" ")
            )
        }
        AddonKind::Redis => format!("exec /usr/bin/redis-server {data}/redis.conf"),
    }
}

impl Addons {
    /// Where the add-on's code sees its volume, and the address it listens on.
    fn data_and_listen(&self, addon: &AddonRecord) -> (String, &'static str) {
        match self.loopback {
            true => (self.volume(addon).dir.display().to_string(), "127.0.0.1"),
            false => ("/data".to_owned(), "*"),
        }
    }

    /// The volume, the first setup, the server, and its version: an error in words.
    pub(super) async fn first_start(
        &self,
        project: &ProjectRecord,
        addon: &mut AddonRecord,
        password: &str,
    ) -> Result<(), String> {
        let (volumes, volume, uid) = (
            self.pipeline.volumes().clone(),
            self.volume(addon),
            project.uid,
        );
        let app_dir = self.empty_app_dir(addon);
        tokio::task::spawn_blocking(move || {
            volumes.ensure_app_data(&volume, uid)?;
            std::fs::create_dir_all(&app_dir)
        })
        .await
        .expect("blocking task")
        .map_err(|e| format!("cannot prepare the add-on's volume: {e}"))?;
        self.write_secret_file(project, addon, password).await?;
        if kind(addon) == AddonKind::Postgres {
            self.initdb(project, addon).await?;
        }
        addon.version = version(addon).await;
        self.run(project, addon, None).await
    }

    /// Postgres: the password file initdb reads (then removes); Redis: its config file.
    pub(super) async fn write_secret_file(
        &self,
        project: &ProjectRecord,
        addon: &AddonRecord,
        password: &str,
    ) -> Result<(), String> {
        let dir = self.volume(addon).dir;
        let (name, text) = match kind(addon) {
            AddonKind::Postgres => (".pwfile", format!("{password}\n")),
            AddonKind::Redis => {
                let (data, listen) = self.data_and_listen(addon);
                let listen = if listen == "*" { "0.0.0.0" } else { listen };
                ("redis.conf", redis_config(addon, password, &data, listen))
            }
        };
        let (path, uid) = (dir.join(name), project.uid);
        tokio::task::spawn_blocking(move || {
            use std::os::unix::fs::OpenOptionsExt;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)?;
            std::io::Write::write_all(&mut file, text.as_bytes())?;
            std::os::unix::fs::chown(&path, Some(uid), Some(uid))
        })
        .await
        .expect("blocking task")
        .map_err(|e| format!("cannot write the add-on's {name}: {e}"))
    }

    /// `initdb` and the `app` database, in a one-off sandbox on the add-on's volume.
    async fn initdb(&self, project: &ProjectRecord, addon: &AddonRecord) -> Result<(), String> {
        let (data, _) = self.data_and_listen(addon);
        let command = format!(
            "set -e; {initdb} -D {data}/pgdata -U slipway --auth-local=trust \
             --auth-host=scram-sha-256 --pwfile={data}/.pwfile -E UTF8 --no-locale >/dev/null; \
             rm -f {data}/.pwfile; \
             echo 'host all all 0.0.0.0/0 scram-sha-256' >> {data}/pgdata/pg_hba.conf; \
             echo '{hba}' >> {data}/pgdata/pg_hba.conf; \
             echo 'CREATE DATABASE app;' | {postgres} --single -D {data}/pgdata postgres >/dev/null",
            initdb = postgres_bin(addon, "initdb"),
            postgres = postgres_bin(addon, "postgres"),
            hba = super::pitr::REPLICATION_HBA,
        );
        self.run_step(Step {
            addon,
            what: "initdb",
            uid: project.uid,
            data_dir: self.volume(addon).dir,
            command,
            env: Vec::new(),
            reach: None,
            timeout: Duration::from_secs(60),
        })
        .await
        .map(|_| ())
    }

    /// The server under the supervisor (adopting `adopt`), ready once it answers.
    pub(super) async fn run(
        &self,
        project: &ProjectRecord,
        addon: &AddonRecord,
        adopt: Option<AppHandle>,
    ) -> Result<(), String> {
        if addon.pitr {
            let pgdata = self.volume(addon).dir.join("pgdata");
            tokio::task::spawn_blocking(move || super::pitr::ensure_replication_hba(&pgdata))
                .await
                .expect("blocking task")
                .map_err(|e| format!("cannot allow base backups in pg_hba.conf: {e}"))?;
        }
        let memory_mb = addon.memory_mb;
        let spec = AppSpec {
            deployment_id: addon.id.clone(),
            instance: InstanceId::new(kind(addon).as_str(), 1),
            slug: String::new(),
            uid: project.uid,
            root: self.empty_app_dir(addon),
            data_dir: self.volume(addon).dir,
            command: {
                let (data, listen) = self.data_and_listen(addon);
                server_command(addon, &data, listen)
            },
            env: vec![
                ("PATH".into(), crate::pipeline::STEP_PATH.into()),
                ("LANG".into(), "C.UTF-8".into()),
            ],
            port: None,
            health_check_path: None,
            health_command: None,
            memory_mb,
            pids: match kind(addon) {
                AddonKind::Postgres => engine::postgres_pids(memory_mb),
                AddonKind::Redis => 64,
            },
            cpus: 1.0,
            reach: Vec::new(),
            serve_port: Some(addon.port),
            link: Some(addon.link_index),
        };
        self.supervisor
            .start(spec, READY_TIMEOUT, adopt, FirstFailure::GiveUp)
            .await
            .map_err(|failure| failure.message)?;
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        while tokio::time::Instant::now() < deadline {
            if answers(
                kind(addon),
                std::net::SocketAddr::from((addon.address, addon.port)),
            )
            .await
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.supervisor.stop_deployment(&addon.id, None).await;
        Err(format!(
            "{} did not accept connections within {} s",
            addon.kind,
            READY_TIMEOUT.as_secs()
        ))
    }
}

/// Redis's config: its address, password, memory and persistence.
fn redis_config(addon: &AddonRecord, password: &str, data: &str, listen: &str) -> String {
    let mode = match addon.mode.as_str() {
        "cache" => RedisMode::Cache,
        _ => RedisMode::Persistent,
    };
    let (maxmemory, policy) = engine::redis_memory(addon.memory_mb, mode);
    let persistence = match mode {
        RedisMode::Cache => "save \"\"\nappendonly no\n",
        RedisMode::Persistent => "save 60 1000\nappendonly yes\nappendfsync everysec\n",
    };
    format!(
        "bind {listen}\nport {}\nprotected-mode no\nrequirepass {password}\ndir {data}\n\
         maxmemory {maxmemory}\nmaxmemory-policy {policy}\n{persistence}daemonize no\n",
        addon.port
    )
}

/// Whether the server answers its protocol: PostgreSQL asks a startup message for
/// authentication (`R`) — while it starts or recovers from a crash it answers an error (`E`,
/// "not yet accepting connections") instead, as `pg_isready` tells; Redis's `PING` gets an
/// answer line (`-NOAUTH` without the password).
async fn answers(kind: AddonKind, address: std::net::SocketAddr) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        let mut reply = [0u8; 1];
        match kind {
            AddonKind::Postgres => {
                stream.write_all(&postgres_startup()).await.ok()?;
                stream.read_exact(&mut reply).await.ok()?;
                Some(reply[0] == b'R')
            }
            AddonKind::Redis => {
                stream.write_all(b"PING\r\n").await.ok()?;
                stream.read_exact(&mut reply).await.ok()?;
                Some(reply[0] == b'+' || reply[0] == b'-' && !is_loading(&mut stream).await)
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(2), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// A protocol 3.0 startup message for user `slipway`, database `app` (no password is sent:
/// the connection ends at the server's authentication request).
fn postgres_startup() -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0slipway\0database\0app\0\0");
    let mut message = (body.len() as u32 + 4).to_be_bytes().to_vec();
    message.extend_from_slice(&body);
    message
}

/// After a `-`: whether the error is Redis's `-LOADING` (not ready yet).
async fn is_loading(stream: &mut tokio::net::TcpStream) -> bool {
    let mut word = [0u8; 7];
    stream.read_exact(&mut word).await.is_ok() && &word == b"LOADING"
}

/// The server's version as the package's program says it (`15.18`, `7.0.15`).
pub(super) async fn version(addon: &AddonRecord) -> String {
    let program = match kind(addon) {
        AddonKind::Postgres => postgres_bin(addon, "postgres"),
        AddonKind::Redis => "/usr/bin/redis-server".to_owned(),
    };
    let output = tokio::process::Command::new(program)
        .arg("--version")
        .output()
        .await;
    let text = output
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    text.split_whitespace()
        .find_map(|word| {
            let word = word.trim_start_matches("v=");
            word.chars()
                .next()
                .filter(char::is_ascii_digit)
                .map(|_| word.to_owned())
        })
        .unwrap_or_default()
}
