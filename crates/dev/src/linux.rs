//! Linux zoned block devices (`/dev/nullb0`, an NVMe ZNS namespace, an SMR disk) as a
//! [`Device`] the runtime drives: [`LinuxZoned`].
//!
//! - **Geometry** from sysfs ([`sysfs`]: size, `chunk_sectors`, `nr_zones`, the open
//!   and active limits, block size, `max_sectors_kb`, `rotational`, the write zeroes
//!   limits) and the zone report (zone capacity, conventional zones; [`layout`]).
//! - **Data** with `O_DIRECT` at byte `sector * 512` of the device: the driver moves
//!   it itself (io_uring) or [`Device::perform`] does with `pread`/`pwrite`, through
//!   an aligned bounce buffer when the caller's is not aligned (never the page cache,
//!   whose writeback could reorder writes to a sequential zone). FUA writes are
//!   `pwritev2(RWF_DSYNC)`, which the kernel sends as REQ_FUA; FLUSH is `fdatasync`.
//! - **Zone append** is emulated by the engine: the kernel offers userspace no zone
//!   append on a raw block device, so the geometry says `max_append_sectors` 0.
//! - **Zone management** through the kernel's zone ioctls ([`ioctl`]), WRITE_ZEROES
//!   through `fallocate` on the device, DISCARD through `BLKDISCARD`.
//!
//! The kernel checks every write against its own write pointer (and plugs it: zblk's
//! plugs sit above the kernel's, one write per zone in flight reaching it), and the
//! device checks again.

pub mod ioctl;
pub mod layout;
pub mod sysfs;

use crate::buf::AlignedBuf;
use crate::device::{DataFds, Device, DeviceZeroing, Plan, Transfer};
use crate::error::{DeviceError, DeviceErrorKind};
use crate::{IoBuf, check_discard, check_range, check_write_zeroes};
pub use ioctl::{BLK_ZONE_BYTES, BlkZone, REPORT_BATCH, RawZone, ZoneCtl, is_block_device};
use rustix::fs::{FallocateFlags, fallocate, fdatasync};
use rustix::io::ReadWriteFlags;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use sysfs::{QueueLimits, SysfsError};
use zblk_core::bio::{BioFlags, Op, Request, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SHIFT, Sector};
use zblk_core::zone::ZoneInfo;

/// How to open a Linux zoned block device.
#[derive(Clone, Copy, Debug)]
pub struct LinuxOptions {
    /// Open for reading only: writes, zone management and zeroing fail.
    pub read_only: bool,
    /// Open with `O_EXCL` (when writing), so that a mounted device or one another
    /// program holds is refused, as blkzone does without `-f`.
    pub exclusive: bool,
}

impl Default for LinuxOptions {
    fn default() -> Self {
        LinuxOptions { read_only: false, exclusive: true }
    }
}

/// A Linux zoned block device, open for I/O. See the module documentation.
#[derive(Debug)]
pub struct LinuxZoned {
    /// The zone ioctls, on the `O_DIRECT` descriptor the data goes through too.
    ctl: ZoneCtl,
    geo: Geometry,
    limits: QueueLimits,
    /// What `O_DIRECT` needs of a buffer's address.
    align: u64,
    read_only: bool,
    closed: AtomicBool,
}

impl LinuxZoned {
    /// Opens the zoned block device at `path`: refuses anything else (a regular file,
    /// a block device that is not zoned) saying what it is, reads sysfs and the zone
    /// report, and checks that zblk's geometry describes the device.
    pub fn open(path: &Path, opts: &LinuxOptions) -> Result<LinuxZoned, DeviceError> {
        let meta = std::fs::metadata(path).map_err(|e| DeviceError::io(path, "stat", e))?;
        ioctl::check_block_device(path, &meta)?;
        let mut flags = rustix::fs::OFlags::DIRECT;
        if opts.exclusive && !opts.read_only {
            flags |= rustix::fs::OFlags::EXCL;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(!opts.read_only)
            .custom_flags(flags.bits() as i32)
            .open(path)
            .map_err(|e| DeviceError::io(path, "open", e))?;
        let ctl = ZoneCtl::with_file(file, path)?;
        let rdev = rustix::fs::fstat(ctl.file()).map_err(|e| DeviceError::io(path, "fstat", e.into()))?.st_rdev;
        let dir = sysfs::device_dir(rustix::fs::major(rdev), rustix::fs::minor(rdev));
        let limits = sysfs::read(&dir).map_err(|e| {
            let kind = match e {
                SysfsError::NotZoned { .. } => DeviceErrorKind::Unsupported(e.to_string()),
                e => DeviceErrorKind::Invalid(format!("sysfs: {e}")),
            };
            DeviceError::new(path, kind)
        })?;
        if limits.nr_sectors != ctl.nr_sectors() {
            return Err(DeviceError::new(
                path,
                DeviceErrorKind::Invalid(format!(
                    "sysfs says {} sectors, BLKGETSIZE64 {}",
                    limits.nr_sectors,
                    ctl.nr_sectors()
                )),
            ));
        }
        let zones = ctl.report_all()?;
        let (geo, _) =
            layout::geometry(&limits, &zones).map_err(|e| DeviceError::new(path, DeviceErrorKind::Invalid(e)))?;
        Ok(LinuxZoned {
            ctl,
            geo,
            align: limits.direct_alignment(),
            limits,
            read_only: opts.read_only,
            closed: AtomicBool::new(false),
        })
    }

    /// The device's path, as given.
    pub fn path(&self) -> &Path {
        self.ctl.path()
    }

    /// What sysfs said about the device.
    pub fn limits(&self) -> &QueueLimits {
        &self.limits
    }

    /// The device's zone ioctls.
    pub fn zone_ctl(&self) -> &ZoneCtl {
        &self.ctl
    }

    fn is_aligned(&self, p: *const u8) -> bool {
        (p as u64) % self.align == 0
    }

    /// Reads `out.len()` bytes at byte `offset`, through an aligned buffer when
    /// `out` is not aligned for `O_DIRECT`.
    fn read_at(&self, out: &mut [u8], offset: u64) -> io::Result<()> {
        if self.is_aligned(out.as_ptr()) {
            return self.ctl.file().read_exact_at(out, offset);
        }
        let mut bounce = AlignedBuf::zeroed(out.len());
        self.ctl.file().read_exact_at(&mut bounce, offset)?;
        out.copy_from_slice(&bounce);
        Ok(())
    }

    /// Writes `data` at byte `offset` (with `fua`, as REQ_FUA), through an aligned
    /// buffer when `data` is not aligned for `O_DIRECT`.
    fn write_at(&self, data: &[u8], offset: u64, fua: bool) -> io::Result<()> {
        let bounce;
        let data = if self.is_aligned(data.as_ptr()) {
            data
        } else {
            bounce = AlignedBuf::from_slice(data);
            &bounce
        };
        let flags = if fua { ReadWriteFlags::DSYNC } else { ReadWriteFlags::empty() };
        let mut done = 0;
        while done < data.len() {
            let part = [io::IoSlice::new(&data[done..])];
            let n = rustix::io::pwritev2(self.ctl.file(), &part, offset + done as u64, flags)?;
            if n == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "short write"));
            }
            done += n;
        }
        Ok(())
    }

    fn transfer(&self, req: &Request, t: Transfer, buf: IoBuf<'_>, fua: bool) -> io::Result<()> {
        let len = (u64::from(req.nr_sectors) << SECTOR_SHIFT) as usize;
        match (t.write, buf) {
            (false, IoBuf::Read(out)) => {
                assert_eq!(out.len(), len, "read buffer size");
                self.read_at(out, t.offset)
            }
            (true, IoBuf::Write(data)) => {
                assert_eq!(data.len(), len, "write buffer size");
                self.write_at(data, t.offset, fua)
            }
            // A write without data: zeroes.
            (true, _) => self.write_at(&AlignedBuf::zeroed(len), t.offset, fua),
            // A read nobody wants the data of.
            (false, _) => Ok(()),
        }
    }

    /// Runs `op` after the sync a PREFLUSH asks for, and before the one a FUA asks
    /// for when `op` cannot carry REQ_FUA itself (`fua_by_sync`).
    fn with_syncs(&self, req: &Request, fua_by_sync: bool, op: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        if req.flags.contains(BioFlags::PREFLUSH) {
            fdatasync(self.ctl.file())?;
        }
        op()?;
        if fua_by_sync && req.flags.contains(BioFlags::FUA) {
            fdatasync(self.ctl.file())?;
        }
        Ok(())
    }

    fn perform_blocking(&self, req: &Request, buf: IoBuf<'_>) -> Result<Sector, Status> {
        let bytes = u64::from(req.nr_sectors) << SECTOR_SHIFT;
        let offset = req.sector.0 << SECTOR_SHIFT;
        let r = match req.op {
            Op::Write => {
                let t = Transfer { write: true, at: req.sector, offset, valid_sectors: req.nr_sectors };
                self.with_syncs(req, false, || self.transfer(req, t, buf, req.flags.contains(BioFlags::FUA)))
            }
            Op::Flush => fdatasync(self.ctl.file()).map_err(io::Error::from),
            Op::WriteZeroes => {
                check_write_zeroes(&self.geo, req)?;
                // The kernel turns these into WRITE_ZEROES: PUNCH_HOLE without
                // NOUNMAP and never falling back to written zeroes, ZERO_RANGE with
                // NOUNMAP.
                let mode = if req.flags.contains(BioFlags::NOUNMAP) {
                    FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE
                } else {
                    FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE
                };
                self.with_syncs(req, true, || Ok(fallocate(self.ctl.file(), mode, offset, bytes)?))
            }
            Op::Discard => {
                check_discard(&self.geo, req)?;
                self.ctl.discard(req.sector, u64::from(req.nr_sectors))
            }
            op if op.is_zone_mgmt() => {
                let (op, sector, nr_sectors) = self.zone_range(req)?;
                self.ctl.zone_mgmt_raw(op, sector, nr_sectors)
            }
            op => unreachable!("{op} is not a blocking operation"),
        };
        r.map(|()| req.sector).map_err(|e| status_of(&e))
    }

    /// The zone ioctl for a zone management request: RESET_ALL is a reset of the
    /// whole device (which the kernel turns into RESET_ALL); the others act on the
    /// sequential zone starting at `req.sector`.
    fn zone_range(&self, req: &Request) -> Result<(Op, Sector, u64), Status> {
        if req.op == Op::ZoneResetAll {
            return Ok((Op::ZoneReset, Sector::ZERO, self.geo.nr_sectors()));
        }
        let s = req.sector;
        if s.0 >= self.geo.nr_sectors() || !self.geo.is_zone_start(s) || self.geo.zone_is_conv(self.geo.zone_no(s)) {
            return Err(Status::Invalid);
        }
        Ok((req.op, s, self.geo.zone_len(self.geo.zone_no(s))))
    }
}

/// The status of a failed system call, as the block layer's errno maps back
/// ([`Status::from_errno`]).
fn status_of(e: &io::Error) -> Status {
    e.raw_os_error().map_or(Status::IoErr, Status::from_errno)
}

impl Device for LinuxZoned {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn rotational(&self) -> bool {
        self.limits.rotational
    }

    fn name(&self) -> String {
        self.path().display().to_string()
    }

    fn data_fds(&self) -> DataFds<'_> {
        DataFds { direct: Some((self.ctl.file().as_fd(), self.align)), buffered: None, holes_punched: None }
    }

    fn prepare(&self, req: &Request) -> Result<Plan, Status> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Status::IoErr);
        }
        if self.read_only && req.op != Op::Read {
            return Err(Status::NotSupported);
        }
        if req.op.has_data() || req.op == Op::WriteZeroes {
            check_range(&self.geo, req)?;
        }
        let synced = req.flags.contains(BioFlags::FUA) || req.flags.contains(BioFlags::PREFLUSH);
        let offset = req.sector.0 << SECTOR_SHIFT;
        let t = Transfer { write: req.op != Op::Read, at: req.sector, offset, valid_sectors: req.nr_sectors };
        match req.op {
            Op::Read => Ok(Plan::Transfer(t)),
            Op::Write if !synced => Ok(Plan::Transfer(t)),
            // The geometry offers none: the engine emulates zone append with writes.
            Op::ZoneAppend => Err(Status::NotSupported),
            _ => Ok(Plan::Blocking),
        }
    }

    fn perform(&self, req: &Request, plan: Plan, buf: IoBuf<'_>) -> Result<Sector, Status> {
        match plan {
            Plan::Transfer(t) => {
                let r = self.transfer(req, t, buf, false);
                self.finish(req, t, r)
            }
            Plan::Blocking => self.perform_blocking(req, buf),
        }
    }

    fn finish(&self, _req: &Request, t: Transfer, io: io::Result<()>) -> Result<Sector, Status> {
        io.map(|()| t.at).map_err(|e| status_of(&e))
    }

    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status> {
        if from.0 >= self.geo.nr_sectors() {
            return Err(Status::Invalid);
        }
        let zones = self.ctl.report_raw(from, max).map_err(|e| status_of(&e))?;
        for z in &zones {
            // A report that no longer fits the geometry read at open: the device
            // changed under us, which the engine cannot follow.
            out.push(layout::zone_info(&self.geo, z).map_err(|_| Status::IoErr)?);
        }
        Ok(zones.len())
    }

    fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        (self.geo.max_write_zeroes_sectors() > 0).then_some(DeviceZeroing::BlockDevice { unmap: !nounmap })
    }

    fn close(&self) -> Result<(), DeviceError> {
        if self.closed.swap(true, Ordering::AcqRel) || self.read_only {
            return Ok(());
        }
        fdatasync(self.ctl.file()).map_err(|e| DeviceError::io(self.path(), "fdatasync", e.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_and_directories_are_refused() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let e = LinuxZoned::open(f.path(), &LinuxOptions::default()).unwrap_err();
        assert!(matches!(e.kind, DeviceErrorKind::Unsupported(_)), "{e}");
        assert!(e.to_string().contains("a regular file, not a block device"), "{e}");
        let d = tempfile::tempdir().unwrap();
        let e = LinuxZoned::open(d.path(), &LinuxOptions::default()).unwrap_err();
        assert!(e.to_string().contains("a directory, not a block device"), "{e}");
        let e = LinuxZoned::open(Path::new("/dev/zblk-no-such-device"), &LinuxOptions::default()).unwrap_err();
        assert_eq!(e.to_string(), "/dev/zblk-no-such-device: no such file or device");
    }

    #[test]
    fn errnos_map_back_to_statuses() {
        use rustix::io::Errno;
        let s = |e: Errno| status_of(&io::Error::from(e));
        assert_eq!(s(Errno::INVAL), Status::Invalid);
        assert_eq!(s(Errno::TOOMANYREFS), Status::ZoneOpenResource);
        assert_eq!(s(Errno::OVERFLOW), Status::ZoneActiveResource);
        assert_eq!(s(Errno::OPNOTSUPP), Status::NotSupported);
        assert_eq!(s(Errno::IO), Status::IoErr);
        for st in [Status::Invalid, Status::ZoneOpenResource, Status::ZoneActiveResource, Status::NotSupported] {
            assert_eq!(status_of(&io::Error::from_raw_os_error(st.errno())), st, "{st}");
        }
    }
}
