//! The rule that refused a request, carried in its [`crate::bio::Status`] from the
//! place that decided (the engine's validation and plugs, the device's zone state
//! machine) to whoever tells the user: a message names the rule that was applied,
//! never one worked out again afterwards from a zone report (which another writer
//! may have changed meanwhile).
//!
//! A status without a rule is one whose code says it all (an open zone limit, a
//! READONLY zone, an aborted plugged write) or one from a device that gives only an
//! errno (a Linux device: the kernel's).

use crate::units::Sector;
use crate::zone::ZoneCond;

/// A rule of the zoned block layer or of the device that refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// A data BIO or request of no sectors.
    LengthZero,
    /// The range is not a whole number of logical blocks, or does not start on one.
    NotBlockAligned,
    /// The range goes past the device's end.
    BeyondEnd,
    /// A zone operation or a zone append not at the start of a zone.
    NotZoneStart,
    /// A zone operation or a zone append on a conventional zone.
    Conventional,
    /// A zone operation or a zone append on a device that is not zoned.
    NotZoned,
    /// A FLUSH or a zone operation that carries a length.
    UnexpectedLength,
    /// A zone append larger than the device's zone append limit.
    AppendOverLimit,
    /// A zone append larger than its zone's capacity.
    AppendOverCapacity,
    /// A zone append where there is none: no native append on the device, and no
    /// emulation without a plug to place it.
    NoZoneAppend,
    /// A DISCARD that reaches a sequential zone (its blocks go with a reset).
    DiscardSequential,
    /// A WRITE_ZEROES on a device without it.
    NoWriteZeroes,
    /// A WRITE_ZEROES larger than the device's write zeroes limit.
    WriteZeroesOverLimit,
    /// A read or write request larger than the device's `max_sectors`.
    OverMaxSectors,
    /// A write to a conventional zone that runs into the next zone.
    CrossesZone,
    /// A write to a sequential zone at `at`, not at its write pointer `wp` (the
    /// plug's `wp_offset` when the host refused it, the zone's when the device did).
    NotAtWp {
        /// Where the write was to start.
        at: Sector,
        /// The write pointer.
        wp: Sector,
    },
    /// A write or append to a zone written to its capacity (FULL).
    ZoneFull,
    /// A write or append that would pass its zone's capacity; `wp` is where the
    /// write pointer was (what landed before it ends there).
    PastCapacity {
        /// The write pointer.
        wp: Sector,
    },
    /// A zone operation the zone's condition does not allow: CLOSE of an EMPTY or
    /// FULL zone, OPEN of a FULL one (null_blk's BLK_STS_IOERR, ZNS's "zone invalid
    /// state transition").
    Transition {
        /// The zone's condition.
        cond: ZoneCond,
    },
}
