//! The device-side reference model of one disk: what null_blk answers to each
//! request in the order the disk executes it (implicit open and close, the open and
//! active limits, the write pointer checks), zone by zone, recounted by scanning.

use super::errno::*;
use zblk_core::bio::{Op, Request};
use zblk_core::geometry::Geometry;
use zblk_core::units::ZoneNo;
use zblk_core::zone::{ZoneCond, ZoneInfo};

/// A zone's condition in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    /// Conventional zone.
    NotWp,
    /// Nothing written.
    Empty,
    /// Opened by a write.
    ImpOpen,
    /// Opened by ZONE_OPEN.
    ExpOpen,
    /// Written, not open.
    Closed,
    /// Write pointer at the capacity (or finished).
    Full,
    /// Failed: readable, not writable.
    ReadOnly,
    /// Failed: no I/O.
    Offline,
}

impl Cond {
    fn of(c: ZoneCond) -> Cond {
        match c {
            ZoneCond::NotWp => Cond::NotWp,
            ZoneCond::Empty => Cond::Empty,
            ZoneCond::ImpOpen => Cond::ImpOpen,
            ZoneCond::ExpOpen => Cond::ExpOpen,
            ZoneCond::Closed => Cond::Closed,
            ZoneCond::Full => Cond::Full,
            ZoneCond::ReadOnly => Cond::ReadOnly,
            ZoneCond::Offline => Cond::Offline,
        }
    }
}

/// One zone of the model.
#[derive(Clone, Copy, Debug)]
struct Zone {
    start: u64,
    len: u64,
    cap: u64,
    cond: Cond,
    /// Absolute write pointer.
    wp: u64,
}

/// The device-side reference model of one disk. See the module documentation.
#[derive(Clone, Debug)]
pub struct DeviceOracle {
    zoned: bool,
    nr_sectors: u64,
    lbs: u64,
    zone_sectors: u64,
    nr_conv: usize,
    max_open: usize,
    max_active: usize,
    max_append: u64,
    max_write_zeroes: u64,
    /// The largest READ or WRITE the device takes (`max_hw_sectors`).
    max_sectors: u64,
    zones: Vec<Zone>,
    /// null_blk's `imp_close_zone_no`: where the search for an implicitly open
    /// zone to close starts.
    imp_close_next: usize,
}

impl DeviceOracle {
    /// The model of a fresh device of geometry `geo`.
    pub fn new(geo: &Geometry) -> DeviceOracle {
        let zones = if geo.is_zoned() {
            (0..geo.nr_zones())
                .map(|z| {
                    let z = ZoneNo(z);
                    let start = geo.zone_start(z).0;
                    let cond = if geo.zone_is_conv(z) { Cond::NotWp } else { Cond::Empty };
                    Zone { start, len: geo.zone_len(z), cap: geo.zone_capacity(z), cond, wp: start }
                })
                .collect()
        } else {
            Vec::new()
        };
        DeviceOracle {
            zoned: geo.is_zoned(),
            nr_sectors: geo.nr_sectors(),
            lbs: u64::from(geo.lbs_sectors()),
            zone_sectors: if geo.is_zoned() { geo.zone_sectors() } else { 0 },
            nr_conv: geo.nr_conv() as usize,
            max_open: geo.max_open() as usize,
            max_active: geo.max_active() as usize,
            max_append: u64::from(geo.max_append_sectors()),
            max_write_zeroes: u64::from(geo.max_write_zeroes_sectors()),
            max_sectors: u64::from(geo.max_sectors()),
            zones,
            imp_close_next: geo.nr_conv() as usize,
        }
    }

    fn zone_of(&self, sector: u64) -> usize {
        (sector / self.zone_sectors) as usize
    }

    fn count(&self, conds: &[Cond]) -> usize {
        self.zones.iter().filter(|z| conds.contains(&z.cond)).count()
    }

    fn nr_open(&self) -> usize {
        self.count(&[Cond::ImpOpen, Cond::ExpOpen])
    }

    fn nr_active(&self) -> usize {
        self.count(&[Cond::ImpOpen, Cond::ExpOpen, Cond::Closed])
    }

    /// null_blk's `null_check_active()`.
    fn check_active(&self) -> Result<(), i32> {
        if self.max_active == 0 || self.nr_active() < self.max_active { Ok(()) } else { Err(EOVERFLOW) }
    }

    /// null_blk's `null_check_open()`: when the open limit is reached, close an
    /// implicitly open zone if there is one and the active limit allows it.
    fn check_open(&mut self) -> Result<(), i32> {
        if self.max_open == 0 || self.nr_open() < self.max_open {
            return Ok(());
        }
        if self.count(&[Cond::ImpOpen]) > 0 && self.check_active().is_ok() {
            self.close_imp_open_zone();
            return Ok(());
        }
        Err(ETOOMANYREFS)
    }

    /// null_blk's `null_close_imp_open_zone()`: the first implicitly open zone
    /// from `imp_close_zone_no` on, wrapping over the sequential zones.
    fn close_imp_open_zone(&mut self) {
        let n = self.zones.len();
        let mut z = self.imp_close_next;
        for _ in self.nr_conv..n {
            if z >= n {
                z = self.nr_conv;
            }
            let this = z;
            z += 1;
            if self.zones[this].cond == Cond::ImpOpen {
                self.close(this);
                self.imp_close_next = z;
                return;
            }
        }
        unreachable!("no implicitly open zone to close");
    }

    /// null_blk's `null_check_zone_resources()` for an EMPTY or CLOSED zone.
    fn check_resources(&mut self, z: usize) -> Result<(), i32> {
        if self.zones[z].cond == Cond::Empty {
            self.check_active()?;
        }
        self.check_open()
    }

    /// An open zone closes: CLOSED, or EMPTY if nothing was written.
    fn close(&mut self, z: usize) {
        let zone = &mut self.zones[z];
        zone.cond = if zone.wp == zone.start { Cond::Empty } else { Cond::Closed };
    }

    fn range_ok(&self, sector: u64, n: u64) -> bool {
        sector.checked_add(n).is_some_and(|e| e <= self.nr_sectors) && sector % self.lbs == 0 && n % self.lbs == 0
    }

    /// A fault turns zone `z` READONLY or OFFLINE.
    pub fn fail_zone(&mut self, z: ZoneNo, cond: ZoneCond) {
        self.zones[z.idx()].cond = Cond::of(cond);
    }

    /// Zone `z` set to `cond` with its write pointer at offset `wp_offset`: what a
    /// device that takes a failed write back (an image) does to the zone, beyond
    /// null_blk's rules.
    pub fn set_zone(&mut self, z: ZoneNo, cond: Cond, wp_offset: u64) {
        let zone = &mut self.zones[z.idx()];
        zone.cond = cond;
        zone.wp = zone.start + wp_offset;
    }

    /// The zone set was rebuilt from its descriptors (an image's `ZoneSet::from_zones`
    /// after a roll back): the search for an implicitly open zone to close starts
    /// again at the first sequential zone.
    pub fn rebuilt(&mut self) {
        self.imp_close_next = self.nr_conv;
    }

    /// Zones active now (implicitly or explicitly open, or closed), and the limit
    /// (0: none).
    pub fn active(&self) -> (usize, usize) {
        (self.nr_active(), self.max_active)
    }

    /// Zone `z`'s condition and write pointer offset.
    pub fn zone(&self, z: ZoneNo) -> (Cond, u64) {
        let zone = &self.zones[z.idx()];
        (zone.cond, zone.wp - zone.start)
    }

    /// The outcome of `req`, executed now: the sector it executed at, or the errno;
    /// the model's state moves as the device's must.
    pub fn execute(&mut self, req: &Request) -> Result<u64, i32> {
        let (s, n) = (req.sector.0, u64::from(req.nr_sectors));
        if matches!(req.op, Op::Read | Op::Write) && n > self.max_sectors {
            // A command above the device's transfer limit: the host must split.
            return Err(EINVAL);
        }
        match req.op {
            Op::Flush => Ok(s),
            Op::Read => {
                if !self.range_ok(s, n) || n == 0 {
                    return Err(EINVAL);
                }
                if self.zoned
                    && (s..s + n).step_by(self.lbs as usize).any(|x| self.zones[self.zone_of(x)].cond == Cond::Offline)
                {
                    return Err(EIO);
                }
                Ok(s)
            }
            Op::Discard => {
                if !self.range_ok(s, n) || n == 0 {
                    return Err(EINVAL);
                }
                if self.zoned && self.zones[self.zone_of(s + n - 1)].cond != Cond::NotWp {
                    return Err(EINVAL);
                }
                Ok(s)
            }
            Op::Write | Op::ZoneAppend | Op::WriteZeroes => self.write(req.op, s, n),
            Op::ZoneResetAll => {
                if !self.zoned {
                    return Err(EOPNOTSUPP);
                }
                for zone in &mut self.zones {
                    if matches!(zone.cond, Cond::ImpOpen | Cond::ExpOpen | Cond::Closed | Cond::Full) {
                        zone.cond = Cond::Empty;
                        zone.wp = zone.start;
                    }
                }
                Ok(s)
            }
            op => self.zone_mgmt(op, s).map(|()| s),
        }
    }

    fn write(&mut self, op: Op, s: u64, n: u64) -> Result<u64, i32> {
        if op == Op::WriteZeroes {
            if self.max_write_zeroes == 0 {
                return Err(EOPNOTSUPP);
            }
            if n > self.max_write_zeroes {
                return Err(EINVAL);
            }
        }
        if !self.range_ok(s, n) {
            return Err(EINVAL);
        }
        if op == Op::ZoneAppend {
            if self.max_append == 0 {
                return Err(EOPNOTSUPP);
            }
            if n > self.max_append {
                return Err(EINVAL);
            }
        }
        if n == 0 {
            return Err(EINVAL);
        }
        if !self.zoned {
            return Ok(s);
        }
        let z = self.zone_of(s);
        let zone = self.zones[z];
        if zone.cond == Cond::NotWp {
            // Random writes within the zone; an append needs a write pointer.
            return if op == Op::ZoneAppend || s + n > zone.start + zone.len { Err(EINVAL) } else { Ok(s) };
        }
        if matches!(zone.cond, Cond::Full | Cond::ReadOnly | Cond::Offline) {
            return Err(EIO);
        }
        let at = if op == Op::ZoneAppend {
            if s != zone.start {
                return Err(EINVAL);
            }
            zone.wp
        } else {
            s
        };
        if at != zone.wp || at + n > zone.start + zone.cap {
            return Err(EIO);
        }
        if matches!(zone.cond, Cond::Empty | Cond::Closed) {
            self.check_resources(z)?;
            self.zones[z].cond = Cond::ImpOpen;
        }
        let zone = &mut self.zones[z];
        zone.wp = at + n;
        if zone.wp == zone.start + zone.cap {
            zone.cond = Cond::Full;
        }
        Ok(at)
    }

    fn zone_mgmt(&mut self, op: Op, s: u64) -> Result<(), i32> {
        if !self.zoned {
            return Err(EOPNOTSUPP);
        }
        if s >= self.nr_sectors || s % self.zone_sectors != 0 {
            return Err(EINVAL);
        }
        let z = self.zone_of(s);
        match self.zones[z].cond {
            Cond::NotWp => return Err(EINVAL),
            Cond::ReadOnly | Cond::Offline => return Err(EIO),
            _ => {}
        }
        let cond = self.zones[z].cond;
        match op {
            Op::ZoneReset => {
                let zone = &mut self.zones[z];
                zone.cond = Cond::Empty;
                zone.wp = zone.start;
            }
            Op::ZoneOpen => match cond {
                Cond::ExpOpen => {}
                Cond::ImpOpen => self.zones[z].cond = Cond::ExpOpen,
                Cond::Empty | Cond::Closed => {
                    self.check_resources(z)?;
                    self.zones[z].cond = Cond::ExpOpen;
                }
                _ => return Err(EIO),
            },
            Op::ZoneClose => match cond {
                Cond::Closed => {}
                Cond::ImpOpen | Cond::ExpOpen => self.close(z),
                _ => return Err(EIO),
            },
            Op::ZoneFinish => {
                match cond {
                    Cond::Full => return Ok(()),
                    Cond::Empty | Cond::Closed => self.check_resources(z)?,
                    _ => {}
                }
                let zone = &mut self.zones[z];
                zone.cond = Cond::Full;
                zone.wp = zone.start + zone.len;
            }
            _ => unreachable!("{op:?} is not a zone management operation"),
        }
        Ok(())
    }

    /// Compares the device's zones with the model; returns the first difference.
    pub fn compare(&self, zones: &[ZoneInfo]) -> Result<(), String> {
        for (z, (m, d)) in self.zones.iter().zip(zones).enumerate() {
            let dc = Cond::of(d.cond);
            // A failed zone's write pointer means nothing.
            let wp_matters = !matches!(m.cond, Cond::ReadOnly | Cond::Offline | Cond::NotWp);
            if dc != m.cond || (wp_matters && d.wp.0 != m.wp) {
                return Err(format!(
                    "zone {z}: the device has it {dc:?} with write pointer {}, the model {:?} at {}",
                    d.wp.0, m.cond, m.wp
                ));
            }
        }
        Ok(())
    }
}
