//! NVMe ZNS namespaces through the kernel's NVMe passthrough: the generic character
//! device (`/dev/ngXnY`) as a [`Device`], [`NvmeZns`], with the drive's native zone
//! append.
//!
//! The kernel gives userspace no zone append on a block device (zblk emulates it
//! there, [`crate::linux`]); on the generic device it takes NVMe commands as they
//! are, Zone Append included, whose completion carries the LBA the data went to.
//!
//! - **Identify** ([`identify`]): size and LBA format, zone size, open and active
//!   limits, the zone append and transfer limits; the zone capacity from the zone
//!   report. A namespace of another command set, a format with metadata, a device
//!   that is not an NVMe namespace are refused, saying so.
//! - **Data**: Read, Write and Zone Append. A driver with an io_uring set up with
//!   128-byte entries and 32-byte completions carries them as `IORING_OP_URING_CMD`
//!   ([`UringCmd`]: the command built here, its status and result dwords read back
//!   here); [`Device::perform`] carries them with the passthrough ioctl.
//! - **Zone management** with Zone Management Send (open, close, finish, reset, reset
//!   all with Select All), **reports** with Zone Management Receive, both by ioctl.
//! - **Errors**: an NVMe status becomes the status the kernel's block layer would
//!   give ([`cmd::status_of`]: the errnos of `nvme_error_status()`), and the device
//!   keeps the last one for [`Device::last_error`], by name.

pub mod cmd;
pub mod identify;

use crate::device::{Device, DeviceZeroing, Plan, Transfer, UringCmd};
use crate::error::{DeviceError, DeviceErrorKind};
use crate::linux::{RawZone, layout};
use crate::{IoBuf, buf::AlignedBuf, check_range};
use cmd::{Cmd, ZoneAction, op};
use identify::{CSI_ZNS, Identity};
use rustix::io::Errno;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use zblk_core::bio::{BioFlags, Op, Request, Status};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::{SECTOR_SHIFT, Sector};
use zblk_core::zone::{ZoneCond, ZoneInfo};

/// A page of memory, the unit the kernel maps a passthrough buffer by.
const PAGE_BYTES: u64 = 4096;

/// Zone descriptors per Zone Management Receive: 64 KiB of report.
const REPORT_ZONES: usize = 1023;

/// Whether `path` is a character device (an NVMe generic device is one).
pub fn is_char_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

/// An NVMe ZNS namespace through its generic character device. See the module
/// documentation.
#[derive(Debug)]
pub struct NvmeZns {
    file: File,
    path: PathBuf,
    nsid: u32,
    id: Identity,
    geo: Geometry,
    read_only: bool,
    closed: AtomicBool,
    /// The NVMe status of the last failed command (0: none yet).
    last_status: AtomicU32,
}

/// Refuses a character device whose sysfs class is not `nvme-generic` before it is
/// opened: opening some devices acts (a watchdog starts counting down). Without
/// sysfs, the NVMe ioctl after the open decides.
fn check_class(path: &Path, meta: &std::fs::Metadata) -> Result<(), DeviceError> {
    use std::os::unix::fs::MetadataExt;
    let (major, minor) = (rustix::fs::major(meta.rdev()), rustix::fs::minor(meta.rdev()));
    let Ok(link) = std::fs::read_link(format!("/sys/dev/char/{major}:{minor}/subsystem")) else { return Ok(()) };
    match link.file_name().and_then(|n| n.to_str()) {
        Some("nvme-generic") => Ok(()),
        class => Err(unsupported(
            path,
            format!(
                "a character device, not an NVMe namespace's generic device (its class is {}; the generic \
                 device of namespace Y of controller X is /dev/ngXnY)",
                class.unwrap_or("unknown")
            ),
        )),
    }
}

/// A device error saying what `path` is instead of an NVMe ZNS namespace.
fn unsupported(path: &Path, what: impl Into<String>) -> DeviceError {
    DeviceError::new(path, DeviceErrorKind::Unsupported(what.into()))
}

impl NvmeZns {
    /// Opens the NVMe generic device at `path` (`/dev/ng0n1`), for reading only with
    /// `read_only`: refuses anything that is not the generic device of a zoned
    /// namespace zblk can drive, saying what it is; reads the Identify data and the
    /// zone report, and checks they agree.
    pub fn open(path: &Path, read_only: bool) -> Result<NvmeZns, DeviceError> {
        let meta = std::fs::metadata(path).map_err(|e| DeviceError::io(path, "stat", e))?;
        if !meta.file_type().is_char_device() {
            let what = if meta.file_type().is_block_device() {
                "a block device: an NVMe namespace's passthrough device is its generic character device (/dev/ngXnY)"
            } else {
                "not a character device: an NVMe namespace's passthrough device is /dev/ngXnY"
            };
            return Err(unsupported(path, what));
        }
        check_class(path, &meta)?;
        let file =
            OpenOptions::new().read(true).write(!read_only).open(path).map_err(|e| DeviceError::io(path, "open", e))?;
        let nsid = cmd::namespace_id(&file).map_err(|e| {
            let e = io::Error::from(e);
            unsupported(
                path,
                format!("a character device, not an NVMe namespace's generic device (NVME_IOCTL_ID: {e})"),
            )
        })?;
        let id = identify(&file, path, nsid)?;
        let mut dev = NvmeZns {
            file,
            path: path.to_path_buf(),
            nsid,
            id,
            geo: Geometry::new(&GeometryParams::default()).expect("the default geometry"),
            read_only,
            closed: AtomicBool::new(false),
            last_status: AtomicU32::new(0),
        };
        dev.geo = dev.read_geometry()?;
        Ok(dev)
    }

    /// The device's path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The namespace ID.
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// What the Identify data say.
    pub fn identity(&self) -> &Identity {
        &self.id
    }

    /// The geometry from the Identify data and the first zone's capacity, checked
    /// against the whole zone report.
    fn read_geometry(&self) -> Result<Geometry, DeviceError> {
        let invalid = |m: String| DeviceError::new(&self.path, DeviceErrorKind::Invalid(m));
        let shift = self.id.lba_shift();
        let zone_sectors = self.id.zone_blocks << shift;
        let first = self.report(Sector::ZERO, 1).map_err(|e| invalid(format!("zone report: {e}")))?;
        let cap = first.first().map(|z| z.capacity).ok_or_else(|| invalid("the zone report is empty".into()))?;
        let max_bytes = self.id.max_transfer_bytes.unwrap_or(1 << 20).min(1 << 20).min(self.kernel_max_bytes());
        // Whole logical blocks (the segment bound is in pages, a block may be larger).
        let lba = u64::from(self.id.lba_bytes);
        let max_bytes = (max_bytes / lba).max(1) * lba;
        let max_sectors = max_bytes >> SECTOR_SHIFT;
        let append = self.id.append_bytes.min(max_sectors << SECTOR_SHIFT) >> SECTOR_SHIFT;
        let nr_zones = self.id.nsze / self.id.zone_blocks;
        // Absurd Identify data (a zone size or namespace size past what sectors count)
        // are refused here, not overflowed.
        let capacity_bytes = nr_zones
            .checked_mul(zone_sectors)
            .and_then(|s| s.checked_mul(512))
            .filter(|_| self.id.zone_blocks.leading_zeros() > shift + SECTOR_SHIFT)
            .ok_or_else(|| invalid(format!("{nr_zones} zones of {} blocks: too large", self.id.zone_blocks)))?;
        let params = GeometryParams {
            lbs_bytes: self.id.lba_bytes,
            // The kernel's zoned disk ends at its last whole zone.
            capacity_bytes,
            zoned: true,
            zone_size_bytes: zone_sectors << SECTOR_SHIFT,
            zone_capacity_bytes: cap << SECTOR_SHIFT,
            nr_conv: 0,
            max_open: self.id.max_open.unwrap_or(0),
            max_active: self.id.max_active.unwrap_or(0),
            max_append_sectors: append as u32,
            max_sectors: max_sectors as u32,
            write_zeroes_max_bytes: 0,
            write_zeroes_unmap_max_hw_bytes: 0,
        };
        let geo = Geometry::new(&params).map_err(|e| invalid(format!("the namespace's geometry is refused: {e}")))?;
        let mut zones = Vec::with_capacity(geo.nr_zones() as usize);
        while zones.len() < geo.nr_zones() as usize {
            let from = geo.zone_start(zblk_core::units::ZoneNo(zones.len() as u32));
            let batch = self.report(from, REPORT_ZONES).map_err(|e| invalid(format!("zone report: {e}")))?;
            if batch.is_empty() {
                return Err(invalid(format!("the zone report ends at zone {}", zones.len())));
            }
            for z in batch.iter().take(geo.nr_zones() as usize - zones.len()) {
                zones.push(layout::zone_info(&geo, z).map_err(|e| invalid(format!("zone {}: {e}", zones.len())))?);
            }
        }
        // Not ZoneSet's checks: a ZNS zone closed explicitly before anything was
        // written to it stays CLOSED at its start, which null_blk's model refuses.
        Ok(geo)
    }

    /// The largest request the kernel passes through for the namespace: its block
    /// device's `max_hw_sectors_kb` (`/dev/ngXnY` is `/sys/block/nvmeXnY`), which
    /// can be below MDTS; no limit when it cannot be read.
    ///
    /// The kernel maps a passthrough command's user buffer page by page, one segment
    /// a page at most, and fails it with EINVAL when the pages are more than the
    /// queue's `max_segments`: a buffer that does not start on a page spans one page
    /// more than its length, so the largest request here leaves room for that page
    /// (a caller's `Vec` is seldom page-aligned; QEMU's ZNS drive, MDTS 512 KiB and
    /// 128 segments, failed 512 KiB reads into a `Vec` with EINVAL).
    fn kernel_max_bytes(&self) -> u64 {
        let name = self.path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("ng"));
        let queue = |attr: &str| {
            let text = name.and_then(|n| std::fs::read_to_string(format!("/sys/block/nvme{n}/queue/{attr}")).ok());
            text.and_then(|t| t.trim().parse::<u64>().ok())
        };
        let hw = queue("max_hw_sectors_kb").filter(|&kb| kb >= 4).map_or(u64::MAX, |kb| kb << 10);
        let pages = queue("max_segments").filter(|&n| n >= 2).map_or(u64::MAX, |n| (n - 1) * PAGE_BYTES);
        hw.min(pages)
    }

    /// Runs an I/O command synchronously (the passthrough ioctl); an NVMe error is
    /// remembered and mapped to the kernel's status.
    ///
    /// # Safety
    /// `c.addr` must point at `c.data_len` bytes the command may read or write.
    unsafe fn run(&self, c: &Cmd) -> Result<u64, Status> {
        // SAFETY: the caller's.
        match unsafe { cmd::submit_sync(&self.file, c, false) } {
            Ok((0, result)) => Ok(result),
            Ok((status, _)) => Err(self.failed(status)),
            Err(e) => Err(errno_status(e)),
        }
    }

    /// Remembers a failed command's NVMe status and maps it.
    fn failed(&self, status: u16) -> Status {
        self.last_status.store(u32::from(status) | 1 << 16, Ordering::Relaxed);
        cmd::status_of(status)
    }

    /// Up to `max` zones from the one holding `from`, as the kernel reports them
    /// (`nvme_zone_parse_entry()`: a FULL zone's write pointer is its end).
    pub fn report(&self, from: Sector, max: usize) -> Result<Vec<RawZone>, Status> {
        let shift = self.id.lba_shift();
        let n = max.clamp(1, REPORT_ZONES);
        let mut buf = AlignedBuf::zeroed(64 * (n + 1));
        let c = Cmd::zone_report(self.nsid, from.0 >> shift, buf.as_mut_ptr() as u64, buf.len() as u32);
        // SAFETY: the command writes into `buf`, ours, of `data_len` bytes.
        unsafe { self.run(&c) }?;
        let got = (u64::from_le_bytes(buf[0..8].try_into().expect("8 bytes")) as usize).min(n);
        let len = self.id.zone_blocks << shift;
        let zones = (0..got)
            .map(|i| {
                let d = &buf[64 * (i + 1)..64 * (i + 2)];
                let at = |o: usize| u64::from_le_bytes(d[o..o + 8].try_into().expect("8 bytes")) << shift;
                let (start, cond) = (at(16), d[1] >> 4);
                // ZNS's zone states have the kernel's condition codes (ZSF = FULL).
                let wp = if cond == ZoneCond::Full.code() { start + len } else { at(24) };
                RawZone { start, len, capacity: at(8), wp, ztype: d[0] & 0xf, cond, reset: 0, non_seq: 0 }
            })
            .filter(|z| z.start < self.geo_end())
            .collect();
        Ok(zones)
    }

    /// Where the zoned disk ends (the last whole zone), in sectors.
    fn geo_end(&self) -> u64 {
        (self.id.nsze / self.id.zone_blocks * self.id.zone_blocks) << self.id.lba_shift()
    }

    /// Zone Management Send: `action` on the zone starting at `zone`, or on every
    /// zone with `all` (a reset of all is the kernel's RESET_ALL).
    pub fn zone_send(&self, action: ZoneAction, zone: Sector, all: bool) -> Result<(), Status> {
        let c = Cmd::zone_send(self.nsid, zone.0 >> self.id.lba_shift(), action, all);
        // SAFETY: no data.
        unsafe { self.run(&c) }.map(|_| ())
    }

    /// The command moving a data request's `len` bytes at `addr` (Read, Write with
    /// FUA when asked, Zone Append to the zone's start).
    fn data_cmd(&self, req: &Request, addr: u64, len: u32) -> Cmd {
        let shift = self.id.lba_shift();
        let opcode = match req.op {
            Op::Read => op::READ,
            Op::ZoneAppend => op::ZONE_APPEND,
            _ => op::WRITE,
        };
        let mut c = Cmd::rw(opcode, self.nsid, req.sector.0 >> shift, req.nr_sectors >> shift, addr, len);
        if req.flags.contains(BioFlags::FUA) {
            c.cdw[2] |= 1 << 30;
        }
        c
    }

    /// The sector a data command ended at: a Zone Append's from its result (the LBA
    /// the device wrote), the request's own otherwise.
    fn landed(&self, req: &Request, result: u64) -> Sector {
        if req.op == Op::ZoneAppend && !planted::append_lba_from_request() {
            Sector(result << self.id.lba_shift())
        } else {
            req.sector
        }
    }

    fn perform_blocking(&self, req: &Request) -> Result<Sector, Status> {
        let zone = req.sector;
        let action = match req.op {
            Op::Flush => {
                let c = Cmd::flush(self.nsid);
                // SAFETY: no data.
                return unsafe { self.run(&c) }.map(|_| req.sector);
            }
            Op::ZoneResetAll => return self.zone_send(ZoneAction::Reset, Sector::ZERO, true).map(|()| req.sector),
            Op::ZoneReset => ZoneAction::Reset,
            Op::ZoneOpen => ZoneAction::Open,
            Op::ZoneClose => ZoneAction::Close,
            Op::ZoneFinish => ZoneAction::Finish,
            _ => return Err(Status::NotSupported),
        };
        if zone.0 >= self.geo.nr_sectors() || !self.geo.is_zone_start(zone) {
            return Err(Status::Invalid);
        }
        self.zone_send(action, zone, false).map(|()| req.sector)
    }
}

/// A planted bug for the passthrough device's VM test (feature `mutations`, as
/// `zblk_core::mutation`; without it the switch is a constant `false`): a zone
/// append's sector taken from the request (its zone's start) instead of the LBA in
/// its completion. Process-wide, not per thread: the runtime's completion thread
/// reads it.
pub mod planted {
    #[cfg(feature = "mutations")]
    static APPEND_LBA_FROM_REQUEST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    /// Plants (or removes) the bug.
    #[cfg(feature = "mutations")]
    pub fn set_append_lba_from_request(on: bool) {
        APPEND_LBA_FROM_REQUEST.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the bug is planted.
    #[inline]
    pub fn append_lba_from_request() -> bool {
        #[cfg(feature = "mutations")]
        return APPEND_LBA_FROM_REQUEST.load(std::sync::atomic::Ordering::Relaxed);
        #[cfg(not(feature = "mutations"))]
        false
    }
}

/// Reads the four Identify pages of namespace `nsid` and what they say.
fn identify(file: &File, path: &Path, nsid: u32) -> Result<Identity, DeviceError> {
    let page = |cns: u8, ns: u32, csi: u8| -> Result<AlignedBuf, (u16, Option<Errno>)> {
        let mut buf = AlignedBuf::zeroed(4096);
        let c = Cmd::identify(cns, ns, csi, buf.as_mut_ptr() as u64);
        // SAFETY: Identify writes 4096 bytes into `buf`, ours.
        match unsafe { cmd::submit_sync(file, &c, true) } {
            Ok((0, _)) => Ok(buf),
            Ok((s, _)) => Err((s, None)),
            Err(e) => Err((0, Some(e))),
        }
    };
    let say = |what: &'static str, (s, e): (u16, Option<Errno>)| match e {
        Some(Errno::ACCESS | Errno::PERM) => DeviceError::new(path, DeviceErrorKind::PermissionDenied),
        Some(e) => DeviceError::io(path, what, e.into()),
        None => DeviceError::new(
            path,
            DeviceErrorKind::Invalid(format!("{what}: NVMe status {s:#x} ({})", cmd::status_name(s))),
        ),
    };
    let ns = page(0x00, nsid, 0).map_err(|e| say("Identify Namespace", e))?;
    let zns = page(0x05, nsid, CSI_ZNS).map_err(|e| match e {
        (s, None) if s != 0 => unsupported(
            path,
            format!("not a zoned namespace: the ZNS command set's Identify Namespace fails ({})", cmd::status_name(s)),
        ),
        e => say("Identify ZNS Namespace", e),
    })?;
    let ctrl = page(0x01, 0, 0).map_err(|e| say("Identify Controller", e))?;
    let zctrl = page(0x06, 0, CSI_ZNS).map_err(|e| say("Identify ZNS Controller", e))?;
    Identity::parse(&ns, &zns, &ctrl, &zctrl).map_err(|m| unsupported(path, m))
}

/// A passthrough call that failed before reaching the drive, as a status
/// ([`Status::from_errno`]).
fn errno_status(e: Errno) -> Status {
    Status::from_errno(e.raw_os_error())
}

/// The status of a passthrough completion's `res`: an NVMe status (positive) or a
/// negative errno.
fn res_status(dev: &NvmeZns, res: i32) -> Result<(), Status> {
    match res {
        0 => Ok(()),
        r if r > 0 => Err(dev.failed(r as u16)),
        r => Err(errno_status(Errno::from_raw_os_error(-r))),
    }
}

impl Device for NvmeZns {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn rotational(&self) -> bool {
        false
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }

    fn prepare(&self, req: &Request) -> Result<Plan, Status> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Status::IoErr);
        }
        if self.read_only && req.op != Op::Read {
            return Err(Status::NotSupported);
        }
        if req.op.has_data() {
            check_range(&self.geo, req)?;
        }
        let t = Transfer {
            write: req.op != Op::Read,
            at: req.sector,
            offset: req.sector.0 << SECTOR_SHIFT,
            valid_sectors: req.nr_sectors,
        };
        match req.op {
            Op::Read | Op::ZoneAppend => Ok(Plan::Transfer(t)),
            Op::Write if !req.flags.contains(BioFlags::PREFLUSH) => Ok(Plan::Transfer(t)),
            _ => Ok(Plan::Blocking),
        }
    }

    fn perform(&self, req: &Request, plan: Plan, buf: IoBuf<'_>) -> Result<Sector, Status> {
        match plan {
            Plan::Transfer(_) => {
                let len = (u64::from(req.nr_sectors) << SECTOR_SHIFT) as u32;
                let zeroes;
                let addr = match buf {
                    IoBuf::Read(b) => b.as_mut_ptr() as u64,
                    IoBuf::Write(b) => b.as_ptr() as u64,
                    IoBuf::None => {
                        zeroes = AlignedBuf::zeroed(len as usize);
                        zeroes.as_ptr() as u64
                    }
                };
                let c = self.data_cmd(req, addr, len);
                // SAFETY: `addr` is the request's buffer of `len` bytes (or ours).
                unsafe { self.run(&c) }.map(|r| self.landed(req, r))
            }
            Plan::Blocking if req.op == Op::Write => {
                // A PREFLUSH write: the flush, then the write (FUA in the command).
                let flush = Request { op: Op::Flush, ..*req };
                self.perform_blocking(&flush)?;
                let plan = Plan::Transfer(Transfer { write: true, at: req.sector, offset: 0, valid_sectors: 0 });
                self.perform(req, plan, buf)
            }
            Plan::Blocking => self.perform_blocking(req),
        }
    }

    fn finish(&self, req: &Request, t: Transfer, io: io::Result<()>) -> Result<Sector, Status> {
        // The device offers no descriptor to move data through: a driver carries its
        // transfers as passthrough commands and ends them with UringCmd::complete,
        // or hands them to perform. A transfer ended here has no completion to take
        // an append's sector from, so an append fails rather than guess it.
        let io = io.map_err(|e| e.raw_os_error().map_or(Status::IoErr, |n| errno_status(Errno::from_raw_os_error(n))));
        match req.op {
            Op::ZoneAppend => io.and(Err(Status::IoErr)),
            _ => io.map(|()| t.at),
        }
    }

    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status> {
        if from.0 >= self.geo.nr_sectors() {
            return Err(Status::Invalid);
        }
        let zones = self.report(from, max)?;
        for z in &zones {
            out.push(layout::zone_info(&self.geo, z).map_err(|_| Status::IoErr)?);
        }
        Ok(zones.len())
    }

    fn zeroing(&self, _nounmap: bool) -> Option<DeviceZeroing> {
        None
    }

    fn close(&self) -> Result<(), DeviceError> {
        if self.closed.swap(true, Ordering::AcqRel) || self.read_only {
            return Ok(());
        }
        let c = Cmd::flush(self.nsid);
        // SAFETY: no data.
        unsafe { self.run(&c) }
            .map(|_| ())
            .map_err(|s| DeviceError::new(&self.path, DeviceErrorKind::Invalid(format!("flush at close: {s}"))))
    }

    fn last_error(&self) -> Option<String> {
        let s = self.last_status.load(Ordering::Relaxed);
        (s != 0).then(|| {
            let status = s as u16;
            let errno = cmd::status_of(status).errno_name();
            format!(
                "{errno}: the drive answered NVMe status {:#05x} ({})",
                cmd::status_code(status),
                cmd::status_name(status)
            )
        })
    }

    fn uring_cmd(&self) -> Option<&dyn UringCmd> {
        Some(self)
    }
}

impl UringCmd for NvmeZns {
    fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    fn cmd_op(&self) -> u32 {
        cmd::URING_CMD_IO
    }

    fn command(&self, req: &Request, addr: *mut u8, len: usize) -> [u8; 80] {
        self.data_cmd(req, addr as u64, len as u32).to_sqe_cmd()
    }

    fn complete(&self, req: &Request, res: i32, result: u64) -> Result<Sector, Status> {
        res_status(self, res).map(|()| self.landed(req, result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_files_are_refused_saying_what_they_are() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let e = NvmeZns::open(f.path(), true).unwrap_err();
        assert!(e.to_string().contains("not a character device"), "{e}");
        let e = NvmeZns::open(Path::new("/dev/null"), true).unwrap_err();
        assert!(e.to_string().contains("a character device, not an NVMe namespace's generic device"), "{e}");
        assert!(e.to_string().contains("its class is mem"), "{e}");
        let e = NvmeZns::open(Path::new("/dev/zblk-no-such-ng"), true).unwrap_err();
        assert_eq!(e.to_string(), "/dev/zblk-no-such-ng: no such file or device");
    }
}
