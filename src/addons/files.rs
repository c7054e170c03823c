//! What the add-on code needs to know of a backup file by itself: its length and SHA-256,
//! and what kind of file it is from its first bytes (leaf of the add-on modules).

use std::path::{Path, PathBuf};

/// What an uploaded file is, from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportFormat {
    /// `pg_dump -Fc` (starts `PGDMP`).
    PgCustom,
    /// SQL text for `psql`.
    Sql,
    /// A Redis RDB (starts `REDIS`).
    Rdb,
}

impl ImportFormat {
    pub fn of(head: &[u8]) -> ImportFormat {
        if head.starts_with(b"PGDMP") {
            ImportFormat::PgCustom
        } else if head.starts_with(b"REDIS") {
            ImportFormat::Rdb
        } else {
            ImportFormat::Sql
        }
    }

    pub(super) fn extension(self) -> &'static str {
        match self {
            ImportFormat::PgCustom => "dump",
            ImportFormat::Sql => "sql",
            ImportFormat::Rdb => "rdb",
        }
    }
}

/// The first bytes of a file (empty when it cannot be read).
pub(super) async fn head_of(path: &Path) -> Vec<u8> {
    let mut head = vec![0u8; 8];
    let Ok(mut file) = tokio::fs::File::open(path).await else {
        return Vec::new();
    };
    let n = tokio::io::AsyncReadExt::read(&mut file, &mut head)
        .await
        .unwrap_or(0);
    head.truncate(n);
    head
}

/// A file's length and SHA-256 (hex), read in a blocking thread.
pub(super) async fn hash_file(path: PathBuf) -> Result<(u64, String), String> {
    tokio::task::spawn_blocking(move || hash_file_blocking(&path))
        .await
        .expect("blocking task")
}

fn hash_file_blocking(path: &Path) -> Result<(u64, String), String> {
    use std::io::Read;
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    let (mut buffer, mut total) = (vec![0u8; 1 << 16], 0u64);
    loop {
        let n = file
            .read(&mut buffer)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        context.update(&buffer[..n]);
        total += n as u64;
    }
    Ok((total, crate::ids::hex(context.finish().as_ref())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_by_their_first_bytes() {
        assert_eq!(ImportFormat::of(b"PGDMP\x01\x0f"), ImportFormat::PgCustom);
        assert_eq!(ImportFormat::of(b"REDIS0010"), ImportFormat::Rdb);
        assert_eq!(ImportFormat::of(b"CREATE TABLE"), ImportFormat::Sql);
        assert_eq!(ImportFormat::of(b""), ImportFormat::Sql);
    }
}
