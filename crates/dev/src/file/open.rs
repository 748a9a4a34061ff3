//! Opening an image: claiming its file, reading its superblocks, deciding its zone
//! state from every copy ([`mod@super::recovery`]), probing how it zeroes, mapping the
//! live table, then writing what recovery repaired (unless read-only).

use super::commit::Durable;
use super::error::{ImageError, ImageErrorKind, err, io_err};
use super::format::{self, Layout, LiveState, Superblock};
use super::live::LiveTable;
use super::media::{FileMedia, Media};
use super::recovery::{Recovery, recover};
use super::superblocks::{Superblocks, read_superblocks, settle_identity};
use super::write_pointer::DevState;
use super::zeroing::{self, FileZeroing, ProbePlace, ProbeResult, ZeroingSetup};
use super::{FileImage, claim};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Mutex;
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SHIFT, ZoneNo};
use zblk_core::zone::ZoneCond;

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

impl FileImage {
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
        let mut sbs = read_superblocks(path, &file, len)?;
        let layout = sbs.sb.layout;
        if len < layout.file_bytes {
            return Err(err(path, ImageErrorKind::Truncated { len, need: layout.file_bytes }));
        }
        let data = DataPath::open(path, &file, &sbs.geo, opts)?;
        let media = wrap(data.media);
        let boot = opts.boot_id.unwrap_or_else(current_boot_id);
        let rec = decide_zone_state(path, &*media, &mut sbs, &boot, opts)?;
        // Zeroing is probed once the image is known good, so that nothing is written
        // to a file that is then refused.
        let probe = probe_zeroing(path, &*media, &layout, opts);
        let (sb, geo) = with_zeroing_limits(path, sbs.sb.clone(), &probe, opts)?;
        let live = if opts.read_only { None } else { Some(LiveTable::open(path, &file, &layout, sbs.sb.id)?) };
        let image = FileImage {
            path: path.to_path_buf(),
            state: Mutex::new(DevState::new(&geo, rec.entries.clone(), live, rec.durable_seq)),
            geo,
            sb,
            media,
            direct: data.direct,
            buffered_fd: data.buffered_fd,
            durable: Mutex::new(Durable::new(rec.durable_seq, rec.durable_slot, rec.durable_entries)),
            read_only: opts.read_only,
            closed: std::sync::atomic::AtomicBool::new(false),
            rewrite_tables: rec.bad_table,
            zeroing: zeroing::Current::new(probe.method),
            zeroing_probe: probe,
            repairs: rec.repairs,
            last_errno: std::sync::atomic::AtomicI32::new(0),
            holes_punched: std::sync::atomic::AtomicU64::new(0),
            file,
        };
        if !opts.read_only {
            image.write_repairs(sbs.repair.is_some(), sbs.commit, rec.unclean, &boot)?;
        }
        Ok(image)
    }

    /// Writes what the open repaired: the damaged superblock copy (both copies are
    /// the same superblock), then what recovery decided.
    fn write_repairs(&self, sb_repair: bool, sb_commit: u64, unclean: bool, boot: &[u8; 36]) -> Result<(), ImageError> {
        if sb_repair {
            let enc = self.sb.encode(sb_commit);
            for at in format::SUPERBLOCK_OFFSETS {
                self.media.write_at(&enc, at).map_err(io_err(&self.path, "rewrite superblock"))?;
            }
        }
        self.apply_recovery(unclean, boot).map_err(io_err(&self.path, "repair"))
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
            let mut d = self.lock_durable();
            for _ in 0..2 {
                let entries = d.entries.clone();
                self.write_table(&mut d, entries)?;
            }
        }
        if unclean && !zblk_core::mutation::on(zblk_core::mutation::Mutation::StaleTailKept) {
            let done = self.lock_state().done.clone();
            for (z, e) in done.iter().enumerate() {
                let z = ZoneNo(z as u32);
                if self.geo.zone_is_conv(z) || matches!(e.cond, ZoneCond::ReadOnly | ZoneCond::Offline) {
                    continue;
                }
                let start = self.geo.zone_start(z) + e.wp_offset;
                let len = self.geo.zone_len(z) - e.wp_offset.min(self.geo.zone_len(z));
                self.punch_hole(self.file_offset(start), len << SECTOR_SHIFT)?;
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
            live.store(z, *e)?;
        }
        live.put_boot(boot);
        st.set_live(LiveState::Live, commit)
    }
}

/// The image's data descriptors: the media's, and copies of their raw numbers for
/// drivers that move the data themselves (io_uring).
struct DataPath {
    media: FileMedia,
    /// The `O_DIRECT` descriptor and its alignment (see [`Device::data_fds`](crate::Device::data_fds)).
    direct: Option<(i32, u64)>,
    buffered_fd: i32,
}

impl DataPath {
    /// Opens the data descriptors of the image `file` is open on: a buffered one, and
    /// an `O_DIRECT` one where every data transfer of `geo` can use it.
    fn open(path: &Path, file: &File, geo: &Geometry, opts: &ImageOptions) -> Result<DataPath, ImageError> {
        let buffered = file.try_clone().map_err(io_err(path, "dup"))?;
        let (direct, dio_align) = if opts.direct { open_direct(file, opts.read_only) } else { (None, 4096) };
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
        let direct_raw = direct.as_ref().map(|f: &File| (f.as_raw_fd(), dio_align));
        let buffered_fd = buffered.as_raw_fd();
        Ok(DataPath { media: FileMedia::new(buffered, direct, dio_align), direct: direct_raw, buffered_fd })
    }
}

/// Reads the zone tables and decides the zone state from every copy (see
/// [`recover`]), the superblocks' repair said first. A state that may be older than
/// the last commit is refused for writing unless the caller accepts the loss; taken,
/// it is said as a warning.
fn decide_zone_state(
    path: &Path,
    media: &dyn Media,
    sbs: &mut Superblocks,
    boot: &[u8; 36],
    opts: &ImageOptions,
) -> Result<Recovery, ImageError> {
    let found = settle_identity(path, media, sbs)?;
    let mut rec = recover(&sbs.geo, found, boot).map_err(|why| err(path, ImageErrorKind::Corrupt(why)))?;
    if let Some(r) = &sbs.repair {
        rec.repairs.insert(0, r.clone());
    }
    if let Some(risk) = &rec.at_risk {
        if !opts.read_only && !opts.accept_rollback {
            return Err(err(path, ImageErrorKind::MayLoseData(risk.clone())));
        }
        let what = if opts.read_only { "read-only; nothing changed" } else { "accepted: the image goes on from it" };
        rec.repairs.insert(0, format!("WARNING: {risk} ({what})"));
    }
    Ok(rec)
}

/// The superblock and geometry as the device presents them: the WRITE_ZEROES limits
/// set from how the image zeroes (`write_zeroes_unmap_max_hw_bytes` only where a
/// fallocate method does it).
fn with_zeroing_limits(
    path: &Path,
    mut sb: Superblock,
    probe: &ProbeResult,
    opts: &ImageOptions,
) -> Result<(Superblock, Geometry), ImageError> {
    sb.params.write_zeroes_max_bytes =
        if opts.zeroing == ZeroingSetup::NoWriteZeroes { 0 } else { zeroing::IMAGE_WRITE_ZEROES_MAX_BYTES };
    sb.params.write_zeroes_unmap_max_hw_bytes =
        if probe.method.is_fallocate() { sb.params.write_zeroes_max_bytes } else { 0 };
    let geo = Geometry::new(&sb.params).map_err(|e| err(path, ImageErrorKind::Geometry(e)))?;
    Ok((sb, geo))
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
