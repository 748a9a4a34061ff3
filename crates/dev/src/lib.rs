//! Devices: what executes the requests the engine issues.
//!
//! Every emulated zoned device executes against the same device-side zone state
//! machine ([`zblk_core::zone::ZoneSet`]), which checks the write pointer on its own.

pub mod buf;
pub mod error;
pub mod file;
pub mod linux;
pub mod mem;

use zblk_core::bio::{Request, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::Sector;
use zblk_core::zone::ZoneInfo;

pub use error::{DeviceError, DeviceErrorKind};
pub use file::FileImage;
pub use mem::MemDevice;

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
/// executes; see [`zblk_sim`]).
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
}
