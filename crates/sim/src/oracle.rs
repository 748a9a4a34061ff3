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

use zblk_core::bio::{Status, StatusCode};
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
    /// Try again (BLK_STS_AGAIN).
    pub const EAGAIN: i32 = 11;

    /// The name of an errno the model speaks, or `errno N` for any other.
    pub fn name(n: i32) -> String {
        match n {
            EIO => "EIO".into(),
            EINVAL => "EINVAL".into(),
            EOVERFLOW => "EOVERFLOW".into(),
            EOPNOTSUPP => "EOPNOTSUPP".into(),
            ETOOMANYREFS => "ETOOMANYREFS".into(),
            EAGAIN => "EAGAIN".into(),
            n => format!("errno {n}"),
        }
    }
}

/// The errno the kernel hands a BIO's user for a status of class `code`: the
/// `blk_status_t` the kernel would complete it with, through
/// `blk_status_to_errno()` (block/blk-core.c, `blk_errors[]`). Written here apart
/// from [`Status::errno`], the one mapping zblk's users get their errno from (the
/// runtime's callers, the ublk target's replies), so that a status mapped to the
/// wrong errno there is seen: the model otherwise judges completions by status
/// class, and EAGAIN, say, is an answer it excuses.
pub fn kernel_errno(code: StatusCode) -> i32 {
    use errno::*;
    match code {
        // BLK_STS_IOERR: null_blk's and the SCSI/NVMe drivers' answer to a write off
        // the write pointer, to a FULL, READONLY or OFFLINE zone; the zone write
        // plug's bio_io_error() for a write aborted in its plug or waiting for a
        // write pointer update.
        StatusCode::IoErr
        | StatusCode::Unaligned
        | StatusCode::ZoneFull
        | StatusCode::ZoneReadOnly
        | StatusCode::ZoneOffline
        | StatusCode::Aborted
        | StatusCode::NeedWpUpdate => EIO,
        StatusCode::ZoneOpenResource => ETOOMANYREFS, // BLK_STS_ZONE_OPEN_RESOURCE
        StatusCode::ZoneActiveResource => EOVERFLOW,  // BLK_STS_ZONE_ACTIVE_RESOURCE
        StatusCode::Invalid => EINVAL,                // BLK_STS_INVAL
        StatusCode::NotSupported => EOPNOTSUPP,       // BLK_STS_NOTSUPP
        StatusCode::Again => EAGAIN,                  // BLK_STS_AGAIN
    }
}

/// Whether the errno a user sees for `result` is the one the kernel gives for its
/// status: the violation in words if not.
pub fn check_errno(result: Result<Sector, Status>) -> Result<(), String> {
    let Err(s) = result else { return Ok(()) };
    let (got, want) = (s.errno(), kernel_errno(s.code()));
    if got == want {
        return Ok(());
    }
    Err(format!(
        "completed with {s:?}, which its user sees as {} ({got}); the kernel gives {} ({want}) for it",
        errno::name(got),
        errno::name(want)
    ))
}

/// The errno a user sees for a status (a success is 0).
pub fn errno_of(r: Result<Sector, Status>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(s) => s.errno(),
    }
}
