//! The write-back cache and the read-ahead buffer: the dirty extents and their
//! segment budget, merging of a zone stream's writes, the destager's choice of what
//! to write back, a reset dropping or flushing its zone's data (mechanism M1), and
//! the reads served without the media.

use super::HddModel;
use super::queue::{MediaOp, Stage, Transfer};
use std::collections::VecDeque;
use zblk_core::bio::{Op, Request};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Extent {
    pub(super) start: u64, // byte offset
    pub(super) len: u64,
    /// Cache segments the commands whose data this extent holds take.
    pub(super) segs: u32,
}

impl Extent {
    pub(super) fn end(&self) -> u64 {
        self.start + self.len
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Readahead {
    pub(super) start: u64,
    /// Media time at which the read-ahead began streaming from `start`.
    pub(super) t0: f64,
    /// Bytes per ns at `start`.
    pub(super) rate: f64,
    /// Media time when it stopped (the media went to other work).
    pub(super) stopped_at: Option<f64>,
}

impl HddModel {
    /// Segments a cached write of `bytes` takes (at most the whole cache, so that a
    /// huge write-zeroes can still pass through it).
    pub(super) fn segments(&self, bytes: u64) -> u32 {
        (bytes.div_ceil(self.p.segment_bytes).max(1)).min(u64::from(self.p.cache_segments)) as u32
    }

    pub(super) fn cache_room(&self, bytes: u64) -> bool {
        self.dirty_segs + self.reserved_segs + self.segments(bytes) <= self.p.cache_segments
    }

    /// A read is served without the media when dirty data or the read-ahead buffer
    /// already holds all of it.
    pub(super) fn read_hit(&self, req: &Request) -> bool {
        let (s, e) = (req.sector.bytes(), req.sector.bytes() + Self::bytes(req));
        if self.dirty.iter().any(|x| x.start <= s && e <= x.end()) {
            return true;
        }
        let Some(ra) = self.readahead else { return false };
        let until = ra.stopped_at.unwrap_or(self.now).min(self.now);
        let avail = ((until - ra.t0).max(0.0) * ra.rate) as u64;
        let avail = avail.min(self.p.readahead_bytes);
        ra.start <= s && e <= ra.start + avail
    }

    /// When the read-ahead, still streaming, will have all of `req`: it starts
    /// inside what has been read ahead and ends within the read-ahead window.
    pub(super) fn streaming_hit(&self, req: &Request) -> Option<f64> {
        let ra = self.readahead?;
        if ra.stopped_at.is_some() {
            return None;
        }
        let (s, e) = (req.sector.bytes(), req.end().bytes());
        let streamed = ((self.now - ra.t0).max(0.0) * ra.rate) as u64;
        let inside = s >= ra.start && s <= ra.start + streamed && e - ra.start <= self.p.readahead_bytes;
        inside.then(|| ra.t0 + (e - ra.start) as f64 / ra.rate)
    }

    /// A reset throws away the zone's dirty data (it is being erased).
    pub(super) fn drop_dirty_for(&mut self, req: &Request) {
        let (lo, hi) = if req.op == Op::ZoneResetAll || self.p.zone_bytes == 0 {
            (0, u64::MAX)
        } else {
            (req.sector.bytes(), req.sector.bytes() + self.p.zone_bytes)
        };
        let mut kept = VecDeque::with_capacity(self.dirty.len());
        for x in self.dirty.drain(..) {
            if x.start >= lo && x.start < hi {
                self.dirty_bytes -= x.len;
                self.dirty_segs -= x.segs;
            } else {
                kept.push_back(x);
            }
        }
        self.dirty = kept;
    }

    pub(super) fn check_flushes(&mut self) {
        let clean = self.dirty_bytes == 0 && !matches!(self.media_op, Some(MediaOp::Destage(_)));
        let no_cached_writes_in_flight = !self.transfers.iter().any(|t| t.2 == Transfer::IntoCache);
        if !(clean && no_cached_writes_in_flight) {
            return;
        }
        let mut i = 0;
        while i < self.cmds.len() {
            if self.cmds[i].stage == Stage::FlushWait {
                let c = self.cmds.remove(i);
                let end = self.link_transfer(0, self.now);
                self.complete_at(end, c.req);
            } else {
                i += 1;
            }
        }
    }

    pub(super) fn start_destage(&mut self, t: f64) {
        let window = (self.p.destage.window as usize).min(self.dirty.len());
        let pick = (0..window)
            .min_by(|&a, &b| {
                let pa = self.positioning(self.dirty[a].start, t, true);
                let pb = self.positioning(self.dirty[b].start, t, true);
                (pa.0 + pa.1).total_cmp(&(pb.0 + pb.1))
            })
            .expect("dirty data to destage");
        let x = self.dirty[pick];
        let chunk = x.len.min(self.p.destage.chunk_bytes);
        // Segments of the data the chunk covers are freed with it.
        let segs = if chunk == x.len { x.segs } else { ((u64::from(x.segs) * chunk / x.len) as u32).min(x.segs) };
        let part = Extent { start: x.start, len: chunk, segs };
        if chunk == x.len {
            self.dirty.remove(pick);
        } else {
            self.dirty[pick] = Extent { start: x.start + chunk, len: x.len - chunk, segs: x.segs - segs };
        }
        self.dirty_bytes -= chunk;
        self.dirty_segs -= segs;
        self.media_access(t, part.start, part.len, true, MediaOp::Destage(part));
    }

    pub(super) fn insert_dirty(&mut self, x: Extent) {
        self.dirty_bytes += x.len;
        self.dirty_segs += x.segs;
        self.stats.cached_writes += 1;
        self.stats.max_dirty_bytes = self.stats.max_dirty_bytes.max(self.dirty_bytes);
        if self.p.destage.merge {
            if let Some(prev) = self.dirty.iter_mut().find(|d| d.end() == x.start) {
                prev.len += x.len;
                prev.segs += x.segs;
                self.stats.merged_writes += 1;
                return;
            }
        }
        self.dirty.push_back(x);
        self.stats.max_dirty_extents = self.stats.max_dirty_extents.max(self.dirty.len() as u64);
        self.stats.max_dirty_segs = self.stats.max_dirty_segs.max(u64::from(self.dirty_segs));
    }
}
