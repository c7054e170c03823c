//! Tests of the source store and the archive rules, on real archives built here with the
//! `tar` and `flate2` crates (hand-written headers where the tar builder refuses a path), real
//! files in temporary directories, and gzip bombs made of repeated gzip members so that
//! building them is cheap while expanding them would not be.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use flate2::write::GzEncoder;
use flate2::Compression;
use tar::{EntryType, Header};

use super::*;

mod refusals;

const MIB: u64 = 1024 * 1024;

/// A tar stream built member by member, with raw names so that `..` and `/` can be written.
struct TarBuilder {
    bytes: Vec<u8>,
}

impl TarBuilder {
    fn new() -> TarBuilder {
        TarBuilder { bytes: Vec::new() }
    }

    fn header(kind: EntryType, path: &str, size: u64, mode: u32) -> Header {
        let mut header = Header::new_gnu();
        header.set_entry_type(kind);
        header.set_size(size);
        header.set_mode(mode);
        header.set_mtime(1_700_000_000);
        let name = &mut header.as_old_mut().name;
        assert!(path.len() < name.len(), "test paths stay short: {path}");
        name[..path.len()].copy_from_slice(path.as_bytes());
        header
    }

    fn push(&mut self, mut header: Header, data: &[u8]) -> &mut TarBuilder {
        header.set_cksum();
        self.bytes.extend_from_slice(header.as_bytes());
        self.bytes.extend_from_slice(data);
        let padding = (512 - data.len() % 512) % 512;
        self.bytes.extend(std::iter::repeat_n(0u8, padding));
        self
    }

    fn file(&mut self, path: &str, data: &[u8], mode: u32) -> &mut TarBuilder {
        self.push(
            Self::header(EntryType::Regular, path, data.len() as u64, mode),
            data,
        )
    }

    fn dir(&mut self, path: &str) -> &mut TarBuilder {
        self.push(Self::header(EntryType::Directory, path, 0, 0o755), b"")
    }

    fn link(&mut self, kind: EntryType, path: &str, target: &str) -> &mut TarBuilder {
        let mut header = Self::header(kind, path, 0, 0o777);
        let link_name = &mut header.as_old_mut().linkname;
        link_name[..target.len()].copy_from_slice(target.as_bytes());
        self.push(header, b"")
    }

    fn special(&mut self, kind: EntryType, path: &str) -> &mut TarBuilder {
        self.push(Self::header(kind, path, 0, 0o644), b"")
    }

    /// A GNU long-name extension ('L') naming the next member.
    fn long_name(&mut self, path: &str) -> &mut TarBuilder {
        let mut data = path.as_bytes().to_vec();
        data.push(0);
        self.push(
            Self::header(
                EntryType::GNULongName,
                "././@LongLink",
                data.len() as u64,
                0,
            ),
            &data,
        )
    }

    /// A PAX extension ('x') giving the next member's path.
    fn pax_path(&mut self, path: &str) -> &mut TarBuilder {
        let body = format!(" path={path}\n");
        // The record's length counts its own decimal digits.
        let mut length = body.len() + 1;
        while body.len() + length.to_string().len() != length {
            length = body.len() + length.to_string().len();
        }
        let record = format!("{length}{body}");
        self.push(
            Self::header(EntryType::XHeader, "pax", record.len() as u64, 0),
            record.as_bytes(),
        )
    }

    fn finish(&mut self) -> Vec<u8> {
        let mut bytes = std::mem::take(&mut self.bytes);
        bytes.extend(std::iter::repeat_n(0u8, 1024));
        bytes
    }

    fn gz(&mut self) -> Vec<u8> {
        gzip(&self.finish())
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// A temporary root holding the store, a destination and an "outside" directory that no
/// archive may touch.
struct Fixture {
    _temp: tempfile::TempDir,
    root: PathBuf,
    store: SourceStore,
}

impl Fixture {
    fn new() -> Fixture {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().to_path_buf();
        fs::create_dir_all(root.join("work/dest")).unwrap();
        fs::create_dir_all(root.join("outside")).unwrap();
        fs::write(root.join("outside/secret"), b"secret").unwrap();
        let store = SourceStore::open(root.join("sources")).unwrap();
        Fixture {
            _temp: temp,
            root,
            store,
        }
    }

    fn dest(&self) -> PathBuf {
        self.root.join("work/dest")
    }

    fn outside(&self) -> PathBuf {
        self.root.join("outside")
    }

    /// Asserts that the tree under the root is exactly what the fixture made: nothing written
    /// outside the destination, an empty destination and an empty store.
    fn assert_untouched(&self) {
        let mut found = Vec::new();
        list(&self.root, &self.root, &mut found);
        found.sort();
        let expected = ["outside", "outside/secret", "sources", "work", "work/dest"];
        assert_eq!(found, expected, "unexpected files under the test root");
        assert_eq!(fs::read(self.outside().join("secret")).unwrap(), b"secret");
    }
}

fn list(root: &Path, dir: &Path, found: &mut Vec<String>) {
    for item in fs::read_dir(dir).unwrap() {
        let item = item.unwrap();
        let path = item.path();
        found.push(
            path.strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned(),
        );
        if item.file_type().unwrap().is_dir() {
            list(root, &path, found);
        }
    }
}

fn expect_invalid(result: Result<impl std::fmt::Debug, SourceError>, needle: &str) {
    match result {
        Err(SourceError::InvalidArchive(message)) => {
            assert!(
                message.contains(needle),
                "message {message:?} lacks {needle:?}"
            )
        }
        other => panic!("expected InvalidArchive containing {needle:?}, got {other:?}"),
    }
}

/// Refused by ingest (nothing stored) and, planted in the store directly, by unpack (nothing
/// unpacked), with nothing written anywhere else either time.
fn assert_refused(fixture: &Fixture, archive: &[u8], needle: &str) {
    let limits = SourceLimits::default();
    expect_invalid(fixture.store.ingest(archive, &limits), needle);
    fixture.assert_untouched();
    let sha256 = crate::ids::sha256_hex(archive);
    fs::write(fixture.store.path(&sha256), archive).unwrap();
    expect_invalid(
        fixture.store.unpack(&sha256, &fixture.dest(), &limits),
        needle,
    );
    fixture.store.remove(&sha256).unwrap();
    fixture.assert_untouched();
}

#[test]
fn valid_archive_round_trips_with_sizes_count_and_exec_bit() {
    let fixture = Fixture::new();
    let archive = TarBuilder::new()
        .dir("./proj/")
        .file("./proj/README.md", b"hello\n", 0o644)
        .file("proj/bin/run.sh", b"#!/bin/sh\necho hi\n", 0o6755)
        .file("proj/sticky", b"x", 0o1600)
        .link(EntryType::Symlink, "proj/bin/readme", "../README.md")
        .link(EntryType::Symlink, "proj/dangling", "missing/file")
        .link(EntryType::Link, "proj/hard", "proj/README.md")
        .dir("proj/empty/")
        .gz();
    let limits = SourceLimits::default();
    let ingested = fixture.store.ingest(&archive, &limits).unwrap();
    assert_eq!(ingested.sha256, crate::ids::sha256_hex(&archive));
    assert_eq!(ingested.size_bytes, archive.len() as u64);
    assert_eq!(ingested.file_count, 8);
    assert!(!ingested.already_present);
    let stored = fixture.store.path(&ingested.sha256);
    assert_eq!(fs::read(&stored).unwrap(), archive);
    let store_mode = fs::metadata(fixture.root.join("sources"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(store_mode & 0o777, 0o700);
    assert!(fixture.store.contains(&ingested.sha256));

    let dest = fixture.dest();
    let stats = fixture
        .store
        .unpack(&ingested.sha256, &dest, &limits)
        .unwrap();
    assert_eq!(
        stats,
        UnpackStats {
            file_count: 8,
            unpacked_bytes: 6 + 18 + 1
        }
    );
    assert_eq!(fs::read(dest.join("proj/README.md")).unwrap(), b"hello\n");
    let mode = |path: &str| {
        fs::symlink_metadata(dest.join(path))
            .unwrap()
            .permissions()
            .mode()
    };
    assert_eq!(mode("proj/README.md") & 0o7777, 0o644);
    assert_eq!(
        mode("proj/bin/run.sh") & 0o7777,
        0o755,
        "exec kept, setuid/setgid dropped"
    );
    assert_eq!(mode("proj/sticky") & 0o7777, 0o644, "sticky dropped");
    assert_eq!(mode("proj/empty") & 0o7777, 0o755);
    assert_eq!(
        fs::read_link(dest.join("proj/bin/readme")).unwrap(),
        Path::new("../README.md")
    );
    assert_eq!(fs::read(dest.join("proj/bin/readme")).unwrap(), b"hello\n");
    let inode = |path: &str| fs::metadata(dest.join(path)).unwrap().ino();
    assert_eq!(inode("proj/hard"), inode("proj/README.md"));
    let mtime = fs::metadata(dest.join("proj/README.md")).unwrap().mtime();
    assert_eq!(mtime, 1_700_000_000);
}

#[test]
fn same_archive_twice_is_stored_once() {
    let fixture = Fixture::new();
    let archive = TarBuilder::new().file("a.txt", b"a", 0o644).gz();
    let limits = SourceLimits::default();
    let first = fixture.store.ingest(&archive, &limits).unwrap();
    let second = fixture.store.ingest(&archive, &limits).unwrap();
    assert!(!first.already_present);
    assert!(second.already_present);
    assert_eq!(first.sha256, second.sha256);
    let stored: Vec<_> = fs::read_dir(fixture.root.join("sources"))
        .unwrap()
        .collect();
    assert_eq!(stored.len(), 1);
}

#[test]
fn unpack_checks_its_inputs() {
    let fixture = Fixture::new();
    let limits = SourceLimits::default();
    let archive = TarBuilder::new().file("a.txt", b"a", 0o644).gz();
    let sha256 = fixture.store.ingest(&archive, &limits).unwrap().sha256;

    fs::write(fixture.dest().join("existing"), b"x").unwrap();
    assert!(matches!(
        fixture.store.unpack(&sha256, &fixture.dest(), &limits),
        Err(SourceError::Io { .. })
    ));
    fs::remove_file(fixture.dest().join("existing")).unwrap();

    for bad in ["../../etc/passwd", "ABC", &"0".repeat(64)] {
        assert!(matches!(
            fixture.store.unpack(bad, &fixture.dest(), &limits),
            Err(SourceError::NotFound(_))
        ));
        assert!(!fixture.store.contains(bad));
    }
    assert!(matches!(
        fixture.store.remove("../x"),
        Err(SourceError::NotFound(_))
    ));

    let mut tampered = archive.clone();
    tampered.push(0);
    fs::write(fixture.store.path(&sha256), &tampered).unwrap();
    assert!(matches!(
        fixture.store.unpack(&sha256, &fixture.dest(), &limits),
        Err(SourceError::Io { .. })
    ));

    fixture.store.remove(&sha256).unwrap();
    fixture.store.remove(&sha256).unwrap();
    assert!(!fixture.store.contains(&sha256));
    fixture.assert_untouched();
}

#[test]
fn open_creates_a_private_directory_and_clears_leftovers() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("data/sources");
    SourceStore::open(dir.clone()).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(dir.join(format!("{TEMP_PREFIX}abc-1-0")), b"partial").unwrap();
    SourceStore::open(dir.clone()).unwrap();
    assert_eq!(
        fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
}

/// Archives made by the system's GNU tar, in its GNU and PAX formats, with long names, links,
/// an executable and the leading `./` that `tar -C dir .` writes, unpack to the same tree.
#[test]
fn archives_made_by_system_tar_round_trip() {
    if Command::new("tar").arg("--version").output().is_err() {
        eprintln!("SKIP: the system tar is not installed");
        return;
    }
    let fixture = Fixture::new();
    let tree = fixture.root.join("tree");
    let long_dir = tree.join("d".repeat(120));
    fs::create_dir_all(&long_dir).unwrap();
    fs::write(long_dir.join("f".repeat(150)), b"long").unwrap();
    fs::create_dir_all(tree.join("node_modules/pkg")).unwrap();
    fs::create_dir_all(tree.join("node_modules/.bin")).unwrap();
    fs::write(
        tree.join("node_modules/pkg/cli.js"),
        b"#!/usr/bin/env node\n",
    )
    .unwrap();
    fs::set_permissions(
        tree.join("node_modules/pkg/cli.js"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("../pkg/cli.js", tree.join("node_modules/.bin/tool")).unwrap();
    fs::write(tree.join("index.html"), b"<h1>hi</h1>").unwrap();
    fs::hard_link(tree.join("index.html"), tree.join("copy.html")).unwrap();
    let limits = SourceLimits::default();
    for format in ["gnu", "pax"] {
        let archive_path = fixture.root.join(format!("{format}.tar.gz"));
        let status = Command::new("tar")
            .arg(format!("--format={format}"))
            .arg("-czf")
            .arg(&archive_path)
            .arg("-C")
            .arg(&tree)
            .arg(".")
            .status()
            .unwrap();
        assert!(status.success());
        let archive = fs::read(&archive_path).unwrap();
        let ingested = fixture.store.ingest(&archive, &limits).unwrap();
        let expected = 4 + 3 + 2;
        assert_eq!(
            ingested.file_count, expected,
            "{format}: directories but ./, files, links"
        );
        let dest = fixture.root.join(format!("dest-{format}"));
        fs::create_dir(&dest).unwrap();
        fixture
            .store
            .unpack(&ingested.sha256, &dest, &limits)
            .unwrap();
        assert_eq!(describe(&dest), describe(&tree), "{format}");
    }
}

/// Every path under `root` with its kind, contents or target, and execute bit.
fn describe(root: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    list(root, root, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .map(|relative| {
            let path = root.join(&relative);
            let metadata = fs::symlink_metadata(&path).unwrap();
            let executable = metadata.permissions().mode() & 0o111 != 0;
            match metadata.file_type() {
                kind if kind.is_symlink() => {
                    format!("{relative} -> {}", fs::read_link(&path).unwrap().display())
                }
                kind if kind.is_dir() => format!("{relative}/"),
                _ => format!("{relative} {:?} x={executable}", fs::read(&path).unwrap()),
            }
        })
        .collect()
}
