//! The reference model (the oracle) of `zblk vopr`: what the kernel's zoned block
//! layer and a null_blk-like device answer to each operation, written apart from
//! `ZoneSet` and the engine, as plainly as possible (zone conditions as an enum,
//! counts recounted by scanning, no caches). docs/vopr.md lists its rules beside
//! the kernel's.
//!
//! Two halves:
//!
//! - [`DeviceOracle`]: one disk, fed every request in the order the disk executes
//!   it. It answers with the outcome null_blk gives (`drivers/block/null_blk/zoned.c`:
//!   implicit open, implicit close of an implicitly open zone round-robin from
//!   `imp_close_zone_no`, EOVERFLOW for the active limit, ETOOMANYREFS for the open
//!   limit, EIO for a write off the write pointer, past the capacity, to a FULL,
//!   READONLY or OFFLINE zone). The simulator compares every completion's errno and
//!   every zone's condition and write pointer with it: a wrong refusal is caught
//!   as surely as a wrong acceptance.
//! - [`HostOracle`]: the top device as its user sees it, fed every BIO in
//!   submission order. It predicts each zone's write pointer as the writes, resets
//!   and finishes submitted so far leave it (the order zone write plugging keeps),
//!   and says at each completion whether the host's answer is right: a valid BIO
//!   refused by the host (never sent to the device) is a violation unless something
//!   excuses it (a device error, a fault, a reset or finish racing with it, a write
//!   pointer the host cannot know); an invalid one accepted is a violation; a write
//!   off the predicted write pointer that succeeds is a violation; an emulated
//!   append must land at the predicted sector; a write waiting in its plug when a
//!   reset or finish of its zone arrives must fail; a FLUSH must reach the device.
//!   Under zone write pipelining, a zone's writes are acknowledged in submission
//!   order, a write that fails on the device fails the writes of its zone in flight
//!   behind it, and the plug's write pointer goes back to the failed write's start.

mod device;
mod host;

pub use device::{Cond, DeviceOracle};
pub use host::{HostBio, HostOracle, HostRules};

use zblk_core::bio::Status;
use zblk_core::units::Sector;

/// Linux errno values the model speaks in.
pub mod errno {
    /// I/O error (BLK_STS_IOERR and every zone write error).
    pub const EIO: i32 = 5;
    /// Invalid request.
    pub const EINVAL: i32 = 22;
    /// Active-zone limit (BLK_STS_ZONE_ACTIVE_RESOURCE).
    pub const EOVERFLOW: i32 = 75;
    /// Operation not supported.
    pub const EOPNOTSUPP: i32 = 95;
    /// Open-zone limit (BLK_STS_ZONE_OPEN_RESOURCE).
    pub const ETOOMANYREFS: i32 = 109;
}

/// The errno a user sees for a status (a success is 0).
pub fn errno_of(r: Result<Sector, Status>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(s) => s.errno(),
    }
}
