//! Power cuts in the runtime vopr: what the image must hold when it is opened again
//! after the power went in the middle of a round (the file as a power-loss model of
//! it may have kept it, `zblk_dev::file::powercut`).
//!
//! For every sequential zone, since its last reset: a FINISH acknowledged leaves it
//! FULL; its write pointer is at or past the end of every durable write; every
//! sector below it holds what the write acknowledged there put, or, where a write
//! failed on the device (racing native appends leave such a range below later
//! ones), zeroes or that write's data (a FULL zone may hold zeroes where nothing
//! was written: after a FINISH, or a failed write that filled the zone); past it,
//! up to the capacity, zeroes.
//!
//! Durable: a FUA write acknowledged, or a write acknowledged before a FLUSH that
//! succeeded was submitted, *if no write accepted below it in its zone was still
//! in flight* at that FLUSH's submission (or the FUA write's commit). An image
//! records a zone's write pointer as the end of its completed writes with nothing
//! in flight below them: a native append completed above one still in flight is
//! made durable by a flush only once that one has completed (docs/images.md, "Left").

use super::Done;
use super::device::DevEvent;
use std::collections::BTreeMap;
use std::path::Path;
use zblk_core::bio::{BioFlags, Op, ReqId};
use zblk_core::geometry::Geometry;
use zblk_core::units::Sector;
use zblk_core::units::ZoneNo;
use zblk_core::zone::{ZoneCond, ZoneType};
use zblk_dev::file::powercut::PowerCut;
use zblk_dev::file::{FileImage, ImageOptions};
use zblk_workload::pattern::{Decoded, decode};

/// Past every write pointer of the image opened again (from `path`), the file holds
/// zeroes: the recovery discarded what lay there (writes not flushed, a write in
/// flight), which a FINISH would otherwise bring back below the write pointer.
fn tail_discarded(img: &FileImage, path: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    for (z, info) in img.zones().iter().enumerate() {
        let (wp, cap) = (info.wp.since(info.start), info.capacity);
        if info.ztype == ZoneType::Conventional || info.cond == ZoneCond::Full || wp >= cap {
            continue;
        }
        let mut buf = vec![0u8; ((cap - wp) * 512) as usize];
        file.read_exact_at(&mut buf, img.file_offset(info.wp)).map_err(|e| format!("zone {z}: read the file: {e}"))?;
        if let Some(i) = buf.iter().position(|&b| b != 0) {
            return Err(format!(
                "zone {z}: the file holds data at sector offset {} past the write pointer ({wp}), which the recovery did not discard",
                wp + i as u64 / 512
            ));
        }
    }
    Ok(())
}

/// The writes the device accepted in a round (from their acceptance to their end;
/// a FUA write's whole decision is one event, never in flight for another).
fn accepted(geo: &Geometry, events: &[DevEvent]) -> Vec<Accepted> {
    let mut open: BTreeMap<ReqId, usize> = BTreeMap::new();
    let mut out: Vec<Accepted> = Vec::new();
    for e in events.iter().filter(|e| matches!(e.req.op, Op::Write | Op::ZoneAppend)) {
        let at = Sector(e.at);
        let (zone, off, len) = (geo.zone_no(at).idx(), geo.offset_in_zone(at), u64::from(e.req.nr_sectors));
        if !e.last && e.result.is_ok() {
            open.insert(e.req.id, out.len());
            out.push(Accepted { zone, off, len, from: e.seq, to: u64::MAX, failed: false });
        } else if let Some(i) = open.remove(&e.req.id) {
            out[i].to = e.seq;
            out[i].failed = e.result.is_err();
        }
        for &r in &e.revoked {
            let (z, o) = (geo.zone_no(Sector(r)).idx(), geo.offset_in_zone(Sector(r)));
            if let Some(a) = out.iter_mut().rev().find(|a| a.zone == z && a.off == o && a.to != u64::MAX) {
                a.failed = true;
            }
        }
    }
    out
}

/// A boot id other than this machine's: the image is opened again as on the next
/// boot, as after a power cut.
const OTHER_BOOT: [u8; 36] = *b"00000000-0000-4000-8000-00000000cafe";

/// A write acknowledged in a zone.
#[derive(Clone, Copy, Debug)]
struct Written {
    off: u64,
    len: u64,
    stamp: u64,
    durable: bool,
    /// Its completion's place on the run's clock.
    completed: u64,
}

#[derive(Clone, Debug, Default)]
struct ZoneHistory {
    writes: Vec<Written>,
    /// Ranges `(offset, sectors)` of writes that failed on the device after it
    /// accepted them.
    failed: Vec<(u64, u64)>,
    finished: bool,
}

/// A write the device accepted: its zone, range, and the clock from its acceptance
/// to its end (`u64::MAX`: not ended).
#[derive(Clone, Copy, Debug)]
struct Accepted {
    zone: usize,
    off: u64,
    len: u64,
    from: u64,
    to: u64,
    /// It failed, or was revoked after it completed.
    failed: bool,
}

/// What the acknowledged operations of a seed leave in each zone.
#[derive(Debug)]
pub(super) struct History {
    zones: Vec<ZoneHistory>,
}

impl History {
    /// Nothing written yet, in a device of `geo`.
    pub(super) fn new(geo: &Geometry) -> History {
        History { zones: vec![ZoneHistory::default(); geo.nr_zones() as usize] }
    }

    /// The BIOs of a round, completed, and the device's decisions in it.
    pub(super) fn round(&mut self, geo: &Geometry, done: &[Done], events: &[DevEvent]) {
        let accepted = accepted(geo, events);
        // Below which offset of zone `z` everything had completed at `seq`.
        let prefix = |z: usize, seq: u64| {
            accepted.iter().filter(|a| a.zone == z && a.from < seq && seq < a.to).map(|a| a.off).min()
        };
        for d in done {
            if let (Op::Write | Op::ZoneAppend, Ok(at)) = (d.op, d.result) {
                let z = geo.zone_no(at).idx();
                let off = geo.offset_in_zone(at);
                let len = u64::from(d.nr_sectors);
                // A FUA write's commit: its own decision on the device.
                let commit = events.iter().find(|e| e.req.flags.contains(BioFlags::FUA) && e.result == Ok(at.0));
                let durable = d.fua && commit.is_some_and(|e| prefix(z, e.seq).is_none_or(|m| off + len <= m));
                let w = Written { off, len, stamp: d.stamp, durable, completed: d.completed };
                self.zones[z].writes.push(w);
            }
        }
        for a in accepted.iter().filter(|a| a.failed) {
            self.zones[a.zone].failed.push((a.off, a.len));
        }
        for f in done.iter().filter(|d| d.op == Op::Flush && d.result.is_ok()) {
            for (z, h) in self.zones.iter_mut().enumerate() {
                let m = prefix(z, f.submitted);
                for w in h.writes.iter_mut().filter(|w| w.completed < f.submitted) {
                    w.durable |= m.is_none_or(|m| w.off + w.len <= m);
                }
            }
        }
    }

    /// Zone management acknowledged between rounds: `op` of zone `z` (every zone for
    /// RESET_ALL).
    pub(super) fn managed(&mut self, op: Op, z: u32) {
        match op {
            Op::ZoneResetAll => self.zones.iter_mut().for_each(|h| *h = ZoneHistory::default()),
            Op::ZoneReset => self.zones[z as usize] = ZoneHistory::default(),
            Op::ZoneFinish => self.zones[z as usize].finished = true,
            _ => {}
        }
    }

    /// Writes of the seed acknowledged, and the durable ones among them.
    pub(super) fn counts(&self) -> (u64, u64) {
        let all = self.zones.iter().flat_map(|z| &z.writes);
        let (n, d) = all.fold((0, 0), |(n, d), w| (n + 1, d + u64::from(w.durable)));
        (n, d)
    }

    /// The file `pc` may have kept (drawn from `seed`), written to `path` and opened
    /// as after a restart, against the history.
    pub(super) fn check_after_cut(&self, pc: &PowerCut, seed: u64, path: &Path) -> Result<(), String> {
        let bytes = pc.cut(seed);
        std::fs::write(path, &bytes).map_err(|e| format!("write {}: {e}", path.display()))?;
        let opts = ImageOptions { boot_id: Some(OTHER_BOOT), ..ImageOptions::default() };
        let img = FileImage::open(path, &opts).map_err(|e| format!("after the power cut, the image: {e}"))?;
        let r = self.check(&img).and_then(|()| tail_discarded(&img, path));
        let r = r.map_err(|v| format!("after the power cut: {v} (repairs: {:?})", img.repairs()));
        let _ = std::fs::remove_file(path);
        r
    }

    fn check(&self, img: &FileImage) -> Result<(), String> {
        let geo = img.geo().clone();
        for (z, info) in img.zones().iter().enumerate() {
            if info.ztype == ZoneType::Conventional {
                continue;
            }
            let h = &self.zones[z];
            let (wp, cap) = (info.wp.since(info.start), info.capacity);
            let full = info.cond == ZoneCond::Full;
            if h.finished && !full {
                return Err(format!("zone {z} was finished, it is {} at {wp}", info.cond));
            }
            let durable_end = h.writes.iter().filter(|w| w.durable).map(|w| w.off + w.len).max().unwrap_or(0);
            if !full && wp < durable_end {
                return Err(format!(
                    "zone {z}: its write pointer is back at {wp}, below durable writes up to {durable_end}"
                ));
            }
            let upto = if full { cap } else { wp.min(cap) };
            let mut buf = vec![0u8; (cap * 512) as usize];
            img.read_direct(geo.zone_start(ZoneNo(z as u32)), &mut buf)
                .map_err(|e| format!("zone {z}: read: {e:?}"))?;
            for s in 0..cap {
                let got = decode(&buf[(s * 512) as usize..((s + 1) * 512) as usize]);
                let by = h.writes.iter().rev().find(|w| w.off <= s && s < w.off + w.len);
                let failed = h.failed.iter().any(|&(o, n)| o <= s && s < o + n);
                let acked_stamp =
                    |g: &Decoded| matches!(g, Decoded::Data((st, _)) if h.writes.iter().any(|w| w.stamp == *st));
                if by.is_none()
                    && failed
                    && s < upto
                    && (got == Decoded::Zeroes || matches!(got, Decoded::Data(_)) && !acked_stamp(&got))
                {
                    continue;
                }
                let want = match by {
                    Some(w) if s < upto => Decoded::Data((w.stamp, (s - w.off) as u32)),
                    None if s < upto && !full => {
                        return Err(format!(
                            "zone {z}: sector {s} lies below the write pointer ({wp}), and no write was acknowledged there (it reads {got:?}); acknowledged since its last reset (offset, sectors, stamp, durable): {:?}",
                            h.writes.iter().map(|w| (w.off, w.len, w.stamp, w.durable)).collect::<Vec<_>>()
                        ));
                    }
                    _ => Decoded::Zeroes,
                };
                if got != want && !(full && by.is_none() && got == Decoded::Zeroes) {
                    return Err(format!(
                        "zone {z} ({}, write pointer {wp}): sector {s} reads {got:?}, {want:?} expected",
                        info.cond
                    ));
                }
            }
        }
        Ok(())
    }
}
