//! The kernel's zone ioctls on a Linux zoned block device, as util-linux `blkzone`
//! uses them: the zone report (`BLKREPORTZONE`), zone management over a sector range
//! (`BLKRESETZONE`, `BLKOPENZONE`, `BLKCLOSEZONE`, `BLKFINISHZONE`), the size and
//! zone size; and `BLKDISCARD`. [`ZoneCtl`] serves zblk's blkzone-style commands on
//! any zoned device, and [`super::LinuxZoned`] as its zone side.

use crate::error::{DeviceError, DeviceErrorKind};
use rustix::ioctl::{Getter, Opcode, Setter, Updater, ioctl, opcode};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use zblk_core::bio::Op;
use zblk_core::units::Sector;

/// `struct blk_zone` (`include/uapi/linux/blkzoned.h`): what `BLKREPORTZONE` fills
/// and what a served device's zone report hands the kernel (zblk-serve encodes its
/// zones with [`BlkZone::of`] and [`BlkZone::write_to`]), one layout for both.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlkZone {
    start: u64,
    len: u64,
    wp: u64,
    ztype: u8,
    cond: u8,
    non_seq: u8,
    reset: u8,
    resv: [u8; 4],
    capacity: u64,
    reserved: [u8; 24],
}

/// The size of the kernel's `struct blk_zone`.
pub const BLK_ZONE_BYTES: usize = std::mem::size_of::<BlkZone>();
const _: () = assert!(BLK_ZONE_BYTES == 64, "struct blk_zone is 64 bytes");

impl BlkZone {
    /// The kernel's record of zone `z` (its reserved fields and flags zero).
    pub fn of(z: &zblk_core::zone::ZoneInfo) -> BlkZone {
        BlkZone {
            start: z.start.0,
            len: z.len,
            wp: z.wp.0,
            ztype: z.ztype.code(),
            cond: z.cond.code(),
            capacity: z.capacity,
            ..BlkZone::default()
        }
    }

    /// Writes the record as the kernel lays it out, in this machine's byte order, at
    /// the fields' own offsets.
    pub fn write_to(&self, out: &mut [u8; BLK_ZONE_BYTES]) {
        use std::mem::offset_of;
        let mut put = |at: usize, v: u64| out[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        put(offset_of!(BlkZone, start), self.start);
        put(offset_of!(BlkZone, len), self.len);
        put(offset_of!(BlkZone, wp), self.wp);
        put(offset_of!(BlkZone, capacity), self.capacity);
        for (at, v) in [
            (offset_of!(BlkZone, ztype), self.ztype),
            (offset_of!(BlkZone, cond), self.cond),
            (offset_of!(BlkZone, non_seq), self.non_seq),
            (offset_of!(BlkZone, reset), self.reset),
        ] {
            out[at] = v;
        }
        for (at, n) in [(offset_of!(BlkZone, resv), 4), (offset_of!(BlkZone, reserved), 24)] {
            out[at..at + n].fill(0);
        }
    }
}

/// `struct blk_zone_report`, without its trailing array.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct BlkZoneReportHdr {
    sector: u64,
    nr_zones: u32,
    flags: u32,
}

/// Zones per `BLKREPORTZONE` call: blkzone's `DEF_REPORT_LEN`, so that `-v` prints the
/// same batches.
pub const REPORT_BATCH: usize = 4096;

#[repr(C)]
struct ReportBuf {
    hdr: BlkZoneReportHdr,
    zones: [BlkZone; REPORT_BATCH],
}

/// `struct blk_zone_range`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct BlkZoneRange {
    sector: u64,
    nr_sectors: u64,
}

/// `BLK_ZONE_REP_CAPACITY`: the report's zones carry their capacity.
const BLK_ZONE_REP_CAPACITY: u32 = 1;

const BLKREPORTZONE: Opcode = opcode::read_write::<BlkZoneReportHdr>(0x12, 130);
const BLKRESETZONE: Opcode = opcode::write::<BlkZoneRange>(0x12, 131);
const BLKGETZONESZ: Opcode = opcode::read::<u32>(0x12, 132);
const BLKOPENZONE: Opcode = opcode::write::<BlkZoneRange>(0x12, 134);
const BLKCLOSEZONE: Opcode = opcode::write::<BlkZoneRange>(0x12, 135);
const BLKFINISHZONE: Opcode = opcode::write::<BlkZoneRange>(0x12, 136);
const BLKGETSIZE64: Opcode = opcode::read::<u64>(0x12, 114);
const BLKSSZGET: Opcode = opcode::none(0x12, 104);
/// `_IO(0x12, 119)`, although it reads a `u64[2]` (byte offset, byte length).
const BLKDISCARD: Opcode = opcode::none(0x12, 119);

/// One zone as the kernel reports it, every field kept (blkzone prints them all).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RawZone {
    /// First sector.
    pub start: u64,
    /// Length in sectors.
    pub len: u64,
    /// Capacity in sectors (the length when the kernel does not report capacities).
    pub capacity: u64,
    /// Write pointer (absolute sector).
    pub wp: u64,
    /// `BLK_ZONE_TYPE_*`: 1 conventional, 2 sequential write required, 3 preferred.
    pub ztype: u8,
    /// `BLK_ZONE_COND_*`.
    pub cond: u8,
    /// The device recommends a reset.
    pub reset: u8,
    /// Non-sequential write resources are active.
    pub non_seq: u8,
}

/// A zoned block device open for its zone ioctls.
#[derive(Debug)]
pub struct ZoneCtl {
    file: File,
    path: PathBuf,
    nr_sectors: u64,
    zone_sectors: u64,
    lbs_bytes: u32,
}

/// Whether `path` is a block device.
pub fn is_block_device(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device())
}

/// Refuses a path that is not a block device, saying what it is instead.
pub(super) fn check_block_device(path: &Path, meta: &std::fs::Metadata) -> Result<(), DeviceError> {
    let what = match meta.file_type() {
        t if t.is_block_device() => return Ok(()),
        t if t.is_file() => "a regular file, not a block device (a zblk image is opened as an image)",
        t if t.is_dir() => "a directory, not a block device",
        _ => "not a block device",
    };
    Err(DeviceError::new(path, DeviceErrorKind::Unsupported(what.to_string())))
}

impl ZoneCtl {
    /// Opens a zoned block device: for writing (zone management) with `O_EXCL`
    /// unless `force`, as blkzone does, so that a mounted device is refused.
    pub fn open(path: &Path, write: bool, force: bool) -> Result<ZoneCtl, DeviceError> {
        let mut o = OpenOptions::new();
        o.read(true);
        if write {
            o.write(true);
            if !force {
                o.custom_flags(rustix::fs::OFlags::EXCL.bits() as i32);
            }
        }
        let file = o.open(path).map_err(|e| DeviceError::io(path, "open", e))?;
        ZoneCtl::with_file(file, path)
    }

    /// Takes `file`, open on the device at `path`, after checking that it is a zoned
    /// block device.
    pub fn with_file(file: File, path: &Path) -> Result<ZoneCtl, DeviceError> {
        check_block_device(path, &file.metadata().map_err(|e| DeviceError::io(path, "stat", e))?)?;
        // SAFETY: BLKGETSIZE64 writes a u64 (the kernel's size_t on 64-bit Linux).
        let bytes = unsafe { ioctl(&file, Getter::<BLKGETSIZE64, u64>::new()) }
            .map_err(|e| DeviceError::io(path, "BLKGETSIZE64", e.into()))?;
        // SAFETY: BLKSSZGET writes an int.
        let lbs = unsafe { ioctl(&file, Getter::<BLKSSZGET, i32>::new()) }
            .map_err(|e| DeviceError::io(path, "BLKSSZGET", e.into()))?;
        // SAFETY: BLKGETZONESZ writes a u32.
        let zone_sectors = unsafe { ioctl(&file, Getter::<BLKGETZONESZ, u32>::new()) }
            .map_err(|e| DeviceError::io(path, "BLKGETZONESZ", e.into()))?;
        if zone_sectors == 0 {
            return Err(DeviceError::new(path, DeviceErrorKind::Unsupported(NOT_ZONED.to_string())));
        }
        Ok(ZoneCtl {
            file,
            path: path.to_path_buf(),
            nr_sectors: bytes >> 9,
            zone_sectors: u64::from(zone_sectors),
            lbs_bytes: u32::try_from(lbs).unwrap_or(0),
        })
    }

    /// The open device.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The device's path, as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Capacity in sectors.
    pub fn nr_sectors(&self) -> u64 {
        self.nr_sectors
    }

    /// Zone size in sectors (`chunk_sectors`).
    pub fn zone_sectors(&self) -> u64 {
        self.zone_sectors
    }

    /// Logical block size in bytes.
    pub fn lbs_bytes(&self) -> u32 {
        self.lbs_bytes
    }

    /// One `BLKREPORTZONE` call: up to `max` (at most [`REPORT_BATCH`]) zones from the
    /// zone holding `from`.
    pub fn report(&self, from: Sector, max: usize) -> Result<Vec<RawZone>, DeviceError> {
        self.report_raw(from, max).map_err(|e| DeviceError::io(&self.path, "BLKREPORTZONE ioctl failed", e))
    }

    /// Every zone, in `BLKREPORTZONE` calls of [`REPORT_BATCH`] zones.
    pub fn report_all(&self) -> Result<Vec<RawZone>, DeviceError> {
        let mut zones = Vec::new();
        let mut from = 0;
        while from < self.nr_sectors {
            let batch = self.report(Sector(from), REPORT_BATCH)?;
            let Some(last) = batch.last().filter(|z| z.len > 0) else { break };
            from = last.start + last.len;
            zones.extend(batch);
        }
        Ok(zones)
    }

    /// [`ZoneCtl::report`], with the system's error as it is.
    pub(super) fn report_raw(&self, from: Sector, max: usize) -> io::Result<Vec<RawZone>> {
        let layout = std::alloc::Layout::new::<ReportBuf>();
        // SAFETY: the layout has a non-zero size; ReportBuf is plain integers, for
        // which all zeroes is a value; the box frees it with the same layout.
        let mut buf: Box<ReportBuf> = unsafe {
            let p = std::alloc::alloc_zeroed(layout).cast::<ReportBuf>();
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Box::from_raw(p)
        };
        buf.hdr = BlkZoneReportHdr { sector: from.0, nr_zones: max.min(REPORT_BATCH) as u32, flags: 0 };
        // SAFETY: BLKREPORTZONE reads the header and writes up to `nr_zones` zones
        // after it, which the buffer has room for.
        unsafe { ioctl(&self.file, Updater::<BLKREPORTZONE, ReportBuf>::new(&mut buf)) }?;
        let n = (buf.hdr.nr_zones as usize).min(REPORT_BATCH);
        let has_cap = buf.hdr.flags & BLK_ZONE_REP_CAPACITY != 0;
        Ok(buf.zones[..n]
            .iter()
            .map(|z| RawZone {
                start: z.start,
                len: z.len,
                capacity: if has_cap { z.capacity } else { z.len },
                wp: z.wp,
                ztype: z.ztype,
                cond: z.cond,
                reset: z.reset,
                non_seq: z.non_seq,
            })
            .collect())
    }

    /// Zone management over `[sector, sector + nr_sectors)`: one ioctl, as blkzone
    /// does (the kernel turns a reset of the whole device into RESET_ALL).
    pub fn zone_mgmt(&self, op: Op, sector: Sector, nr_sectors: u64) -> Result<(), DeviceError> {
        let name = match op {
            Op::ZoneReset => "BLKRESETZONE ioctl failed",
            Op::ZoneOpen => "BLKOPENZONE ioctl failed",
            Op::ZoneClose => "BLKCLOSEZONE ioctl failed",
            Op::ZoneFinish => "BLKFINISHZONE ioctl failed",
            _ => "zone management",
        };
        self.zone_mgmt_raw(op, sector, nr_sectors).map_err(|e| DeviceError::io(&self.path, name, e))
    }

    /// [`ZoneCtl::zone_mgmt`], with the system's error as it is (EINVAL for an
    /// operation that is not zone management).
    pub(super) fn zone_mgmt_raw(&self, op: Op, sector: Sector, nr_sectors: u64) -> io::Result<()> {
        let range = BlkZoneRange { sector: sector.0, nr_sectors };
        // SAFETY: each of these ioctls reads one blk_zone_range.
        let r = unsafe {
            match op {
                Op::ZoneReset => ioctl(&self.file, Setter::<BLKRESETZONE, BlkZoneRange>::new(range)),
                Op::ZoneOpen => ioctl(&self.file, Setter::<BLKOPENZONE, BlkZoneRange>::new(range)),
                Op::ZoneClose => ioctl(&self.file, Setter::<BLKCLOSEZONE, BlkZoneRange>::new(range)),
                Op::ZoneFinish => ioctl(&self.file, Setter::<BLKFINISHZONE, BlkZoneRange>::new(range)),
                _ => return Err(io::Error::from_raw_os_error(rustix::io::Errno::INVAL.raw_os_error())),
            }
        };
        Ok(r?)
    }

    /// `BLKDISCARD` of `[sector, sector + nr_sectors)`.
    pub(super) fn discard(&self, sector: Sector, nr_sectors: u64) -> io::Result<()> {
        let range: [u64; 2] = [sector.0 << 9, nr_sectors << 9];
        // SAFETY: BLKDISCARD reads two u64: the byte offset and the byte length.
        unsafe { ioctl(&self.file, Setter::<BLKDISCARD, [u64; 2]>::new(range)) }?;
        Ok(())
    }
}

/// What a block device that is not zoned is told.
pub(super) const NOT_ZONED: &str =
    "not a zoned block device (the kernel reports no zone size): zblk drives zoned block devices only";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zone_is_written_as_the_kernels_struct_blk_zone() {
        use zblk_core::geometry::{Geometry, GeometryParams};
        use zblk_core::units::ZoneNo;
        use zblk_core::zone::{ZoneCond, ZoneInfo};
        let geo = Geometry::new(&GeometryParams {
            capacity_bytes: 1 << 30,
            zone_size_bytes: 64 << 20,
            zone_capacity_bytes: 48 << 20,
            nr_conv: 1,
            ..GeometryParams::default()
        })
        .unwrap();
        let z = ZoneInfo::of(&geo, ZoneNo(2), ZoneCond::ImpOpen, 8);
        let mut out = [0xa5u8; BLK_ZONE_BYTES];
        BlkZone::of(&z).write_to(&mut out);
        // include/uapi/linux/blkzoned.h: start, len, wp (__u64 each), type, cond,
        // non_seq, reset (__u8 each), resv[4], capacity (__u64), reserved[24].
        let u64_at = |o: usize| u64::from_ne_bytes(out[o..o + 8].try_into().unwrap());
        assert_eq!((u64_at(0), u64_at(8), u64_at(16)), (2 * 131072, 131072, 2 * 131072 + 8));
        assert_eq!(&out[24..32], &[0x2, 0x2, 0, 0, 0, 0, 0, 0], "type SWR, cond IMP_OPEN, flags and resv zero");
        assert_eq!(u64_at(32), 98304);
        assert!(out[40..].iter().all(|&b| b == 0), "reserved zero");
    }

    #[test]
    fn ioctl_numbers_match_the_kernel_headers() {
        assert_eq!(std::mem::size_of::<BlkZone>(), 64);
        assert_eq!(BLKREPORTZONE as u64, 0xc010_1282);
        assert_eq!(BLKRESETZONE as u64, 0x4010_1283);
        assert_eq!(BLKGETZONESZ as u64, 0x8004_1284);
        assert_eq!(BLKFINISHZONE as u64, 0x4010_1288);
        assert_eq!(BLKGETSIZE64 as u64, 0x8008_1272);
        assert_eq!(BLKSSZGET as u64, 0x1268);
        assert_eq!(BLKDISCARD as u64, 0x1277);
    }

    #[test]
    fn a_regular_file_is_refused() {
        let f = tempfile::NamedTempFile::new().unwrap();
        assert!(!is_block_device(f.path()));
        let e = ZoneCtl::open(f.path(), false, false).unwrap_err();
        assert!(e.to_string().contains("a regular file, not a block device"), "{e}");
        assert!(e.to_string().starts_with(&f.path().display().to_string()), "{e}");
    }
}
