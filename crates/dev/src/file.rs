//! The file-backed zoned device: a persistent zoned image on one regular file.
//!
//! The image holds a superblock (geometry), two durable zone tables and a live zone
//! table, then the data (see [`mod@format`] for the layout). The device side behaves as
//! null_blk with memory backing: the same [`ZoneSet`] state machine checks every
//! request, and reads past a write pointer return zeroes. A reset keeps the zone's
//! blocks allocated (the data is hidden, not discarded: see `zone_mgmt`); a finish
//! punches out what lies past the write pointer, and so does reopening after a crash.
//!
//! # Write pointers and crashes
//!
//! The device distinguishes a zone's *accepted* write pointer (where the next write
//! must start; the [`ZoneSet`]'s) from its *completed* one: the sector below which every
//! accepted write has completed. Only the completed one is ever recorded:
//!
//! - the **live table**, a shared mapping of the file, is updated with one store as
//!   each write completes. After the process dies (`kill -9`), the page cache still
//!   holds it and the data: reopening in the same boot takes the write pointers from
//!   it and no acknowledged write is lost;
//! - a **commit** (FLUSH, a FUA write, a reset or finish, a clean close) makes the data
//!   durable with `fdatasync`, then writes the completed write pointers into the older
//!   of the two durable tables (checksummed) and syncs again. A durable write pointer
//!   is therefore never past durable data. After a power loss (the boot id differs) the
//!   live table is ignored and the newest valid durable table is used: every write
//!   acknowledged after a FLUSH or with FUA is there; later ones may be lost, as with
//!   a device's volatile write cache. A torn table write leaves the other table.
//!
//! Reopening checks all of this and repairs what it can, saying what it repaired
//! ([`FileImage::repairs`]).
//!
//! # Write zeroes
//!
//! WRITE_ZEROES is a write (at the write pointer on a sequential zone, recorded as
//! completed like any write). Without NOUNMAP the range is zeroed by a fallocate call
//! the open probed for ([`mod@zeroing`]): the image's "unmap", a metadata operation;
//! with NOUNMAP, or where the file system has no fallocate zeroing, zeroes are
//! written as data. `write_zeroes_unmap_max_hw_bytes` says which the image can do.
//!
//! # Where each part lives
//!
//! [`mod@format`] is the layout on disk; `create` writes a new image; `open` claims
//! one ([`mod@claim`]), decides its zone state (`recovery`) and repairs it;
//! `write_pointer` holds the device-side state a request moves (accepted and
//! completed write pointers), `live` the live table it is recorded in, `commit` what
//! makes it durable; `execute` carries out requests (the [`Device`] implementation)
//! through [`mod@media`], zeroing with what [`mod@zeroing`] probed.
//!
//! [`ZoneSet`]: zblk_core::zone::ZoneSet
//! [`Device`]: crate::Device

pub mod claim;
mod commit;
mod create;
mod error;
mod execute;
pub mod format;
mod live;
pub mod media;
mod open;
#[cfg(feature = "testing")]
pub mod powercut;
mod recovery;
pub mod staging;
mod superblocks;
mod write_pointer;
pub mod zeroing;

pub use create::CreateOptions;
pub use error::{ImageError, ImageErrorKind};
pub use open::{ImageOptions, current_boot_id};
pub use staging::StaleTemporary;

use commit::Durable;
use error::io_err;
use format::Superblock;
use media::Media;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use write_pointer::DevState;
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SHIFT, Sector};
use zblk_core::zone::ZoneInfo;
use zeroing::{FileZeroing, ProbeResult};

/// A zoned image on a regular file. Shared between threads: the device-side state
/// has its own short lock, never held across I/O; commits are serialised by another.
#[derive(Debug)]
pub struct FileImage {
    path: PathBuf,
    geo: Geometry,
    sb: Superblock,
    media: Box<dyn Media>,
    /// The `O_DIRECT` descriptor and its alignment, for drivers that do their own data
    /// I/O (io_uring). Kept by [`FileMedia`](media::FileMedia); a copy of the raw descriptor number.
    direct: Option<(i32, u64)>,
    buffered_fd: i32,
    state: Mutex<DevState>,
    durable: Mutex<Durable>,
    read_only: bool,
    /// Closed: the drop has nothing left to do.
    closed: std::sync::atomic::AtomicBool,
    /// Some durable table was unusable at open: both are rewritten.
    rewrite_tables: bool,
    /// The unmap path's zeroing method (moves down if refused at run time).
    zeroing: zeroing::Current,
    /// What the open found about zeroing.
    zeroing_probe: ProbeResult,
    repairs: Vec<String>,
    /// The errno of the file system's last failed operation under a request (0:
    /// none): what the EIO the request completes with stood for.
    last_errno: std::sync::atomic::AtomicI32,
    /// Ranges of the file deallocated so far ([`FileImage::punch_hole`]), for a
    /// driver writing through a mapping of the file ([`DataFds::holes_punched`]).
    holes_punched: std::sync::atomic::AtomicU64,
    /// The descriptor the open locked, held for the image's lifetime (its lock says
    /// the image is in use); every other descriptor on the image was opened from it.
    file: File,
}

impl FileImage {
    /// The image's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the image was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The superblock: geometry parameters, attributes, layout.
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    /// The image's identity, given at its creation ([`format::ImageId::NONE`] for an
    /// image of format 2, made before images had one).
    pub fn identity(&self) -> format::ImageId {
        self.sb.id
    }

    /// Whether the image stands for a rotational disk.
    pub fn rotational(&self) -> bool {
        self.sb.rotational
    }

    /// What opening the image found and repaired (read-only: what it would repair).
    pub fn repairs(&self) -> &[String] {
        &self.repairs
    }

    /// The length of the file the image's layout needs: its metadata, then every
    /// zone's data. zblk never writes past it.
    pub fn file_bytes(&self) -> u64 {
        self.sb.layout.file_bytes
    }

    /// The length of the image's file now, from its descriptor (the path may name
    /// another file by now).
    pub fn file_len(&self) -> Result<u64, ImageError> {
        Ok(self.file.metadata().map_err(io_err(&self.path, "stat"))?.len())
    }

    /// Cuts off whatever the file holds past [`FileImage::file_bytes`] (zblk never
    /// writes there), through the image's own descriptor.
    pub fn cut_past_end(&self) -> Result<(), ImageError> {
        assert!(!self.read_only, "cut_past_end on a read-only image");
        self.file.set_len(self.file_bytes()).map_err(io_err(&self.path, "cut the file"))
    }

    /// The device and inode numbers of the image's file (through its descriptor).
    pub fn file_id(&self) -> Result<(u64, u64), ImageError> {
        use std::os::unix::fs::MetadataExt;
        let m = self.file.metadata().map_err(io_err(&self.path, "stat"))?;
        Ok((m.dev(), m.ino()))
    }

    /// Whether `other` is open on this image's file (the same device and inode).
    pub fn is_same_file(&self, other: &File) -> Result<bool, ImageError> {
        use std::os::unix::fs::MetadataExt;
        let (a, b) = (self.file.metadata(), other.metadata());
        let (a, b) = (a.map_err(io_err(&self.path, "stat"))?, b.map_err(io_err(&self.path, "stat"))?);
        Ok((a.dev(), a.ino()) == (b.dev(), b.ino()))
    }

    /// How the image zeroes a range for a WRITE_ZEROES without NOUNMAP (its unmap
    /// path): as probed at open, or lower if the file system refused it since.
    pub fn zeroing(&self) -> FileZeroing {
        self.zeroing.get()
    }

    /// How the image zeroes a range for a WRITE_ZEROES with NOUNMAP set or not.
    pub fn zeroing_for(&self, nounmap: bool) -> FileZeroing {
        if nounmap { FileZeroing::PwriteZeroes } else { self.zeroing() }
    }

    /// What the open found about zeroing: the method and, in words, where it probed
    /// and what each fallocate method answered.
    pub fn zeroing_probe(&self) -> &ProbeResult {
        &self.zeroing_probe
    }

    /// The byte offset in the file of device sector `s`.
    pub fn file_offset(&self, s: Sector) -> u64 {
        self.sb.layout.data_offset + (s.0 << SECTOR_SHIFT)
    }

    /// All zones, as a report shows them now.
    pub fn zones(&self) -> Vec<ZoneInfo> {
        self.lock_state().zones.as_ref().map_or_else(Vec::new, |z| z.zones().to_vec())
    }

    /// Open and active zone counts, as the device sees them.
    pub fn open_active(&self) -> (u32, u32) {
        self.lock_state().zones.as_ref().map_or((0, 0), |z| (z.nr_open(), z.nr_active()))
    }

    /// The newest durable table's sequence number (commits made so far).
    pub fn durable_seq(&self) -> u64 {
        self.lock_durable().seq
    }

    /// The device-side state. A lock poisoned by a panic under it propagates the
    /// panic: the thread may have left the zones half updated (a write pointer
    /// moved and its completion not counted, a roll back begun), and the next
    /// commit or close would make that durable. The image stays as a kill leaves
    /// it, which the next open recovers.
    fn lock_state(&self) -> MutexGuard<'_, DevState> {
        self.state.lock().unwrap_or_else(|_| {
            panic!("image {}: the zone state lock is poisoned: a thread panicked changing it", self.path.display())
        })
    }

    /// The commit state (the durable tables' sequence and entries). Poisoning
    /// propagates, as for [`FileImage::lock_state`]: a panic between writing a
    /// table and recording it leaves `Durable` behind the file.
    fn lock_durable(&self) -> MutexGuard<'_, commit::Durable> {
        self.durable.lock().unwrap_or_else(|_| {
            panic!("image {}: the commit lock is poisoned: a thread panicked committing", self.path.display())
        })
    }

    /// The device's geometry (also available through [`Device`](crate::Device)).
    pub fn geo(&self) -> &Geometry {
        &self.geo
    }
}

impl Drop for FileImage {
    fn drop(&mut self) {
        // After a panic under one of the image's locks, nothing is committed: the
        // image is left as a kill leaves it (the next open recovers from the
        // durable tables), and the drop, which may run while that panic unwinds,
        // raises none of its own.
        if self.state.is_poisoned() || self.durable.is_poisoned() {
            return;
        }
        let _ = self.close_inner();
    }
}

#[cfg(test)]
mod tests;
