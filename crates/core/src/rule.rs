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
    /// A write to a sequential zone not at its write pointer `wp` (the plug's
    /// `wp_offset` when the host refused it, the zone's when the device did). The
    /// write started where its request did: the first piece of a BIO, since a
    /// plug checks the pieces after it against the write pointer the first moved.
    NotAtWp {
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

/// Sectors a packed rule can name: a [`crate::bio::Status`] is eight bytes, and a
/// geometry is at most this large (`Geometry::new` refuses more: 1 EiB).
pub const MAX_PACKED_SECTORS: u64 = 1 << 51;

impl Rule {
    /// One of each rule, for tests.
    pub const EVERY: [Rule; 19] = [
        Rule::LengthZero,
        Rule::NotBlockAligned,
        Rule::BeyondEnd,
        Rule::NotZoneStart,
        Rule::Conventional,
        Rule::NotZoned,
        Rule::UnexpectedLength,
        Rule::AppendOverLimit,
        Rule::AppendOverCapacity,
        Rule::NoZoneAppend,
        Rule::DiscardSequential,
        Rule::NoWriteZeroes,
        Rule::WriteZeroesOverLimit,
        Rule::OverMaxSectors,
        Rule::CrossesZone,
        Rule::NotAtWp { wp: Sector(MAX_PACKED_SECTORS - 1) },
        Rule::ZoneFull,
        Rule::PastCapacity { wp: Sector(12345) },
        Rule::Transition { cond: ZoneCond::Offline },
    ];

    /// The rule in 60 bits: its number (1 up; 0 is no rule) in the low 5, a zone
    /// condition's code in the next 4, a write pointer in the top 51.
    pub(crate) fn pack(self) -> u64 {
        let (tag, cond, wp): (u64, u64, u64) = match self {
            Rule::LengthZero => (1, 0, 0),
            Rule::NotBlockAligned => (2, 0, 0),
            Rule::BeyondEnd => (3, 0, 0),
            Rule::NotZoneStart => (4, 0, 0),
            Rule::Conventional => (5, 0, 0),
            Rule::NotZoned => (6, 0, 0),
            Rule::UnexpectedLength => (7, 0, 0),
            Rule::AppendOverLimit => (8, 0, 0),
            Rule::AppendOverCapacity => (9, 0, 0),
            Rule::NoZoneAppend => (10, 0, 0),
            Rule::DiscardSequential => (11, 0, 0),
            Rule::NoWriteZeroes => (12, 0, 0),
            Rule::WriteZeroesOverLimit => (13, 0, 0),
            Rule::OverMaxSectors => (14, 0, 0),
            Rule::CrossesZone => (15, 0, 0),
            Rule::NotAtWp { wp } => (16, 0, wp.0),
            Rule::ZoneFull => (17, 0, 0),
            Rule::PastCapacity { wp } => (18, 0, wp.0),
            Rule::Transition { cond } => (19, u64::from(cond.code()), 0),
        };
        assert!(wp < MAX_PACKED_SECTORS, "write pointer {wp} past what a geometry holds");
        tag | cond << 5 | wp << 9
    }

    /// The rule [`Rule::pack`] packed, or `None` for no rule.
    pub(crate) fn unpack(bits: u64) -> Option<Rule> {
        let wp = Sector(bits >> 9);
        Some(match bits & 0x1f {
            0 => return None,
            1 => Rule::LengthZero,
            2 => Rule::NotBlockAligned,
            3 => Rule::BeyondEnd,
            4 => Rule::NotZoneStart,
            5 => Rule::Conventional,
            6 => Rule::NotZoned,
            7 => Rule::UnexpectedLength,
            8 => Rule::AppendOverLimit,
            9 => Rule::AppendOverCapacity,
            10 => Rule::NoZoneAppend,
            11 => Rule::DiscardSequential,
            12 => Rule::NoWriteZeroes,
            13 => Rule::WriteZeroesOverLimit,
            14 => Rule::OverMaxSectors,
            15 => Rule::CrossesZone,
            16 => Rule::NotAtWp { wp },
            17 => Rule::ZoneFull,
            18 => Rule::PastCapacity { wp },
            19 => Rule::Transition { cond: ZoneCond::of_code((bits >> 5) as u8 & 0xf).expect("a condition's code") },
            t => unreachable!("rule number {t}"),
        })
    }
}
