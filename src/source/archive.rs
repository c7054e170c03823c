//! The streaming walk over a gzip'd tar shared by validation ([`super::tree`]) and unpacking
//! ([`super::extract`]): decompression under a meter that stops a bomb at the limit, the
//! per-member rules (path, type, link target) and the size and count budgets.
//!
//! The meter bounds every byte the tar reader pulls out of the decompressor: a member's data
//! may be read up to its declared size (itself checked against the budget before any of it is
//! read), and the extension headers (GNU long names, PAX records) between two members to
//! [`METADATA_WINDOW`], which also bounds the memory the tar crate spends on them.

use std::cell::Cell;
use std::io::{self, Read};
use std::rc::Rc;

use flate2::read::MultiGzDecoder;
use tar::EntryType;

use super::{SourceError, SourceLimits};

/// The most extension-header bytes allowed in front of one member.
pub(super) const METADATA_WINDOW: u64 = 1024 * 1024;
/// The most bytes allowed after the end-of-archive marker (tar pads to its record size).
pub(super) const TRAILER_ALLOWANCE: u64 = 1024 * 1024;
/// The stream allowance per member on top of its contents: header, padding, one extension.
const HEADER_ALLOWANCE: u64 = 4 * 1024;
/// Linux's limits on a path and on one name in it.
const PATH_MAX: usize = 4096;
const NAME_MAX: usize = 255;
/// The most components a member path may have; this bounds the directory walk per member.
const MAX_DEPTH: usize = 128;

/// The tar reader's input: the decompressed stream under the meter.
pub(super) type Stream<'a> = Metered<MultiGzDecoder<&'a [u8]>>;
/// One member as the tar crate yields it.
pub(super) type TarEntry<'e, 'a> = tar::Entry<'e, Stream<'a>>;

/// What one member is, once it passed the per-member rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Member {
    Directory,
    File {
        executable: bool,
    },
    Symlink {
        target: Vec<u8>,
    },
    /// A hard link; `target` is normalized like a member path.
    HardLink {
        target: Vec<u8>,
    },
}

/// A member that passed the per-member rules.
#[derive(Debug)]
pub(super) struct CheckedMember {
    /// The path relative to the root, without `.`, empty components or a trailing slash.
    pub path: Vec<u8>,
    pub member: Member,
}

/// Totals of a walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Manifest {
    pub file_count: u64,
    pub unpacked_bytes: u64,
}

/// Decompresses and walks every member of `archive`, applying the per-member rules and the
/// budgets, and hands each accepted member to `visit`, which may read its data. After the last
/// member the rest of the gzip stream is read too, so that a truncated or corrupt stream is
/// refused even when the damage lies past the end-of-archive marker.
pub(super) fn walk(
    archive: &[u8],
    limits: &SourceLimits,
    mut visit: impl FnMut(&CheckedMember, &mut TarEntry<'_, '_>) -> Result<(), SourceError>,
) -> Result<Manifest, SourceError> {
    let stream_cap = limits
        .max_unpacked_bytes
        .saturating_add(limits.max_files.saturating_mul(HEADER_ALLOWANCE))
        .saturating_add(TRAILER_ALLOWANCE);
    let meter = Rc::new(Meter {
        consumed: Cell::new(0),
        window_end: Cell::new(METADATA_WINDOW),
        stream_cap,
        tripped: Cell::new(false),
    });
    let reader = Metered {
        inner: MultiGzDecoder::new(archive),
        meter: Rc::clone(&meter),
    };
    let mut tar_archive = tar::Archive::new(reader);
    let mut manifest = Manifest {
        file_count: 0,
        unpacked_bytes: 0,
    };
    let mut last_path = String::new();
    {
        let mut entries = tar_archive
            .entries()
            .map_err(|error| stream_error(&meter, limits, &last_path, error))?;
        loop {
            let mut entry = match entries.next() {
                None => break,
                Some(Ok(entry)) => entry,
                Some(Err(error)) => return Err(stream_error(&meter, limits, &last_path, error)),
            };
            let name = display(&entry.path_bytes());
            let size = entry.size();
            manifest.unpacked_bytes = manifest.unpacked_bytes.saturating_add(size);
            if manifest.unpacked_bytes > limits.max_unpacked_bytes {
                return Err(invalid(format!(
                    "entry '{name}' would expand the source past the limit of {} bytes",
                    limits.max_unpacked_bytes
                )));
            }
            let padded = size.div_ceil(512).saturating_mul(512);
            let data_end = entry.raw_file_position().saturating_add(padded);
            meter
                .window_end
                .set(data_end.saturating_add(METADATA_WINDOW));
            last_path.clone_from(&name);
            let Some(checked) = check_member(&entry)? else {
                continue;
            };
            manifest.file_count += 1;
            if manifest.file_count > limits.max_files {
                return Err(invalid(format!(
                    "entry '{name}' would take the source past the limit of {} files",
                    limits.max_files
                )));
            }
            visit(&checked, &mut entry)?;
        }
    }
    if manifest.file_count == 0 {
        return Err(invalid("the archive holds no entries".to_owned()));
    }
    meter
        .window_end
        .set(meter.consumed.get().saturating_add(TRAILER_ALLOWANCE));
    let mut reader = tar_archive.into_inner();
    if let Err(error) = io::copy(&mut reader, &mut io::sink()) {
        if meter.tripped.get() && meter.consumed.get() < meter.stream_cap {
            return Err(invalid(format!(
                "the archive has more than {TRAILER_ALLOWANCE} bytes after its end-of-archive marker"
            )));
        }
        return Err(stream_error(&meter, limits, &last_path, error));
    }
    Ok(manifest)
}

/// Reads `entry`'s data into `sink` (used by unpacking), naming the member when the stream
/// fails; write failures are I/O errors.
pub(super) fn copy_data(
    entry: &mut TarEntry<'_, '_>,
    path: &[u8],
    mut sink: impl io::Write,
) -> Result<u64, SourceError> {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let read = match entry.read(&mut buffer) {
            Ok(0) => return Ok(total),
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => {
                return Err(invalid(format!(
                    "cannot read entry '{}': {error}",
                    display(path)
                )))
            }
        };
        sink.write_all(&buffer[..read])
            .map_err(super::SourceError::io(format!(
                "cannot write entry '{}'",
                display(path)
            )))?;
        total += read as u64;
    }
}

/// Applies the per-member rules. `None` means the member carries nothing to unpack (a PAX
/// global header, or the root directory itself such as `./`).
pub(super) fn check_member(entry: &TarEntry<'_, '_>) -> Result<Option<CheckedMember>, SourceError> {
    let raw_path = entry.path_bytes();
    let name = display(&raw_path);
    let entry_type = entry.header().entry_type();
    if entry_type == EntryType::XGlobalHeader {
        return Ok(None);
    }
    let path = normalize(&raw_path).map_err(|rule| invalid(format!("entry '{name}' {rule}")))?;
    let member = match entry_type {
        EntryType::Regular | EntryType::Continuous => {
            let executable = entry.header().mode().unwrap_or(0) & 0o111 != 0;
            Member::File { executable }
        }
        EntryType::Directory => Member::Directory,
        EntryType::Symlink => {
            let target = link_target(entry, &name)?;
            if !symlink_stays_inside(&path, &target) {
                return Err(invalid(format!(
                    "symlink '{name}' points outside the source tree ('{}')",
                    display(&target)
                )));
            }
            Member::Symlink { target }
        }
        EntryType::Link => {
            let target = link_target(entry, &name)?;
            let normalized = normalize(&target).map_err(|_| {
                invalid(format!(
                    "hard link '{name}' points outside the source tree ('{}')",
                    display(&target)
                ))
            })?;
            if normalized.is_empty() {
                return Err(invalid(format!(
                    "hard link '{name}' points to the source root"
                )));
            }
            Member::HardLink { target: normalized }
        }
        EntryType::Char | EntryType::Block | EntryType::Fifo => {
            return Err(invalid(format!("entry '{name}' is a device file or fifo")));
        }
        EntryType::GNUSparse => {
            return Err(invalid(format!(
                "entry '{name}' is a sparse file, which is not supported"
            )));
        }
        other => {
            return Err(invalid(format!(
                "entry '{name}' has unsupported type '{}'",
                (other.as_byte() as char).escape_default()
            )));
        }
    };
    if path.is_empty() {
        return match member {
            Member::Directory => Ok(None),
            _ => Err(invalid(format!("entry '{name}' has an empty path"))),
        };
    }
    Ok(Some(CheckedMember { path, member }))
}

/// A path with `.` and empty components removed, or the rule it breaks.
pub(super) fn normalize(raw: &[u8]) -> Result<Vec<u8>, &'static str> {
    if raw.first() == Some(&b'/') {
        return Err("has an absolute path");
    }
    if raw.contains(&0) {
        return Err("has a NUL byte in its path");
    }
    if raw.len() > PATH_MAX {
        return Err("has a path longer than 4096 bytes");
    }
    let mut normalized = Vec::with_capacity(raw.len());
    let mut depth = 0;
    for component in raw.split(|byte| *byte == b'/') {
        match component {
            b"" | b"." => continue,
            b".." => return Err("leaves the source tree"),
            _ if component.len() > NAME_MAX => return Err("has a name longer than 255 bytes"),
            _ => {}
        }
        depth += 1;
        if depth > MAX_DEPTH {
            return Err("has a path more than 128 directories deep");
        }
        if !normalized.is_empty() {
            normalized.push(b'/');
        }
        normalized.extend_from_slice(component);
    }
    Ok(normalized)
}

/// The lexical check of a symlink target: relative, and never above the root when resolved
/// from the link's directory. Links through other links are checked by [`super::tree`].
pub(super) fn symlink_stays_inside(link_path: &[u8], target: &[u8]) -> bool {
    if target.first() == Some(&b'/') {
        return false;
    }
    let mut depth = link_path.split(|byte| *byte == b'/').count() as i64 - 1;
    for component in target.split(|byte| *byte == b'/') {
        match component {
            b"" | b"." => {}
            b".." => depth -= 1,
            _ => depth += 1,
        }
        if depth < 0 {
            return false;
        }
    }
    true
}

/// A member path or link target as text for messages (lossy, control characters escaped).
pub(super) fn display(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for character in String::from_utf8_lossy(bytes).chars() {
        match character.is_control() {
            true => text.extend(character.escape_default()),
            false => text.push(character),
        }
    }
    text
}

pub(super) fn invalid(message: String) -> SourceError {
    SourceError::InvalidArchive(message)
}

fn link_target(entry: &TarEntry<'_, '_>, name: &str) -> Result<Vec<u8>, SourceError> {
    let target = entry
        .link_name_bytes()
        .map(|target| target.into_owned())
        .unwrap_or_default();
    if target.is_empty() {
        return Err(invalid(format!("link '{name}' has no target")));
    }
    if target.contains(&0) || target.len() > PATH_MAX {
        return Err(invalid(format!("link '{name}' has an unusable target")));
    }
    Ok(target)
}

/// Turns a failure of the decompressed stream into the error naming where it happened.
fn stream_error(
    meter: &Meter,
    limits: &SourceLimits,
    last_path: &str,
    error: io::Error,
) -> SourceError {
    let place = match last_path.is_empty() {
        true => "at its start".to_owned(),
        false => format!("after entry '{last_path}'"),
    };
    if !meter.tripped.get() {
        return invalid(format!(
            "the archive is not a valid gzip'd tar ({place}): {error}"
        ));
    }
    if meter.consumed.get() >= meter.stream_cap {
        return invalid(format!(
            "the archive expands past the limit of {} bytes ({place})",
            limits.max_unpacked_bytes
        ));
    }
    invalid(format!(
        "the archive has more than {METADATA_WINDOW} bytes of extension headers ({place})"
    ))
}

/// Shared between the walk and the reader under the tar crate.
pub(super) struct Meter {
    /// Decompressed bytes handed to the tar reader so far.
    consumed: Cell<u64>,
    /// The stream position the reader may not pass before the walk moves it on.
    window_end: Cell<u64>,
    /// The position the reader may never pass.
    stream_cap: u64,
    /// Set when a read was refused for crossing a limit.
    tripped: Cell<bool>,
}

/// A reader that refuses to go past the meter's limits.
pub(super) struct Metered<R> {
    inner: R,
    meter: Rc<Meter>,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let meter = &self.meter;
        let limit = meter.window_end.get().min(meter.stream_cap);
        let consumed = meter.consumed.get();
        if buffer.is_empty() {
            return Ok(0);
        }
        if consumed >= limit {
            // At the limit, only the end of the stream is acceptable.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => {
                    meter.tripped.set(true);
                    Err(io::Error::other("decompressed data past the limit"))
                }
            };
        }
        let allowed = (limit - consumed).min(buffer.len() as u64) as usize;
        let read = self.inner.read(&mut buffer[..allowed])?;
        meter.consumed.set(consumed + read as u64);
        Ok(read)
    }
}
