//! The accepted and completed write pointers: the device-side state under its short
//! lock, how a write is accepted (the zone's write pointer moves, the zone opens),
//! completed (recorded in the live table) or rolled back when it fails, and the entry
//! each zone records: its completed write pointer, with a consistent condition.

use super::FileImage;
use super::format::{Entry, LiveState};
use super::live::LiveTable;
use crate::device::Transfer;
use crate::{check_append, check_range};
use std::io;
use zblk_core::bio::{BioFlags, Op, Request, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SHIFT, Sector, ZoneNo};
use zblk_core::zone::{ZoneCond, ZoneInfo, ZoneSet, ZoneType};

/// A write accepted by the device and not completed yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Extent {
    pub(super) start: u64,
    pub(super) len: u64,
    /// An earlier write to the zone failed and the write pointer went back below this
    /// one: it fails when it completes.
    pub(super) doomed: bool,
    /// Acknowledged when the device completes it (every write but a pipelined one,
    /// whose acknowledgement the host holds until the writes before it in the zone
    /// complete): once completed, its data stays even if a write below it fails.
    pub(super) acked: bool,
}

/// The device-side state, under the image's short lock (never held across I/O).
#[derive(Debug)]
pub(super) struct DevState {
    pub(super) zones: Option<ZoneSet>,
    /// Per zone, accepted writes not completed.
    pub(super) inflight: Vec<Vec<Extent>>,
    /// Per zone, writes completed while a write below them was still in flight:
    /// `(start, end, acked)` offsets. Appends race so, and the device acknowledged
    /// them: a failed write below them must not take the write pointer back under
    /// their data. A pipelined write (`BioFlags::PIPELINED`) is acknowledged by the
    /// host in zone order: a failed write below fails it, and the write pointer goes
    /// back under it (its data is punched).
    pub(super) acked_above: Vec<Vec<(u64, u64, bool)>>,
    /// Per zone, what the tables record: the completed write pointer and a condition
    /// consistent with it.
    pub(super) done: Vec<Entry>,
    /// The live table (None when read-only).
    pub(super) live: Option<LiveTable>,
    /// What the live table's header says: its state and the last commit it saw.
    pub(super) live_hdr: (LiveState, u64),
}

impl DevState {
    /// The state of an image just opened: its zones as recovery decided them
    /// (`entries`), nothing in flight, the live table (none when read-only) not yet
    /// valid, its last commit `commit`.
    pub(super) fn new(geo: &Geometry, entries: Vec<Entry>, live: Option<LiveTable>, commit: u64) -> DevState {
        let zones = geo.is_zoned().then(|| {
            let infos: Vec<ZoneInfo> = entries.iter().enumerate().map(|(z, e)| e.info(geo, ZoneNo(z as u32))).collect();
            ZoneSet::from_zones(geo, &infos).expect("recovered zones were checked")
        });
        let nr = entries.len();
        DevState {
            zones,
            inflight: vec![Vec::new(); nr],
            acked_above: vec![Vec::new(); nr],
            done: entries,
            live,
            live_hdr: (LiveState::Invalid, commit),
        }
    }

    /// Sets the live table header's state and commit (errors are the caller's).
    pub(super) fn set_live(&mut self, state: LiveState, commit: u64) -> io::Result<()> {
        self.live_hdr = (state, commit);
        match self.live.as_mut() {
            Some(live) => live.set_state(state, commit),
            None => Ok(()),
        }
    }
}

impl FileImage {
    /// The device-side checks of a read or a plain write and its transfer. A data
    /// write to a sequential zone is *accepted* here (the zone's write pointer moves,
    /// the zone opens); `finish` records it as completed.
    pub(super) fn prepare_transfer(&self, req: &Request) -> Result<Transfer, Status> {
        if req.op == Op::Read {
            check_range(&self.geo, req)?;
            let st = self.lock_state();
            let valid = match &st.zones {
                Some(z) => z.read(req.sector, req.nr_sectors)? as u32,
                None => req.nr_sectors,
            };
            let offset = self.file_offset(req.sector);
            return Ok(Transfer { write: false, at: req.sector, offset, valid_sectors: valid });
        }
        let at = self.accept_write(req)?;
        Ok(Transfer { write: true, at, offset: self.file_offset(at), valid_sectors: req.nr_sectors })
    }

    fn accept_write(&self, req: &Request) -> Result<Sector, Status> {
        check_range(&self.geo, req)?;
        let append = req.op == Op::ZoneAppend;
        if append {
            check_append(&self.geo, req)?;
        }
        let mut guard = self.lock_state();
        let st = &mut *guard;
        let Some(zs) = st.zones.as_mut() else { return Ok(req.sector) };
        let z = self.geo.zone_no(req.sector);
        let before = zs.zone(z).cond;
        if !self.geo.zone_is_conv(z) && (append || req.sector == zs.zone(z).wp) {
            // After a failed write took the write pointer back, writes accepted above
            // it before the failure (doomed) may still be moving data, and each punches
            // its range when it completes: a new write into their range would be
            // overwritten or zeroed after its acknowledgement. It fails instead, as
            // any write to a zone still recovering from an error may.
            let start = self.geo.zone_start(z);
            let at = zs.zone(z).wp;
            let (lo, hi) = (at.since(start), at.since(start) + u64::from(req.nr_sectors));
            if st.inflight[z.idx()].iter().any(|e| e.start < hi && lo < e.start + e.len) {
                return Err(Status::IoErr);
            }
        }
        let at = zs.write(req.sector, req.nr_sectors, append)?;
        if self.geo.zone_is_conv(z) {
            return Ok(at);
        }
        let start = self.geo.zone_start(z);
        let acked = !req.flags.contains(BioFlags::PIPELINED);
        let ext = Extent { start: at.since(start), len: u64::from(req.nr_sectors), doomed: false, acked };
        st.inflight[z.idx()].push(ext);
        if matches!(before, ZoneCond::Empty | ZoneCond::Closed) && self.geo.max_open() > 0 {
            // Opening this zone may have closed an implicitly open one.
            self.refresh_all(st);
        } else {
            self.refresh(st, z);
        }
        Ok(at)
    }

    pub(super) fn finish_write(&self, at: Sector, len: u64, ok: bool) -> Result<Sector, Status> {
        if !self.geo.is_zoned() || self.geo.zone_is_conv(self.geo.zone_no(at)) {
            return if ok { Ok(at) } else { Err(Status::IoErr) };
        }
        let z = self.geo.zone_no(at);
        let off = at.since(self.geo.zone_start(z));
        let mut guard = self.lock_state();
        let st = &mut *guard;
        let list = &mut st.inflight[z.idx()];
        let i = list.iter().position(|e| e.start == off && e.len == len).expect("completion of a write not in flight");
        let ext = list.remove(i);
        let result = if ext.doomed {
            Err(Status::IoErr)
        } else if ok {
            if list.iter().any(|e| e.start < off) {
                st.acked_above[z.idx()].push((off, off + len, ext.acked));
            }
            Ok(at)
        } else {
            self.roll_back(st, z, off);
            Err(Status::IoErr)
        };
        // Acknowledged writes with nothing in flight below them can no longer be
        // rolled back over.
        let (inflight, above) = (&st.inflight[z.idx()], &mut st.acked_above[z.idx()]);
        above.retain(|&(s, _, _)| inflight.iter().any(|e| e.start < s));
        self.refresh(st, z);
        if result.is_err() {
            // Whatever reached the file past the write pointer must read as zeroes.
            // Punched before the state lock is let go: once it is, the rolled-back
            // write pointer lets a new write (an append, say) into this range, and a
            // later punch would zero it after its acknowledgement.
            let _ = self.punch_hole(self.file_offset(at), len << SECTOR_SHIFT);
        }
        drop(guard);
        result
    }

    /// A write at `off` of zone `z` failed: the zone's write pointer goes back to
    /// `off`, or to the end of the writes after it already acknowledged (appends
    /// race: their data stays, the failed range reads as zeroes), and writes
    /// accepted after that are doomed.
    fn roll_back(&self, st: &mut DevState, z: ZoneNo, off: u64) {
        let above = &mut st.acked_above[z.idx()];
        let off = above.iter().filter(|&&(s, _, acked)| acked && s > off).map(|&(_, e, _)| e).fold(off, u64::max);
        // Pipelined writes completed above the failure were not acknowledged (the
        // host acknowledges in zone order): they go, and read as zeroes.
        let zstart = self.geo.zone_start(z);
        for &(s, e, _) in above.iter().filter(|&&(s, _, acked)| !acked && s >= off) {
            let _ = self.punch_hole(self.file_offset(zstart + s), (e - s) << SECTOR_SHIFT);
        }
        above.retain(|&(s, _, acked)| acked || s < off);
        // `>=`: a write in flight that starts where the write pointer goes back to
        // (the end of an acknowledged append above the failed write) is past it too.
        for e in st.inflight[z.idx()].iter_mut().filter(|e| e.start >= off) {
            e.doomed = true;
        }
        let zs = st.zones.as_mut().expect("zoned");
        let mut infos = zs.zones().to_vec();
        let max_active = self.geo.max_active();
        let active_full = max_active > 0 && zs.nr_active() >= max_active;
        let info = &mut infos[z.idx()];
        if info.wp.since(info.start) > off {
            // A zone the failed write filled was no longer active: going back to
            // CLOSED would exceed the active limit if another zone has taken its
            // place since. The zone stays FULL instead, as a ZNS controller may
            // finish a zone on an error (zone finished by controller), and its unwritten
            // rest reads as zeroes, as after a FINISH.
            if info.cond == ZoneCond::Full && off > 0 && active_full {
                let tail = self.geo.zone_start(z) + off;
                let _ = self.punch_hole(self.file_offset(tail), (self.geo.zone_len(z) - off) << SECTOR_SHIFT);
                return;
            }
            info.wp = info.start + off;
            info.cond = match info.cond {
                _ if off == 0 => ZoneCond::Empty,
                ZoneCond::ExpOpen => ZoneCond::ExpOpen,
                _ => ZoneCond::Closed,
            };
        }
        *zs = ZoneSet::from_zones(&self.geo, &infos).expect("rolled-back zone set is consistent");
        assert!(
            max_active == 0 || zs.nr_active() <= max_active,
            "a roll back of zone {z} made {} zones active (limit {max_active})",
            zs.nr_active()
        );
    }

    /// Brings zone `z`'s recorded entry up to date and stores it in the live table.
    fn refresh(&self, st: &mut DevState, z: ZoneNo) {
        let e = entry_now(st, z);
        if st.done[z.idx()] != e {
            st.done[z.idx()] = e;
            let stored = match st.live.as_mut() {
                Some(live) => live.store(z, e).is_ok(),
                None => true,
            };
            if !stored {
                // The live table can no longer follow the writes: say so in it, and
                // a restart falls back to the durable tables.
                let c = st.live_hdr.1;
                let _ = st.set_live(LiveState::Invalid, c);
            }
        }
    }

    pub(super) fn refresh_all(&self, st: &mut DevState) {
        for z in 0..self.geo.nr_zones() {
            self.refresh(st, ZoneNo(z));
        }
    }
}

/// The entry zone `z` should have now: its completed write pointer, with a condition
/// consistent with it.
fn entry_now(st: &DevState, z: ZoneNo) -> Entry {
    let Some(zs) = &st.zones else { return Entry { cond: ZoneCond::NotWp, wp_offset: 0 } };
    let info = zs.zone(z);
    if info.ztype == ZoneType::Conventional {
        return Entry { cond: ZoneCond::NotWp, wp_offset: 0 };
    }
    let accepted = info.wp.since(info.start);
    let done = st.inflight[z.idx()].iter().filter(|e| !e.doomed).map(|e| e.start).min().unwrap_or(accepted);
    // Planted: the writes in flight counted as done, so that a flush records a
    // write pointer over data that may never land (a hole).
    let done = if zblk_core::mutation::on(zblk_core::mutation::Mutation::FlushCoversHole) { accepted } else { done };
    let cond = if done == accepted {
        info.cond
    } else {
        // Writes are out: record the state as it will be if they never complete.
        match info.cond {
            ZoneCond::ExpOpen => ZoneCond::ExpOpen,
            _ if done == 0 => ZoneCond::Empty,
            ZoneCond::ImpOpen => ZoneCond::ImpOpen,
            _ => ZoneCond::Closed,
        }
    };
    Entry { cond, wp_offset: done }
}
