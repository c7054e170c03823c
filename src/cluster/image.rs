//! The runtime image every task starts from, made on each node from that node's own files,
//! never pulled: the `slipway` binary (for `task-boot`) at [`BOOT_BINARY`], the merged-`/usr`
//! links (`/bin` → `usr/bin`, …) and empty mount points. What apps run with — `sh`, `node`,
//! `python3`, the C library — is the node's `/usr`, bind-mounted read-only into each task
//! (`spec.rs`), as the local sandbox shows the host's `/usr`; so a node runs what its
//! packages provide, like the control plane does.
//!
//! The daemon makes it on its own engine at start-up when it is missing; `slipway node join`
//! makes it on a worker before the worker joins.

use std::io::Write;

use super::docker::{Docker, DockerError};

/// Where the image holds the binary (outside `/usr`, which the node's own covers).
pub const BOOT_BINARY: &str = "/slipway/slipway";

/// The image's layer: a tar of the binary at `binary` and the skeleton.
pub fn layer(binary: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut dir = |path: &str, mode: u32| -> std::io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(mode);
        header.set_size(0);
        header.set_mtime(0);
        builder.append_data(&mut header, path, std::io::empty())
    };
    // `sbin` a directory of its own: the engine mounts its init at `/sbin/docker-init`,
    // which could not be made in the node's read-only `/usr`.
    for path in ["slipway", "usr", "sbin", "proc", "sys", "dev", "etc", "run"] {
        dir(path, 0o755)?;
    }
    for (link, target) in [
        ("bin", "usr/bin"),
        ("lib", "usr/lib"),
        ("lib64", "usr/lib64"),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_mode(0o777);
        header.set_size(0);
        header.set_mtime(0);
        builder.append_link(&mut header, link, target)?;
    }
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o755);
    header.set_size(binary.len() as u64);
    header.set_mtime(0);
    builder.append_data(&mut header, BOOT_BINARY.trim_start_matches('/'), binary)?;
    let mut bytes = builder.into_inner()?;
    bytes.flush()?;
    Ok(bytes)
}

/// Makes `reference` on the engine from this executable unless it is there; whether it was
/// made.
pub async fn ensure(docker: &Docker, reference: &str) -> Result<bool, DockerError> {
    match docker
        .get::<serde_json::Value>(&format!("/images/{reference}/json"))
        .await
    {
        Ok(_) => return Ok(false),
        Err(error) if !error.is_not_found() => return Err(error),
        Err(_) => {}
    }
    let layer = tokio::task::spawn_blocking(|| {
        std::fs::read("/proc/self/exe").and_then(|binary| layer(&binary))
    })
    .await
    .map_err(|e| DockerError::Parse(e.to_string()))?
    .map_err(|e| DockerError::Parse(format!("cannot make the runtime image: {e}")))?;
    let (repo, tag) = reference.rsplit_once(':').unwrap_or((reference, "latest"));
    let path = format!("/images/create?fromSrc=-&repo={repo}&tag={tag}");
    let answer = docker.call(http::Method::POST, &path, Some(layer)).await?;
    // The engine streams progress as JSON lines and reports a failure inside them.
    let text = String::from_utf8_lossy(&answer);
    if let Some(line) = text.lines().find(|line| line.contains("\"errorDetail\"")) {
        return Err(DockerError::Parse(format!("importing {reference}: {line}")));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layer_holds_the_binary_the_links_and_no_app_or_tmp() {
        let bytes = layer(b"\x7fELF").unwrap();
        let mut archive = tar::Archive::new(&bytes[..]);
        let mut names = Vec::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            let name = entry.path().unwrap().display().to_string();
            if name == "slipway/slipway" {
                assert_eq!(entry.header().mode().unwrap(), 0o755);
            }
            if name == "bin" {
                assert_eq!(
                    entry.link_name().unwrap().unwrap().to_str(),
                    Some("usr/bin")
                );
            }
            names.push(name);
        }
        assert!(names.contains(&"slipway/slipway".to_owned()), "{names:?}");
        // The tasks' tmpfs mounts make these with their own mode; an image's own directory
        // would have its mode copied up and the app could not write there.
        assert!(!names.iter().any(|n| n == "app" || n == "tmp"), "{names:?}");
    }
}
