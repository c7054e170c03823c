//! `slipway backup` against a daemon serving traffic, `slipway restore` into a new data dir,
//! and a second daemon started on it: the same projects, env vars, tokens, logs and CA, the
//! live site served from the restored build with no new run. Corrupt, truncated and newer
//! archives are refused with a message that says so, and nothing is written.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::support::{DaemonOptions, TestDaemon, TlsSetup, BIN};

pub(crate) fn slipway(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().expect("run slipway")
}

pub(crate) fn text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A backup of `daemon` at `file`; the command must succeed.
pub(crate) fn backup(daemon: &TestDaemon, file: &Path) -> String {
    let output = slipway(&[
        "backup",
        "--output",
        file.to_str().unwrap(),
        "--data-dir",
        daemon.data_dir().to_str().unwrap(),
    ]);
    assert!(output.status.success(), "backup: {}", text(&output));
    text(&output)
}

/// `slipway restore` of `archive` into `data_dir`; the command must succeed. Returns what it said.
pub(crate) fn restore(archive: &Path, data_dir: &Path) -> String {
    let output = slipway(&[
        "restore",
        archive.to_str().unwrap(),
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "restore: {}", text(&output));
    text(&output)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_taken_under_load_restores_into_a_working_data_dir() {
    let options = DaemonOptions::default().tls(TlsSetup::Internal);
    let daemon = TestDaemon::start_with(options.clone());
    let status = daemon.deploy_verified("site", "<h1>backed up</h1>").await;
    let deployment_id = status["deploymentId"].as_str().unwrap().to_owned();
    let set = daemon
        .api(
            "POST",
            "/api/projects/site/env-vars",
            Some(json!({"GREETING": "hello", "SECRET_KEY": "s3cr3t"})),
        )
        .await;
    assert!(set.status < 300, "env: {}", set.text());
    let created = daemon
        .api("POST", "/api/tokens", Some(json!({"name": "ci"})))
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let ci_token = created.json()["token"].as_str().unwrap().to_owned();
    let logs_before = daemon.logs_text(&deployment_id).await;
    assert!(!logs_before.is_empty());

    // Load: visitors keep fetching the site while the backup runs.
    let stop = Arc::new(AtomicBool::new(false));
    let (served, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load = {
        let (stop, served, failed) = (stop.clone(), served.clone(), failed.clone());
        let (addr, host) = (daemon.http, daemon.app_host("site"));
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let response =
                    crate::support::http_request(addr, "GET", &host, "/", &[], vec![]).await;
                // Plain HTTP redirects to HTTPS in tls mode internal: a 308 is a served request.
                if response.status == 308 || response.status == 200 {
                    served.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let archive_dir = tempfile::tempdir().unwrap();
    let archive = archive_dir.path().join("slipway-backup.tar.gz");
    let said = tokio::task::block_in_place(|| backup(&daemon, &archive));
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    assert!(said.contains("every checksum verified"), "{said}");
    assert_eq!(
        failed.load(Ordering::Relaxed),
        0,
        "requests failed during the backup"
    );
    assert!(
        served.load(Ordering::Relaxed) > 10,
        "the load ran during the backup"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&archive).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the archive holds the secret key: 0600"
    );
    assert!(
        !archive_dir
            .path()
            .join("slipway-backup.tar.gz.partial")
            .exists(),
        "no partial file is left"
    );
    let ca_before = text(&slipway(&[
        "ca",
        "export",
        "--data-dir",
        daemon.data_dir().to_str().unwrap(),
    ]));

    // Restore into a new data dir and start a second daemon there.
    let restored = TestDaemon::start_prepared(options, |data_dir| {
        let said = restore(&archive, data_dir);
        assert!(said.contains("restored 1 project(s)"), "{said}");
    });
    assert_eq!(
        restored.token, daemon.token,
        "the initial admin token file is restored"
    );
    let page = restored.app_get("site", "/", &[]).await;
    assert_eq!(page.status, 308, "plain HTTP redirects: {}", page.text());
    let https = crate::support::tls::curl_https(
        &restored.app_host("site"),
        restored.https_addr(),
        &write_ca(&restored),
        &[],
    )
    .await;
    assert!(
        String::from_utf8_lossy(&https.stdout).contains("<h1>backed up</h1>"),
        "the live site is served from the restored build: {https:?}"
    );
    let ca_after = text(&slipway(&[
        "ca",
        "export",
        "--data-dir",
        restored.data_dir().to_str().unwrap(),
    ]));
    assert!(ca_before.contains("BEGIN CERTIFICATE"), "{ca_before}");
    assert_eq!(ca_before, ca_after, "the same internal CA");

    for path in [
        "/api/projects",
        "/api/projects/site/env-vars",
        "/api/projects/site/deployments",
    ] {
        // The same, but for the daemon's own port in app URLs.
        let port = |d: &TestDaemon| format!(":{}", d.https_addr().port());
        let before = daemon
            .api("GET", path, None)
            .await
            .text()
            .replace(&port(&daemon), ":PORT");
        let after = restored
            .api("GET", path, None)
            .await
            .text()
            .replace(&port(&restored), ":PORT");
        assert_eq!(before, after, "{path} differs after the restore");
    }
    let deployments = restored
        .api("GET", "/api/projects/site/deployments", None)
        .await
        .json();
    assert_eq!(
        deployments["deployments"].as_array().unwrap().len(),
        1,
        "no new run: {deployments}"
    );
    let env = restored
        .api("GET", "/api/projects/site/env-vars", None)
        .await
        .text();
    assert!(
        env.contains("s3cr3t"),
        "sealed values open with the restored key: {env}"
    );
    let token_names = |list: serde_json::Value| -> Vec<(String, String)> {
        let items = list
            .as_array()
            .cloned()
            .unwrap_or_else(|| list["tokens"].as_array().cloned().unwrap_or_default());
        items
            .iter()
            .map(|t| (t["id"].to_string(), t["name"].to_string()))
            .collect()
    };
    assert_eq!(
        token_names(daemon.api("GET", "/api/tokens", None).await.json()),
        token_names(restored.api("GET", "/api/tokens", None).await.json()),
    );
    let with_ci = restored
        .request(
            "GET",
            &restored.control_host(),
            "/api/projects",
            &[("authorization", format!("Bearer {ci_token}"))],
            vec![],
        )
        .await;
    assert_eq!(with_ci.status, 200, "a token made before the backup works");
    let logs_after = restored.logs_text(&deployment_id).await;
    assert!(
        logs_after.starts_with(&logs_before),
        "the deployment's logs are restored:\nbefore:\n{logs_before}\nafter:\n{logs_after}"
    );
}

fn write_ca(daemon: &TestDaemon) -> PathBuf {
    let pem = slipway(&[
        "ca",
        "export",
        "--data-dir",
        daemon.data_dir().to_str().unwrap(),
    ]);
    let path = daemon.dir.path().join("ca.pem");
    std::fs::write(&path, &pem.stdout).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn corrupt_truncated_and_newer_archives_are_refused_and_nothing_is_written() {
    let daemon = TestDaemon::start();
    daemon.deploy_page("site", "<h1>x</h1>").await;
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.tar.gz");
    tokio::task::block_in_place(|| backup(&daemon, &good));
    let bytes = std::fs::read(&good).unwrap();
    let restore = |archive: &Path, name: &str| {
        let target = dir.path().join(name);
        let output = slipway(&[
            "restore",
            archive.to_str().unwrap(),
            "--data-dir",
            target.to_str().unwrap(),
        ]);
        (output, target)
    };

    // Cut short: the manifest never arrives.
    let truncated = dir.path().join("truncated.tar.gz");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let (output, target) = restore(&truncated, "from-truncated");
    assert!(!output.status.success());
    assert!(text(&output).contains("corrupt"), "{}", text(&output));
    assert!(!target.exists(), "nothing is written");

    // One file changed inside a well-formed archive: its checksum gives it away.
    let tampered = dir.path().join("tampered.tar.gz");
    rewrite(&good, &tampered, |name, data| {
        if name == "data/secret.key" {
            data[0] ^= 0xff;
        }
    });
    let (output, target) = restore(&tampered, "from-tampered");
    assert!(!output.status.success());
    let said = text(&output);
    assert!(
        said.contains("data/secret.key") && said.contains("checksum"),
        "{said}"
    );
    assert!(!target.exists());

    // Made by a newer Slipway (a store schema this binary does not know).
    let newer = dir.path().join("newer.tar.gz");
    rewrite(&good, &newer, |name, data| {
        if name == "slipway-backup.json" {
            let mut header: serde_json::Value = serde_json::from_slice(data).unwrap();
            header["schemaVersion"] = json!(999);
            header["slipwayVersion"] = json!("9.9.9");
            *data = serde_json::to_vec(&header).unwrap();
        }
    });
    let (output, target) = restore(&newer, "from-newer");
    assert!(!output.status.success());
    let said = text(&output);
    assert!(
        said.contains("newer Slipway (9.9.9")
            && said.contains("install a Slipway at least as new as 9.9.9"),
        "{said}"
    );
    assert!(!target.exists());

    // Not a backup at all.
    let other = dir.path().join("other.tar.gz");
    std::fs::write(
        &other,
        crate::support::targz(&[("index.html", "hi", 0o644)]),
    )
    .unwrap();
    let (output, _) = restore(&other, "from-other");
    assert!(
        text(&output).contains("is not a Slipway backup"),
        "{}",
        text(&output)
    );

    // A data dir in use is never overwritten.
    let (output, _) = restore(&good, "../");
    assert!(!output.status.success());
    let output = slipway(&[
        "restore",
        good.to_str().unwrap(),
        "--data-dir",
        daemon.data_dir().to_str().unwrap(),
    ]);
    assert!(text(&output).contains("is not empty"), "{}", text(&output));
}

/// Copies the archive `from` to `to`, letting `change` edit each regular file's bytes.
pub(crate) fn rewrite(from: &Path, to: &Path, mut change: impl FnMut(&str, &mut Vec<u8>)) {
    let (mut input, mut builder) = reopen(from, to);
    for entry in input.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut header = entry.header().clone();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
        if header.entry_type() == tar::EntryType::Regular {
            change(&name, &mut data);
            header.set_size(data.len() as u64);
            header.set_cksum();
        }
        if header.entry_type() == tar::EntryType::Symlink {
            let target = entry.link_name().unwrap().unwrap().into_owned();
            builder.append_link(&mut header, &name, target).unwrap();
        } else {
            builder
                .append_data(&mut header, &name, data.as_slice())
                .unwrap();
        }
    }
    builder.into_inner().unwrap().finish().unwrap();
}

/// An archive of an older Slipway (format 1) also held each volume's image, copied while
/// mounted: it restores from the files it holds beside them, and the images are left out.
#[tokio::test(flavor = "multi_thread")]
async fn a_format_1_archive_restores_without_its_volume_images() {
    let daemon = TestDaemon::start();
    let status = daemon.deploy_page("site", "<h1>old format</h1>").await;
    let deployment = status["deploymentId"].as_str().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let current = dir.path().join("current.tar.gz");
    tokio::task::block_in_place(|| backup(&daemon, &current));
    let image = format!("data/deployments/{deployment}/workspace.img");
    let old = dir.path().join("format-1.tar.gz");
    as_format_1(&current, &old, &image);

    let restored = TestDaemon::start_prepared(DaemonOptions::default(), |data_dir| {
        restore(&old, data_dir);
    });
    let image_path = restored.data_dir().join(image.trim_start_matches("data/"));
    assert!(!image_path.exists(), "a format 1 image is not restored");
    let page = restored.app_get("site", "/", &[]).await;
    assert_eq!(page.text(), "<h1>old format</h1>");
}

/// Rewrites a current archive as a format 1 one holding a (fake) volume image at `image`.
fn as_format_1(from: &Path, to: &Path, image: &str) {
    let bytes = vec![0xab_u8; 1 << 20];
    let sha256 = slipway::ids::sha256_hex(&bytes);
    let (mut input, mut builder) = reopen(from, to);
    let append = |builder: &mut tar::Builder<_>, name: &str, data: &[u8], mode: u32| {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(mode);
        header.set_entry_type(tar::EntryType::Regular);
        builder.append_data(&mut header, name, data).unwrap();
    };
    for entry in input.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        if name == "slipway-backup.json" || name == "manifest.json" {
            let mut json: serde_json::Value = serde_json::from_reader(&mut entry).unwrap();
            json["format"] = json!(1);
            if name == "manifest.json" {
                append(&mut builder, image, &bytes, 0o644);
                let file = json!({"path": image, "size": bytes.len(), "sha256": sha256});
                json["files"].as_array_mut().unwrap().push(file);
            }
            append(
                &mut builder,
                &name,
                &serde_json::to_vec(&json).unwrap(),
                0o600,
            );
            continue;
        }
        let mut header = entry.header().clone();
        match header.entry_type() {
            tar::EntryType::Symlink => {
                let target = entry.link_name().unwrap().unwrap().into_owned();
                builder.append_link(&mut header, &name, target).unwrap();
            }
            _ => builder.append_data(&mut header, &name, &mut entry).unwrap(),
        }
    }
    builder.into_inner().unwrap().finish().unwrap();
}

type GzTarWriter = tar::Builder<flate2::write::GzEncoder<std::fs::File>>;

/// The archive at `from`, to read, and a new one at `to`, to write.
fn reopen(
    from: &Path,
    to: &Path,
) -> (
    tar::Archive<flate2::read::GzDecoder<std::fs::File>>,
    GzTarWriter,
) {
    let input = tar::Archive::new(flate2::read::GzDecoder::new(
        std::fs::File::open(from).unwrap(),
    ));
    let output = std::fs::File::create(to).unwrap();
    let builder = tar::Builder::new(flate2::write::GzEncoder::new(
        output,
        flate2::Compression::fast(),
    ));
    (input, builder)
}
