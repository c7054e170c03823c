//! Tests of the source store and the archive rules, on real archives built here with the
//! `tar` and `flate2` crates (hand-written headers where the tar builder refuses a path), real
//! files in temporary directories, and gzip bombs made of repeated gzip members so that
//! building them is cheap while expanding them would not be.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flate2::write::GzEncoder;
use flate2::Compression;
use tar::{EntryType, Header};

use super::*;

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
    let sha256 = sha256_hex(archive);
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
    assert_eq!(ingested.sha256, sha256_hex(&archive));
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
fn paths_leaving_the_tree_are_refused() {
    let fixture = Fixture::new();
    let absolute = format!("{}/abs", fixture.outside().display());
    let cases: Vec<(Vec<u8>, String)> = vec![
        (
            TarBuilder::new().file("../evil", b"x", 0o644).gz(),
            "entry '../evil' leaves the source tree".into(),
        ),
        (
            TarBuilder::new().file("a/../../evil", b"x", 0o644).gz(),
            "leaves the source tree".into(),
        ),
        (
            TarBuilder::new().file(&absolute, b"x", 0o644).gz(),
            format!("entry '{absolute}' has an absolute path"),
        ),
        (
            TarBuilder::new().dir("/").gz(),
            "has an absolute path".into(),
        ),
        (
            TarBuilder::new()
                .long_name(&format!("{}/../../evil", "d".repeat(120)))
                .file("short", b"x", 0o644)
                .gz(),
            "leaves the source tree".into(),
        ),
        (
            TarBuilder::new()
                .pax_path("../pax-evil")
                .file("short", b"x", 0o644)
                .gz(),
            "entry '../pax-evil' leaves".into(),
        ),
    ];
    for (archive, needle) in cases {
        assert_refused(&fixture, &archive, &needle);
    }
}

#[test]
fn links_leaving_the_tree_are_refused() {
    let fixture = Fixture::new();
    let secret = fixture.outside().join("secret").display().to_string();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            TarBuilder::new()
                .link(EntryType::Symlink, "p/passwd", "../../etc/passwd")
                .gz(),
            "symlink 'p/passwd' points outside the source tree ('../../etc/passwd')",
        ),
        (
            TarBuilder::new()
                .link(EntryType::Symlink, "etc", "/etc")
                .gz(),
            "symlink 'etc' points outside",
        ),
        (
            TarBuilder::new()
                .link(EntryType::Symlink, "link", "/tmp")
                .file("link/x", b"x", 0o644)
                .gz(),
            "symlink 'link' points outside",
        ),
        (
            // Each link alone stays inside; followed through each other they escape.
            TarBuilder::new()
                .link(EntryType::Symlink, "up", ".")
                .link(EntryType::Symlink, "esc", "up/up/..")
                .gz(),
            "symlink 'esc' points outside",
        ),
        (
            TarBuilder::new()
                .link(EntryType::Symlink, "sub/loop", "../sub/next")
                .link(EntryType::Symlink, "sub/next", "../../x")
                .gz(),
            "symlink 'sub/next' points outside",
        ),
        (
            TarBuilder::new()
                .link(EntryType::Link, "hard", &secret)
                .gz(),
            "hard link 'hard' points outside",
        ),
        (
            TarBuilder::new()
                .link(EntryType::Link, "hard", "../outside/secret")
                .gz(),
            "hard link 'hard' points outside",
        ),
        (
            TarBuilder::new()
                .link(EntryType::Link, "hard", "later")
                .file("later", b"x", 0o644)
                .gz(),
            "not an earlier regular file",
        ),
        (
            TarBuilder::new()
                .file("sub/f", b"x", 0o644)
                .link(EntryType::Symlink, "via", "sub")
                .link(EntryType::Link, "hard", "via/f")
                .gz(),
            "hard link 'hard' points to 'via/f', which is not an earlier regular file",
        ),
        (
            TarBuilder::new()
                .dir("sub")
                .link(EntryType::Symlink, "link", "sub")
                .file("link/x", b"x", 0o644)
                .gz(),
            "entry 'link/x' passes through symlink 'link'",
        ),
        (
            TarBuilder::new()
                .file("link/x", b"x", 0o644)
                .link(EntryType::Symlink, "link", "sub")
                .gz(),
            "entry 'link' is not a directory, but earlier entries are inside it",
        ),
        (
            TarBuilder::new()
                .file("f", b"x", 0o644)
                .file("f/x", b"x", 0o644)
                .gz(),
            "entry 'f/x' is beneath 'f'",
        ),
        (
            TarBuilder::new()
                .file("f", b"x", 0o644)
                .file("./f", b"y", 0o644)
                .gz(),
            "entry 'f' appears more than once",
        ),
    ];
    for (archive, needle) in cases {
        assert_refused(&fixture, &archive, needle);
    }
}

#[test]
fn special_files_are_refused() {
    let fixture = Fixture::new();
    for kind in [EntryType::Char, EntryType::Block, EntryType::Fifo] {
        let archive = TarBuilder::new()
            .file("ok", b"x", 0o644)
            .special(kind, "dev/thing")
            .gz();
        assert_refused(
            &fixture,
            &archive,
            "entry 'dev/thing' is a device file or fifo",
        );
    }
    let archive = TarBuilder::new()
        .special(EntryType::new(b'V'), "label")
        .gz();
    assert_refused(&fixture, &archive, "entry 'label' has unsupported type 'V'");
}

#[test]
fn count_and_size_limits_are_enforced() {
    let fixture = Fixture::new();
    let limits = SourceLimits {
        max_archive_bytes: MIB,
        max_unpacked_bytes: 1000,
        max_files: 5,
    };
    let mut builder = TarBuilder::new();
    for index in 0..6 {
        builder.file(&format!("f{index}"), b"x", 0o644);
    }
    let too_many = builder.gz();
    expect_invalid(
        fixture.store.ingest(&too_many, &limits),
        "entry 'f5' would take the source past the limit of 5 files",
    );
    let too_big = TarBuilder::new()
        .file("small", &[1; 600], 0o644)
        .file("big", &[2; 600], 0o644)
        .gz();
    expect_invalid(
        fixture.store.ingest(&too_big, &limits),
        "entry 'big' would expand the source past the limit of 1000 bytes",
    );
    let oversized = vec![0u8; MIB as usize + 1];
    match fixture.store.ingest(&oversized, &limits) {
        Err(SourceError::TooLarge { size, limit }) => assert_eq!((size, limit), (MIB + 1, MIB)),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    fixture.assert_untouched();
}

#[test]
fn broken_gzip_and_non_archives_are_refused() {
    let fixture = Fixture::new();
    let good = TarBuilder::new().file("a.txt", &[7; 5000], 0o644).gz();
    let truncated = &good[..good.len() / 2];
    let mut corrupt = good.clone();
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 0xff;
    let mut bad_crc = good.clone();
    let crc_at = bad_crc.len() - 8;
    bad_crc[crc_at] ^= 0xff;
    let cases: Vec<(&[u8], &str)> = vec![
        (truncated, "not a valid gzip'd tar"),
        (&corrupt, "not a valid gzip'd tar"),
        (&bad_crc, "not a valid gzip'd tar"),
        (
            b"PK\x03\x04 this is a zip file, not a gzip'd tar",
            "not a valid gzip'd tar (at its start)",
        ),
        (b"", "not a valid gzip'd tar"),
    ];
    for (archive, needle) in cases {
        assert_refused(&fixture, archive, needle);
    }
    let not_tar = gzip(&[b'a'; 2000]);
    assert_refused(&fixture, &not_tar, "not a valid gzip'd tar");
    let empty = gzip(&[0; 1024]);
    assert_refused(&fixture, &empty, "holds no entries");
}

/// Concatenated gzip members: `head`, then `copies` times one member of 1 MiB of zeros.
fn zero_bomb(head: &[u8], copies: usize, tail: &[u8]) -> Vec<u8> {
    let zeros = gzip(&vec![0u8; MIB as usize]);
    let mut bomb = gzip(head);
    for _ in 0..copies {
        bomb.extend_from_slice(&zeros);
    }
    bomb.extend_from_slice(&gzip(tail));
    bomb
}

/// Each bomb expands to about 1 GiB; with a 10 MiB limit each must be refused quickly.
#[test]
fn gzip_bombs_stop_at_the_limit() {
    let fixture = Fixture::new();
    let limits = SourceLimits::from_archive_limit(MIB);
    assert_eq!(limits.max_unpacked_bytes, 10 * MIB);
    let mut header = TarBuilder::header(EntryType::Regular, "zeros.bin", 1024 * MIB, 0o644);
    header.set_cksum();
    let one_member = zero_bomb(header.as_bytes(), 1024, &[0; 1024]);

    let mut many_members = gzip(b"");
    let zeros = gzip(&vec![0u8; MIB as usize]);
    for index in 0..1024 {
        let mut header = TarBuilder::header(EntryType::Regular, &format!("f{index}"), MIB, 0o644);
        header.set_cksum();
        many_members.extend_from_slice(&gzip(header.as_bytes()));
        many_members.extend_from_slice(&zeros);
    }

    let trailer = zero_bomb(
        &TarBuilder::new().file("a", b"a", 0o644).finish(),
        1024,
        b"",
    );
    let mut long_name = TarBuilder::header(EntryType::GNULongName, "././@LongLink", 1024 * MIB, 0);
    long_name.set_cksum();
    let metadata = zero_bomb(long_name.as_bytes(), 1024, b"");
    let plain_zeros = zero_bomb(b"", 1024, b"");

    let cases = [
        (
            one_member,
            "entry 'zeros.bin' would expand the source past the limit of 10485760 bytes",
        ),
        (
            many_members,
            "entry 'f10' would expand the source past the limit of 10485760 bytes",
        ),
        (trailer, "bytes after its end-of-archive marker"),
        (metadata, "bytes of extension headers (at its start)"),
        (plain_zeros, "holds no entries"),
    ];
    for (bomb, needle) in cases {
        assert!(bomb.len() < 2 * MIB as usize, "the bomb itself stays small");
        let limits = SourceLimits {
            max_archive_bytes: 2 * MIB,
            ..limits
        };
        let started = Instant::now();
        expect_invalid(fixture.store.ingest(&bomb, &limits), needle);
        let sha256 = sha256_hex(&bomb);
        fs::write(fixture.store.path(&sha256), &bomb).unwrap();
        expect_invalid(
            fixture.store.unpack(&sha256, &fixture.dest(), &limits),
            needle,
        );
        fixture.store.remove(&sha256).unwrap();
        let elapsed = started.elapsed();
        // Expanding 1 GiB in a debug build takes tens of seconds; stopping at 10 MiB does not.
        assert!(
            elapsed < Duration::from_secs(5),
            "{needle}: took {elapsed:?}"
        );
        fixture.assert_untouched();
    }
}

/// The writer alone (whole-archive validation bypassed) never follows a symlink planted by
/// the archive. `up -> .` and `esc -> up/up/../..` pass the per-member lexical check, yet `esc`
/// resolves to the test root, two levels above the destination.
#[test]
fn extraction_never_follows_a_planted_symlink() {
    let fixture = Fixture::new();
    let planted = || {
        let mut builder = TarBuilder::new();
        builder
            .link(EntryType::Symlink, "up", ".")
            .link(EntryType::Symlink, "esc", "up/up/../..");
        builder
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            planted().file("esc/outside/x", b"x", 0o644).gz(),
            "entry 'esc/outside/x' passes through 'esc', which is not a directory",
        ),
        (
            planted().file("esc", b"pwned", 0o644).gz(),
            "entry 'esc' collides with an earlier entry",
        ),
        (
            planted()
                .link(EntryType::Link, "hard", "esc/outside/secret")
                .gz(),
            "entry 'hard' passes through 'esc', which is not a directory",
        ),
        (
            planted().dir("esc/outside/sub").gz(),
            "entry 'esc/outside/sub' passes through 'esc', which is not a directory",
        ),
    ];
    for (archive, needle) in cases {
        let limits = SourceLimits::default();
        expect_invalid(extract::extract(&archive, &fixture.dest(), &limits), needle);
        fixture.assert_untouched();
        expect_invalid(fixture.store.ingest(&archive, &limits), "'esc");
    }
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
