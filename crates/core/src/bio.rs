//! BIOs, requests, completions and the statuses they end with.
//!
//! A [`Bio`] is one I/O as its submitter sees it. The core turns it into one or more
//! [`Request`]s issued to the device (a BIO is split at `max_sectors` and at zone
//! boundaries; an emulated zone append becomes a write), and ends it with one
//! [`Completion`] once every request is done.
//!
//! Data never passes through here: a request names the BIO it belongs to
//! (`user_data`) and where its data sits in the BIO (`bio_offset`); the driver, which
//! owns the buffers, moves the bytes (see `docs/ARCHITECTURE.md`, "Who owns buffers").

use crate::rule::Rule;
use crate::units::Sector;
use std::fmt;

/// The operation of a BIO or a request (the kernel's `REQ_OP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Read sectors. Never held back by a zone write plug.
    Read,
    /// Write sectors. On a sequential zone it must start at the write pointer.
    Write,
    /// Write at the zone's write pointer and report where the data landed. The BIO's
    /// sector is the start of the target zone. Emulated with a plugged write when the
    /// device has no native zone append.
    ZoneAppend,
    /// Make a range read back as zeroes. On a sequential zone it is a write.
    WriteZeroes,
    /// Deallocate a range (conventional zones and regular devices only).
    Discard,
    /// Make completed writes durable (write cache flush). No data, no sector.
    Flush,
    /// Move a zone's write pointer back to its start (condition EMPTY).
    ZoneReset,
    /// Reset every sequential zone of the device.
    ZoneResetAll,
    /// Open a zone explicitly (condition EXP_OPEN).
    ZoneOpen,
    /// Close an open zone (CLOSED, or EMPTY if nothing was written).
    ZoneClose,
    /// Move a zone's write pointer to its end (condition FULL).
    ZoneFinish,
}

impl Op {
    /// Whether the operation writes data to a zone (and so is plugged on a
    /// sequential zone): the kernel's `op_needs_zoned_write_locking()`.
    pub fn is_zone_write(self) -> bool {
        matches!(self, Op::Write | Op::ZoneAppend | Op::WriteZeroes)
    }

    /// Whether the operation is a zone management operation.
    pub fn is_zone_mgmt(self) -> bool {
        matches!(self, Op::ZoneReset | Op::ZoneResetAll | Op::ZoneOpen | Op::ZoneClose | Op::ZoneFinish)
    }

    /// Whether a BIO of this operation carries data in a buffer.
    pub fn has_data(self) -> bool {
        matches!(self, Op::Read | Op::Write | Op::ZoneAppend)
    }

    /// Whether the operation addresses a sector range (as opposed to a whole zone or
    /// nothing at all).
    pub fn has_range(self) -> bool {
        matches!(self, Op::Read | Op::Write | Op::ZoneAppend | Op::WriteZeroes | Op::Discard)
    }

    /// The kernel's name for the operation, as blktrace and error messages print it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "READ",
            Op::Write => "WRITE",
            Op::ZoneAppend => "ZONE_APPEND",
            Op::WriteZeroes => "WRITE_ZEROES",
            Op::Discard => "DISCARD",
            Op::Flush => "FLUSH",
            Op::ZoneReset => "ZONE_RESET",
            Op::ZoneResetAll => "ZONE_RESET_ALL",
            Op::ZoneOpen => "ZONE_OPEN",
            Op::ZoneClose => "ZONE_CLOSE",
            Op::ZoneFinish => "ZONE_FINISH",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Modifier flags of a BIO (the kernel's `REQ_*` flags that zblk honours).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct BioFlags(u8);

impl BioFlags {
    /// No flags.
    pub const NONE: BioFlags = BioFlags(0);
    /// Forced unit access: the write is durable when it completes.
    pub const FUA: BioFlags = BioFlags(1);
    /// Flush the write cache before the write (the kernel's REQ_PREFLUSH).
    pub const PREFLUSH: BioFlags = BioFlags(2);
    /// For WRITE_ZEROES: do not deallocate, write real zeroes (REQ_NOUNMAP).
    pub const NOUNMAP: BioFlags = BioFlags(4);
    /// Set by the engine on a pipelined zone write (never by a submitter): the host
    /// acknowledges it only after every write before it in its zone, so if one of
    /// those fails, this one fails too and the device may take the write pointer
    /// back under it.
    pub const PIPELINED: BioFlags = BioFlags(8);

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: BioFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// These flags less those of `other`.
    #[must_use]
    pub fn without(self, other: BioFlags) -> BioFlags {
        BioFlags(self.0 & !other.0)
    }

    /// The raw bits.
    pub fn bits(self) -> u8 {
        self.0
    }
}

impl std::ops::BitOr for BioFlags {
    type Output = BioFlags;
    fn bitor(self, rhs: BioFlags) -> BioFlags {
        BioFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for BioFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names = Vec::new();
        for (flag, name) in [
            (BioFlags::FUA, "FUA"),
            (BioFlags::PREFLUSH, "PREFLUSH"),
            (BioFlags::NOUNMAP, "NOUNMAP"),
            (BioFlags::PIPELINED, "PIPELINED"),
        ] {
            if self.contains(flag) {
                names.push(name);
            }
        }
        write!(f, "[{}]", names.join("|"))
    }
}

/// One I/O as its submitter sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bio {
    /// What to do.
    pub op: Op,
    /// First sector. For a zone operation or a zone append: the start of the zone.
    /// Ignored for FLUSH and ZONE_RESET_ALL.
    pub sector: Sector,
    /// Length in sectors (zero for FLUSH and zone operations).
    pub nr_sectors: u32,
    /// FUA, PREFLUSH, NOUNMAP.
    pub flags: BioFlags,
    /// The submitter's token, handed back in the completion and in every request
    /// made from this BIO (as io_uring's `user_data`).
    pub user_data: u64,
}

impl Bio {
    /// A READ of `nr_sectors` at `sector`.
    pub fn read(sector: Sector, nr_sectors: u32, user_data: u64) -> Bio {
        Bio { op: Op::Read, sector, nr_sectors, flags: BioFlags::NONE, user_data }
    }

    /// A WRITE of `nr_sectors` at `sector`.
    pub fn write(sector: Sector, nr_sectors: u32, user_data: u64) -> Bio {
        Bio { op: Op::Write, sector, nr_sectors, flags: BioFlags::NONE, user_data }
    }

    /// A ZONE_APPEND of `nr_sectors` to the zone starting at `zone_start`.
    pub fn append(zone_start: Sector, nr_sectors: u32, user_data: u64) -> Bio {
        Bio { op: Op::ZoneAppend, sector: zone_start, nr_sectors, flags: BioFlags::NONE, user_data }
    }

    /// A zone management operation on the zone starting at `zone_start`.
    pub fn zone_op(op: Op, zone_start: Sector, user_data: u64) -> Bio {
        assert!(op.is_zone_mgmt(), "{op} is not a zone management operation");
        Bio { op, sector: zone_start, nr_sectors: 0, flags: BioFlags::NONE, user_data }
    }

    /// A FLUSH.
    pub fn flush(user_data: u64) -> Bio {
        Bio { op: Op::Flush, sector: Sector::ZERO, nr_sectors: 0, flags: BioFlags::NONE, user_data }
    }

    /// The same BIO with `flags` added.
    pub fn with_flags(mut self, flags: BioFlags) -> Bio {
        self.flags = self.flags | flags;
        self
    }

    /// One past the last sector.
    pub fn end(&self) -> Sector {
        self.sector + u64::from(self.nr_sectors)
    }
}

/// Identifies a request issued to a device until the device completes it. Opaque to
/// drivers: they hand it back to [`crate::engine::Engine::complete`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId(pub(crate) u64);

impl ReqId {
    /// The raw value, for a driver's own tables and traces.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// An id for a request that no engine issued: a tool or a test that executes a
    /// request of its own making on a device (the device only hands it back).
    pub fn unissued(raw: u64) -> ReqId {
        ReqId(raw)
    }

    /// The id of slot `idx` in its `generation` (an engine's fragment table).
    pub(crate) fn pack(generation: u32, idx: u32) -> ReqId {
        ReqId((u64::from(generation) << 32) | u64::from(idx))
    }

    /// `(generation, slot)` of an id made by [`ReqId::pack`].
    pub(crate) fn unpack(self) -> (u32, u32) {
        ((self.0 >> 32) as u32, self.0 as u32)
    }
}

/// What the core issues to a device: a BIO, or a piece of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// Hand this back on completion.
    pub id: ReqId,
    /// The device operation. An emulated zone append is issued as a WRITE at the
    /// zone's write pointer; ZONE_APPEND here means the device's native append.
    pub op: Op,
    /// First sector (for a native append, the zone start).
    pub sector: Sector,
    /// Length in sectors.
    pub nr_sectors: u32,
    /// FUA, PREFLUSH, NOUNMAP as submitted.
    pub flags: BioFlags,
    /// The `user_data` of the BIO this request comes from.
    pub user_data: u64,
    /// Where this request's data starts in the BIO's buffer, in sectors from the BIO
    /// start.
    pub bio_offset: u32,
}

impl Request {
    /// A request that no engine issued (id [`ReqId::unissued`] 0, no flags, no
    /// buffer token): what a device's own tests and tools hand it directly.
    pub fn direct(op: Op, sector: Sector, nr_sectors: u32) -> Request {
        Request { id: ReqId::unissued(0), op, sector, nr_sectors, flags: BioFlags::NONE, user_data: 0, bio_offset: 0 }
    }

    /// One past the last sector.
    pub fn end(&self) -> Sector {
        self.sector + u64::from(self.nr_sectors)
    }
}

/// The end of a BIO, handed back to its submitter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The BIO's `user_data`.
    pub user_data: u64,
    /// On success, the sector where the BIO's data starts on the device: for a zone
    /// append the sector it was written at, otherwise the BIO's own sector.
    pub result: Result<Sector, Status>,
}

/// The accounting of a BIO cut into pieces (an engine's requests, the BIOs a stacked
/// device submits to its members): it ends when its last piece ends, with the first
/// error any piece met, or with its result sector.
///
/// One reference is held for the submission itself while the BIO is being cut, so
/// that a piece ending early (refused at once) cannot end the BIO before every piece
/// exists: the submitter calls [`BioAccount::end_piece`] once more when it is done
/// cutting.
#[derive(Debug)]
pub(crate) struct BioAccount {
    /// The submitter's token.
    pub user_data: u64,
    /// Pieces not ended yet, plus the submission's own reference.
    remaining: u32,
    /// The first error a piece met.
    status: Option<Status>,
    /// The BIO's sector, or for a zone append where the data landed.
    result: Sector,
}

impl BioAccount {
    /// A BIO at `sector`, holding the submission's reference.
    pub fn new(user_data: u64, sector: Sector) -> BioAccount {
        BioAccount { user_data, remaining: 1, status: None, result: sector }
    }

    /// One more piece is outstanding.
    pub fn add_piece(&mut self) {
        self.remaining += 1;
    }

    /// Pieces outstanding, the submission's reference included.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// A zone append's data landed at `at`.
    pub fn set_result(&mut self, at: Sector) {
        self.result = at;
    }

    /// A piece (or the submission's reference) ended. Returns whether the BIO is done.
    pub fn end_piece(&mut self, result: Result<(), Status>) -> bool {
        if let Err(s) = result {
            self.status.get_or_insert(s);
        }
        assert!(self.remaining > 0, "BIO {:#x} ended more pieces than it had", self.user_data);
        self.remaining -= 1;
        self.remaining == 0
    }

    /// The BIO's completion, once done.
    pub fn completion(&self) -> Completion {
        let result = match self.status {
            Some(s) => Err(s),
            None => Ok(self.result),
        };
        Completion { user_data: self.user_data, result }
    }
}

/// The class of a failure: the kernel's `blk_status_t` values, with the causes a
/// zoned device distinguishes spelled out. Each maps to the errno a user sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusCode {
    /// A generic I/O error (BLK_STS_IOERR), e.g. an injected media error.
    IoErr,
    /// A write to a sequential zone that does not start at its write pointer
    /// (SCSI "unaligned write command", NVMe "zone invalid write").
    Unaligned,
    /// A write to a FULL zone, or one that would go past the zone capacity.
    ZoneFull,
    /// The zone is READONLY.
    ZoneReadOnly,
    /// The zone is OFFLINE.
    ZoneOffline,
    /// No zone can be opened: the open limit is reached and no implicitly open zone
    /// can be closed (BLK_STS_ZONE_OPEN_RESOURCE).
    ZoneOpenResource,
    /// The active zone limit is reached (BLK_STS_ZONE_ACTIVE_RESOURCE).
    ZoneActiveResource,
    /// The request itself is wrong: out of range, misaligned to the block size, wrong
    /// operation for the zone type, an append too large or crossing a zone.
    Invalid,
    /// The device does not support the operation (BLK_STS_NOTSUPP).
    NotSupported,
    /// A plugged write that could not be issued: an earlier write to its zone failed,
    /// or the zone was reset or finished while the write waited in the plug.
    Aborted,
    /// The host lost track of the zone's write pointer after a write error and has
    /// not re-synchronised it yet (the kernel's BLK_ZONE_WPLUG_NEED_WP_UPDATE).
    NeedWpUpdate,
    /// Too many BIOs are queued in the core (BLK_STS_AGAIN).
    Again,
}

impl StatusCode {
    /// Every code, in the order of their values.
    pub const ALL: [StatusCode; 12] = [
        StatusCode::IoErr,
        StatusCode::Unaligned,
        StatusCode::ZoneFull,
        StatusCode::ZoneReadOnly,
        StatusCode::ZoneOffline,
        StatusCode::ZoneOpenResource,
        StatusCode::ZoneActiveResource,
        StatusCode::Invalid,
        StatusCode::NotSupported,
        StatusCode::Aborted,
        StatusCode::NeedWpUpdate,
        StatusCode::Again,
    ];

    /// What the failure is, in words.
    pub fn describe(self) -> &'static str {
        match self {
            StatusCode::IoErr => "I/O error",
            StatusCode::Unaligned => "unaligned write",
            StatusCode::ZoneFull => "zone is full",
            StatusCode::ZoneReadOnly => "zone is read-only",
            StatusCode::ZoneOffline => "zone is offline",
            StatusCode::ZoneOpenResource => "too many open zones",
            StatusCode::ZoneActiveResource => "too many active zones",
            StatusCode::Invalid => "invalid request",
            StatusCode::NotSupported => "operation not supported",
            StatusCode::Aborted => "aborted: zone write pointer changed",
            StatusCode::NeedWpUpdate => "zone write pointer needs an update (report the zone)",
            StatusCode::Again => "too many queued I/Os, try again",
        }
    }
}

/// Why an I/O failed: its [`StatusCode`] (what the kernel's user sees, as an errno)
/// and, where the place that decided knows it, the [`Rule`] that refused it (what
/// the user is told: see [`crate::rule`]).
///
/// Statuses compare, hash and print (`{:?}`) by their code alone: the rule is what
/// a message says, not part of the outcome. The constants carry the codes' names
/// (`Status::Unaligned`), as the kernel's `BLK_STS_*` do.
///
/// Eight bytes, so that a request's `Result<Sector, Status>` stays two words on the
/// completion path: the code, the rule and its write pointer are packed (see
/// [`crate::rule::Rule::pack`]).
#[derive(Clone, Copy)]
pub struct Status(u64);

/// Bits of [`Status`] that hold the code; the rule has the rest.
const CODE_BITS: u32 = 4;

#[allow(non_upper_case_globals)]
impl Status {
    /// See [`StatusCode::IoErr`].
    pub const IoErr: Status = Status::of(StatusCode::IoErr);
    /// See [`StatusCode::Unaligned`].
    pub const Unaligned: Status = Status::of(StatusCode::Unaligned);
    /// See [`StatusCode::ZoneFull`].
    pub const ZoneFull: Status = Status::of(StatusCode::ZoneFull);
    /// See [`StatusCode::ZoneReadOnly`].
    pub const ZoneReadOnly: Status = Status::of(StatusCode::ZoneReadOnly);
    /// See [`StatusCode::ZoneOffline`].
    pub const ZoneOffline: Status = Status::of(StatusCode::ZoneOffline);
    /// See [`StatusCode::ZoneOpenResource`].
    pub const ZoneOpenResource: Status = Status::of(StatusCode::ZoneOpenResource);
    /// See [`StatusCode::ZoneActiveResource`].
    pub const ZoneActiveResource: Status = Status::of(StatusCode::ZoneActiveResource);
    /// See [`StatusCode::Invalid`].
    pub const Invalid: Status = Status::of(StatusCode::Invalid);
    /// See [`StatusCode::NotSupported`].
    pub const NotSupported: Status = Status::of(StatusCode::NotSupported);
    /// See [`StatusCode::Aborted`].
    pub const Aborted: Status = Status::of(StatusCode::Aborted);
    /// See [`StatusCode::NeedWpUpdate`].
    pub const NeedWpUpdate: Status = Status::of(StatusCode::NeedWpUpdate);
    /// See [`StatusCode::Again`].
    pub const Again: Status = Status::of(StatusCode::Again);
}

impl Status {
    /// A status of `code` with no rule named.
    pub const fn of(code: StatusCode) -> Status {
        Status(code as u64)
    }

    /// The same status, refused by `rule`.
    #[must_use]
    pub fn because(self, rule: Rule) -> Status {
        Status((self.0 & ((1 << CODE_BITS) - 1)) | rule.pack() << CODE_BITS)
    }

    /// Its class.
    pub fn code(self) -> StatusCode {
        StatusCode::ALL[(self.0 & ((1 << CODE_BITS) - 1)) as usize]
    }

    /// The rule that refused the request, if the place that decided named it.
    pub fn rule(self) -> Option<Rule> {
        Rule::unpack(self.0 >> CODE_BITS)
    }

    /// The Linux errno a user sees for this status.
    pub fn errno(self) -> i32 {
        match self.code() {
            // Planted bug (`mutations` only): an aborted write told as EAGAIN.
            StatusCode::Aborted if crate::mutation::on(crate::mutation::Mutation::AbortedAsEagain) => 11,
            StatusCode::IoErr
            | StatusCode::Unaligned
            | StatusCode::ZoneFull
            | StatusCode::ZoneReadOnly
            | StatusCode::ZoneOffline
            | StatusCode::Aborted
            | StatusCode::NeedWpUpdate => 5, // EIO
            StatusCode::ZoneOpenResource => 109,  // ETOOMANYREFS
            StatusCode::ZoneActiveResource => 75, // EOVERFLOW
            StatusCode::Invalid => 22,            // EINVAL
            StatusCode::NotSupported => 95,       // EOPNOTSUPP
            StatusCode::Again => 11,              // EAGAIN
        }
    }

    /// The status a device's failed call stands for, from its errno, as the kernel's
    /// `errno_to_blk_status()` maps one back: an errno that only one status has
    /// ([`Status::errno`]: EINVAL, EOPNOTSUPP, ETOOMANYREFS, EOVERFLOW) is that status;
    /// anything else, EAGAIN included (a device's transient refusal, which the block
    /// layer fails as an I/O error), is [`Status::IoErr`]. Every device that gets
    /// errnos (a Linux zoned block device, an NVMe generic device) reads them here.
    pub fn from_errno(errno: i32) -> Status {
        const EIO: i32 = 5;
        const EAGAIN: i32 = 11;
        if errno == EIO || errno == EAGAIN {
            return Status::IoErr;
        }
        let mut named = Status::ALL.into_iter().filter(|s| s.errno() == errno);
        match (named.next(), named.next()) {
            (Some(s), None) => s,
            _ => Status::IoErr,
        }
    }

    /// The errno's symbolic name, e.g. `EIO`.
    pub fn errno_name(self) -> &'static str {
        match self.errno() {
            5 => "EIO",
            109 => "ETOOMANYREFS",
            75 => "EOVERFLOW",
            22 => "EINVAL",
            95 => "EOPNOTSUPP",
            11 => "EAGAIN",
            n => unreachable!("errno {n} has no name"),
        }
    }

    /// Every status, for tables and tests.
    pub const ALL: [Status; 12] = {
        let mut all = [Status::IoErr; 12];
        let mut i = 0;
        while i < all.len() {
            all[i] = Status::of(StatusCode::ALL[i]);
            i += 1;
        }
        all
    };
}

impl PartialEq for Status {
    fn eq(&self, other: &Status) -> bool {
        self.code() == other.code()
    }
}

impl Eq for Status {}

impl std::hash::Hash for Status {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.code().hash(h);
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.code(), f)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code().describe())
    }
}

impl std::error::Error for Status {}

impl serde::Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.code().serialize(s)
    }
}

impl From<StatusCode> for Status {
    fn from(code: StatusCode) -> Status {
        Status::of(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_the_errnos_of_domain_md() {
        assert_eq!(Status::Unaligned.errno_name(), "EIO");
        assert_eq!(Status::ZoneFull.errno_name(), "EIO");
        assert_eq!(Status::ZoneOpenResource.errno_name(), "ETOOMANYREFS");
        assert_eq!(Status::ZoneActiveResource.errno_name(), "EOVERFLOW");
        assert_eq!(Status::Invalid.errno_name(), "EINVAL");
        for s in Status::ALL {
            assert!(!s.errno_name().is_empty());
            assert!(!s.to_string().is_empty());
        }
    }

    #[test]
    fn a_devices_errno_maps_back_to_the_status_only_it_names() {
        for (errno, s) in [(22, Status::Invalid), (95, Status::NotSupported), (109, Status::ZoneOpenResource)] {
            assert_eq!(Status::from_errno(errno), s);
        }
        assert_eq!(Status::from_errno(75), Status::ZoneActiveResource);
        for errno in [5, 11, 0, -1, 28, 4095] {
            assert_eq!(Status::from_errno(errno), Status::IoErr, "errno {errno}");
        }
        // Back and forth: a status whose errno is its own comes back as itself.
        for s in Status::ALL {
            let back = Status::from_errno(s.errno());
            assert!(back == s || back == Status::IoErr, "{s} -> {} -> {back}", s.errno());
            assert_eq!(back.errno() == s.errno(), back == s || s.errno() == 5, "{s}");
        }
    }

    #[test]
    fn a_status_compares_by_its_code_and_carries_its_rule() {
        let refused = Status::Unaligned.because(Rule::NotAtWp { wp: Sector(8) });
        assert_eq!(refused, Status::Unaligned);
        assert_ne!(refused, Status::ZoneFull);
        assert_eq!(refused.rule(), Some(Rule::NotAtWp { wp: Sector(8) }));
        assert_eq!(std::mem::size_of::<Result<Sector, Status>>(), 16, "two words on the completion path");
        for (i, c) in StatusCode::ALL.into_iter().enumerate() {
            assert_eq!(c as usize, i);
            for r in Rule::EVERY {
                assert_eq!(Status::of(c).because(r).code(), c);
                assert_eq!(Status::of(c).because(r).rule(), Some(r), "{c:?} {r:?}");
            }
        }
        assert_eq!(Status::Unaligned.rule(), None);
        assert_eq!(format!("{refused:?} {refused}"), "Unaligned unaligned write");
    }

    #[test]
    fn flags_combine() {
        let f = BioFlags::FUA | BioFlags::PREFLUSH;
        assert!(f.contains(BioFlags::FUA));
        assert!(f.contains(BioFlags::PREFLUSH));
        assert!(!f.contains(BioFlags::NOUNMAP));
        assert_eq!(format!("{f:?}"), "[FUA|PREFLUSH]");
    }
}
