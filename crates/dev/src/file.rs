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

pub mod claim;
pub mod format;
pub mod media;
#[cfg(feature = "testing")]
pub mod powercut;
mod recovery;
pub mod zeroing;

use crate::device::{DataFds, Device, DeviceZeroing, Plan, Transfer};
use crate::error::DeviceError;
use crate::{IoBuf, check_append, check_discard, check_range, check_write_zeroes, zero_past};
use format::{Entry, Layout, LiveHeader, LiveState, Superblock, Table};
use media::{FileMedia, Media};
use recovery::{read_superblocks, read_tables, recover};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use zblk_core::bio::{BioFlags, Op, Request, Status};
use zblk_core::geometry::{Geometry, GeometryError, GeometryParams};
use zblk_core::units::{SECTOR_SHIFT, SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::{ZoneCond, ZoneInfo, ZoneSet, ZoneType};
use zeroing::{FileZeroing, ProbePlace, ProbeResult, ZeroingSetup};

/// What went wrong with an image file. Every error names the file.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {kind}")]
pub struct ImageError {
    /// The image's path, as given.
    pub path: String,
    /// What is wrong.
    pub kind: ImageErrorKind,
}

/// The kinds of [`ImageError`].
#[derive(Debug, thiserror::Error)]
pub enum ImageErrorKind {
    /// The file does not exist.
    #[error("no such file")]
    Missing,
    /// The directory the file would be created in does not exist (the error's path
    /// is the directory's).
    #[error("no such directory")]
    NoDirectory,
    /// The file cannot be opened with the access needed.
    #[error("permission denied")]
    PermissionDenied,
    /// The file is not a zblk image.
    #[error("not a zblk image ({0})")]
    NotAnImage(String),
    /// A zblk image of a format version this code does not read.
    #[error(
        "image format version {found}, made by {} zblk (this zblk reads version {supported}{})",
        if found > supported { "a newer" } else { "an older" },
        if found > supported { ": use a newer zblk" } else { ": copy its data out with the zblk that made it, and recreate it" }
    )]
    WrongVersion {
        /// The version in the file.
        found: u32,
        /// The version this code reads.
        supported: u32,
    },
    /// A zblk image whose metadata does not check out.
    #[error("corrupt image: {0}")]
    Corrupt(String),
    /// Opening for writing would build on a state that may be older than the last
    /// commit (a flush or a reset may be undone): says which commit and what may be
    /// lost.
    #[error("refusing to open for writing: {0}")]
    MayLoseData(String),
    /// The file is shorter than its geometry needs.
    #[error("truncated image: the file has {len} bytes, its geometry needs {need}")]
    Truncated {
        /// The file's length.
        len: u64,
        /// The length the superblock's geometry needs.
        need: u64,
    },
    /// Another process holds the image open (its lock is taken).
    #[error("image in use by another process")]
    InUse,
    /// `create` would overwrite an existing file (there when it looked, or put there
    /// while it made the image).
    #[error("file exists (remove it first, or force)")]
    Exists,
    /// The path was replaced again and again while the image's lock was waited for
    /// or the image made: which file is meant cannot be told.
    #[error("the path was replaced again and again meanwhile: refused")]
    Replaced,
    /// The geometry asked for at creation is refused.
    #[error("invalid geometry: {0}")]
    Geometry(#[from] GeometryError),
    /// The geometry asked for is past a limit of the image format (named).
    #[error("cannot create: {0}")]
    Limit(String),
    /// An I/O error on the file.
    #[error("{op}: {}", describe_io(source))]
    Io {
        /// What was being done.
        op: &'static str,
        /// The system's error.
        source: io::Error,
    },
}

/// An I/O error as the kernel names it and in words: the errno first, so that a
/// full file system or the file size limit is told from a failing disk.
pub fn describe_io(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(27) => "EFBIG: file size limit (ulimit -f) or the file system's largest file".to_string(),
        Some(28) => "ENOSPC: no space left on the file system holding the image".to_string(),
        Some(122) => "EDQUOT: disk quota exceeded".to_string(),
        Some(5) => "EIO: I/O error reported by the file system".to_string(),
        Some(30) => "EROFS: read-only file system".to_string(),
        _ => e.to_string(),
    }
}

fn err(path: &Path, kind: ImageErrorKind) -> ImageError {
    ImageError { path: path.display().to_string(), kind }
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> ImageError + 'a {
    move |source| match source.kind() {
        io::ErrorKind::NotFound => err(path, ImageErrorKind::Missing),
        io::ErrorKind::PermissionDenied => err(path, ImageErrorKind::PermissionDenied),
        _ => err(path, ImageErrorKind::Io { op, source }),
    }
}

/// How to create an image.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// The geometry (null_blk's parameters).
    pub geometry: GeometryParams,
    /// The image stands for a rotational disk (`zoned_qd1_writes` defaults to 1).
    pub rotational: bool,
    /// Replace an existing file.
    pub force: bool,
}

/// How to open an image.
#[derive(Clone, Debug)]
pub struct ImageOptions {
    /// Open for reading only: nothing is written, repairs are only described, and
    /// other readers may hold the image at the same time.
    pub read_only: bool,
    /// Use `O_DIRECT` for aligned data I/O where the file system allows it.
    pub direct: bool,
    /// The boot the caller runs in; `None`: this machine's
    /// `/proc/sys/kernel/random/boot_id`. Tests give another one to model a restart.
    pub boot_id: Option<[u8; 36]>,
    /// How WRITE_ZEROES is set up: probed (the default), a given method, or none.
    pub zeroing: ZeroingSetup,
    /// Open for writing even when the zone state cannot be proven as new as the last
    /// commit ([`ImageErrorKind::MayLoseData`]): the newest usable state is taken and
    /// the loss accepted (`zblk check --repair -y`).
    pub accept_rollback: bool,
    /// When another process holds the image: fail at once (`None`), or wait for its
    /// lock this long (`Some(Duration::MAX)`: as long as it takes), as `flock -w`.
    pub lock_wait: Option<std::time::Duration>,
}

impl Default for ImageOptions {
    fn default() -> Self {
        ImageOptions {
            read_only: false,
            direct: true,
            boot_id: None,
            zeroing: ZeroingSetup::Probe,
            accept_rollback: false,
            lock_wait: None,
        }
    }
}

/// This machine's boot id (all zeroes if it cannot be read: then the live table is
/// never trusted, which is safe).
pub fn current_boot_id() -> [u8; 36] {
    let mut id = [0u8; 36];
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        let s = s.trim().as_bytes();
        if s.len() == 36 {
            id.copy_from_slice(s);
        }
    }
    id
}

/// A write accepted by the device and not completed yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Extent {
    start: u64,
    len: u64,
    /// An earlier write to the zone failed and the write pointer went back below this
    /// one: it fails when it completes.
    doomed: bool,
}

#[derive(Debug)]
struct DevState {
    zones: Option<ZoneSet>,
    /// Per zone, accepted writes not completed.
    inflight: Vec<Vec<Extent>>,
    /// Per zone, writes acknowledged while a write below them was still in flight
    /// (appends race so): `(start, end)` offsets. A failed write below them must not
    /// take the write pointer back under acknowledged data.
    acked_above: Vec<Vec<(u64, u64)>>,
    /// Per zone, what the tables record: the completed write pointer and a condition
    /// consistent with it.
    done: Vec<Entry>,
    /// The live table (None when read-only).
    live: Option<LiveTable>,
    /// What the live table's header says: its state and the last commit it saw.
    live_hdr: (LiveState, u64),
}

impl DevState {
    /// Sets the live table header's state and commit (errors are the caller's).
    fn set_live(&mut self, state: LiveState, commit: u64) -> io::Result<()> {
        self.live_hdr = (state, commit);
        match self.live.as_mut() {
            Some(live) => live.set_state(state, commit),
            None => Ok(()),
        }
    }
}

/// The live table region of the file, as the device updates it.
#[derive(Debug)]
enum LiveTable {
    /// A shared mapping: an update is a store, which the page cache keeps when the
    /// process dies.
    Map(memmap2::MmapMut),
    /// Where the file system does not allow shared writable mappings (9p, some FUSE
    /// file systems): a copy in memory, each update written with `pwrite`.
    Pwrite { file: File, offset: u64, copy: Vec<u8> },
}

impl LiveTable {
    fn bytes(&mut self) -> &mut [u8] {
        match self {
            LiveTable::Map(m) => m,
            LiveTable::Pwrite { copy, .. } => copy,
        }
    }

    /// Makes `[at, at + len)` of the region, changed through `bytes()`, visible in the
    /// file.
    fn publish(&mut self, at: usize, len: usize) -> io::Result<()> {
        match self {
            LiveTable::Map(_) => Ok(()),
            LiveTable::Pwrite { file, offset, copy } => file.write_all_at(&copy[at..at + len], *offset + at as u64),
        }
    }

    /// Stores one 8-byte entry at `at`.
    fn store(&mut self, at: usize, word: u64) -> io::Result<()> {
        // One aligned 8-byte store: a process killed at any instruction leaves either
        // the old entry or the new one.
        self.bytes()[at..at + 8].copy_from_slice(&word.to_le_bytes());
        self.publish(at, 8)
    }

    /// Stores the digest of the entries as commit `commit` leaves them, which a
    /// clean close stores before it marks the table clean.
    fn set_digest(&mut self, commit: u64, nr_zones: u32) -> io::Result<()> {
        LiveHeader::put_digest(self.bytes(), commit, nr_zones);
        self.publish(0, format::TABLE_HEADER_BYTES as usize)
    }

    /// Changes the witness at the end of the region (see [`format::LiveWitness`]).
    fn update_witness(&mut self, change: impl FnOnce(&mut format::LiveWitness)) -> io::Result<()> {
        let bytes = self.bytes();
        let mut w = format::live_witness(bytes).unwrap_or_default();
        change(&mut w);
        format::put_live_witness(bytes, w);
        let at = bytes.len() - format::LIVE_WITNESS_BYTES;
        self.publish(at, format::LIVE_WITNESS_BYTES)
    }

    /// Stores the header's state and commit word (one aligned 8-byte store), after
    /// the witness of the commit announced: a process killed in between leaves the
    /// witness one commit ahead of the header, never behind it.
    fn set_state(&mut self, state: LiveState, commit: u64) -> io::Result<()> {
        self.update_witness(|w| w.announced = commit)?;
        LiveHeader::put_state(self.bytes(), state, commit);
        self.publish(0, format::TABLE_HEADER_BYTES as usize)
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            LiveTable::Map(m) => m.flush(),
            LiveTable::Pwrite { .. } => Ok(()),
        }
    }
}

#[derive(Debug)]
struct Durable {
    seq: u64,
    /// The slot holding `seq`; the next commit writes the other.
    slot: usize,
    entries: Vec<Entry>,
    /// A table write failed: the other slot may hold it, newer than `seq`, and may
    /// surface after a power loss. The next commit must write, whatever it holds.
    unsure: bool,
    /// The witnesses of `seq` (the superblocks, the live table's) were stored since
    /// the last `fdatasync`.
    witness_unsynced: bool,
}

/// A zoned image on a regular file. Shared between threads: the device-side state
/// has its own short lock, never held across I/O; commits are serialised by another.
#[derive(Debug)]
pub struct FileImage {
    path: PathBuf,
    geo: Geometry,
    sb: Superblock,
    media: Box<dyn Media>,
    /// The `O_DIRECT` descriptor and its alignment, for drivers that do their own data
    /// I/O (io_uring). Kept by [`FileMedia`]; a copy of the raw descriptor number.
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
    /// The descriptor the open locked, held for the image's lifetime (its lock says
    /// the image is in use); every other descriptor on the image was opened from it.
    file: File,
}

impl FileImage {
    /// Creates an image at `path`: all sequential zones EMPTY, no data (a sparse
    /// file). Written to a temporary file and renamed, so that a crash never leaves
    /// a half-made image under `path`; the rename replaces nothing that was not
    /// examined first (see [`mod@claim`]): a file put at `path` meanwhile makes the
    /// create fail with [`ImageErrorKind::Exists`].
    pub fn create(path: &Path, opts: &CreateOptions) -> Result<(), ImageError> {
        Self::create_waiting(path, opts, None)
    }

    /// [`FileImage::create`], waiting up to `wait` (`Duration::MAX`: as long as it
    /// takes) for another process to let go of the image `opts.force` replaces,
    /// as [`ImageOptions::lock_wait`] does for an open.
    pub fn create_waiting(
        path: &Path,
        opts: &CreateOptions,
        wait: Option<std::time::Duration>,
    ) -> Result<(), ImageError> {
        let geo = Geometry::new(&opts.geometry).map_err(|e| err(path, e.into()))?;
        let layout = Layout::try_of(&geo).map_err(|e| err(path, ImageErrorKind::Limit(e)))?;
        // What is at `path` now: only a regular file is ever replaced, and only when
        // no process holds it open as an image: its lock is taken, and kept until the
        // new image has replaced it.
        let wait = claim::Wait::of(wait);
        let old = claim::examine(path, opts.force, wait)?;
        let sb = Superblock { params: opts.geometry.clone(), rotational: opts.rotational, layout };
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let tmp = claim::temp_name(path, dir)?;
        // The temporary file is zblk's business: a failure to make it is told with
        // the directory the user named.
        let in_dir = |e: io::Error| match std::fs::metadata(dir) {
            Err(d) if d.kind() == io::ErrorKind::NotFound => err(dir, ImageErrorKind::NoDirectory),
            _ => io_err(dir, "create a file in the directory")(e),
        };
        let result = (|| {
            let f = OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(in_dir)?;
            f.set_len(layout.file_bytes).map_err(io_err(path, "set length"))?;
            for at in format::SUPERBLOCK_OFFSETS {
                f.write_all_at(&sb.encode(1), at).map_err(io_err(path, "write superblock"))?;
            }
            let entries = initial_entries(&geo);
            for (slot, seq) in [(0, 1), (1, 0)] {
                let t = Table { seq, entries: entries.clone() };
                f.write_all_at(&t.encode(layout.table_bytes), layout.table_offset[slot])
                    .map_err(io_err(path, "write zone table"))?;
            }
            f.write_all_at(
                &live_region(&entries, layout.table_bytes, LiveState::Clean, 1, &[0; 36]),
                layout.live_offset,
            )
            .map_err(io_err(path, "write live table"))?;
            f.sync_all().map_err(io_err(path, "sync"))?;
            claim::install(&tmp, path, old, opts.force, wait)?;
            File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(path, "sync directory"))
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Opens an image, checks it and repairs it (unless read-only). See the module
    /// documentation for what is checked.
    pub fn open(path: &Path, opts: &ImageOptions) -> Result<FileImage, ImageError> {
        FileImage::open_with(path, opts, |m| Box::new(m))
    }

    /// [`FileImage::open`], with the file's media wrapped by `wrap` (tests put a
    /// power-loss model there).
    pub fn open_with(
        path: &Path,
        opts: &ImageOptions,
        wrap: impl FnOnce(FileMedia) -> Box<dyn Media>,
    ) -> Result<FileImage, ImageError> {
        let file = claim::open_locked(path, opts.read_only, claim::Wait::of(opts.lock_wait))?;
        let len = file.metadata().map_err(io_err(path, "stat"))?.len();
        let sbs = read_superblocks(path, &file, len)?;
        let (mut sb, geo, sb_repair) = (sbs.sb, sbs.geo, sbs.repair);
        let layout = sb.layout;
        if len < layout.file_bytes {
            return Err(err(path, ImageErrorKind::Truncated { len, need: layout.file_bytes }));
        }
        let buffered = file.try_clone().map_err(io_err(path, "dup"))?;
        let (direct, dio_align) = if opts.direct { open_direct(&file, opts.read_only) } else { (None, 4096) };
        // Direct I/O only where every data transfer can use it: a logical block
        // smaller than the file system's direct alignment would send some transfers
        // through the page cache, onto pages other transfers reach directly (see
        // `FileMedia::goes_direct`), and a bounce buffer must be aligned enough.
        let (direct, dio_align) = match direct {
            Some(f) if dio_align <= u64::from(geo.lbs_bytes()) && dio_align <= crate::buf::BUF_ALIGN as u64 => {
                (Some(f), dio_align)
            }
            _ => (None, 4096),
        };
        use std::os::fd::AsRawFd;
        let direct_raw = direct.as_ref().map(|f: &File| (f.as_raw_fd(), dio_align));
        let buffered_fd = buffered.as_raw_fd();
        let media = wrap(FileMedia::new(buffered, direct, dio_align));
        let boot = opts.boot_id.unwrap_or_else(current_boot_id);
        let found = read_tables(&*media, &geo, &layout, sbs.commit).map_err(io_err(path, "read zone tables"))?;
        let mut rec = recover(&geo, found, &boot).map_err(|why| err(path, ImageErrorKind::Corrupt(why)))?;
        if let Some(r) = &sb_repair {
            rec.repairs.insert(0, r.clone());
        }
        if let Some(risk) = &rec.at_risk {
            if !opts.read_only && !opts.accept_rollback {
                return Err(err(path, ImageErrorKind::MayLoseData(risk.clone())));
            }
            let what =
                if opts.read_only { "read-only; nothing changed" } else { "accepted: the image goes on from it" };
            rec.repairs.insert(0, format!("WARNING: {risk} ({what})"));
        }
        // Zeroing is probed once the image is known good, so that nothing is written
        // to a file that is then refused.
        let probe = probe_zeroing(path, &*media, &layout, opts);
        sb.params.write_zeroes_max_bytes =
            if opts.zeroing == ZeroingSetup::NoWriteZeroes { 0 } else { zeroing::IMAGE_WRITE_ZEROES_MAX_BYTES };
        sb.params.write_zeroes_unmap_max_hw_bytes =
            if probe.method.is_fallocate() { sb.params.write_zeroes_max_bytes } else { 0 };
        let geo = Geometry::new(&sb.params).map_err(|e| err(path, ImageErrorKind::Geometry(e)))?;
        let zones = geo.is_zoned().then(|| {
            let infos: Vec<ZoneInfo> =
                rec.entries.iter().enumerate().map(|(z, e)| e.info(&geo, ZoneNo(z as u32))).collect();
            ZoneSet::from_zones(&geo, &infos).expect("recovered zones were checked")
        });
        let live = if opts.read_only {
            None
        } else {
            // SAFETY: the mapping covers the live table region inside the file, whose
            // length was checked above; the file is locked against other zblk
            // processes, and the mapping lives in `state` for the image's lifetime.
            let map = unsafe {
                memmap2::MmapOptions::new().offset(layout.live_offset).len(layout.table_bytes as usize).map_mut(&file)
            };
            Some(match map {
                Ok(m) => LiveTable::Map(m),
                Err(_) => {
                    let mut copy = vec![0u8; layout.table_bytes as usize];
                    file.read_exact_at(&mut copy, layout.live_offset).map_err(io_err(path, "read live table"))?;
                    let file = file.try_clone().map_err(io_err(path, "dup"))?;
                    LiveTable::Pwrite { file, offset: layout.live_offset, copy }
                }
            })
        };
        let nr = rec.entries.len();
        let image = FileImage {
            path: path.to_path_buf(),
            geo,
            sb,
            media,
            direct: direct_raw,
            buffered_fd,
            state: Mutex::new(DevState {
                zones,
                inflight: vec![Vec::new(); nr],
                acked_above: vec![Vec::new(); nr],
                done: rec.entries.clone(),
                live,
                live_hdr: (LiveState::Invalid, rec.durable_seq),
            }),
            durable: Mutex::new(Durable {
                seq: rec.durable_seq,
                slot: rec.durable_slot,
                entries: rec.durable_entries,
                unsure: false,
                witness_unsynced: false,
            }),
            read_only: opts.read_only,
            closed: std::sync::atomic::AtomicBool::new(false),
            rewrite_tables: rec.bad_table,
            zeroing: zeroing::Current::new(probe.method),
            zeroing_probe: probe,
            repairs: rec.repairs,
            last_errno: std::sync::atomic::AtomicI32::new(0),
            file,
        };
        if !opts.read_only {
            if sb_repair.is_some() {
                // Both copies are the same superblock: rewrite the damaged one.
                let enc = image.sb.encode(sbs.commit);
                for at in format::SUPERBLOCK_OFFSETS {
                    image.media.write_at(&enc, at).map_err(io_err(path, "rewrite superblock"))?;
                }
            }
            image.apply_recovery(rec.unclean, &boot).map_err(io_err(path, "repair"))?;
        }
        Ok(image)
    }

    /// Writes what recovery decided: a durable table if it differs from the newest
    /// one (after syncing the data it describes), holes past every write pointer
    /// after an unclean stop, and a fresh live table for this boot.
    fn apply_recovery(&self, unclean: bool, boot: &[u8; 36]) -> io::Result<()> {
        // The live table says nothing trustworthy until it is rewritten below; a
        // process killed in between leaves it invalid and the durable tables current.
        {
            let mut st = self.lock_state();
            let c = st.live_hdr.1;
            st.set_live(LiveState::Invalid, c)?;
        }
        self.commit_io()?;
        if self.rewrite_tables {
            // Both slots are written, so that both hold a valid table again, each
            // newer than any commit number a damaged copy claims.
            let mut d = self.durable.lock().unwrap_or_else(|p| p.into_inner());
            for _ in 0..2 {
                let entries = d.entries.clone();
                self.write_table(&mut d, entries)?;
            }
        }
        if unclean {
            let done = self.lock_state().done.clone();
            for (z, e) in done.iter().enumerate() {
                let z = ZoneNo(z as u32);
                if self.geo.zone_is_conv(z) || matches!(e.cond, ZoneCond::ReadOnly | ZoneCond::Offline) {
                    continue;
                }
                let start = self.geo.zone_start(z) + e.wp_offset;
                let len = self.geo.zone_len(z) - e.wp_offset.min(self.geo.zone_len(z));
                self.media.punch_hole(self.file_offset(start), len << SECTOR_SHIFT)?;
            }
        }
        // Invalidate, rewrite, validate: a process killed half-way leaves an invalid
        // live table, and the durable table just written says the same thing.
        let commit = self.durable_seq();
        let mut st = self.lock_state();
        let entries = st.done.clone();
        let live = st.live.as_mut().expect("read-write image has a live table");
        for (z, e) in entries.iter().enumerate() {
            let z = ZoneNo(z as u32);
            live.store(format::entry_offset(z), e.pack(z))?;
        }
        LiveHeader::put_identity(live.bytes(), boot);
        st.set_live(LiveState::Live, commit)
    }

    /// Commits and marks the live table clean. Dropping the image does the same,
    /// ignoring errors; call this to see them.
    pub fn close(self) -> Result<(), ImageError> {
        let r = self.close_inner();
        r.map_err(io_err(&self.path, "close"))
    }

    /// Closes once: later requests fail (a write after the live table is marked clean
    /// would be lost by the next open).
    fn close_inner(&self) -> io::Result<()> {
        if self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) || self.read_only {
            return Ok(());
        }
        self.commit_io()?;
        {
            // The witnesses of the last commit are made durable before the live
            // table says the close was clean.
            let mut d = self.durable.lock().unwrap_or_else(|p| p.into_inner());
            if d.witness_unsynced {
                self.media.sync_data()?;
                d.witness_unsynced = false;
            }
        }
        let commit = self.durable_seq();
        let nr_zones = self.geo.nr_zones();
        let mut st = self.lock_state();
        // The entries are what commit `commit` holds (the commit above synced them);
        // their digest ties them to the header that says so.
        st.live.as_mut().expect("read-write image has a live table").set_digest(commit, nr_zones)?;
        st.set_live(LiveState::Clean, commit)?;
        st.live.as_mut().expect("read-write image has a live table").flush()
    }

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
        self.durable.lock().unwrap_or_else(|p| p.into_inner()).seq
    }

    fn lock_state(&self) -> MutexGuard<'_, DevState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    // ------------------------------------------------------------ request checks

    /// The device-side checks of a read or a plain write and its transfer. A data
    /// write to a sequential zone is *accepted* here (the zone's write pointer moves,
    /// the zone opens); `finish` records it as completed.
    fn prepare_transfer(&self, req: &Request) -> Result<Transfer, Status> {
        if req.op == Op::Read {
            check_range(&self.geo, req)?;
            let st = self.lock_state();
            let valid = match &st.zones {
                Some(z) => z.read(req.sector, req.nr_sectors)? as u32,
                None => req.nr_sectors,
            };
            let offset = self.file_offset(req.sector);
            return Ok(Transfer { write: false, at: req.sector, offset, valid_sectors: valid });
        }
        let at = self.accept_write(req)?;
        Ok(Transfer { write: true, at, offset: self.file_offset(at), valid_sectors: req.nr_sectors })
    }

    fn accept_write(&self, req: &Request) -> Result<Sector, Status> {
        check_range(&self.geo, req)?;
        let append = req.op == Op::ZoneAppend;
        if append {
            check_append(&self.geo, req)?;
        }
        let mut guard = self.lock_state();
        let st = &mut *guard;
        let Some(zs) = st.zones.as_mut() else { return Ok(req.sector) };
        let z = self.geo.zone_no(req.sector);
        let before = zs.zone(z).cond;
        if !self.geo.zone_is_conv(z) && (append || req.sector == zs.zone(z).wp) {
            // After a failed write took the write pointer back, writes accepted above
            // it before the failure (doomed) may still be moving data, and each punches
            // its range when it completes: a new write into their range would be
            // overwritten or zeroed after its acknowledgement. It fails instead, as
            // any write to a zone still recovering from an error may.
            let start = self.geo.zone_start(z);
            let at = zs.zone(z).wp;
            let (lo, hi) = (at.since(start), at.since(start) + u64::from(req.nr_sectors));
            if st.inflight[z.idx()].iter().any(|e| e.start < hi && lo < e.start + e.len) {
                return Err(Status::IoErr);
            }
        }
        let at = zs.write(req.sector, req.nr_sectors, append)?;
        if self.geo.zone_is_conv(z) {
            return Ok(at);
        }
        let start = self.geo.zone_start(z);
        st.inflight[z.idx()].push(Extent { start: at.since(start), len: u64::from(req.nr_sectors), doomed: false });
        if matches!(before, ZoneCond::Empty | ZoneCond::Closed) && self.geo.max_open() > 0 {
            // Opening this zone may have closed an implicitly open one.
            self.refresh_all(st);
        } else {
            self.refresh(st, z);
        }
        Ok(at)
    }

    fn finish_write(&self, at: Sector, len: u64, ok: bool) -> Result<Sector, Status> {
        if !self.geo.is_zoned() || self.geo.zone_is_conv(self.geo.zone_no(at)) {
            return if ok { Ok(at) } else { Err(Status::IoErr) };
        }
        let z = self.geo.zone_no(at);
        let off = at.since(self.geo.zone_start(z));
        let mut guard = self.lock_state();
        let st = &mut *guard;
        let list = &mut st.inflight[z.idx()];
        let i = list.iter().position(|e| e.start == off && e.len == len).expect("completion of a write not in flight");
        let ext = list.remove(i);
        let result = if ext.doomed {
            Err(Status::IoErr)
        } else if ok {
            if list.iter().any(|e| e.start < off) {
                st.acked_above[z.idx()].push((off, off + len));
            }
            Ok(at)
        } else {
            self.roll_back(st, z, off);
            Err(Status::IoErr)
        };
        // Acknowledged writes with nothing in flight below them can no longer be
        // rolled back over.
        let (inflight, above) = (&st.inflight[z.idx()], &mut st.acked_above[z.idx()]);
        above.retain(|&(s, _)| inflight.iter().any(|e| e.start < s));
        self.refresh(st, z);
        if result.is_err() {
            // Whatever reached the file past the write pointer must read as zeroes.
            // Punched before the state lock is let go: once it is, the rolled-back
            // write pointer lets a new write (an append, say) into this range, and a
            // later punch would zero it after its acknowledgement.
            let _ = self.media.punch_hole(self.file_offset(at), len << SECTOR_SHIFT);
        }
        drop(guard);
        result
    }

    /// A write at `off` of zone `z` failed: the zone's write pointer goes back to
    /// `off`, or to the end of the writes after it already acknowledged (appends
    /// race: their data stays, the failed range reads as zeroes), and writes
    /// accepted after that are doomed.
    fn roll_back(&self, st: &mut DevState, z: ZoneNo, off: u64) {
        let off = st.acked_above[z.idx()].iter().filter(|&&(s, _)| s > off).map(|&(_, e)| e).fold(off, u64::max);
        // `>=`: a write in flight that starts where the write pointer goes back to
        // (the end of an acknowledged append above the failed write) is past it too.
        for e in st.inflight[z.idx()].iter_mut().filter(|e| e.start >= off) {
            e.doomed = true;
        }
        let zs = st.zones.as_mut().expect("zoned");
        let mut infos = zs.zones().to_vec();
        let max_active = self.geo.max_active();
        let active_full = max_active > 0 && zs.nr_active() >= max_active;
        let info = &mut infos[z.idx()];
        if info.wp.since(info.start) > off {
            // A zone the failed write filled was no longer active: going back to
            // CLOSED would exceed the active limit if another zone has taken its
            // place since. The zone stays FULL instead, as a ZNS controller may
            // finish a zone on an error (zone finished by controller), and its unwritten
            // rest reads as zeroes, as after a FINISH.
            if info.cond == ZoneCond::Full && off > 0 && active_full {
                let tail = self.geo.zone_start(z) + off;
                let _ = self.media.punch_hole(self.file_offset(tail), (self.geo.zone_len(z) - off) << SECTOR_SHIFT);
                return;
            }
            info.wp = info.start + off;
            info.cond = match info.cond {
                _ if off == 0 => ZoneCond::Empty,
                ZoneCond::ExpOpen => ZoneCond::ExpOpen,
                _ => ZoneCond::Closed,
            };
        }
        *zs = ZoneSet::from_zones(&self.geo, &infos).expect("rolled-back zone set is consistent");
        assert!(
            max_active == 0 || zs.nr_active() <= max_active,
            "a roll back of zone {z} made {} zones active (limit {max_active})",
            zs.nr_active()
        );
    }

    /// Brings zone `z`'s recorded entry up to date and stores it in the live table.
    fn refresh(&self, st: &mut DevState, z: ZoneNo) {
        let e = entry_now(st, z);
        if st.done[z.idx()] != e {
            st.done[z.idx()] = e;
            let stored = match st.live.as_mut() {
                Some(live) => live.store(format::entry_offset(z), e.pack(z)).is_ok(),
                None => true,
            };
            if !stored {
                // The live table can no longer follow the writes: say so in it, and
                // a restart falls back to the durable tables.
                let c = st.live_hdr.1;
                let _ = st.set_live(LiveState::Invalid, c);
            }
        }
    }

    fn refresh_all(&self, st: &mut DevState) {
        for z in 0..self.geo.nr_zones() {
            self.refresh(st, ZoneNo(z));
        }
    }

    // ------------------------------------------------------------------ commits

    /// Makes every completed write durable, with its write pointer: `fdatasync`, then
    /// the completed write pointers into the older durable table, then `fdatasync`.
    fn commit_io(&self) -> io::Result<()> {
        let mut d = self.durable.lock().unwrap_or_else(|p| p.into_inner());
        // The snapshot is taken before the data sync: every write it counts completed
        // before the sync began, so the sync makes its data durable.
        let snap = self.lock_state().done.clone();
        self.media.sync_data()?;
        d.witness_unsynced = false;
        if snap != d.entries || d.unsure {
            self.write_table(&mut d, snap)?;
        }
        Ok(())
    }

    /// Commits a zone management operation: the newest durable table with `changes`,
    /// without syncing data (no write pointer in it moves up).
    fn commit_zones(&self, changes: &[(ZoneNo, Entry)]) -> io::Result<()> {
        let mut d = self.durable.lock().unwrap_or_else(|p| p.into_inner());
        let mut entries = d.entries.clone();
        for &(z, e) in changes {
            entries[z.idx()] = e;
        }
        if entries != d.entries || d.unsure { self.write_table(&mut d, entries) } else { Ok(()) }
    }

    fn write_table(&self, d: &mut Durable, entries: Vec<Entry>) -> io::Result<()> {
        let layout = &self.sb.layout;
        if d.seq >= format::MAX_COMMIT {
            return Err(io::Error::other(format!(
                "commit numbers exhausted: the image holds commit {}, the format's limit is {}",
                d.seq,
                format::MAX_COMMIT
            )));
        }
        let t = Table { seq: d.seq + 1, entries };
        {
            // The live table announces the commit before its table is written: the
            // table's sync carries the announcement, so that an open that finds this
            // table damaged knows a commit is missing; and in the same boot the live
            // table (updated before any commit) is then known to have seen it. Lock
            // order: durable, then state.
            let mut st = self.lock_state();
            let state = st.live_hdr.0;
            st.set_live(state, t.seq)?;
        }
        let slot = 1 - d.slot;
        let written = self
            .media
            .write_at(&t.encode(layout.table_bytes), layout.table_offset[slot])
            .and_then(|()| self.media.sync_data());
        d.unsure = written.is_err();
        written?;
        d.seq = t.seq;
        d.slot = slot;
        d.entries = t.entries;
        // Now that the table is durable, both superblocks and the live table witness
        // its commit: a later open that finds no table of it (the table copied back
        // from an older image, or lost by the disk) knows a commit is missing. Made
        // durable by the next sync (every commit starts with one, and a close makes
        // one); until then a power cut leaves an older witness, which proves less.
        let enc = self.sb.encode(d.seq);
        for at in format::SUPERBLOCK_OFFSETS {
            self.media.write_at(&enc, at)?;
        }
        if let Some(live) = self.lock_state().live.as_mut() {
            let seq = d.seq;
            live.update_witness(|w| w.completed = seq)?;
        }
        d.witness_unsynced = true;
        Ok(())
    }

    // ---------------------------------------------------------------- execution

    /// Remembers what a failed file operation under a request stood for, and gives
    /// the request's status: EIO, as a disk's media error (the errno is told by
    /// [`Device::last_error`]).
    fn note(&self, e: &io::Error) -> Status {
        if let Some(n) = e.raw_os_error() {
            self.last_errno.store(n, std::sync::atomic::Ordering::Relaxed);
        }
        Status::IoErr
    }

    /// Carries out a transfer synchronously (the thread-pool driver's path for every
    /// read and write, and every driver's for buffers it cannot hand to the kernel)
    /// and finishes it.
    fn perform_transfer(&self, req: &Request, t: Transfer, buf: IoBuf<'_>) -> Result<Sector, Status> {
        let len = u64::from(req.nr_sectors) << SECTOR_SHIFT;
        let r = match (t.write, buf) {
            (false, IoBuf::Read(out)) => {
                assert_eq!(out.len() as u64, len, "read buffer size");
                let r = self.media.read_at(out, t.offset);
                zero_past(out, t.valid_sectors);
                r
            }
            (true, IoBuf::Write(data)) => {
                assert_eq!(data.len() as u64, len, "write buffer size");
                self.media.write_at(data, t.offset)
            }
            // A write without data: the range reads back as zeroes.
            (true, _) => self.media.punch_hole(t.offset, len),
            // A read nobody wants the data of.
            (false, _) => Ok(()),
        };
        Device::finish(self, req, t, r)
    }

    /// Runs `write` between the commits its flags ask for: before it with PREFLUSH
    /// (every write completed so far becomes durable), after it with FUA (this one
    /// too).
    fn with_commits(&self, req: &Request, write: impl FnOnce() -> Result<Sector, Status>) -> Result<Sector, Status> {
        let io = |r: io::Result<()>| r.map_err(|e| self.note(&e));
        if req.flags.contains(BioFlags::PREFLUSH) {
            io(self.commit_io())?;
        }
        let at = write()?;
        if req.flags.contains(BioFlags::FUA) {
            io(self.commit_io())?;
        }
        Ok(at)
    }

    fn perform_blocking(&self, req: &Request, buf: IoBuf<'_>) -> Result<Sector, Status> {
        let io = |r: io::Result<()>| r.map_err(|e| self.note(&e));
        match req.op {
            Op::Write | Op::ZoneAppend => self.with_commits(req, || {
                let plain = Request { flags: BioFlags::NONE, ..*req };
                let t = self.prepare_transfer(&plain)?;
                self.perform_transfer(&plain, t, buf)
            }),
            Op::WriteZeroes => self.with_commits(req, || self.execute_write_zeroes(req)),
            Op::Discard => {
                check_discard(&self.geo, req)?;
                io(self.media.punch_hole(self.file_offset(req.sector), u64::from(req.nr_sectors) << SECTOR_SHIFT))?;
                Ok(req.sector)
            }
            Op::Flush => io(self.commit_io()).map(|()| req.sector),
            op if op.is_zone_mgmt() => self.zone_mgmt(req),
            op => unreachable!("{op} is not a blocking operation"),
        }
    }

    /// WRITE_ZEROES: accepted as a write (at the write pointer of a sequential
    /// zone, completed like one), the range of the file zeroed by
    /// [`FileImage::zero_file`].
    fn execute_write_zeroes(&self, req: &Request) -> Result<Sector, Status> {
        check_write_zeroes(&self.geo, req)?;
        let req_w = Request { op: Op::Write, flags: BioFlags::NONE, ..*req };
        let t = self.prepare_transfer(&req_w)?;
        let len = u64::from(req.nr_sectors) << SECTOR_SHIFT;
        let r = self.zero_file(t.offset, len, req.flags.contains(BioFlags::NOUNMAP));
        Device::finish(self, &req_w, t, r.map(|_| ()))
    }

    /// Zeroes `[offset, offset + len)` of the file: with NOUNMAP by writing zeroes,
    /// otherwise with the unmap path's method; a fallocate method the file system
    /// refuses (EOPNOTSUPP) is dropped for the next one, for good. Returns the method
    /// that did it.
    fn zero_file(&self, offset: u64, len: u64, nounmap: bool) -> io::Result<FileZeroing> {
        loop {
            let m = self.zeroing_for(nounmap);
            match self.media.zero_range(m, offset, len) {
                Ok(()) => return Ok(m),
                Err(e) if m.is_fallocate() && zeroing::is_not_supported(&e) => self.zeroing.refused(m),
                Err(e) => return Err(e),
            }
        }
    }

    /// Zone management. A reset only moves the write pointer: the zone's blocks stay
    /// allocated in the file, as a device's capacity stays (reads past a write pointer
    /// return zeroes whatever the file holds there). Punching them out would make
    /// every write after a reset allocate blocks and convert unwritten extents, with
    /// that latency on the critical path of a zone whose writes go one at a time
    /// (zone write plugging). A finish exposes `[wp, end)` to reads: those blocks are
    /// punched out first.
    fn zone_mgmt(&self, req: &Request) -> Result<Sector, Status> {
        let io = |r: io::Result<()>| r.map_err(|e| self.note(&e));
        if !self.geo.is_zoned() {
            return Err(Status::NotSupported);
        }
        if req.op == Op::ZoneFinish && self.geo.is_zone_start(req.sector) {
            let z = self.geo.zone_no(req.sector);
            if !self.geo.zone_is_conv(z) {
                let wp = self.lock_state().done[z.idx()].wp_offset.min(self.geo.zone_len(z));
                // Before the finish is recorded anywhere: a crash after the punch and
                // before the commit leaves zeroes past the write pointer, harmless.
                let start = self.geo.zone_start(z) + wp;
                io(self.media.punch_hole(self.file_offset(start), (self.geo.zone_len(z) - wp) << SECTOR_SHIFT))?;
            }
        }
        let mut st = self.lock_state();
        let zs = st.zones.as_mut().ok_or(Status::NotSupported)?;
        let reset: Vec<ZoneNo> = match req.op {
            Op::ZoneResetAll => zs.reset_all(),
            op => {
                zs.zone_mgmt(op, req.sector)?;
                if op == Op::ZoneReset { vec![self.geo.zone_no(req.sector)] } else { Vec::new() }
            }
        };
        self.refresh_all(&mut st);
        let changes: Vec<(ZoneNo, Entry)> = reset.iter().map(|&z| (z, st.done[z.idx()])).collect();
        drop(st);
        match req.op {
            // A reset lowers write pointers only: the newest durable table with them
            // lowered needs no data synced first.
            Op::ZoneResetAll | Op::ZoneReset => io(self.commit_zones(&changes))?,
            // A finish moves the write pointer past data that may not be durable yet:
            // a full commit syncs it first.
            Op::ZoneFinish => io(self.commit_io())?,
            // OPEN and CLOSE change no write pointer: nothing to make durable.
            _ => {}
        }
        Ok(req.sector)
    }
}

impl Drop for FileImage {
    fn drop(&mut self) {
        let _ = self.close_inner();
    }
}

impl Device for FileImage {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn rotational(&self) -> bool {
        self.sb.rotational
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }

    fn data_fds(&self) -> DataFds<'_> {
        // SAFETY: both descriptors belong to the media, which lives as long as `self`.
        let direct = self.direct.map(|(fd, align)| (unsafe { BorrowedFd::borrow_raw(fd) }, align));
        // With a direct descriptor, none through the page cache: a transfer from an
        // unaligned buffer goes to `perform`, which bounces it (a page reached both
        // ways goes stale, see `FileMedia::goes_direct`).
        // SAFETY: as above.
        let buffered = if direct.is_some() { None } else { Some(unsafe { BorrowedFd::borrow_raw(self.buffered_fd) }) };
        DataFds { direct, buffered }
    }

    fn prepare(&self, req: &Request) -> Result<Plan, Status> {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Status::IoErr);
        }
        if self.read_only && req.op != Op::Read {
            return Err(Status::NotSupported);
        }
        let synced = req.flags.contains(BioFlags::FUA) || req.flags.contains(BioFlags::PREFLUSH);
        match req.op {
            Op::Read => self.prepare_transfer(req).map(Plan::Transfer),
            // A FUA or PREFLUSH write commits around its data: a thread that may block
            // does all of it.
            Op::Write | Op::ZoneAppend if !synced => self.prepare_transfer(req).map(Plan::Transfer),
            _ => Ok(Plan::Blocking),
        }
    }

    fn perform(&self, req: &Request, plan: Plan, buf: IoBuf<'_>) -> Result<Sector, Status> {
        match plan {
            Plan::Transfer(t) => self.perform_transfer(req, t, buf),
            Plan::Blocking => self.perform_blocking(req, buf),
        }
    }

    /// Records a completed write in the live table; a failed one moves the zone's
    /// write pointer back to where it started (later writes to the zone already
    /// accepted fail too) and discards what it may have written.
    fn finish(&self, req: &Request, t: Transfer, io: io::Result<()>) -> Result<Sector, Status> {
        if let Err(e) = &io {
            self.note(e);
        }
        if t.write {
            self.finish_write(t.at, u64::from(req.nr_sectors), io.is_ok())
        } else {
            io.map(|()| req.sector).map_err(|_| Status::IoErr)
        }
    }

    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status> {
        match &self.lock_state().zones {
            Some(z) => Ok(z.report(from, max, out)),
            None => Err(Status::NotSupported),
        }
    }

    fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        (self.geo.max_write_zeroes_sectors() > 0).then(|| DeviceZeroing::File(self.zeroing_for(nounmap)))
    }

    fn close(&self) -> Result<(), DeviceError> {
        self.close_inner().map_err(|e| DeviceError::io(&self.path, "close", e))
    }

    fn last_error(&self) -> Option<String> {
        match self.last_errno.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            n => Some(describe_io(&io::Error::from_raw_os_error(n))),
        }
    }
}

impl FileImage {
    /// The device's geometry (also available through [`Device`]).
    pub fn geo(&self) -> &Geometry {
        &self.geo
    }

    /// Reads `buf.len()` bytes (whole sectors) at `sector` straight from the device,
    /// without an engine: for checkers and tools. Past a write pointer reads zeroes.
    pub fn read_direct(&self, sector: Sector, buf: &mut [u8]) -> Result<(), Status> {
        if buf.len() as u64 % SECTOR_SIZE != 0 {
            return Err(Status::Invalid);
        }
        let nr_sectors = u32::try_from(buf.len() as u64 / SECTOR_SIZE).map_err(|_| Status::Invalid)?;
        let req = Request {
            id: zblk_core::bio::ReqId::unissued(0),
            op: Op::Read,
            sector,
            nr_sectors,
            flags: BioFlags::NONE,
            user_data: 0,
            bio_offset: 0,
        };
        self.execute(&req, IoBuf::Read(buf)).map(|_| ())
    }

    /// The descriptor of the zone holding `sector`, as a report shows it now.
    pub fn zone_info(&self, sector: Sector) -> Result<ZoneInfo, Status> {
        self.report_zone(sector)
    }
}

/// The entry zone `z` should have now: its completed write pointer, with a condition
/// consistent with it.
fn entry_now(st: &DevState, z: ZoneNo) -> Entry {
    let Some(zs) = &st.zones else { return Entry { cond: ZoneCond::NotWp, wp_offset: 0 } };
    let info = zs.zone(z);
    if info.ztype == ZoneType::Conventional {
        return Entry { cond: ZoneCond::NotWp, wp_offset: 0 };
    }
    let accepted = info.wp.since(info.start);
    let done = st.inflight[z.idx()].iter().filter(|e| !e.doomed).map(|e| e.start).min().unwrap_or(accepted);
    let cond = if done == accepted {
        info.cond
    } else {
        // Writes are out: record the state as it will be if they never complete.
        match info.cond {
            ZoneCond::ExpOpen => ZoneCond::ExpOpen,
            _ if done == 0 => ZoneCond::Empty,
            ZoneCond::ImpOpen => ZoneCond::ImpOpen,
            _ => ZoneCond::Closed,
        }
    };
    Entry { cond, wp_offset: done }
}

fn initial_entries(geo: &Geometry) -> Vec<Entry> {
    if !geo.is_zoned() {
        return Vec::new();
    }
    ZoneSet::new(geo).zones().iter().map(Entry::of).collect()
}

fn live_region(entries: &[Entry], table_bytes: u64, state: LiveState, commit: u64, boot: &[u8; 36]) -> Vec<u8> {
    let mut buf = vec![0u8; table_bytes as usize];
    LiveHeader::put_identity(&mut buf, boot);
    LiveHeader::put_state(&mut buf, state, commit);
    for (z, e) in entries.iter().enumerate() {
        let at = format::entry_offset(ZoneNo(z as u32));
        buf[at..at + 8].copy_from_slice(&e.pack(ZoneNo(z as u32)).to_le_bytes());
    }
    LiveHeader::put_digest(&mut buf, commit, entries.len() as u32);
    format::put_live_witness(&mut buf, format::LiveWitness { completed: commit, announced: commit });
    buf
}

/// Decides how the image zeroes (see [`mod@zeroing`]): probes on the padding between
/// the metadata and the data (nothing reads it) when the image is writable and has
/// some, else on a temporary file beside it.
fn probe_zeroing(path: &Path, media: &dyn Media, layout: &Layout, opts: &ImageOptions) -> ProbeResult {
    match opts.zeroing {
        ZeroingSetup::NoWriteZeroes => {
            ProbeResult { method: FileZeroing::PwriteZeroes, detail: "no WRITE_ZEROES (opened without it)".into() }
        }
        ZeroingSetup::Use(m) => ProbeResult { method: m, detail: "chosen when opening (not probed)".into() },
        ZeroingSetup::Probe => {
            let meta_end = layout.live_offset + layout.table_bytes;
            if !opts.read_only && layout.data_offset >= meta_end + zeroing::PROBE_BYTES {
                zeroing::probe(ProbePlace::Image(media, meta_end))
            } else {
                let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
                zeroing::probe(ProbePlace::TempFileIn(dir))
            }
        }
    }
}

/// Opens the image `file` is open on with `O_DIRECT` if the file system allows it
/// (from the descriptor, not the path: see [`mod@claim`]), with the alignment it
/// needs (`statx` STATX_DIOALIGN; 4 KiB when the kernel does not say).
fn open_direct(file: &File, read_only: bool) -> (Option<File>, u64) {
    let Some(f) = claim::reopen(file, !read_only, rustix::fs::OFlags::DIRECT) else { return (None, 4096) };
    let align = rustix::fs::statx(&f, "", rustix::fs::AtFlags::EMPTY_PATH, rustix::fs::StatxFlags::DIOALIGN)
        .ok()
        .filter(|s| s.stx_mask & rustix::fs::StatxFlags::DIOALIGN.bits() != 0)
        .map(|s| u64::from(s.stx_dio_offset_align.max(s.stx_dio_mem_align)));
    match align {
        Some(0) => (None, 4096), // the kernel says: no direct I/O on this file
        Some(a) if a.is_power_of_two() => (Some(f), a.max(512)),
        _ => (Some(f), 4096),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn params() -> GeometryParams {
        GeometryParams {
            capacity_bytes: 8 << 20,
            zone_size_bytes: 1 << 20,
            zone_capacity_bytes: 768 << 10,
            nr_conv: 1,
            max_open: 2,
            max_append_sectors: 0,
            ..GeometryParams::default()
        }
    }

    fn req(op: Op, sector: u64, nr_sectors: u32) -> Request {
        Request::direct(op, Sector(sector), nr_sectors)
    }

    fn image(dir: &Path) -> PathBuf {
        image_with(dir, params())
    }

    fn image_with(dir: &Path, geometry: GeometryParams) -> PathBuf {
        let p = dir.join("img");
        FileImage::create(&p, &CreateOptions { geometry, rotational: false, force: false }).unwrap();
        p
    }

    /// A new image with `geometry` in `dir`, open.
    fn open_new(dir: &Path, geometry: GeometryParams) -> FileImage {
        FileImage::open(&image_with(dir, geometry), &ImageOptions::default()).unwrap()
    }

    #[test]
    fn create_open_write_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let p = image(dir.path());
        let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
        assert!(img.repairs().is_empty(), "{:?}", img.repairs());
        let data = vec![0x5a; 4096];
        assert_eq!(img.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&data)), Ok(Sector(2048)));
        assert_eq!(img.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&data)), Err(Status::Unaligned));
        img.close().unwrap();
        let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
        assert!(img.repairs().is_empty(), "{:?}", img.repairs());
        let z = img.zone_info(Sector(2048)).unwrap();
        assert_eq!((z.cond, z.wp), (ZoneCond::ImpOpen, Sector(2056)));
        let mut out = vec![0u8; 8192];
        img.execute(&req(Op::Read, 2048, 16), IoBuf::Read(&mut out)).unwrap();
        assert!(out[..4096].iter().all(|&b| b == 0x5a));
        assert!(out[4096..].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_closed_image_refuses_requests() {
        let dir = tempfile::tempdir().unwrap();
        let p = image(dir.path());
        let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
        img.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&[1; 4096])).unwrap();
        Device::close(&img).unwrap();
        // A write now would land after the live table was marked clean.
        assert_eq!(img.execute(&req(Op::Write, 2056, 8), IoBuf::Write(&[1; 4096])), Err(Status::IoErr));
        assert_eq!(img.zone_info(Sector(2048)).unwrap().wp, Sector(2056), "reports still answer");
        drop(img);
        let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
        assert!(img.repairs().is_empty(), "{:?}", img.repairs());
        assert_eq!(img.zone_info(Sector(2048)).unwrap().wp, Sector(2056));
    }

    #[test]
    fn second_open_is_refused_while_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let p = image(dir.path());
        let _img = FileImage::open(&p, &ImageOptions::default()).unwrap();
        let e = FileImage::open(&p, &ImageOptions::default()).unwrap_err();
        assert!(matches!(e.kind, ImageErrorKind::InUse), "{e}");
        let e = FileImage::open(&p, &ImageOptions { read_only: true, ..ImageOptions::default() }).unwrap_err();
        assert!(matches!(e.kind, ImageErrorKind::InUse), "{e}");
    }

    #[test]
    fn reset_hides_data_and_is_durable() {
        let dir = tempfile::tempdir().unwrap();
        let p = image(dir.path());
        let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
        let data = vec![1u8; 4096];
        img.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&data)).unwrap();
        img.execute(&req(Op::Flush, 0, 0), IoBuf::None).unwrap();
        let seq = img.durable_seq();
        img.execute(&req(Op::ZoneReset, 2048, 0), IoBuf::None).unwrap();
        assert_eq!(img.durable_seq(), seq + 1);
        let mut out = vec![9u8; 4096];
        img.read_direct(Sector(2048), &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0), "past the write pointer reads zeroes");
        // A finish exposes the zone to reads: what was there before is gone.
        img.execute(&req(Op::ZoneFinish, 2048, 0), IoBuf::None).unwrap();
        img.read_direct(Sector(2048), &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0), "finish punched the stale data");
    }

    fn transfer(img: &FileImage, r: &Request) -> Result<Transfer, Status> {
        match Device::prepare(img, r)? {
            Plan::Transfer(t) => Ok(t),
            Plan::Blocking => panic!("{r:?} planned as blocking"),
        }
    }

    /// Appends race: after a failed one takes the write pointer back, a later one
    /// accepted above it (doomed) is still moving data, and it punches its range when
    /// it completes. A new write into that range fails until then, instead of being
    /// acknowledged and zeroed behind its back.
    #[test]
    fn a_doomed_write_in_flight_fences_its_range() {
        let dir = tempfile::tempdir().unwrap();
        let img = open_new(dir.path(), GeometryParams { max_append_sectors: 64, ..params() });
        let append = req(Op::ZoneAppend, 2048, 8);
        let a = transfer(&img, &append).unwrap();
        let b = transfer(&img, &append).unwrap();
        assert_eq!((a.at, b.at), (Sector(2048), Sector(2056)));
        assert_eq!(Device::finish(&img, &append, a, Err(io::Error::from_raw_os_error(5))), Err(Status::IoErr));
        assert_eq!(img.zone_info(Sector(2048)).unwrap().wp, Sector(2048), "the failed append took the wp back");
        // Below the doomed append: accepted, and its data stays.
        let c_data = vec![0xc3; 4096];
        let c = transfer(&img, &append).unwrap();
        assert_eq!(c.at, Sector(2048));
        assert_eq!(Device::perform(&img, &append, Plan::Transfer(c), IoBuf::Write(&c_data)), Ok(Sector(2048)));
        // Into the doomed append's range, while it is in flight: refused, append or write.
        assert_eq!(transfer(&img, &append).map(|t| t.at), Err(Status::IoErr));
        assert_eq!(transfer(&img, &req(Op::Write, 2056, 8)).map(|t| t.at), Err(Status::IoErr));
        // A write elsewhere than the write pointer is still unaligned, not fenced.
        assert_eq!(transfer(&img, &req(Op::Write, 2060, 8)).map(|t| t.at), Err(Status::Unaligned));
        assert_eq!(img.zone_info(Sector(2048)).unwrap().wp, Sector(2056));
        // The doomed append moved its data, then completes: it fails and punches.
        let late = vec![0xbb; 4096];
        assert_eq!(Device::perform(&img, &append, Plan::Transfer(b), IoBuf::Write(&late)), Err(Status::IoErr));
        let d_data = vec![0xd4; 4096];
        let d = transfer(&img, &append).unwrap();
        assert_eq!(d.at, Sector(2056));
        assert_eq!(Device::perform(&img, &append, Plan::Transfer(d), IoBuf::Write(&d_data)), Ok(Sector(2056)));
        let mut out = vec![0u8; 8192];
        img.read_direct(Sector(2048), &mut out).unwrap();
        assert!(out[..4096] == c_data[..] && out[4096..] == d_data[..], "acknowledged appends read back");
    }

    /// Media that, once armed, says when a punch begins and holds it a while: the
    /// window in which a new write could slip under a rolled-back write pointer.
    #[derive(Debug)]
    struct SlowPunch {
        inner: FileMedia,
        armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
        started: Mutex<Option<std::sync::mpsc::Sender<()>>>,
    }

    impl Media for SlowPunch {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.inner.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.inner.write_at(buf, offset)
        }
        fn sync_data(&self) -> io::Result<()> {
            self.inner.sync_data()
        }
        fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
            if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
                if let Some(tx) = self.started.lock().unwrap().take() {
                    tx.send(()).unwrap();
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            self.inner.punch_hole(offset, len)
        }
        fn zero_range(&self, how: FileZeroing, offset: u64, len: u64) -> io::Result<()> {
            self.inner.zero_range(how, offset, len)
        }
    }

    /// A failed append's range is punched before its roll back can be seen: an
    /// append accepted meanwhile at the rolled-back write pointer would be zeroed
    /// after its acknowledgement.
    #[test]
    fn an_append_after_a_roll_back_is_not_punched_by_it() {
        let dir = tempfile::tempdir().unwrap();
        let p = image_with(dir.path(), GeometryParams { max_append_sectors: 64, ..params() });
        let (tx, rx) = std::sync::mpsc::channel();
        let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let img = FileImage::open_with(&p, &ImageOptions::default(), |m| {
            Box::new(SlowPunch { inner: m, armed: armed.clone(), started: Mutex::new(Some(tx)) })
        })
        .unwrap();
        armed.store(true, std::sync::atomic::Ordering::SeqCst);
        let append = req(Op::ZoneAppend, 2048, 8);
        let a = transfer(&img, &append).unwrap();
        std::thread::scope(|sc| {
            let failing = sc.spawn(|| Device::finish(&img, &append, a, Err(io::Error::from_raw_os_error(5))));
            rx.recv().unwrap();
            // The failed append is being punched: this one waits for the roll back.
            let b = transfer(&img, &append).unwrap();
            assert_eq!(b.at, Sector(2048));
            let data = vec![0xb7; 4096];
            assert_eq!(Device::perform(&img, &append, Plan::Transfer(b), IoBuf::Write(&data)), Ok(Sector(2048)));
            assert_eq!(failing.join().unwrap(), Err(Status::IoErr));
            let mut out = vec![0u8; 4096];
            img.read_direct(Sector(2048), &mut out).unwrap();
            assert!(out == data, "the acknowledged append reads back");
        });
    }

    /// Data never goes both through the page cache and directly: a direct
    /// descriptor, if any, is the only one a driver gets.
    #[test]
    fn data_moves_through_one_descriptor_kind() {
        let dir = tempfile::tempdir().unwrap();
        let p = image(dir.path());
        let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
        let fds = img.data_fds();
        match fds.direct {
            Some((_, align)) => {
                assert!(fds.buffered.is_none(), "a page cache descriptor beside the direct one");
                assert!(align <= u64::from(img.geo().lbs_bytes()), "direct alignment {align} above a block");
            }
            None => assert!(fds.buffered.is_some(), "no descriptor at all"),
        }
        // An unaligned buffer, written and read through `perform`: bounced, intact.
        let data: Vec<u8> = (0..4097u32).map(|i| i as u8).collect();
        let w = req(Op::Write, 2048, 8);
        let t = transfer(&img, &w).unwrap();
        assert_eq!(Device::perform(&img, &w, Plan::Transfer(t), IoBuf::Write(&data[1..])), Ok(Sector(2048)));
        let mut back = vec![0u8; 4097];
        let r = req(Op::Read, 2048, 8);
        let t = transfer(&img, &r).unwrap();
        assert_eq!(Device::perform(&img, &r, Plan::Transfer(t), IoBuf::Read(&mut back[1..])), Ok(Sector(2048)));
        assert!(back[1..] == data[1..]);
    }

    /// Appends race: A below, B acknowledged above it, C in flight above B. A fails:
    /// the write pointer goes back to B's end, where C starts, so C fails too; it was
    /// left to complete once, and an append after it landed on its acknowledged range.
    #[test]
    fn a_write_starting_where_a_roll_back_ends_is_doomed() {
        let dir = tempfile::tempdir().unwrap();
        let img = open_new(dir.path(), GeometryParams { max_append_sectors: 64, ..params() });
        let append = req(Op::ZoneAppend, 2048, 8);
        let [a, b, c] = [(); 3].map(|()| transfer(&img, &append).unwrap());
        assert_eq!([a.at, b.at, c.at], [Sector(2048), Sector(2056), Sector(2064)]);
        let b_data = vec![0xb2; 4096];
        assert_eq!(Device::perform(&img, &append, Plan::Transfer(b), IoBuf::Write(&b_data)), Ok(Sector(2056)));
        assert_eq!(Device::finish(&img, &append, a, Err(io::Error::from_raw_os_error(5))), Err(Status::IoErr));
        assert_eq!(img.zone_info(Sector(2048)).unwrap().wp, Sector(2064), "back to B's end, not under it");
        assert_eq!(Device::perform(&img, &append, Plan::Transfer(c), IoBuf::Write(&[0xcc; 4096])), Err(Status::IoErr));
        let d_data = vec![0xd4; 4096];
        let d = transfer(&img, &append).unwrap();
        assert_eq!(Device::perform(&img, &append, Plan::Transfer(d), IoBuf::Write(&d_data)), Ok(Sector(2064)));
        let mut out = vec![0xffu8; 3 * 4096];
        img.read_direct(Sector(2048), &mut out).unwrap();
        assert!(out[..4096].iter().all(|&x| x == 0), "the failed append reads as zeroes");
        assert!(out[4096..8192] == b_data[..] && out[8192..] == d_data[..], "acknowledged appends read back");
    }

    /// A write that filled its zone fails after another zone took the freed active
    /// slot: the zone cannot go back to CLOSED without exceeding the active limit, so
    /// it stays FULL (finished by the device), its unwritten rest zeroes; the limits
    /// hold for the next writes.
    #[test]
    fn a_failed_write_that_filled_its_zone_never_exceeds_the_active_limit() {
        let dir = tempfile::tempdir().unwrap();
        let img = open_new(dir.path(), GeometryParams { max_active: 2, ..params() });
        let one = vec![0x11u8; 4096];
        assert_eq!(img.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&one)), Ok(Sector(2048)));
        // The rest of zone 1 in one write: accepted, the zone is FULL, no longer active.
        let fill = req(Op::Write, 2056, 1528);
        let t = transfer(&img, &fill).unwrap();
        assert_eq!(img.zone_info(Sector(2048)).unwrap().cond, ZoneCond::Full);
        for z in [2u64, 3] {
            assert_eq!(img.execute(&req(Op::Write, z * 2048, 8), IoBuf::Write(&one)), Ok(Sector(z * 2048)));
        }
        assert_eq!(img.open_active(), (2, 2));
        assert_eq!(Device::finish(&img, &fill, t, Err(io::Error::from_raw_os_error(5))), Err(Status::IoErr));
        let z1 = img.zone_info(Sector(2048)).unwrap();
        assert_eq!(z1.cond, ZoneCond::Full, "kept FULL: CLOSED would make 3 zones active");
        assert_eq!(img.open_active(), (2, 2));
        assert_eq!(img.execute(&req(Op::Write, 4 * 2048, 8), IoBuf::Write(&one)), Err(Status::ZoneActiveResource));
        let mut out = vec![0xffu8; 8192];
        img.read_direct(Sector(2048), &mut out).unwrap();
        assert!(out[..4096] == one[..] && out[4096..].iter().all(|&b| b == 0), "acknowledged data, then zeroes");
    }
}
