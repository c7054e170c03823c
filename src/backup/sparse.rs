//! Holes, both ways. Writing: [`data_segments`] finds a file's data with `SEEK_DATA` and
//! `SEEK_HOLE`, and [`SegmentReader`] reads just those bytes, so a sparse file goes into the
//! archive as its data (format 3, `mod.rs`) rather than as terabytes of zeros. Restoring: a
//! file's bytes are written block by block, a zero block skipped rather than written, and a
//! file stored as segments has each written at its offset; so a file that was sparse (an
//! app's preallocated database, a disk image of its own) takes no more room after the restore
//! than before it. Called by `archive.rs` and `restore.rs` for every regular file.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use nix::errno::Errno;
use nix::unistd::{lseek, Whence};

/// Zero runs are found in blocks of this size (the usual filesystem block, 4 KiB, divides it).
const BLOCK: usize = 64 * 1024;

/// How an archived file's bytes map onto the file.
pub(super) enum Layout<'a> {
    /// The entry is the whole file.
    Whole,
    /// The entry is these `[offset, length]` segments of a file of this length, one after
    /// another (checked sound by `verify`).
    Segments(u64, &'a [[u64; 2]]),
}

/// The data segments (`[offset, length]`) of `file` within its first `size` bytes, or `None`
/// when it has no hole (or its filesystem cannot tell).
pub(super) fn data_segments(file: &File, size: u64) -> io::Result<Option<Vec<[u64; 2]>>> {
    let fd = file.as_fd();
    let mut segments = Vec::new();
    let mut offset = 0u64;
    while offset < size {
        let start = match lseek(fd, to_off(offset)?, Whence::SeekData) {
            Ok(start) => start as u64,
            // Only a hole from here to the end.
            Err(Errno::ENXIO) => break,
            Err(Errno::EINVAL) => return Ok(None),
            Err(error) => return Err(error.into()),
        };
        if start >= size {
            break;
        }
        let end = match lseek(fd, to_off(start)?, Whence::SeekHole) {
            Ok(end) => (end as u64).min(size),
            Err(Errno::ENXIO) => size,
            Err(error) => return Err(error.into()),
        };
        if end <= start {
            // Truncated meanwhile: what is left is read as zeros or not at all.
            break;
        }
        segments.push([start, end - start]);
        offset = end;
    }
    // The seeks moved the file's position: a dense file is then read from its start.
    lseek(fd, 0, Whence::SeekSet)?;
    let dense = size == 0 || segments == [[0, size]];
    Ok((!dense).then_some(segments))
}

fn to_off(offset: u64) -> io::Result<i64> {
    i64::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Reads a file's data segments one after another, each cut or zero-padded to its length (a
/// file that shrinks while it is read still gives exactly what the manifest says).
pub(super) struct SegmentReader {
    file: File,
    segments: Vec<[u64; 2]>,
    index: usize,
    done: u64,
}

impl SegmentReader {
    pub(super) fn new(file: File, segments: Vec<[u64; 2]>) -> SegmentReader {
        SegmentReader {
            file,
            segments,
            index: 0,
            done: 0,
        }
    }
}

impl Read for SegmentReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while let Some(&[offset, length]) = self.segments.get(self.index) {
            if self.done == length {
                self.index += 1;
                self.done = 0;
                continue;
            }
            let left = usize::try_from(length - self.done).unwrap_or(usize::MAX);
            let want = buf.len().min(left);
            let read = match self.file.read_at(&mut buf[..want], offset + self.done)? {
                0 => {
                    buf[..want].fill(0);
                    want
                }
                read => read,
            };
            self.done += read as u64;
            return Ok(read);
        }
        Ok(0)
    }
}

/// Writes `entry`'s bytes to the new file `dest` (it must not exist) as `layout` says, with
/// its owner, mode and modification time from the archive.
pub(super) fn write_file(
    entry: &mut impl Read,
    header: &tar::Header,
    layout: Layout<'_>,
    dest: &Path,
) -> io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)?;
    // A file ending in zeros ends in a hole: its length is set at the end.
    let length = match layout {
        Layout::Whole => copy_blocks(entry, &mut file, u64::MAX)?,
        Layout::Segments(size, segments) => {
            for &[offset, length] in segments {
                file.seek(SeekFrom::Start(offset))?;
                if copy_blocks(entry, &mut file, length)? != length {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
            }
            size
        }
    };
    file.set_len(length)?;
    std::os::unix::fs::fchown(
        &file,
        Some(header.uid()? as u32),
        Some(header.gid()? as u32),
    )?;
    let mode = header.mode()? & 0o7777;
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))?;
    let modified = std::time::UNIX_EPOCH + std::time::Duration::from_secs(header.mtime()?);
    file.set_times(std::fs::FileTimes::new().set_modified(modified))
}

/// Copies up to `limit` bytes of `entry` to `file` at its position, a zero block as a seek;
/// returns how many.
fn copy_blocks(entry: &mut impl Read, file: &mut File, limit: u64) -> io::Result<u64> {
    let mut block = vec![0u8; BLOCK];
    let mut copied: u64 = 0;
    while copied < limit {
        let want = BLOCK.min(usize::try_from(limit - copied).unwrap_or(BLOCK));
        let filled = read_block(entry, &mut block[..want])?;
        if filled == 0 {
            break;
        }
        match block[..filled].iter().all(|byte| *byte == 0) {
            true => file.seek(SeekFrom::Current(filled as i64)).map(drop)?,
            false => file.write_all(&block[..filled])?,
        }
        copied += filled as u64;
    }
    Ok(copied)
}

/// Reads until `block` is full or the entry ends; returns how much was read.
fn read_block(entry: &mut impl Read, block: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < block.len() {
        match entry.read(&mut block[filled..]) {
            Ok(0) => break,
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn zero_blocks_become_holes_and_the_bytes_are_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = vec![0u8; 8 << 20];
        bytes[..5].copy_from_slice(b"start");
        let end = bytes.len() - 3;
        bytes[end..].copy_from_slice(b"end");
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o640);
        header.set_mtime(1_700_000_000);
        header.set_uid(nix::unistd::getuid().as_raw().into());
        header.set_gid(nix::unistd::getgid().as_raw().into());
        let dest = dir.path().join("sparse");
        super::write_file(&mut bytes.as_slice(), &header, super::Layout::Whole, &dest).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), bytes);
        let metadata = std::fs::metadata(&dest).unwrap();
        assert_eq!(metadata.mode() & 0o7777, 0o640);
        assert_eq!(metadata.mtime(), 1_700_000_000);
        // Two 64 KiB blocks of data at most; tmpfs and ext4 alike keep the rest as holes.
        assert!(
            metadata.blocks() * 512 <= 2 * 64 * 1024,
            "{} blocks",
            metadata.blocks()
        );
    }

    /// A 1 TiB file with 8 bytes of data: read as its two segments, restored as holes.
    #[test]
    fn a_sparse_file_is_read_as_its_data_and_restored_with_its_holes() {
        use std::io::Read;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge");
        let size: u64 = 1 << 40;
        let file = std::fs::File::create(&path).unwrap();
        if let Err(error) = file.set_len(size) {
            eprintln!("SKIP: this filesystem keeps no 1 TiB sparse file: {error}");
            return;
        }
        use std::os::unix::fs::FileExt;
        file.write_all_at(b"head", 0).unwrap();
        file.write_all_at(b"tail", size - 4).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let segments = super::data_segments(&file, size)
            .unwrap()
            .expect("it has holes");
        assert_eq!(segments.first().unwrap()[0], 0);
        let stored: u64 = segments.iter().map(|[_, length]| length).sum();
        assert!(stored <= 2 << 20, "{segments:?}");
        let mut bytes = Vec::new();
        super::SegmentReader::new(file, segments.clone())
            .read_to_end(&mut bytes)
            .unwrap();
        assert_eq!(bytes.len() as u64, stored);
        assert!(bytes.starts_with(b"head") && bytes.ends_with(b"tail"));

        let mut header = tar::Header::new_gnu();
        header.set_mode(0o600);
        header.set_uid(nix::unistd::getuid().as_raw().into());
        header.set_gid(nix::unistd::getgid().as_raw().into());
        let dest = dir.path().join("restored");
        let layout = super::Layout::Segments(size, &segments);
        super::write_file(&mut bytes.as_slice(), &header, layout, &dest).unwrap();
        let metadata = std::fs::metadata(&dest).unwrap();
        assert_eq!(metadata.len(), size);
        assert!(
            metadata.blocks() * 512 <= 4 << 20,
            "{} blocks",
            metadata.blocks()
        );
        let restored = std::fs::File::open(&dest).unwrap();
        let mut four = [0u8; 4];
        restored.read_exact_at(&mut four, size - 4).unwrap();
        assert_eq!(&four, b"tail");
        // A dense file has no segments.
        std::fs::write(dir.path().join("dense"), b"dense").unwrap();
        let mut dense = std::fs::File::open(dir.path().join("dense")).unwrap();
        assert_eq!(super::data_segments(&dense, 5).unwrap(), None);
        let mut read = String::new();
        dense.read_to_string(&mut read).unwrap();
        assert_eq!(read, "dense", "read from the start after the seeks");
    }
}
