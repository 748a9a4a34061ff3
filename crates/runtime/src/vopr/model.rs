//! The runtime vopr's model of an image's device side: what a zoned image answers to
//! each request, fed in the order the image decides them (the vopr's device holds
//! one lock around every decision, so the order is total). The zone rules (implicit
//! open and close, the open and active limits, the write pointer checks) are the
//! simulator's null_blk model ([`DeviceOracle`]); what an image adds is written here
//! apart from `crates/dev/src/file/write_pointer.rs`, as plainly as possible:
//!
//! - a plain write or append is *accepted* when it is prepared (the zone's write
//!   pointer moves) and *finished* when its transfer ends;
//! - a write accepted at the write pointer fails (EIO) while a write still in flight
//!   overlaps its range (after a failure took the write pointer back under it);
//! - a transfer that fails takes the zone's write pointer back to the failed write's
//!   start, or to the end of the writes above it already acknowledged; the writes
//!   accepted from there on fail when they finish (doomed); pipelined writes that
//!   completed above it, not yet acknowledged by the host, are taken back (revoked:
//!   their data goes, and their BIOs fail); a zone the failed write filled stays FULL
//!   when the active limit is reached; the zone set is rebuilt, so the search for an
//!   implicitly open zone to close starts again at the first sequential zone;
//! - a FUA write is accepted, transferred and finished at once, between commits;
//!   a FLUSH commits;
//! - with the power off every transfer and commit fails with EIO (what is
//!   accepted still is: acceptance touches no medium).

use zblk_core::bio::{BioFlags, Op, Request};
use zblk_core::geometry::Geometry;
use zblk_core::units::{Sector, ZoneNo};
use zblk_sim::oracle::errno::EIO;
use zblk_sim::oracle::{Cond, DeviceOracle};

/// A write accepted and not finished (offsets in its zone).
#[derive(Clone, Copy, Debug)]
struct Ext {
    start: u64,
    len: u64,
    doomed: bool,
    /// Acknowledged when the device completes it (not pipelined).
    acked: bool,
}

/// What the model predicts of a request: where it executes (absolute sector) or its
/// errno.
pub(super) type Predicted = Result<u64, i32>;

/// The model. See the module documentation.
#[derive(Debug)]
pub(super) struct ImageModel {
    geo: Geometry,
    dev: DeviceOracle,
    inflight: Vec<Vec<Ext>>,
    /// Per zone, writes finished while a write below them was in flight:
    /// `(start, end, acked)` offsets.
    above: Vec<Vec<(u64, u64, bool)>>,
    /// The power is off.
    pub(super) power_off: bool,
}

impl ImageModel {
    /// The model of an image of geometry `geo` just created (every zone empty).
    pub(super) fn new(geo: &Geometry) -> ImageModel {
        let n = geo.nr_zones() as usize;
        ImageModel {
            geo: geo.clone(),
            dev: DeviceOracle::new(geo),
            inflight: vec![Vec::new(); n],
            above: vec![Vec::new(); n],
            power_off: false,
        }
    }

    /// Whether the image hands `req` to the driver as a transfer (a read, a plain
    /// write or append); otherwise it carries it out whole in `perform`.
    pub(super) fn is_transfer(req: &Request) -> bool {
        let synced = req.flags.contains(BioFlags::FUA) || req.flags.contains(BioFlags::PREFLUSH);
        req.op == Op::Read || (matches!(req.op, Op::Write | Op::ZoneAppend) && !synced)
    }

    fn seq_zone(&self, sector: Sector) -> Option<ZoneNo> {
        let z = self.geo.zone_no(sector);
        (self.geo.is_zoned() && !self.geo.zone_is_conv(z)).then_some(z)
    }

    /// The preparation of transfer `req`: a read's checks, a write's acceptance.
    pub(super) fn accept(&mut self, req: &Request) -> Predicted {
        if req.op == Op::Read {
            return self.dev.execute(req);
        }
        let zone = self.seq_zone(req.sector);
        if let Some(z) = zone {
            let (_, wp) = self.dev.zone(z);
            let off = self.geo.offset_in_zone(req.sector);
            if req.op == Op::ZoneAppend || off == wp {
                let (lo, hi) = (wp, wp + u64::from(req.nr_sectors));
                if self.inflight[z.idx()].iter().any(|e| e.start < hi && lo < e.start + e.len) {
                    return Err(EIO);
                }
            }
        }
        let at = self.dev.execute(req)?;
        if let Some(z) = zone {
            let acked = !req.flags.contains(BioFlags::PIPELINED);
            let start = self.geo.offset_in_zone(Sector(at));
            self.inflight[z.idx()].push(Ext { start, len: u64::from(req.nr_sectors), doomed: false, acked });
        }
        Ok(at)
    }

    /// The end of transfer `req`, accepted at `at`, whose data moved (`ok`) or not.
    /// Returns the outcome and the writes revoked by it (their absolute starts).
    pub(super) fn finish(&mut self, req: &Request, at: u64, ok: bool) -> Result<(Predicted, Vec<u64>), String> {
        if req.op == Op::Read {
            return Ok((if ok { Ok(req.sector.0) } else { Err(EIO) }, Vec::new()));
        }
        let Some(z) = self.seq_zone(Sector(at)) else {
            return Ok((if ok { Ok(at) } else { Err(EIO) }, Vec::new()));
        };
        let (zi, off, len) = (z.idx(), self.geo.offset_in_zone(Sector(at)), u64::from(req.nr_sectors));
        let Some(i) = self.inflight[zi].iter().position(|e| e.start == off && e.len == len) else {
            return Err(format!("the device finished {req:?} at {at}, which the model has not accepted"));
        };
        let ext = self.inflight[zi].remove(i);
        let mut revoked = Vec::new();
        let result = if ext.doomed {
            Err(EIO)
        } else if ok {
            if self.inflight[zi].iter().any(|e| e.start < off) {
                self.above[zi].push((off, off + len, ext.acked));
            }
            Ok(at)
        } else {
            revoked = self.roll_back(z, off);
            Err(EIO)
        };
        let inflight = &self.inflight[zi];
        self.above[zi].retain(|&(s, _, _)| inflight.iter().any(|e| e.start < s));
        Ok((result, revoked))
    }

    /// A write at `off` of zone `z` failed. Returns the absolute starts of the
    /// pipelined writes it revokes.
    fn roll_back(&mut self, z: ZoneNo, off: u64) -> Vec<u64> {
        let zi = z.idx();
        let zstart = self.geo.zone_start(z).0;
        let off =
            self.above[zi].iter().filter(|&&(s, _, acked)| acked && s > off).map(|&(_, e, _)| e).fold(off, u64::max);
        let revoked = self.above[zi].iter().filter(|&&(s, _, acked)| !acked && s >= off).map(|&(s, _, _)| zstart + s);
        let revoked: Vec<u64> = revoked.collect();
        self.above[zi].retain(|&(s, _, acked)| acked || s < off);
        for e in self.inflight[zi].iter_mut().filter(|e| e.start >= off) {
            e.doomed = true;
        }
        let (cond, wp) = self.dev.zone(z);
        let (active, max_active) = self.dev.active();
        if wp > off {
            if cond == Cond::Full && off > 0 && max_active > 0 && active >= max_active {
                return revoked; // stays FULL, its unwritten rest punched
            }
            let cond = match cond {
                _ if off == 0 => Cond::Empty,
                Cond::ExpOpen => Cond::ExpOpen,
                _ => Cond::Closed,
            };
            self.dev.set_zone(z, cond, off);
        }
        self.dev.rebuilt();
        revoked
    }

    /// A request the image carries out whole (a FUA write, a FLUSH, a zone
    /// management operation): its outcome.
    pub(super) fn blocking(&mut self, req: &Request) -> Result<(Predicted, Vec<u64>), String> {
        match req.op {
            Op::Write | Op::ZoneAppend => {
                if req.flags.contains(BioFlags::PREFLUSH) && self.power_off {
                    return Ok((Err(EIO), Vec::new()));
                }
                let plain = Request { flags: BioFlags::NONE, ..*req };
                let at = match self.accept(&plain) {
                    Ok(at) => at,
                    Err(e) => return Ok((Err(e), Vec::new())),
                };
                let (r, revoked) = self.finish(&plain, at, !self.power_off)?;
                let r = if r.is_ok() && req.flags.contains(BioFlags::FUA) && self.power_off { Err(EIO) } else { r };
                Ok((r, revoked))
            }
            Op::Flush => Ok((if self.power_off { Err(EIO) } else { Ok(req.sector.0) }, Vec::new())),
            _ if self.power_off => Ok((Err(EIO), Vec::new())),
            _ => {
                let r = self.dev.execute(req);
                if r.is_ok() {
                    for (zi, list) in self.above.iter_mut().enumerate() {
                        let hit = req.op == Op::ZoneResetAll || zi == self.geo.zone_no(req.sector).idx();
                        if hit && matches!(req.op, Op::ZoneReset | Op::ZoneResetAll | Op::ZoneFinish) {
                            list.clear();
                        }
                    }
                }
                Ok((r, Vec::new()))
            }
        }
    }

    /// Zone `z`'s write pointer offset as a zone report gives it to the host (the
    /// capacity for a FULL zone; `None` for a failed one).
    pub(super) fn host_wp(&self, z: ZoneNo) -> Option<u64> {
        let cap = self.geo.zone_capacity(z);
        match self.dev.zone(z) {
            (Cond::ReadOnly | Cond::Offline | Cond::NotWp, _) => None,
            (Cond::Full, _) => Some(cap),
            (_, wp) => Some(wp.min(cap)),
        }
    }

    /// The image's zones must be as the model has them.
    pub(super) fn compare(&self, zones: &[zblk_core::zone::ZoneInfo]) -> Result<(), String> {
        self.dev.compare(zones)
    }
}
