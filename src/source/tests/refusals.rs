//! Refusals: paths and links leaving the tree, special files, limits, broken gzip, gzip
//! bombs, and the writer's own refusal to follow a planted symlink. Every case also checks
//! that nothing was written outside the destination and nothing was kept in the store.

use std::fs;
use std::time::{Duration, Instant};

use tar::EntryType;

use super::*;
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
        (
            TarBuilder::new()
                .long_name(&format!("{}f", "a/".repeat(128)))
                .file("short", b"x", 0o644)
                .gz(),
            "has a path more than 128 directories deep".into(),
        ),
        (
            TarBuilder::new()
                .file("bad\nname/../../x", b"x", 0o644)
                .gz(),
            "entry 'bad\\nname/../../x' leaves the source tree".into(),
        ),
    ];
    for (archive, needle) in cases {
        assert_refused(&fixture, &archive, &needle);
    }
}

/// A symlink whose target leaves the tree, alone or followed through other symlinks.
#[test]
fn symlinks_pointing_outside_the_tree_are_refused() {
    let fixture = Fixture::new();
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
    ];
    for (archive, needle) in cases {
        assert_refused(&fixture, &archive, needle);
    }
}

/// A hard link to a path outside the tree, or to anything but an earlier regular file.
#[test]
fn hard_links_must_name_an_earlier_file_inside_the_tree() {
    let fixture = Fixture::new();
    let secret = fixture.outside().join("secret").display().to_string();
    let cases: Vec<(Vec<u8>, &str)> = vec![
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
    ];
    for (archive, needle) in cases {
        assert_refused(&fixture, &archive, needle);
    }
}

/// An entry reached through a symlink, beneath a file, or written twice.
#[test]
fn entries_passing_through_or_beneath_others_are_refused() {
    let fixture = Fixture::new();
    let cases: Vec<(Vec<u8>, &str)> = vec![
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
        let sha256 = crate::ids::sha256_hex(&bomb);
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
