//! The device side of the zone model: zone types, conditions and their legal
//! transitions, the write pointer check, and the open/active resource limits.
//!
//! [`ZoneSet`] is what every emulated device (memory, file image, timing models)
//! executes requests against. It checks on its own, independently of the host-side
//! zone write plugs: a write that reaches it anywhere but at the write pointer fails
//! with [`Status::Unaligned`]. Having a check on both sides of the boundary is what
//! makes ordering bugs visible. Its semantics follow null_blk's `zoned.c`, which
//! follows ZBC/ZNS: implicit open on write, closing an implicitly open zone to make
//! room under `max_open`, the active limit counting open and closed zones.

use crate::bio::Status;
use crate::geometry::Geometry;
use crate::rule::Rule;
use crate::units::{Sector, ZoneNo};
use std::fmt;

/// The type of a zone (`BLK_ZONE_TYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ZoneType {
    /// Random writes allowed, no write pointer (NOT_WP).
    Conventional,
    /// Writes must start at the write pointer.
    SeqWriteRequired,
}

impl ZoneType {
    /// The numeric code `blkzone report` prints (`type: 1(CONVENTIONAL)`).
    pub fn code(self) -> u8 {
        match self {
            ZoneType::Conventional => 1,
            ZoneType::SeqWriteRequired => 2,
        }
    }

    /// The name `blkzone report` prints.
    pub fn name(self) -> &'static str {
        match self {
            ZoneType::Conventional => "CONVENTIONAL",
            ZoneType::SeqWriteRequired => "SEQ_WRITE_REQUIRED",
        }
    }
}

/// The condition of a zone (`BLK_ZONE_COND_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ZoneCond {
    /// Conventional zone: no write pointer.
    NotWp,
    /// Nothing written, write pointer at the zone start.
    Empty,
    /// Opened by a write; may be closed by the device to open another zone.
    ImpOpen,
    /// Opened by an explicit OPEN; stays open until closed, finished or reset.
    ExpOpen,
    /// Partly written and not open: counts against the active limit only.
    Closed,
    /// Written to its capacity, or finished.
    Full,
    /// Cannot be written (device-side fault).
    ReadOnly,
    /// Cannot be accessed at all (device-side fault).
    Offline,
}

/// blkzone's short names of zone conditions, by code (`condition_str[]` in
/// util-linux's `blkzone.c`): the one table `zblk report` prints from.
const COND_SHORT: [&str; 16] =
    ["nw", "em", "oi", "oe", "cl", "x5", "x6", "x7", "x8", "x9", "xA", "xB", "xC", "ro", "fu", "of"];

/// The kernel's names of zone conditions (`blk_zone_cond_str()`), by code.
const COND_NAME: [&str; 16] = [
    "NOT_WP", "EMPTY", "IMP_OPEN", "EXP_OPEN", "CLOSED", "0x5", "0x6", "0x7", "0x8", "0x9", "0xA", "0xB", "0xC",
    "READONLY", "FULL", "OFFLINE",
];

impl ZoneCond {
    /// The numeric code `blkzone report` prints (`cond: 0x1(em)`).
    pub fn code(self) -> u8 {
        match self {
            ZoneCond::NotWp => 0x0,
            ZoneCond::Empty => 0x1,
            ZoneCond::ImpOpen => 0x2,
            ZoneCond::ExpOpen => 0x3,
            ZoneCond::Closed => 0x4,
            ZoneCond::ReadOnly => 0xd,
            ZoneCond::Full => 0xe,
            ZoneCond::Offline => 0xf,
        }
    }

    /// The condition of code `code`, if one has it.
    pub fn of_code(code: u8) -> Option<ZoneCond> {
        Some(match code {
            0x0 => ZoneCond::NotWp,
            0x1 => ZoneCond::Empty,
            0x2 => ZoneCond::ImpOpen,
            0x3 => ZoneCond::ExpOpen,
            0x4 => ZoneCond::Closed,
            0xd => ZoneCond::ReadOnly,
            0xe => ZoneCond::Full,
            0xf => ZoneCond::Offline,
            _ => return None,
        })
    }

    /// The short name `blkzone report` prints (`zcond:15(of)`).
    pub fn short_name(self) -> &'static str {
        ZoneCond::short_name_of(self.code())
    }

    /// The kernel's name (`blk_zone_cond_str()`).
    pub fn name(self) -> &'static str {
        ZoneCond::name_of(self.code())
    }

    /// blkzone's short name of condition code `code` (its `condition_str[]`, indexed
    /// by the low four bits): a code no condition has is printed `xN`, as blkzone
    /// prints a reserved one. A Linux device reports codes, not [`ZoneCond`]s.
    pub fn short_name_of(code: u8) -> &'static str {
        COND_SHORT[usize::from(code & 0xf)]
    }

    /// The kernel's name of condition code `code`; a reserved code as `0xN`.
    pub fn name_of(code: u8) -> &'static str {
        COND_NAME[usize::from(code & 0xf)]
    }

    /// Whether the zone is open (implicitly or explicitly).
    pub fn is_open(self) -> bool {
        matches!(self, ZoneCond::ImpOpen | ZoneCond::ExpOpen)
    }

    /// Whether the zone counts against the active limit (open or closed).
    pub fn is_active(self) -> bool {
        matches!(self, ZoneCond::ImpOpen | ZoneCond::ExpOpen | ZoneCond::Closed)
    }
}

impl fmt::Display for ZoneCond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One zone as a zone report describes it (the kernel's `struct blk_zone`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ZoneInfo {
    /// First sector.
    pub start: Sector,
    /// Length in sectors.
    pub len: u64,
    /// Writable sectors from the start.
    pub capacity: u64,
    /// Write pointer (absolute sector). For conventional zones: `start + len`, as
    /// null_blk reports; for a finished zone: `start + len`.
    pub wp: Sector,
    /// Conventional or sequential.
    pub ztype: ZoneType,
    /// Condition.
    pub cond: ZoneCond,
}

impl ZoneInfo {
    /// The descriptor of zone `z` of `geo`: a conventional zone (NOT_WP, write pointer
    /// at its end) whatever `cond` and `wp_offset` say, else a sequential zone in
    /// condition `cond` with its write pointer `wp_offset` sectors from its start.
    pub fn of(geo: &Geometry, z: ZoneNo, cond: ZoneCond, wp_offset: u64) -> ZoneInfo {
        let start = geo.zone_start(z);
        let len = geo.zone_len(z);
        if geo.zone_is_conv(z) {
            return ZoneInfo {
                start,
                len,
                capacity: len,
                wp: start + len,
                ztype: ZoneType::Conventional,
                cond: ZoneCond::NotWp,
            };
        }
        ZoneInfo {
            start,
            len,
            capacity: geo.zone_capacity(z),
            wp: start + wp_offset,
            ztype: ZoneType::SeqWriteRequired,
            cond,
        }
    }

    /// The zone's write pointer as an offset from its start, as the kernel's
    /// `blk_zone_wp_offset()` derives it: `None` for zones without a valid write
    /// pointer (conventional, read-only, offline); the zone length when FULL.
    pub fn wp_offset(&self) -> Option<u64> {
        match self.cond {
            ZoneCond::ImpOpen | ZoneCond::ExpOpen | ZoneCond::Closed => Some(self.wp.since(self.start)),
            ZoneCond::Full => Some(self.len),
            ZoneCond::Empty => Some(0),
            ZoneCond::NotWp | ZoneCond::ReadOnly | ZoneCond::Offline => None,
        }
    }
}

/// The zones of one device and their resource counters: the device-side state
/// machine shared by every emulated device.
#[derive(Clone, Debug)]
pub struct ZoneSet {
    geo: Geometry,
    zones: Vec<ZoneInfo>,
    nr_imp_open: u32,
    nr_exp_open: u32,
    nr_closed: u32,
    /// Where the round-robin search for an implicitly open zone to close starts
    /// (null_blk's `imp_close_zone_no`), so that closes spread over zones.
    imp_close_zone_no: u32,
    /// When each zone last became implicitly open (a count of implicit opens), for
    /// the planted bug that closes the newest one (`mutation::ImplicitCloseWrongZone`).
    imp_opened: Vec<u64>,
    imp_opens: u64,
}

impl ZoneSet {
    /// All sequential zones EMPTY, conventional zones NOT_WP.
    pub fn new(geo: &Geometry) -> ZoneSet {
        assert!(geo.is_zoned(), "ZoneSet on a regular device");
        let zones = (0..geo.nr_zones()).map(|z| ZoneInfo::of(geo, ZoneNo(z), ZoneCond::Empty, 0)).collect();
        ZoneSet {
            geo: geo.clone(),
            zones,
            nr_imp_open: 0,
            nr_exp_open: 0,
            nr_closed: 0,
            imp_close_zone_no: geo.nr_conv(),
            imp_opened: vec![0; geo.nr_zones() as usize],
            imp_opens: 0,
        }
    }

    /// Rebuilds a zone set from saved zone descriptors (a persistent image), checking
    /// that they describe this geometry and recounting the resources. Returns what
    /// is inconsistent, zone by zone, instead of trusting it.
    pub fn from_zones(geo: &Geometry, saved: &[ZoneInfo]) -> Result<ZoneSet, String> {
        let mut set = ZoneSet::new(geo);
        if saved.len() != set.zones.len() {
            return Err(format!("{} zones saved, the geometry has {}", saved.len(), set.zones.len()));
        }
        for (z, (zone, s)) in set.zones.iter_mut().zip(saved).enumerate() {
            if s.start != zone.start || s.len != zone.len || s.capacity != zone.capacity || s.ztype != zone.ztype {
                return Err(format!("zone {z}: layout differs from the geometry"));
            }
            let wp_ok = s.wp >= s.start && s.wp.since(s.start) <= s.len;
            let cond_ok = match (s.ztype, s.cond) {
                (ZoneType::Conventional, c) => c == ZoneCond::NotWp,
                (_, ZoneCond::NotWp) => false,
                (_, ZoneCond::Empty) => s.wp == s.start,
                (_, ZoneCond::Full) => true,
                (_, ZoneCond::ReadOnly | ZoneCond::Offline) => true,
                (_, ZoneCond::ImpOpen | ZoneCond::ExpOpen) => s.wp.since(s.start) < s.capacity,
                (_, ZoneCond::Closed) => s.wp > s.start && s.wp.since(s.start) < s.capacity,
            };
            if !wp_ok || !cond_ok {
                return Err(format!("zone {z}: condition {} with write pointer {} is impossible", s.cond, s.wp));
            }
            *zone = *s;
        }
        set.recount();
        Ok(set)
    }

    fn recount(&mut self) {
        self.nr_imp_open = self.count(ZoneCond::ImpOpen);
        self.nr_exp_open = self.count(ZoneCond::ExpOpen);
        self.nr_closed = self.count(ZoneCond::Closed);
    }

    fn count(&self, cond: ZoneCond) -> u32 {
        self.zones.iter().filter(|z| z.cond == cond).count() as u32
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// Zone `z` as a report would show it.
    pub fn zone(&self, z: ZoneNo) -> &ZoneInfo {
        &self.zones[z.idx()]
    }

    /// All zones.
    pub fn zones(&self) -> &[ZoneInfo] {
        &self.zones
    }

    /// Appends up to `max` zone descriptors starting with the zone holding `from` to
    /// `out` (REPORT_ZONES). Returns how many were added.
    pub fn report(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> usize {
        if from.0 >= self.geo.nr_sectors() {
            return 0;
        }
        let first = self.geo.zone_no(from).idx();
        let n = max.min(self.zones.len() - first);
        out.extend_from_slice(&self.zones[first..first + n]);
        n
    }

    /// Number of open zones (implicitly + explicitly).
    pub fn nr_open(&self) -> u32 {
        self.nr_imp_open + self.nr_exp_open
    }

    /// Number of active zones (open + closed).
    pub fn nr_active(&self) -> u32 {
        self.nr_open() + self.nr_closed
    }

    /// Checks a read of `[sector, sector+nr_sectors)` and returns how many of its
    /// sectors lie below the write pointers (the rest read as zeroes, as on null_blk).
    pub fn read(&self, sector: Sector, nr_sectors: u32) -> Result<u64, Status> {
        self.check_range(sector, u64::from(nr_sectors))?;
        let mut valid = 0;
        let mut s = sector;
        let end = sector + u64::from(nr_sectors);
        while s < end {
            let zone = &self.zones[self.geo.zone_no(s).idx()];
            let zend = (zone.start + zone.len).min(end);
            match zone.cond {
                ZoneCond::Offline => return Err(Status::ZoneOffline),
                ZoneCond::NotWp => valid += zend.since(s),
                _ => valid += zone.wp.min(zend).0.saturating_sub(s.0),
            }
            s = zend;
        }
        Ok(valid)
    }

    fn check_range(&self, sector: Sector, nr_sectors: u64) -> Result<(), Status> {
        if sector.0.checked_add(nr_sectors).is_none_or(|end| end > self.geo.nr_sectors()) {
            return Err(Status::Invalid.because(Rule::BeyondEnd));
        }
        if !self.geo.is_block_aligned(sector, nr_sectors) {
            return Err(Status::Invalid.because(Rule::NotBlockAligned));
        }
        Ok(())
    }

    /// Executes a write (or a native zone append when `append`) of `nr_sectors` at
    /// `sector`: checks it, opens the zone if needed, advances the write pointer.
    /// Returns the sector written at (the write pointer, for an append).
    pub fn write(&mut self, sector: Sector, nr_sectors: u32, append: bool) -> Result<Sector, Status> {
        let n = u64::from(nr_sectors);
        self.check_range(sector, n)?;
        if n == 0 {
            return Err(Status::Invalid.because(Rule::LengthZero));
        }
        let z = self.geo.zone_no(sector);
        let zone = self.zones[z.idx()];
        if zone.ztype == ZoneType::Conventional {
            // A conventional write must stay in its zone; an append needs a WP.
            if append {
                return Err(Status::Invalid.because(Rule::Conventional));
            }
            if sector + n > zone.start + zone.len {
                return Err(Status::Invalid.because(Rule::CrossesZone));
            }
            return Ok(sector);
        }
        match zone.cond {
            ZoneCond::Full => return Err(Status::ZoneFull.because(Rule::ZoneFull)),
            ZoneCond::ReadOnly => return Err(Status::ZoneReadOnly),
            ZoneCond::Offline => return Err(Status::ZoneOffline),
            _ => {}
        }
        let at = if append {
            if sector != zone.start {
                return Err(Status::Invalid.because(Rule::NotZoneStart));
            }
            zone.wp
        } else if sector != zone.wp {
            return Err(Status::Unaligned.because(Rule::NotAtWp { wp: zone.wp }));
        } else {
            sector
        };
        if at + n > zone.start + zone.capacity {
            return Err(Status::ZoneFull.because(Rule::PastCapacity { wp: zone.wp }));
        }
        if matches!(zone.cond, ZoneCond::Empty | ZoneCond::Closed) {
            self.check_zone_resources(z)?;
            if zone.cond == ZoneCond::Closed {
                self.nr_closed -= 1;
            }
            self.nr_imp_open += 1;
            self.zones[z.idx()].cond = ZoneCond::ImpOpen;
            self.imp_opens += 1;
            self.imp_opened[z.idx()] = self.imp_opens;
        }
        let zone = &mut self.zones[z.idx()];
        zone.wp = at + n;
        if zone.wp == zone.start + zone.capacity {
            match zone.cond {
                ZoneCond::ExpOpen => self.nr_exp_open -= 1,
                ZoneCond::ImpOpen => self.nr_imp_open -= 1,
                c => unreachable!("write completed in condition {c}"),
            }
            zone.cond = ZoneCond::Full;
        }
        self.assert_counts();
        Ok(at)
    }

    /// ZBC's "manage open zone resources", with ZNS's active limit: may a zone in
    /// `z`'s condition (EMPTY or CLOSED) become open? Closes an implicitly open zone
    /// to make room when the open limit is reached and the active limit allows it.
    fn check_zone_resources(&mut self, z: ZoneNo) -> Result<(), Status> {
        let cond = self.zones[z.idx()].cond;
        assert!(matches!(cond, ZoneCond::Empty | ZoneCond::Closed), "resource check in {cond}");
        if cond == ZoneCond::Empty {
            self.check_active()?;
        }
        self.check_open()
    }

    fn check_active(&self) -> Result<(), Status> {
        let max = self.max_active();
        if max == 0 || self.nr_active() < max { Ok(()) } else { Err(Status::ZoneActiveResource) }
    }

    /// The active-zone limit (0: none). The planted off-by-one of the mutation check
    /// changes it here, for the checks and the assertions alike, as a real bug would.
    fn max_active(&self) -> u32 {
        let max = self.geo.max_active();
        if max > 0 && crate::mutation::on(crate::mutation::Mutation::ActiveLimitOffByOne) { max + 1 } else { max }
    }

    fn check_open(&mut self) -> Result<(), Status> {
        let max = self.geo.max_open();
        if max == 0 || self.nr_open() < max {
            return Ok(());
        }
        if self.nr_imp_open > 0 && self.check_active().is_ok() {
            self.close_imp_open_zone();
            return Ok(());
        }
        Err(Status::ZoneOpenResource)
    }

    /// Closes the next implicitly open zone, round-robin from where the last search
    /// stopped.
    fn close_imp_open_zone(&mut self) {
        let nr_zones = self.geo.nr_zones();
        let nr_conv = self.geo.nr_conv();
        let mut zno = self.imp_close_zone_no;
        if crate::mutation::on(crate::mutation::Mutation::ImplicitCloseWrongZone) {
            let newest = (nr_conv..nr_zones)
                .filter(|&z| self.zones[z as usize].cond == ZoneCond::ImpOpen)
                .max_by_key(|&z| self.imp_opened[z as usize]);
            self.close_zone(ZoneNo(newest.expect("an implicitly open zone"))).expect("close");
            return;
        }
        for _ in nr_conv..nr_zones {
            if zno >= nr_zones {
                zno = nr_conv;
            }
            let this = zno;
            zno += 1;
            if self.zones[this as usize].cond == ZoneCond::ImpOpen {
                self.close_zone(ZoneNo(this)).expect("closing an implicitly open zone cannot fail");
                self.imp_close_zone_no = zno;
                return;
            }
        }
        unreachable!("nr_imp_open > 0 but no zone is implicitly open");
    }

    fn seq_zone(&self, z: ZoneNo) -> Result<ZoneInfo, Status> {
        let zone = self.zones[z.idx()];
        match (zone.ztype, zone.cond) {
            (ZoneType::Conventional, _) => Err(Status::Invalid.because(Rule::Conventional)),
            (_, ZoneCond::ReadOnly) => Err(Status::ZoneReadOnly),
            (_, ZoneCond::Offline) => Err(Status::ZoneOffline),
            _ => Ok(zone),
        }
    }

    /// ZONE_OPEN: explicitly open zone `z`.
    pub fn open_zone(&mut self, z: ZoneNo) -> Result<(), Status> {
        let zone = self.seq_zone(z)?;
        match zone.cond {
            ZoneCond::ExpOpen => return Ok(()),
            ZoneCond::Empty => self.check_zone_resources(z)?,
            ZoneCond::ImpOpen => self.nr_imp_open -= 1,
            ZoneCond::Closed => {
                self.check_zone_resources(z)?;
                self.nr_closed -= 1;
            }
            c => return Err(Status::ZoneFull.because(Rule::Transition { cond: c })),
        }
        self.zones[z.idx()].cond = ZoneCond::ExpOpen;
        self.nr_exp_open += 1;
        self.assert_counts();
        Ok(())
    }

    /// ZONE_CLOSE: close open zone `z` (EMPTY if nothing was written).
    pub fn close_zone(&mut self, z: ZoneNo) -> Result<(), Status> {
        let zone = self.seq_zone(z)?;
        match zone.cond {
            ZoneCond::Closed => return Ok(()),
            ZoneCond::ImpOpen => self.nr_imp_open -= 1,
            ZoneCond::ExpOpen => self.nr_exp_open -= 1,
            c => return Err(Status::IoErr.because(Rule::Transition { cond: c })),
        }
        let zone = &mut self.zones[z.idx()];
        if zone.wp == zone.start {
            zone.cond = ZoneCond::Empty;
        } else {
            zone.cond = ZoneCond::Closed;
            self.nr_closed += 1;
        }
        self.assert_counts();
        Ok(())
    }

    /// ZONE_FINISH: move zone `z`'s write pointer to its end (FULL).
    pub fn finish_zone(&mut self, z: ZoneNo) -> Result<(), Status> {
        let zone = self.seq_zone(z)?;
        match zone.cond {
            ZoneCond::Full => return Ok(()),
            ZoneCond::Empty => self.check_zone_resources(z)?,
            ZoneCond::ImpOpen => self.nr_imp_open -= 1,
            ZoneCond::ExpOpen => self.nr_exp_open -= 1,
            ZoneCond::Closed => {
                self.check_zone_resources(z)?;
                self.nr_closed -= 1;
            }
            c => unreachable!("finish in {c}"),
        }
        let zone = &mut self.zones[z.idx()];
        zone.cond = ZoneCond::Full;
        zone.wp = zone.start + zone.len;
        self.assert_counts();
        Ok(())
    }

    /// ZONE_RESET: move zone `z`'s write pointer back to its start (EMPTY).
    pub fn reset_zone(&mut self, z: ZoneNo) -> Result<(), Status> {
        let zone = self.seq_zone(z)?;
        match zone.cond {
            ZoneCond::Empty => return Ok(()),
            ZoneCond::ImpOpen => self.nr_imp_open -= 1,
            ZoneCond::ExpOpen => self.nr_exp_open -= 1,
            ZoneCond::Closed => self.nr_closed -= 1,
            ZoneCond::Full => {}
            c => unreachable!("reset in {c}"),
        }
        let zone = &mut self.zones[z.idx()];
        zone.cond = ZoneCond::Empty;
        zone.wp = zone.start;
        self.assert_counts();
        Ok(())
    }

    /// ZONE_RESET_ALL: reset every sequential zone that is not EMPTY, READONLY or
    /// OFFLINE. Returns the zones reset, so that data can be dropped.
    pub fn reset_all(&mut self) -> Vec<ZoneNo> {
        let mut reset = Vec::new();
        for z in self.geo.nr_conv()..self.geo.nr_zones() {
            let z = ZoneNo(z);
            if !matches!(self.zones[z.idx()].cond, ZoneCond::Empty | ZoneCond::ReadOnly | ZoneCond::Offline) {
                self.reset_zone(z).expect("reset of a writable zone cannot fail");
                reset.push(z);
            }
        }
        reset
    }

    /// Fault injection: turn zone `z` READONLY or OFFLINE, as a failing device does.
    /// The write pointer is kept for READONLY (still readable), as ZBC does.
    pub fn set_failed(&mut self, z: ZoneNo, cond: ZoneCond) {
        assert!(matches!(cond, ZoneCond::ReadOnly | ZoneCond::Offline), "set_failed({cond})");
        let zone = self.zones[z.idx()];
        assert_eq!(zone.ztype, ZoneType::SeqWriteRequired, "only sequential zones fail");
        match zone.cond {
            ZoneCond::ImpOpen => self.nr_imp_open -= 1,
            ZoneCond::ExpOpen => self.nr_exp_open -= 1,
            ZoneCond::Closed => self.nr_closed -= 1,
            _ => {}
        }
        self.zones[z.idx()].cond = cond;
        self.assert_counts();
    }

    /// Executes a zone management operation on the zone starting at `sector`.
    pub fn zone_mgmt(&mut self, op: crate::bio::Op, sector: Sector) -> Result<(), Status> {
        use crate::bio::Op;
        if op == Op::ZoneResetAll {
            self.reset_all();
            return Ok(());
        }
        if !self.geo.is_zone_start(sector) {
            return Err(Status::Invalid.because(Rule::NotZoneStart));
        }
        let z = self.geo.zone_no(sector);
        match op {
            Op::ZoneReset => self.reset_zone(z),
            Op::ZoneOpen => self.open_zone(z),
            Op::ZoneClose => self.close_zone(z),
            Op::ZoneFinish => self.finish_zone(z),
            _ => panic!("{op} is not a zone management operation"),
        }
    }

    /// Checks every invariant of the zone set and panics on a violation: the resource
    /// counters match the zone conditions (a recount, O(zones)), the limits hold, and
    /// every zone's write pointer agrees with its condition. Checkers call it after
    /// every step; it runs in release builds as in debug ones.
    pub fn check_invariants(&self) {
        assert_eq!(self.nr_imp_open, self.count(ZoneCond::ImpOpen), "implicitly open zones miscounted");
        assert_eq!(self.nr_exp_open, self.count(ZoneCond::ExpOpen), "explicitly open zones miscounted");
        assert_eq!(self.nr_closed, self.count(ZoneCond::Closed), "closed zones miscounted");
        self.assert_counts();
        for (z, info) in self.zones.iter().enumerate() {
            let cap = info.capacity;
            match (info.ztype, info.cond, info.wp_offset()) {
                (ZoneType::Conventional, ZoneCond::NotWp, _) => {}
                (ZoneType::Conventional, c, _) => panic!("conventional zone {z} is {c}"),
                (_, ZoneCond::NotWp, _) => panic!("sequential zone {z} is NOT_WP"),
                (_, ZoneCond::Empty, _) if info.wp == info.start => {}
                (_, ZoneCond::Full, _) | (_, ZoneCond::ReadOnly | ZoneCond::Offline, None) => {}
                (_, ZoneCond::ImpOpen | ZoneCond::ExpOpen, Some(o)) if o < cap => {}
                (_, ZoneCond::Closed, Some(o)) if o > 0 && o < cap => {}
                (_, c, wp) => panic!("zone {z} is {c} with write pointer offset {wp:?} (capacity {cap})"),
            }
        }
    }

    /// Invariant kept on every transition, O(1): the limits hold. (The recount of
    /// the counters is [`ZoneSet::check_invariants`].)
    fn assert_counts(&self) {
        let (mo, ma) = (self.geo.max_open(), self.max_active());
        assert!(mo == 0 || self.nr_open() <= mo, "open zones {} > max_open {mo}", self.nr_open());
        assert!(ma == 0 || self.nr_active() <= ma, "active zones {} > max_active {ma}", self.nr_active());
    }
}

#[cfg(test)]
mod tests;
