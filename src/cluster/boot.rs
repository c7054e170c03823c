//! A task's first process (`slipway task-boot <secret>`, inside the runtime image; the
//! engine's init is PID 1): reads its boot document from the engine's secret, fetches the
//! build over TLS from the daemon (trusting only the certificate the document names),
//! refuses it unless its SHA-256 is the one the document names, unpacks it into `/app`, and
//! runs the app's command (`/bin/sh -c`, with the document's environment and nothing else)
//! in a process group of its own, with no_new_privs and the local sandbox's seccomp filter
//! set. It stays next to the app for the task's life: it sends
//! the task's usage reports (`report.rs`), carries its connections to linked add-ons
//! (`tunnel.rs`), forwards the signals the engine's init gives it to the app's whole group
//! (so the app gets its `SIGTERM` even when `sh` does not `exec` it) and ends with the app's
//! exit status.

use std::path::Path;

use bytes::Bytes;
use http_body_util::BodyExt;
use serde::{Deserialize, Serialize};

/// What a task is told, in its secret.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootDocument {
    pub url: String,
    pub sha256: String,
    pub cert_pem: String,
    pub command: String,
    pub env: Vec<(String, String)>,
    /// The linked add-ons, reached through tunnels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tunnels: Vec<super::tunnel::Tunnel>,
}

/// Where the build is unpacked (a tmpfs in the service's spec).
const APP_DIR: &str = "/app";

/// The signals passed on to the app's process group.
const FORWARDED: [nix::sys::signal::Signal; 6] = {
    use nix::sys::signal::Signal::*;
    [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2]
};

/// Runs the boot and the app; ends the process with the app's status, or returns why it
/// could not run it.
pub fn run(secret: &Path) -> Result<std::convert::Infallible, String> {
    // Before anything runs: no exec of this task (the app's included: it is inherited) gains
    // privileges, e.g. from a setuid program of the node's `/usr` (the engine's API of
    // Debian's docker.io has no field for it).
    nix::sys::prctl::set_no_new_privs().map_err(|e| format!("set no_new_privs: {e}"))?;
    // The local sandbox's seccomp filter, over the engine's default profile (which lets
    // io_uring through, for one): on this thread before any other starts, so every thread
    // of this process and the app inherit it.
    let filters = crate::sandbox::seccomp::compile().map_err(|e| format!("seccomp: {e}"))?;
    crate::sandbox::seccomp::install(&filters).map_err(|e| format!("install seccomp: {e}"))?;
    let text = std::fs::read(secret).map_err(|e| format!("cannot read {secret:?}: {e}"))?;
    let document: BootDocument =
        serde_json::from_slice(&text).map_err(|e| format!("the boot document: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let code = runtime.block_on(boot(document))?;
    std::process::exit(code)
}

async fn boot(document: BootDocument) -> Result<i32, String> {
    // This task's own instance name (`web.3`), which the engine set from its slot.
    let instance = std::env::var("SLIPWAY_INSTANCE").ok();
    if let Some(instance) = instance.clone() {
        let (url, cert_pem) = (document.url.clone(), document.cert_pem.clone());
        tokio::spawn(
            async move { super::report::report_forever(&url, &cert_pem, &instance).await },
        );
    }
    let tarball = fetch(&document).await?;
    let digest = crate::ids::sha256_hex(&tarball);
    if digest != document.sha256 {
        return Err(format!(
            "the build's SHA-256 is {digest}, not {}: refused",
            document.sha256
        ));
    }
    unpack(&tarball)?;
    super::tunnel::listen(&document.tunnels, &document.cert_pem).await?;
    let mut command = tokio::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(&document.command)
        .current_dir(APP_DIR)
        .env_clear()
        .envs(document.env.iter().map(|(k, v)| (k, v)))
        .process_group(0);
    if let Some(instance) = instance {
        command.env("SLIPWAY_INSTANCE", instance);
    }
    let app = command
        .spawn()
        .map_err(|e| format!("cannot run the command: {e}"))?;
    supervise(app).await
}

/// Waits for the app, passing the forwarded signals on to its process group; its exit
/// status (128 + the signal when a signal ended it).
async fn supervise(mut app: tokio::process::Child) -> Result<i32, String> {
    use std::os::unix::process::ExitStatusExt;
    use tokio::signal::unix::{signal, SignalKind};
    let group = app
        .id()
        .map(|pid| nix::unistd::Pid::from_raw(pid as i32))
        .ok_or("the app ended before it was watched")?;
    let (forward, mut received) = tokio::sync::mpsc::unbounded_channel();
    for kind in FORWARDED {
        let mut stream = signal(SignalKind::from_raw(kind as i32)).map_err(|e| e.to_string())?;
        let forward = forward.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                let _ = forward.send(kind);
            }
        });
    }
    loop {
        tokio::select! {
            status = app.wait() => {
                let status = status.map_err(|e| e.to_string())?;
                return Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)));
            }
            Some(kind) = received.recv() => {
                let _ = nix::sys::signal::killpg(group, kind);
            }
        }
    }
}

/// Unpacks the build into [`APP_DIR`]; the error names the file and the system's reason.
fn unpack(tarball: &[u8]) -> Result<(), String> {
    let why = |e: std::io::Error| {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            text = format!("{text}: {cause}");
            source = cause.source();
        }
        text
    };
    let mut archive = tar::Archive::new(tarball);
    for entry in archive.entries().map_err(why)? {
        let mut entry = entry.map_err(why)?;
        let path = entry.path().map_err(why)?.into_owned();
        entry
            .unpack_in(APP_DIR)
            .map_err(|e| format!("cannot unpack {}: {}", path.display(), why(e)))?;
    }
    Ok(())
}

async fn fetch(document: &BootDocument) -> Result<Bytes, String> {
    let response = super::link::get(&document.url, &document.cert_pem, None).await?;
    if !response.status().is_success() {
        return Err(format!("the control plane answered {}", response.status()));
    }
    Ok(response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes())
}
