//! Issue 31, item 9: `slipway backup` reads, as root, trees a tenant's app writes while it
//! reads them. A tree full of links (to a file outside the data dir, to another project's
//! data, to `/etc`), FIFOs and a sparse 15 TiB file, with a thread that keeps swapping a file
//! and a directory for links and FIFOs during the backups: no link target is copied, no backup
//! hangs, the archive stays small, and a restore gives the sparse file back with its holes.

use std::io::Read;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::backup::{slipway, text};
use crate::support::TestDaemon;

const SPARSE_SIZE: u64 = 15 << 40;
const HOST_SECRET: &str = "HOST-SECRET-OUTSIDE-THE-DATA-DIR";
const VICTIM_SECRET: &str = "VICTIM-PROJECT-SECRET";

async fn project_data(daemon: &TestDaemon, slug: &str) -> std::path::PathBuf {
    let created = daemon
        .api("POST", "/api/projects", Some(json!({ "slug": slug })))
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let dir = daemon.data_dir().join("appdata").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn fifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

/// Keeps renaming a regular file, a link to `secret` and a FIFO in turn onto `tenant/swap`,
/// and a real directory and a link to `victim` onto `tenant/swapdir`, until `stop`.
fn swapper(tenant: &Path, secret: &Path, victim: &Path, stop: Arc<AtomicBool>) -> u64 {
    let mut swaps = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for (index, kind) in ["file", "link", "fifo"].iter().enumerate() {
            let staged = tenant.join(format!(".staged-{index}"));
            let _ = std::fs::remove_file(&staged);
            match *kind {
                "file" => std::fs::write(&staged, "own swap file").unwrap(),
                "link" => std::os::unix::fs::symlink(secret, &staged).unwrap(),
                _ => fifo(&staged),
            }
            std::fs::rename(&staged, tenant.join("swap")).unwrap();
        }
        let staged_dir = tenant.join(".staged-dir");
        let _ = std::fs::remove_dir_all(&staged_dir);
        std::fs::create_dir(&staged_dir).unwrap();
        std::fs::write(staged_dir.join("inner.txt"), "own inner").unwrap();
        let _ = std::fs::remove_dir_all(tenant.join("swapdir"));
        let _ = std::fs::remove_file(tenant.join("swapdir"));
        std::fs::rename(&staged_dir, tenant.join("swapdir")).unwrap();
        let staged_link = tenant.join(".staged-dirlink");
        let _ = std::fs::remove_file(&staged_link);
        std::os::unix::fs::symlink(victim, &staged_link).unwrap();
        let _ = std::fs::remove_dir_all(tenant.join("swapdir"));
        std::fs::rename(&staged_link, tenant.join("swapdir")).unwrap();
        swaps += 1;
    }
    swaps
}

/// `slipway backup` to `file`, killed (and the test failed) if it takes over 60 s.
fn backup_within_a_minute(daemon: &TestDaemon, file: &Path) {
    let mut child = std::process::Command::new(crate::support::BIN)
        .args(["backup", "--output", file.to_str().unwrap(), "--data-dir"])
        .arg(daemon.data_dir())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let output = child.wait_with_output().unwrap();
            assert!(status.success(), "backup: {}", text(&output));
            return;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the backup hung (still running after 60 s)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The archive's entries: (type, name, size).
fn entries(tar: &[u8]) -> Vec<(String, String, u64)> {
    let mut archive = tar::Archive::new(tar);
    archive
        .entries()
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let kind = format!("{:?}", entry.header().entry_type());
            let name = entry.path().unwrap().to_string_lossy().into_owned();
            (kind, name, entry.header().size().unwrap())
        })
        .collect()
}

fn count(haystack: &[u8], needle: &str) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle.as_bytes())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_of_links_fifos_and_a_sparse_file_copies_no_target_and_stays_small() {
    let daemon = TestDaemon::start();
    let outside = tempfile::tempdir().unwrap();
    let host_secret = outside.path().join("host-secret");
    std::fs::write(&host_secret, HOST_SECRET).unwrap();
    let victim = project_data(&daemon, "victim").await;
    std::fs::write(victim.join("secret.txt"), VICTIM_SECRET).unwrap();
    let tenant = project_data(&daemon, "tenant").await;

    std::fs::write(tenant.join("own.txt"), "own data").unwrap();
    std::os::unix::fs::symlink(&host_secret, tenant.join("to-host-secret")).unwrap();
    std::os::unix::fs::symlink(victim.join("secret.txt"), tenant.join("to-victim")).unwrap();
    std::os::unix::fs::symlink(&victim, tenant.join("to-victim-dir")).unwrap();
    std::os::unix::fs::symlink("/etc", tenant.join("to-etc")).unwrap();
    fifo(&tenant.join("pipe"));
    std::fs::create_dir(tenant.join("nested")).unwrap();
    fifo(&tenant.join("nested/pipe"));
    std::os::unix::fs::symlink(outside.path(), tenant.join("nested/out")).unwrap();
    let sparse = std::fs::File::create(tenant.join("sparse.bin")).unwrap();
    if let Err(error) = sparse.set_len(SPARSE_SIZE) {
        eprintln!("SKIP: the data dir's filesystem keeps no 15 TiB sparse file: {error}");
        return;
    }
    sparse.write_all_at(b"SPARSE-HEAD", 0).unwrap();
    sparse.write_all_at(b"SPARSE-MIDDLE", 7 << 40).unwrap();
    sparse
        .write_all_at(b"SPARSE-TAIL", SPARSE_SIZE - 11)
        .unwrap();
    drop(sparse);

    let stop = Arc::new(AtomicBool::new(false));
    let racing = {
        let (tenant, secret, victim, stop) = (
            tenant.clone(),
            host_secret.clone(),
            victim.clone(),
            stop.clone(),
        );
        std::thread::spawn(move || swapper(&tenant, &secret, &victim, stop))
    };
    let dir = tempfile::tempdir().unwrap();
    let mut archives = Vec::new();
    let started = Instant::now();
    for round in 0..5 {
        let file = dir.path().join(format!("backup-{round}.tar.gz"));
        backup_within_a_minute(&daemon, &file);
        archives.push(file);
    }
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let swaps = racing.join().unwrap();
    assert!(swaps > 0, "the swapper never ran");

    for file in &archives {
        let size = std::fs::metadata(file).unwrap().len();
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(file).unwrap())
            .read_to_end(&mut tar)
            .unwrap();
        eprintln!(
            "{}: {size} bytes, {} unpacked ({swaps} swap rounds, 5 backups in {took:?})",
            file.display(),
            tar.len()
        );
        assert!(size < 1 << 20, "the archive is {size} bytes");
        assert!(tar.len() < 8 << 20, "the tar stream is {} bytes", tar.len());
        assert_eq!(
            count(&tar, HOST_SECRET),
            0,
            "a link's target outside was copied"
        );
        assert_eq!(
            count(&tar, VICTIM_SECRET),
            1,
            "the victim's file is in the archive once (as its own), never through a link: {:?}",
            entries(&tar)
        );
        for own in ["SPARSE-HEAD", "SPARSE-MIDDLE", "SPARSE-TAIL", "own data"] {
            assert_eq!(count(&tar, own), 1, "{own}");
        }
        // The swapped-in directory's file is archived only as a file of its own, under
        // `swapdir/` or, caught before its rename, under `.staged-dir/`.
        assert!(
            count(&tar, "own inner") <= count(&tar, "/inner.txt"),
            "{:?}",
            entries(&tar)
        );
    }

    // The last archive restores, the sparse file with its holes.
    let restored = dir.path().join("restored");
    let output = slipway(&[
        "restore",
        archives[4].to_str().unwrap(),
        "--data-dir",
        restored.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "restore: {}", text(&output));
    let back = restored.join(tenant.strip_prefix(daemon.data_dir()).unwrap());
    let metadata = std::fs::metadata(back.join("sparse.bin")).unwrap();
    assert_eq!(metadata.len(), SPARSE_SIZE);
    assert!(
        metadata.blocks() * 512 < 1 << 20,
        "{} blocks",
        metadata.blocks()
    );
    let file = std::fs::File::open(back.join("sparse.bin")).unwrap();
    let mut tail = [0u8; 11];
    file.read_exact_at(&mut tail, SPARSE_SIZE - 11).unwrap();
    assert_eq!(&tail, b"SPARSE-TAIL");
    assert_eq!(
        std::fs::read_link(back.join("to-host-secret")).unwrap(),
        host_secret
    );
    assert!(!back.join("pipe").exists(), "FIFOs are left out");
}
