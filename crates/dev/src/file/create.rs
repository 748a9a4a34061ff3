//! Creating an image: the superblock copies, both durable zone tables (every
//! sequential zone EMPTY) and a clean live table, written to a temporary file that
//! replaces nothing unexamined when it is put at the path (see [`mod@super::claim`]).

use super::error::{ImageError, ImageErrorKind, err, io_err};
use super::format::{self, Entry, ImageId, Layout, LiveState, Superblock, Table};
use super::live::live_region;
use super::staging::{self, Staged, StaleTemporary};
use super::{FileImage, claim};
use rustix::fs::{FallocateFlags, fallocate, fstatvfs};
use rustix::io::Errno;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::zone::ZoneSet;

/// How to create an image.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// The geometry (null_blk's parameters).
    pub geometry: GeometryParams,
    /// The image stands for a rotational disk (`zoned_qd1_writes` defaults to 1).
    pub rotational: bool,
    /// Replace an existing file.
    pub force: bool,
    /// Allocate the data region now (`fallocate`), as a device's blocks all exist:
    /// the space is taken at once, a write never waits for the file system to
    /// allocate, and a file system too small is found now rather than by a write
    /// that fails with ENOSPC. Otherwise the file is sparse.
    pub preallocate: bool,
}

impl FileImage {
    /// Creates an image at `path`: all sequential zones EMPTY, no data (a sparse
    /// file). Made in a file without a name where the file system allows (else under
    /// a temporary one) and put at `path` at the end, so that a crash or a signal
    /// never leaves a half-made image, nor a temporary file, behind (see
    /// [`mod@staging`]); putting it there replaces nothing that was not examined
    /// first (see [`mod@claim`]): a file put at `path` meanwhile makes the create
    /// fail with [`ImageErrorKind::Exists`].
    pub fn create(path: &Path, opts: &CreateOptions) -> Result<(), ImageError> {
        Self::create_waiting(path, opts, None)
    }

    /// [`FileImage::create`], waiting up to `wait` (`Duration::MAX`: as long as it
    /// takes) for another process to let go of the image `opts.force` replaces,
    /// as [`ImageOptions::lock_wait`](super::ImageOptions::lock_wait) does for an open.
    pub fn create_waiting(
        path: &Path,
        opts: &CreateOptions,
        wait: Option<std::time::Duration>,
    ) -> Result<(), ImageError> {
        // Every image made has an identity of its own (format 3), so that no part of
        // another image can pass for its state.
        let id = ImageId::random().map_err(io_err(path, "draw an identity from /dev/urandom"))?;
        Self::create_as(path, opts, wait, id)
    }

    /// [`FileImage::create`] with a given identity, for images that must come out
    /// the same byte for byte (a fuzzer's template). Two images made with one
    /// identity are one image to the checks that tell images apart: never use it
    /// for images that hold data.
    pub fn create_with_identity(path: &Path, opts: &CreateOptions, id: ImageId) -> Result<(), ImageError> {
        assert!(!id.is_none(), "an image made now has an identity");
        Self::create_as(path, opts, None, id)
    }

    fn create_as(
        path: &Path,
        opts: &CreateOptions,
        wait: Option<std::time::Duration>,
        id: ImageId,
    ) -> Result<(), ImageError> {
        let geo = Geometry::new(&opts.geometry).map_err(|e| err(path, e.into()))?;
        let layout = Layout::try_of(&geo).map_err(|e| err(path, ImageErrorKind::Limit(e)))?;
        // What is at `path` now: only a regular file is ever replaced, and only when
        // no process holds it open as an image: its lock is taken, and kept until the
        // new image has replaced it.
        let wait = claim::Wait::of(wait);
        let old = claim::examine(path, opts.force, wait)?;
        let sb = Superblock { params: opts.geometry.clone(), rotational: opts.rotational, layout, id };
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        // The temporary file is zblk's business: a failure to make it is told with
        // the directory the user named.
        let in_dir = |e: io::Error| match std::fs::metadata(dir) {
            Err(d) if d.kind() == io::ErrorKind::NotFound => err(dir, ImageErrorKind::NoDirectory),
            _ => io_err(dir, "create a file in the directory")(e),
        };
        // Unnamed until it is put at the path (see [`mod@staging`]): an interrupted
        // create leaves nothing; a temporary name, where one is needed, goes when
        // `new` does, whatever the outcome.
        let mut new = Staged::new(path, dir, in_dir)?;
        let f = new.file();
        f.set_len(layout.file_bytes).map_err(io_err(path, "set length"))?;
        for at in format::SUPERBLOCK_OFFSETS {
            f.write_all_at(&sb.encode(1), at).map_err(io_err(path, "write superblock"))?;
        }
        let entries = initial_entries(&geo);
        for (slot, seq) in [(0, 1), (1, 0)] {
            let t = Table { seq, entries: entries.clone() };
            f.write_all_at(&t.encode(layout.table_bytes, id), layout.table_offset[slot])
                .map_err(io_err(path, "write zone table"))?;
        }
        f.write_all_at(
            &live_region(&entries, layout.table_bytes, (LiveState::Clean, 1), &[0; 36], id),
            layout.live_offset,
        )
        .map_err(io_err(path, "write live table"))?;
        if opts.preallocate {
            preallocate(f, path, &layout)?;
        }
        f.sync_all().map_err(io_err(path, "sync"))?;
        claim::install(&mut new, path, old, opts.force, wait)?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(path, "sync directory"))
    }
}

/// Allocates the data region of the image being made in `f` (`fallocate`, mode 0).
/// Refused before anything is allocated when the file system has not the room (a
/// `fallocate` that runs out of space fills the file system first, then fails).
fn preallocate(f: &File, path: &Path, layout: &Layout) -> Result<(), ImageError> {
    let need = layout.file_bytes - layout.data_offset;
    let mib = |b: u64| b.div_ceil(1 << 20);
    let st = fstatvfs(f).map_err(|e| io_err(path, "statvfs")(e.into()))?;
    let free = st.f_bavail.saturating_mul(st.f_frsize);
    if need > free {
        let why = format!(
            "the data region needs {} MiB, the file system has {} MiB free{}",
            mib(need),
            free >> 20,
            staging::held_by_stale(path)
        );
        return Err(err(path, ImageErrorKind::Preallocate(why)));
    }
    match fallocate(f, FallocateFlags::empty(), layout.data_offset, need) {
        Ok(()) => Ok(()),
        Err(e) if e == Errno::OPNOTSUPP => Err(err(
            path,
            ImageErrorKind::Preallocate(
                "the file system does not allocate ahead (fallocate: operation not supported); \
                 create the image without preallocating"
                    .into(),
            ),
        )),
        // The room was there at the look above and is gone: if stale temporary
        // files hold some of it, say so.
        Err(Errno::NOSPC) => match staging::held_by_stale(path) {
            held if held.is_empty() => Err(io_err(path, "preallocate the data region")(Errno::NOSPC.into())),
            held => Err(err(path, ImageErrorKind::Preallocate(format!("no space left on the file system{held}")))),
        },
        Err(e) => Err(io_err(path, "preallocate the data region")(e.into())),
    }
}

impl FileImage {
    /// The temporary files that interrupted creates left in the directory an image
    /// at `path` would be created in (see [`mod@staging`]): a create killed while
    /// its new image had a name. Nothing is removed.
    pub fn stale_temporaries(path: &Path) -> Vec<StaleTemporary> {
        staging::stale(path)
    }
}

fn initial_entries(geo: &Geometry) -> Vec<Entry> {
    if !geo.is_zoned() {
        return Vec::new();
    }
    ZoneSet::new(geo).zones().iter().map(Entry::of).collect()
}
