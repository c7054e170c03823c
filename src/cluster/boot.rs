//! A task's first process (`slipway task-boot <secret>`, inside the runtime image): reads
//! its boot document from the engine's secret, fetches the build over TLS from the daemon
//! (trusting only the certificate the document names), refuses it unless its SHA-256 is the
//! one the document names, unpacks it into `/app`, and becomes the app's command
//! (`/bin/sh -c`), with the document's environment and nothing else. Before any of it, it
//! forks the task's usage reporter (`report.rs`), detached from the app.

use std::path::Path;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::{Deserialize, Serialize};

use super::link::{connect, Connection};

/// What a task is told, in its secret.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootDocument {
    pub url: String,
    pub sha256: String,
    pub cert_pem: String,
    pub command: String,
    pub env: Vec<(String, String)>,
}

/// Where the build is unpacked (a tmpfs in the service's spec).
const APP_DIR: &str = "/app";

/// Runs the boot; returns only on failure (the message says why).
pub fn run(secret: &Path) -> Result<std::convert::Infallible, String> {
    let text = std::fs::read(secret).map_err(|e| format!("cannot read {secret:?}: {e}"))?;
    let document: BootDocument =
        serde_json::from_slice(&text).map_err(|e| format!("the boot document: {e}"))?;
    // This task's own instance name (`web.3`), which the engine set from its slot.
    let instance = std::env::var("SLIPWAY_INSTANCE").ok();
    // The reporter is forked while this process has one thread (nothing started one yet).
    if let Some(instance) = &instance {
        if crate::sys::process::fork_detached() == crate::sys::process::Detached::Detached {
            super::report::run(&document.url, &document.cert_pem, instance);
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let tarball = runtime.block_on(fetch(&document))?;
    let digest = crate::ids::sha256_hex(&tarball);
    if digest != document.sha256 {
        return Err(format!(
            "the build's SHA-256 is {digest}, not {}: refused",
            document.sha256
        ));
    }
    unpack(&tarball)?;
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(&document.command)
        .current_dir(APP_DIR)
        .env_clear()
        .envs(document.env.iter().map(|(k, v)| (k, v)));
    if let Some(instance) = instance {
        command.env("SLIPWAY_INSTANCE", instance);
    }
    let error = command.exec();
    Err(format!("cannot run the command: {error}"))
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
    let uri: http::Uri = document.url.parse().map_err(|e| format!("the URL: {e}"))?;
    let Connection {
        mut sender,
        authority,
    } = connect(&document.url, &document.cert_pem).await?;
    let request = http::Request::get(uri.path())
        .header(http::header::HOST, authority)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
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
