//! Opening the files a command writes its results to (`read -O FILE`, the plots of
//! `sweep --out DIR`). A regular file there is truncated only once it is known not
//! to be something that must not be: a zblk image (a superblock's magic at either
//! copy: truncating it takes the image and every flushed write in it), a file whose
//! `flock` another process holds (an image in use, or another program's locked
//! file: a writer of an image would die of SIGBUS on its truncated mapping), or the
//! image the command itself reads. A block device is never an output (a disk is
//! written with `dd`, not as a side effect of a read). A FIFO, a terminal, a pipe or
//! `/dev/null` is written as it is.

use crate::CliError;
use rustix::fs::{FlockOperation, flock};
use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;
use zblk_dev::file::FileImage;
use zblk_dev::file::format::{MAGIC, SUPERBLOCK_OFFSETS};

/// Opens `path` to write a command's output, truncated, unless it is one of the
/// files the module documentation names; `image` is the image the command reads.
/// The file stays locked (`flock`, exclusive) while it is open when it is a
/// regular file, so that no zblk process takes it as an image meanwhile.
pub fn create(path: &Path, image: Option<&FileImage>) -> Result<File, CliError> {
    let name = path.display();
    let refused = |why: &str| CliError(format!("{name}: {why}: not overwritten"));
    let block = |m: &Metadata| m.file_type().is_block_device();
    // Looked at before opening: opening a device node may have effects of its own.
    let before = std::fs::metadata(path).ok();
    if before.as_ref().is_some_and(block) {
        return Err(refused("it is a block device (an output is never a disk)"));
    }
    // Read access too where it is a regular file (or none yet), to look for an
    // image's superblock; a FIFO is opened for writing only, as a writer of it.
    let regular = before.as_ref().is_none_or(|m| m.file_type().is_file());
    // Not truncated on opening: only once the checks below pass.
    let open = |read: bool| OpenOptions::new().read(read).write(true).create(true).truncate(false).open(path);
    let file = match open(regular) {
        Err(e) if regular && e.kind() == io::ErrorKind::PermissionDenied => open(false),
        r => r,
    }
    .map_err(|e| CliError(format!("{name}: {e}")))?;
    let m = file.metadata().map_err(|e| CliError(format!("{name}: {e}")))?;
    if block(&m) {
        return Err(refused("it is a block device (an output is never a disk)"));
    }
    if !m.file_type().is_file() {
        return Ok(file);
    }
    if let Some(img) = image {
        if img.is_same_file(&file).map_err(CliError::msg)? {
            return Err(refused("it is the image itself"));
        }
    }
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            return Err(refused("it is in use by another process (its lock is held)"));
        }
        Err(e) => return Err(CliError(format!("{name}: lock: {e}"))),
    }
    if is_image(&file) {
        return Err(refused("it is a zblk image (remove it first to reuse the name)"));
    }
    file.set_len(0).map_err(|e| CliError(format!("{name}: truncate: {e}")))?;
    Ok(file)
}

/// Whether `file` holds a zblk superblock's magic at either copy. A file opened
/// without read access (write-only permission) reads as no image: no zblk process
/// could have opened it as one either.
fn is_image(file: &File) -> bool {
    SUPERBLOCK_OFFSETS.iter().any(|&at| {
        let mut magic = [0u8; 8];
        file.read_exact_at(&mut magic, at).is_ok() && magic == MAGIC
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_refused_and_what_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"old contents").unwrap();
        let f = create(&plain, None).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 0, "a plain file is truncated");
        // Locked while it is open: a second writer is refused.
        let e = create(&plain, None).unwrap_err();
        assert!(e.0.contains("in use by another process"), "{e}");
        drop(f);
        let new = dir.path().join("new");
        create(&new, None).unwrap();
        assert!(new.exists());
        // An image's magic at either superblock copy.
        for at in SUPERBLOCK_OFFSETS {
            let img = dir.path().join(format!("img{at}"));
            let mut bytes = vec![0u8; 8192];
            bytes[at as usize..at as usize + 8].copy_from_slice(&MAGIC);
            std::fs::write(&img, &bytes).unwrap();
            let e = create(&img, None).unwrap_err();
            assert!(e.0.contains("is a zblk image"), "{e}");
            assert_eq!(std::fs::read(&img).unwrap(), bytes, "a refused output was changed");
        }
        let e = create(dir.path(), None).unwrap_err();
        assert!(e.0.contains(&dir.path().display().to_string()), "{e}");
        create(Path::new("/dev/null"), None).unwrap();
    }
}
