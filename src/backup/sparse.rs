//! Restoring a regular file with holes where its bytes are zero. The archive holds a file's
//! bytes as read (a sparse file's holes read as zeros, and gzip makes them almost nothing);
//! written back block by block, a zero block is skipped rather than written, so a file that
//! was sparse (an app's preallocated database, a disk image of its own) takes no more room
//! after the restore than before it. Called by `restore.rs` for every regular file.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Zero runs are found in blocks of this size (the usual filesystem block, 4 KiB, divides it).
const BLOCK: usize = 64 * 1024;

/// Writes `entry`'s bytes to the new file `dest` (it must not exist), with its owner, mode
/// and modification time from the archive.
pub(super) fn write_file(
    entry: &mut impl Read,
    header: &tar::Header,
    dest: &Path,
) -> io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dest)?;
    let mut block = vec![0u8; BLOCK];
    let mut length: u64 = 0;
    loop {
        let filled = read_block(entry, &mut block)?;
        if filled == 0 {
            break;
        }
        match block[..filled].iter().all(|byte| *byte == 0) {
            true => file.seek(SeekFrom::Current(filled as i64)).map(drop)?,
            false => file.write_all(&block[..filled])?,
        }
        length += filled as u64;
    }
    // A file ending in zeros ends in a hole: its length comes from here.
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
        super::write_file(&mut bytes.as_slice(), &header, &dest).unwrap();
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
}
