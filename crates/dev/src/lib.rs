//! Devices: what executes the requests the engine issues.
//!
//! Two interfaces. [`BlockDevice`] executes one request at a time through `&mut
//! self`: the simulator's devices, whose timing models decide when. [`Device`] is
//! driven from many threads at once by the real-time runtime, which may move the data
//! itself (io_uring): zoned images ([`FileImage`]), Linux zoned block devices
//! ([`linux::LinuxZoned`]), and any [`BlockDevice`] behind a lock ([`Locked`]).
//!
//! Every emulated zoned device executes against the same device-side zone state
//! machine ([`zblk_core::zone::ZoneSet`]), which checks the write pointer on its own;
//! a Linux device leaves those checks to the kernel and the device.

pub mod buf;
pub mod device;
pub mod error;
pub mod file;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod linux;
pub mod mem;
pub mod nvme;
pub mod pages;

use zblk_core::bio::{Request, Status};
use zblk_core::geometry::Geometry;
use zblk_core::rule::Rule;
use zblk_core::units::Sector;
use zblk_core::zone::ZoneInfo;

pub use device::{DataFds, Device, DeviceZeroing, Locked, Plan, Transfer, UringCmd};
pub use error::{DeviceError, DeviceErrorKind, Hold};
pub use file::FileImage;
pub use mem::MemDevice;
pub use pages::PageStore;

/// The data of one request, owned by the driver and lent to the device while it
/// executes the request.
#[derive(Debug)]
pub enum IoBuf<'a> {
    /// No data moves: a zone operation, a flush, write zeroes, a discard, or a
    /// driver that does not carry data (a benchmark on a device that drops it).
    None,
    /// The bytes to write: `nr_sectors * 512` of them.
    Write(&'a [u8]),
    /// Where to read into: `nr_sectors * 512` bytes.
    Read(&'a mut [u8]),
}

/// A device that executes requests synchronously: the in-memory device, and the
/// data side of simulated devices (whose timing models decide *when* a request
/// executes; see the `zblk-sim` crate).
pub trait BlockDevice {
    /// The device's geometry.
    fn geometry(&self) -> &Geometry;

    /// Executes `req`. Returns the sector the request was executed at (for a native
    /// zone append, where the data landed), or the status the device fails it with.
    fn execute(&mut self, req: &Request, buf: IoBuf<'_>) -> Result<Sector, Status>;

    /// Appends up to `max` zone descriptors, starting with the zone holding `from`,
    /// to `out` (REPORT_ZONES). Returns how many were added.
    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status>;

    /// The descriptor of the zone holding `sector`.
    fn report_zone(&self, sector: Sector) -> Result<ZoneInfo, Status> {
        let mut out = Vec::with_capacity(1);
        self.report_zones(sector, 1, &mut out)?;
        out.pop().ok_or(Status::Invalid)
    }

    /// How the device carries out a WRITE_ZEROES with NOUNMAP set or not; `None`
    /// when it has none, or does not say.
    fn zeroing(&self, _nounmap: bool) -> Option<DeviceZeroing> {
        None
    }
}

/// The device-side check every device makes of a data request's range: not empty,
/// inside the device, aligned to the logical block size; EINVAL otherwise.
pub(crate) fn check_range(geo: &Geometry, req: &Request) -> Result<(), Status> {
    check_span(geo, req.sector, req.nr_sectors)
}

/// [`check_range`] of `nr_sectors` at `sector`.
pub(crate) fn check_span(geo: &Geometry, sector: Sector, nr_sectors: u32) -> Result<(), Status> {
    let n = u64::from(nr_sectors);
    let rule = if n == 0 {
        Rule::LengthZero
    } else if sector.0.checked_add(n).is_none_or(|end| end > geo.nr_sectors()) {
        Rule::BeyondEnd
    } else if !geo.is_block_aligned(sector, n) {
        Rule::NotBlockAligned
    } else {
        return Ok(());
    };
    Err(Status::Invalid.because(rule))
}

/// The device-side check of a WRITE_ZEROES: EOPNOTSUPP on a device without it
/// (`write_zeroes_max_bytes` 0), EINVAL above its limit.
pub(crate) fn check_write_zeroes(geo: &Geometry, req: &Request) -> Result<(), Status> {
    match geo.max_write_zeroes_sectors() {
        0 => Err(Status::NotSupported.because(Rule::NoWriteZeroes)),
        max if req.nr_sectors > max => Err(Status::Invalid.because(Rule::WriteZeroesOverLimit)),
        _ => Ok(()),
    }
}

/// The device-side check of a native ZONE_APPEND: EOPNOTSUPP on a device without
/// one (`zone_append_max_bytes` 0), EINVAL above its limit.
pub(crate) fn check_append(geo: &Geometry, req: &Request) -> Result<(), Status> {
    match geo.max_append_sectors() {
        0 => Err(Status::NotSupported.because(Rule::NoZoneAppend)),
        max if req.nr_sectors > max => Err(Status::Invalid.because(Rule::AppendOverLimit)),
        _ => Ok(()),
    }
}

/// The device-side check of a DISCARD: its range, and on a zoned device conventional
/// zones only (a sequential zone's blocks go with a reset).
pub(crate) fn check_discard(geo: &Geometry, req: &Request) -> Result<(), Status> {
    check_range(geo, req)?;
    if geo.is_zoned() && !geo.zone_is_conv(geo.zone_no(req.end() - 1)) {
        return Err(Status::Invalid.because(Rule::DiscardSequential));
    }
    Ok(())
}

/// Zeroes the sectors of `buf` from `valid_sectors` on: they lie past a write pointer
/// (see [`Transfer::valid_sectors`]).
pub fn zero_past(buf: &mut [u8], valid_sectors: u32) {
    let from = (u64::from(valid_sectors) * zblk_core::units::SECTOR_SIZE) as usize;
    if from < buf.len() {
        buf[from..].fill(0);
    }
}
