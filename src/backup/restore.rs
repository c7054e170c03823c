//! The offline side: [`verify`] reads a whole archive and checks it against its manifest
//! (every file's size and SHA-256, every link, nothing missing or extra) without writing
//! anything; [`restore`] verifies, then unpacks the files (owners, modes and times kept, zero
//! blocks and the holes the manifest lists as holes: `sparse.rs`) into a staging dir beside the target, opens the store there,
//! and renames it into place. Each volume comes back as a directory with a marker beside it
//! (`mod.rs`: volumes); a format 1 archive's volume images are skipped. A corrupt archive, or
//! one made by a newer Slipway, is refused before anything is written.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use super::{io, BackupError, Hashing, Header, Manifest, Place, DATA_PREFIX, FORMAT};
use super::{HEADER_NAME, MANIFEST_NAME};

/// Reads `archive` end to end: its header and manifest when every byte checks out.
pub fn verify(archive: &Path) -> Result<(Header, Manifest), BackupError> {
    let mut files: BTreeMap<String, (u64, String)> = BTreeMap::new();
    let mut links: BTreeMap<String, String> = BTreeMap::new();
    let (header, manifest) = walk(archive, |name, entry| {
        match entry.header().entry_type() {
            tar::EntryType::Regular => {
                let mut hashing = Hashing::new(entry);
                std::io::copy(&mut hashing, &mut std::io::sink()).map_err(corrupt)?;
                files.insert(name.to_owned(), hashing.finish());
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(corrupt)?
                    .map(|target| target.to_string_lossy().into_owned())
                    .unwrap_or_default();
                links.insert(name.to_owned(), target);
            }
            tar::EntryType::Directory => {}
            other => {
                return Err(BackupError::Corrupt(format!(
                    "{name}: an entry of type {other:?}, which backups never contain"
                )))
            }
        }
        Ok(())
    })?;
    for file in &manifest.files {
        if !file.segments_are_sound() {
            return Err(BackupError::Corrupt(format!(
                "{}: its data segments overlap, are out of order or pass its size",
                file.path
            )));
        }
        let stored = file.stored_size();
        match files.remove(&file.path) {
            None => return Err(BackupError::Corrupt(format!("{} is missing", file.path))),
            Some((size, sha256)) if size != stored || sha256 != file.sha256 => {
                return Err(BackupError::Corrupt(format!(
                    "{}: its checksum does not match the manifest ({size} bytes, sha256 \
                     {sha256}; expected {stored} bytes, sha256 {})",
                    file.path, file.sha256
                )))
            }
            Some(_) => {}
        }
    }
    if let Some(extra) = files.keys().next() {
        return Err(BackupError::Corrupt(format!(
            "{extra} is not in the manifest"
        )));
    }
    for link in &manifest.links {
        if links.remove(&link.path).as_deref() != Some(link.target.as_str()) {
            return Err(BackupError::Corrupt(format!(
                "the link {} does not match the manifest",
                link.path
            )));
        }
    }
    if let Some(extra) = links.keys().next() {
        return Err(BackupError::Corrupt(format!(
            "the link {extra} is not in the manifest"
        )));
    }
    Ok((header, manifest))
}

/// Makes a working data dir at `data_dir` (absent or empty) from `archive`.
pub fn restore(archive: &Path, data_dir: &Path) -> Result<Header, BackupError> {
    if let Ok(mut entries) = std::fs::read_dir(data_dir) {
        if entries.next().is_some() {
            return Err(BackupError::Refused(format!(
                "{} is not empty: restore into a new directory (then point data_dir at it)",
                data_dir.display()
            )));
        }
    }
    let (header, manifest) = verify(archive)?;
    let parent = match data_dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(io(format!("creating {}", parent.display())))?;
    let file_name = data_dir.file_name().ok_or_else(|| {
        BackupError::Refused(format!("{} names no directory", data_dir.display()))
    })?;
    let staging = parent.join(format!(
        ".{}.restoring-{}",
        file_name.to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&staging);
    let holes: BTreeMap<String, (u64, Vec<[u64; 2]>)> = manifest
        .files
        .into_iter()
        .filter_map(|file| Some((file.path, (file.size, file.data?))))
        .collect();
    let result = unpack(archive, &staging, &holes).and_then(|()| {
        // Opening it checks the store file and its schema; the lock is let go at once.
        drop(crate::store::Store::open(&staging)?);
        let _ = std::fs::remove_dir(data_dir);
        std::fs::rename(&staging, data_dir).map_err(io(format!(
            "moving the restored data to {}",
            data_dir.display()
        )))
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result.map(|()| header)
}

/// `holes`: the files stored as data segments (path → length, segments), from the manifest.
fn unpack(
    archive: &Path,
    staging: &Path,
    holes: &BTreeMap<String, (u64, Vec<[u64; 2]>)>,
) -> Result<(), BackupError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(staging).map_err(io(format!("creating {}", staging.display())))?;
    std::fs::set_permissions(staging, std::fs::Permissions::from_mode(0o700))
        .map_err(io(format!("setting the mode of {}", staging.display())))?;
    let root = staging
        .canonicalize()
        .map_err(io(format!("resolving {}", staging.display())))?;
    walk(archive, |name, entry| {
        let Some(relative) = name.strip_prefix(&format!("{DATA_PREFIX}/")) else {
            return Ok(());
        };
        let is_file = entry.header().entry_type() == tar::EntryType::Regular;
        if is_file && Place::of(relative) == Place::VolumeImage {
            // A format 1 archive's image, copied while mounted: its contents are restored.
            return Ok(());
        }
        let dest = root.join(relative);
        let parent = dest.parent().unwrap_or(&root);
        make_parents(&root, Path::new(relative))
            .map_err(|why| BackupError::Corrupt(format!("{name} {why}")))?;
        // An earlier entry must not have turned a parent into a link out of the data dir.
        let resolved = parent
            .canonicalize()
            .map_err(io(format!("resolving {}", parent.display())))?;
        if !resolved.starts_with(&root) {
            return Err(BackupError::Corrupt(format!(
                "{name} leads out of the data dir"
            )));
        }
        if is_file {
            let header = entry.header().clone();
            let layout = match holes.get(name) {
                Some((size, segments)) => super::sparse::Layout::Segments(*size, segments),
                None => super::sparse::Layout::Whole,
            };
            super::sparse::write_file(entry, &header, layout, &dest)
                .map_err(io(format!("restoring {}", dest.display())))?;
        } else {
            entry.set_preserve_permissions(true);
            entry.set_preserve_mtime(true);
            entry.set_unpack_xattrs(false);
            entry
                .unpack(&dest)
                .map_err(io(format!("restoring {}", dest.display())))?;
        }
        if let Some(volume) = Place::volume(&root, relative).filter(|_| dest.is_dir()) {
            mark_restored(&volume)?;
        }
        Ok(())
    })?;
    std::fs::set_permissions(staging, std::fs::Permissions::from_mode(0o700))
        .map_err(io(format!("setting the mode of {}", staging.display())))
}

/// Makes the directories leading to `relative` under `root` one at a time, refusing an
/// absolute path, a `..`, or a component an earlier entry made into anything but a real
/// directory (a link out of the data dir): no directory is ever made outside `root`.
fn make_parents(root: &Path, relative: &Path) -> Result<(), String> {
    let mut dir = root.to_path_buf();
    for component in relative.parent().into_iter().flat_map(Path::components) {
        let Component::Normal(part) = component else {
            return Err("is not a plain relative path".into());
        };
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(metadata) if metadata.is_dir() => {}
            Ok(_) => return Err("leads out of the data dir".into()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir(&dir).map_err(|e| format!("cannot be made: {e}"))?
            }
            Err(error) => return Err(format!("cannot be read: {error}")),
        }
    }
    Ok(())
}

/// Leaves the marker that makes the daemon turn the directory back into a disk-limited
/// volume where its limits are on (`disk::Volumes::rebuild_restored`).
fn mark_restored(volume: &crate::disk::Volume) -> Result<(), BackupError> {
    let marker = volume.restored_marker();
    std::fs::write(&marker, b"").map_err(io(format!("writing {}", marker.display())))
}

/// Reads the archive's entries in order: the header first (refusing a newer archive), each
/// `data/` entry through `each` (its path checked), the manifest last. Returns both.
fn walk(
    archive: &Path,
    mut each: impl FnMut(
        &str,
        &mut tar::Entry<'_, flate2::read::GzDecoder<std::fs::File>>,
    ) -> Result<(), BackupError>,
) -> Result<(Header, Manifest), BackupError> {
    let file =
        std::fs::File::open(archive).map_err(io(format!("opening {}", archive.display())))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    tar.set_preserve_ownerships(true);
    let mut header: Option<Header> = None;
    let mut manifest: Option<Manifest> = None;
    for entry in tar.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        let name = entry
            .path()
            .map_err(corrupt)?
            .to_string_lossy()
            .into_owned();
        if manifest.is_some() {
            return Err(BackupError::Corrupt(format!(
                "{name} comes after the manifest"
            )));
        }
        let Some(found) = &header else {
            if name != HEADER_NAME {
                return Err(BackupError::NotABackup(archive.display().to_string()));
            }
            let parsed: Header = serde_json::from_reader(&mut entry)
                .map_err(|error| BackupError::Corrupt(format!("{HEADER_NAME}: {error}")))?;
            refuse_newer(&parsed)?;
            header = Some(parsed);
            continue;
        };
        let _ = found;
        if name == MANIFEST_NAME {
            manifest = Some(
                serde_json::from_reader(&mut entry)
                    .map_err(|error| BackupError::Corrupt(format!("{MANIFEST_NAME}: {error}")))?,
            );
            continue;
        }
        let path = Path::new(&name);
        let plain = path
            .components()
            .all(|component| matches!(component, Component::Normal(_)));
        if !plain || !name.starts_with(&format!("{DATA_PREFIX}/")) {
            return Err(BackupError::Corrupt(format!(
                "an entry with an unexpected path: {name:?}"
            )));
        }
        each(&name, &mut entry)?;
    }
    let header = header.ok_or_else(|| BackupError::NotABackup(archive.display().to_string()))?;
    let manifest = manifest.ok_or_else(|| {
        BackupError::Corrupt("the manifest is missing (was the archive cut short?)".into())
    })?;
    Ok((header, manifest))
}

fn refuse_newer(header: &Header) -> Result<(), BackupError> {
    let known = crate::store::tables::SCHEMA_VERSION;
    if header.format > FORMAT || header.schema_version > known {
        return Err(BackupError::Newer {
            made_by: header.slipway_version.clone(),
            format: header.format,
            schema: header.schema_version,
            this: env!("CARGO_PKG_VERSION"),
            known,
        });
    }
    Ok(())
}

fn corrupt(error: std::io::Error) -> BackupError {
    BackupError::Corrupt(format!(
        "cannot read the archive ({error}); was it cut short or changed?"
    ))
}

#[cfg(test)]
mod tests {
    use super::make_parents;
    use std::path::Path;

    #[test]
    fn no_directory_is_made_through_a_link_or_out_of_the_target() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("link")).unwrap();
        assert!(make_parents(root.path(), Path::new("link/x/file")).is_err());
        assert!(make_parents(root.path(), Path::new("../x/file")).is_err());
        assert!(
            !outside.path().join("x").exists(),
            "made a directory outside"
        );
        make_parents(root.path(), Path::new("appdata/prj_a/sub/file")).unwrap();
        assert!(root.path().join("appdata/prj_a/sub").is_dir());
    }
}
