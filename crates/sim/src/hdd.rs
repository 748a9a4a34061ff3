//! A hard disk timing model (SMR or conventional), in virtual time: a DiskSim-like
//! model small enough to read in one sitting.
//!
//! - **Layout**: zoned bit recording. LBAs run from the outer diameter (OD) to the
//!   inner (ID); the linear bit density is constant, so the media rate is
//!   proportional to the radius, from `od_rate` down to `id_rate`. The model uses one
//!   virtual surface whose track holds one revolution of data, and places an LBA at a
//!   radial position (fraction of the stroke) and an angle.
//! - **Seek**: Ruemmler & Wilkes' shape: `t1 + a·√d` for short seeks, `c + b·d` for
//!   long ones (d = fraction of the stroke), fitted to the datasheet's single-track,
//!   average and full-stroke times; writes add the datasheet's extra settle time.
//! - **Rotation**: exact, at `rpm`. After a seek the head waits for the target
//!   sector to come round; continuing where the last transfer ended costs nothing, but
//!   arriving late at the next sector costs (almost) a revolution, as on a real disk.
//! - **Interface**: a per-command overhead and a link (SATA 6 Gb/s: 600 MB/s) shared
//!   by all transfers; a command queue of `ncq_depth` tags.
//! - **Write-back cache**: with the write cache on, a write is acknowledged once its
//!   data is in the cache, if the dirty budget (`cache_bytes`, `cache_extents`) has
//!   room; otherwise it waits. Data contiguous with a cached extent merges into it.
//!   Dirty data is destaged in chunks by the policy of [`Destage`]. FLUSH waits until
//!   nothing is dirty; a FUA write goes to the media before it completes. A zone
//!   reset is non-queued and waits for the cache to be written back (M1). With the
//!   cache off, writes are written to the media before completing, scheduled by
//!   shortest positioning time among the queued commands (RPO).
//! - **Zone resume (M2)**: a media write that resumes a zone after the head wrote
//!   another one first re-acquires the zone's last shingled track: one revolution.
//! - **Reads**: from the cache when dirty data covers them, from the read-ahead
//!   buffer when the previous media read ran on into them, else from the media
//!   (shortest positioning time first among queued reads).
//!
//! Every parameter is documented with its source in the presets ([`HddParams::smr_30tb`],
//! [`HddParams::smr_20tb`]) and in `docs/calibration.md`.
//!
//! The parts: `params` (parameters and presets), `mechanics` (layout, seek, rotation,
//! zone resume), `cache` (write-back cache, destage, read-ahead) and `queue` (NCQ
//! tags, the link, the event loop); this module holds the disk's state and its
//! [`DeviceModel`] face.

mod cache;
mod mechanics;
mod params;
mod queue;

pub use params::{
    CACHE_SEGMENTS, CMD_OVERHEAD_NS, DESTAGE_WINDOW_30TB, Destage, HddParams, OD_RATE, ZONE_ADVANCE_30TB,
    ZONE_RESUME_REVS,
};

use super::model::DeviceModel;
use cache::{Extent, Readahead};
use mechanics::{SeekCurve, ZONE_ADVANCE_DRAW, unit_hash};
use queue::{Cmd, MediaOp, Transfer};
use std::collections::VecDeque;
use zblk_core::bio::{Op, Request};

/// The disk model. Implements [`DeviceModel`].
#[derive(Debug)]
pub struct HddModel {
    p: HddParams,
    rev_ns: f64,
    /// `p.zone_advance`, or the layout seed's draw of it.
    zone_advance: f64,
    n_tracks: f64,
    r_min: f64,
    seek: SeekCurve,
    write_seek: SeekCurve,
    /// Commands accepted (NCQ), in arrival order, and the ones waiting for a tag.
    cmds: Vec<Cmd>,
    backlog: VecDeque<Request>,
    link_free_at: f64,
    media_free_at: f64,
    media_op: Option<MediaOp>,
    /// Head position after the last media operation: LBA byte and time.
    head_byte: u64,
    head_time: f64,
    /// The zone the head last wrote (its last shingled track's position is known).
    last_write_zone: Option<u64>,
    /// Zone of the last write that reached the disk (for `arrival_switches`).
    last_arrival_zone: Option<u64>,
    dirty: VecDeque<Extent>,
    dirty_bytes: u64,
    dirty_segs: u32,
    reserved_segs: u32,
    readahead: Option<Readahead>,
    /// Completions scheduled: (time, request), unordered.
    pending: Vec<(f64, Request)>,
    /// Commands whose link transfer is in progress: (end time, request id, kind).
    transfers: Vec<(f64, u64, Transfer)>,
    now: f64,
    /// Counters for reports.
    pub stats: HddStats,
}

/// What the disk did.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct HddStats {
    /// Media operations.
    pub media_ops: u64,
    /// Media operations that needed a seek.
    pub seeks: u64,
    /// Time spent seeking, ns.
    pub seek_ns: f64,
    /// Time spent waiting for rotation, ns.
    pub rotation_ns: f64,
    /// Time spent transferring to/from the media, ns.
    pub transfer_ns: f64,
    /// Bytes destaged from the cache.
    pub destaged_bytes: u64,
    /// Reads served from the read-ahead buffer or the cache.
    pub read_hits: u64,
    /// Writes cached.
    pub cached_writes: u64,
    /// Of which merged into a dirty extent they continue.
    pub merged_writes: u64,
    /// Most dirty extents at once.
    pub max_dirty_extents: u64,
    /// Most dirty bytes at once.
    pub max_dirty_bytes: u64,
    /// Most cache segments in use at once.
    pub max_dirty_segs: u64,
    /// Media writes that resumed a zone after writing another (mechanism M2).
    pub zone_resumes: u64,
    /// Time spent re-acquiring resumed zones, ns.
    pub resume_ns: f64,
    /// Zone resets executed.
    pub resets: u64,
    /// Writes that reached the disk for another zone than the write that reached it
    /// just before (the interleaving the host hands the disk, before any cache).
    pub arrival_switches: u64,
}

impl HddModel {
    /// A disk with parameters `p`, idle at time zero with the head at LBA 0.
    pub fn new(p: HddParams) -> HddModel {
        assert!(p.od_rate >= p.id_rate && p.id_rate > 0.0, "media rates must satisfy od >= id > 0");
        assert!(p.ncq_depth > 0 && p.destage.window > 0 && p.destage.chunk_bytes > 0, "bad HDD parameters");
        let rev_ns = 60e9 / p.rpm;
        let r_min = p.id_rate / p.od_rate;
        let avg_track = rev_ns * 1e-9 * (p.od_rate + p.id_rate) / 2.0;
        let n_tracks = p.capacity_bytes as f64 / avg_track;
        let seek = SeekCurve::fit(p.seek_track_ns, p.seek_avg_ns, p.seek_full_ns, 1.0 / n_tracks);
        let write_seek =
            SeekCurve::fit(p.write_seek_track_ns, p.write_seek_avg_ns, p.write_seek_full_ns, 1.0 / n_tracks);
        let zone_advance = match p.zone_advance {
            Some(a) => {
                assert!((0.0..1.0).contains(&a), "zone advance {a} is not in [0, 1) revolutions");
                a
            }
            None => unit_hash(p.layout_seed, ZONE_ADVANCE_DRAW),
        };
        HddModel {
            rev_ns,
            zone_advance,
            write_seek,
            n_tracks,
            r_min,
            seek,
            cmds: Vec::new(),
            backlog: VecDeque::new(),
            link_free_at: 0.0,
            media_free_at: 0.0,
            media_op: None,
            head_byte: 0,
            head_time: 0.0,
            last_write_zone: None,
            last_arrival_zone: None,
            dirty: VecDeque::new(),
            dirty_bytes: 0,
            dirty_segs: 0,
            reserved_segs: 0,
            readahead: None,
            pending: Vec::new(),
            transfers: Vec::new(),
            now: 0.0,
            stats: HddStats::default(),
            p,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &HddParams {
        &self.p
    }
}

impl DeviceModel for HddModel {
    fn submit(&mut self, now_ns: u64, req: &Request) {
        let mut scratch = Vec::new();
        self.run_to(now_ns as f64, &mut scratch);
        // Completions due now stay pending: give them back to the heap of the caller's
        // next advance by keeping them in `pending`.
        for r in scratch {
            self.pending.push((now_ns as f64, r));
        }
        self.now = now_ns as f64;
        if matches!(req.op, Op::Write | Op::ZoneAppend) && self.p.zone_bytes != 0 {
            let z = req.sector.bytes() / self.p.zone_bytes;
            if self.last_arrival_zone.is_some_and(|l| l != z) {
                self.stats.arrival_switches += 1;
            }
            self.last_arrival_zone = Some(z);
        }
        self.backlog.push_back(*req);
        self.schedule();
    }

    fn next_event_ns(&self) -> Option<u64> {
        let next_xfer = self.transfers.iter().map(|t| t.0).fold(f64::INFINITY, f64::min);
        let next_media = if self.media_op.is_some() { self.media_free_at } else { f64::INFINITY };
        let next_done = self.pending.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let t = next_xfer.min(next_media).min(next_done);
        t.is_finite().then(|| t.ceil() as u64)
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Request>) {
        self.run_to(now_ns as f64, done);
    }

    fn power_loss(&mut self, now_ns: u64) {
        // Its commands, its cache and its head position go; what it counted stays.
        let stats = self.stats;
        *self = HddModel::new(self.p.clone());
        self.stats = stats;
        (self.now, self.link_free_at, self.media_free_at) = (now_ns as f64, now_ns as f64, now_ns as f64);
    }

    fn describe(&self) -> String {
        format!(
            "simulated {} ({:.0} TB, {} rpm, {:.0}-{:.0} MB/s, write cache {})",
            self.p.name,
            self.p.capacity_bytes as f64 / 1e12,
            self.p.rpm,
            self.p.od_rate / 1e6,
            self.p.id_rate / 1e6,
            if self.p.write_cache { "on" } else { "off" }
        )
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let s = &self.stats;
        vec![
            ("media_ops", s.media_ops as f64),
            ("seeks", s.seeks as f64),
            ("seek_s", s.seek_ns / 1e9),
            ("rotation_s", s.rotation_ns / 1e9),
            ("media_transfer_s", s.transfer_ns / 1e9),
            ("destaged_bytes", s.destaged_bytes as f64),
            ("cached_writes", s.cached_writes as f64),
            ("merged_writes", s.merged_writes as f64),
            ("read_hits", s.read_hits as f64),
            ("max_dirty_bytes", s.max_dirty_bytes as f64),
            ("zone_resumes", s.zone_resumes as f64),
            ("resume_s", s.resume_ns / 1e9),
            ("resets", s.resets as f64),
            ("arrival_switches", s.arrival_switches as f64),
        ]
    }
}

#[cfg(test)]
mod tests;
