//! Issue 29 §2: a backup of a server restores to working sites, with disk limits on (volumes
//! are loop-mounted images) and off (plain directories), and from one to the other. A static
//! site and a Node app that keeps files in `/data` (random bytes, a symlink, a 64 MB sparse
//! file) are deployed; after `slipway backup`, `slipway restore` into an empty dir and a
//! daemon started there, every page answers the same bytes with no new run, every `/data`
//! file has the same checksum, owner and mode, and the restored data dir takes about as much
//! disk as the archive (`du`), not the volumes' limits.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::json;
use slipway::disk::Volume;

use super::Sandboxed;
use crate::operator::backup::{backup, restore};
use crate::support::{missing_tool, targz, DaemonOptions, TestDaemon};

/// Keeps its state in `/data` (or, without a sandbox, in its project's data dir found from
/// its workspace: `DATA_REL`), made at its first start only.
const APP: &str = r#"
const fs = require('fs'), http = require('http'), path = require('path'), crypto = require('crypto');
const data = fs.existsSync('/data') ? '/data' : path.resolve(process.env.DATA_REL);
const sha = (file) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
if (!fs.existsSync(path.join(data, 'notes'))) {
  fs.mkdirSync(path.join(data, 'notes'));
  fs.writeFileSync(path.join(data, 'notes', 'hello.txt'), 'kept across servers\n');
  fs.writeFileSync(path.join(data, 'blob.bin'), crypto.randomBytes(3 << 20));
  fs.symlinkSync('notes/hello.txt', path.join(data, 'link'));
  const sparse = fs.openSync(path.join(data, 'sparse.bin'), 'w');
  fs.writeSync(sparse, 'end', 64 << 20);
  fs.closeSync(sparse);
}
http.createServer((req, res) => {
  if (req.url === '/write') {
    fs.writeFileSync(path.join(data, 'written-after-restore'), 'ok');
    res.end('wrote');
    return;
  }
  res.end(`${fs.readFileSync(path.join(data, 'link'))}blob=${sha(path.join(data, 'blob.bin'))} payload=${sha('payload.bin')}`);
}).listen(process.env.PORT);
"#;

/// The pages compared before and after: (slug, path).
const PAGES: [(&str, &str); 4] = [
    ("site", "/"),
    ("site", "/assets/app.js"),
    ("site", "/data.json"),
    ("keeper", "/"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_with_disk_limits_restores_every_site_and_data_byte_for_byte() {
    const TEST: &str = "a_backup_with_disk_limits_restores_every_site_and_data_byte_for_byte";
    if missing_tool("node", "the app is a node server") {
        return;
    }
    let Some(mut original) = Sandboxed::start(TEST, "") else {
        return;
    };
    if !disk_limits(&original.daemon).await {
        eprintln!("SKIP {TEST}: no usable loop devices here, so no disk limits");
        return;
    }
    let before = deploy_both(&original.daemon).await;
    let data = app_data(&original.daemon).await;
    let archive = take_backup(&original.daemon);
    assert!(
        !list_archive(&archive)
            .iter()
            .any(|name| name.ends_with(".img")),
        "no volume image is in the archive"
    );
    // The original's apps stop before the copies start (they would share its project uids).
    assert_eq!(original.daemon.stop(), Some(0));
    assert!(original.daemon.stop_apps().status.success());

    let restored = Sandboxed::start_prepared(TEST, DaemonOptions::default(), "", |dir| {
        restore(&archive, dir);
    })
    .expect("the sandbox ran once");
    assert!(disk_limits(&restored.daemon).await);
    assert_same(&restored.daemon, &before, &data, &archive).await;
    for volume in volumes(&restored.daemon.data_dir()) {
        let dir = volume.dir.display();
        assert!(volume.image.exists(), "{dir} is an image again");
        assert!(!volume.restored_marker().exists(), "{dir} was rebuilt");
        assert!(is_mount_point(&volume.dir), "{dir} is mounted");
    }
    // The app writes its restored `/data` as its own uid.
    let wrote = restored.daemon.app_get("keeper", "/write", &[]).await;
    assert_eq!(wrote.text(), "wrote");

    // The same archive on a machine without disk limits: plain directories, same content.
    let plain =
        TestDaemon::start_prepared_in(Path::new("/var/tmp"), DaemonOptions::default(), |dir| {
            restore(&archive, dir);
        });
    assert!(!disk_limits(&plain).await);
    assert_same(&plain, &before, &data, &archive).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_without_disk_limits_restores_every_site_and_data_byte_for_byte() {
    if missing_tool("node", "the app is a node server") {
        return;
    }
    let original = TestDaemon::start_in(Path::new("/var/tmp"), DaemonOptions::default());
    assert!(!disk_limits(&original).await);
    let before = deploy_both(&original).await;
    let data = app_data(&original).await;
    let archive = take_backup(&original);
    let restored =
        TestDaemon::start_prepared_in(Path::new("/var/tmp"), DaemonOptions::default(), |dir| {
            restore(&archive, dir);
        });
    assert_same(&restored, &before, &data, &archive).await;
    assert!(
        !std::fs::read_dir(restored.data_dir().join("appdata"))
            .unwrap()
            .any(|entry| entry
                .unwrap()
                .path()
                .extension()
                .is_some_and(|e| e == "img")),
        "no image where disk limits are off"
    );
}

async fn disk_limits(daemon: &TestDaemon) -> bool {
    daemon.api("GET", "/api/system", None).await.json()["diskLimits"] == true
}

/// Deploys the static site and the app; returns what each page answers.
async fn deploy_both(daemon: &TestDaemon) -> Vec<(u16, Vec<u8>)> {
    let script: String = (0..20_000).map(|i| format!("let v{i} = {i};\n")).collect();
    let site = targz(&[
        ("public/index.html", "<h1>restored whole</h1>", 0o644),
        ("public/assets/app.js", &script, 0o644),
        ("public/data.json", r#"{"kept": true}"#, 0o644),
    ]);
    assert_eq!(daemon.upload("site", site).await.status, 201);
    let run = daemon
        .provision("site", json!({"installCommand": "", "buildCommand": ""}))
        .await;
    complete(daemon, &run).await;

    let upload = daemon
        .upload("keeper", targz(&[("server.js", APP, 0o644)]))
        .await;
    assert_eq!(upload.status, 201, "{}", upload.text());
    let id = project_id(daemon, "keeper").await;
    let relative = format!("../../../appdata/{id}");
    let set = daemon
        .api(
            "POST",
            "/api/projects/keeper/env-vars",
            Some(json!({ "DATA_REL": relative })),
        )
        .await;
    assert!(set.status < 300, "{}", set.text());
    let body = json!({
        "installCommand": "",
        "buildCommand": "head -c 2000000 /dev/urandom > payload.bin",
        "startCommand": "node server.js",
    });
    let run = daemon.provision("keeper", body).await;
    complete(daemon, &run).await;
    let mut pages = Vec::new();
    for (slug, path) in PAGES {
        let page = daemon.app_get(slug, path, &[]).await;
        assert_eq!(page.status, 200, "{slug}{path}: {}", page.text());
        pages.push((page.status, page.body.to_vec()));
    }
    assert!(String::from_utf8_lossy(&pages[3].1).starts_with("kept across servers"));
    pages
}

async fn complete(daemon: &TestDaemon, started: &serde_json::Value) {
    let id = started["provisioningId"].as_str().unwrap();
    let status = daemon.wait_run(id, Duration::from_secs(120)).await;
    assert_eq!(
        status["status"],
        "provisioning_complete",
        "{status}\n{}",
        daemon.log_text()
    );
}

async fn project_id(daemon: &TestDaemon, slug: &str) -> String {
    let project = daemon
        .api("GET", &format!("/api/projects/{slug}"), None)
        .await
        .json();
    project["id"]
        .as_str()
        .or_else(|| project["project"]["id"].as_str())
        .unwrap_or_else(|| panic!("no id: {project}"))
        .to_owned()
}

/// Every file, directory and link of the app's `/data` as seen on the host: path → what it
/// is, its owner, mode and (files) SHA-256 or (links) target.
async fn app_data(daemon: &TestDaemon) -> BTreeMap<String, String> {
    let id = project_id(daemon, "keeper").await;
    let mut found = BTreeMap::new();
    walk(&daemon.data_dir().join("appdata").join(id), "", &mut found);
    assert!(found.contains_key("blob.bin"), "{found:?}");
    found
}

fn walk(dir: &Path, prefix: &str, found: &mut BTreeMap<String, String>) {
    use std::os::unix::fs::MetadataExt;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if prefix.is_empty() && name == "lost+found" {
            continue;
        }
        let path = entry.path();
        let metadata = std::fs::symlink_metadata(&path).unwrap();
        let owner = format!(
            "{}:{} {:o}",
            metadata.uid(),
            metadata.gid(),
            metadata.mode()
        );
        let relative = format!("{prefix}{name}");
        let what = if metadata.is_dir() {
            walk(&path, &format!("{relative}/"), found);
            "dir".to_owned()
        } else if metadata.is_symlink() {
            format!("link {}", std::fs::read_link(&path).unwrap().display())
        } else {
            slipway::ids::sha256_hex(&std::fs::read(&path).unwrap())
        };
        found.insert(relative, format!("{what} {owner}"));
    }
}

fn take_backup(daemon: &TestDaemon) -> std::path::PathBuf {
    let archive = daemon.dir.path().join("backup.tar.gz");
    tokio::task::block_in_place(|| backup(daemon, &archive));
    eprintln!(
        "original data dir {} KiB on disk (du -x)",
        disk_usage_kb(&daemon.data_dir())
    );
    archive
}

/// The restored daemon answers every page with the same bytes, ran nothing new, holds the
/// same `/data`, and its data dir takes about the archive's size on disk.
async fn assert_same(
    restored: &TestDaemon,
    pages: &[(u16, Vec<u8>)],
    data: &BTreeMap<String, String>,
    archive: &Path,
) {
    for ((slug, path), (status, body)) in PAGES.iter().zip(pages) {
        let page = restored.app_get(slug, path, &[]).await;
        assert_eq!(
            (page.status, &page.body[..]),
            (*status, &body[..]),
            "{slug}{path} after the restore: {}\n{}",
            page.text(),
            restored.log_text()
        );
    }
    for slug in ["site", "keeper"] {
        let list = restored
            .api("GET", &format!("/api/projects/{slug}/deployments"), None)
            .await
            .json();
        assert_eq!(
            list["deployments"].as_array().unwrap().len(),
            1,
            "no new run: {list}"
        );
    }
    assert_eq!(&app_data(restored).await, data, "/data after the restore");
    let archive_kb = std::fs::metadata(archive).unwrap().len() >> 10;
    let used_kb = disk_usage_kb(&restored.data_dir());
    eprintln!(
        "archive {archive_kb} KiB; restored data dir {used_kb} KiB on disk (du -x; images \
         counted, their mounts not)"
    );
    assert!(
        used_kb < archive_kb * 3 + 16 * 1024,
        "the restored data dir takes {used_kb} KiB for a {archive_kb} KiB archive"
    );
}

/// `du -skx`: what the data dir takes on its own filesystem (sparse images count what they
/// hold, mounted volumes are not counted twice).
fn disk_usage_kb(dir: &Path) -> u64 {
    let output = std::process::Command::new("du")
        .arg("-skx")
        .arg(dir)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .and_then(|kb| kb.parse().ok())
        .unwrap()
}

/// The volumes of a data dir: live workspaces and app data dirs.
fn volumes(data_dir: &Path) -> Vec<Volume> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(data_dir.join("deployments")).unwrap() {
        found.push(Volume::workspace(&entry.unwrap().path(), 0));
    }
    for entry in std::fs::read_dir(data_dir.join("appdata")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.push(Volume::app_data(&path, 0));
        }
    }
    found
}

fn is_mount_point(dir: &Path) -> bool {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

fn list_archive(archive: &Path) -> Vec<String> {
    let file = std::fs::File::open(archive).unwrap();
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    tar.entries()
        .unwrap()
        .map(|entry| {
            entry
                .unwrap()
                .path()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}
