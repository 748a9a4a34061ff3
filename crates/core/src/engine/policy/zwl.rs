//! Legacy zone write locking (ZWL), the scheme zone write plugging replaced: a
//! request-level per-zone lock inside an mq-deadline-like scheduler.
//!
//! Every request needs one of a limited number of scheduler tags (mq-deadline's
//! `nr_requests`, twice the device queue depth by default); a request holds its tag
//! from the moment it enters the scheduler until it completes. Reads are dispatched
//! first; writes in ascending sector order from the last dispatch position (an
//! elevator), skipping writes whose zone is locked. Dispatching a write to a
//! sequential zone locks the zone until the write completes. A write waiting on a
//! locked zone keeps its tag: with many writers on few zones the tags run out and
//! writes to every other zone, and reads, wait too. That is the starvation that
//! motivated zone write plugging, and why zblk keeps this scheme as a baseline.
//!
//! There is no host write pointer here: a write not at the write pointer reaches the
//! device and fails there, as it did.

use super::{IssuePolicy, Policy, PolicyCtx, PolicyView, UnpluggedDone};
use crate::engine::EngineConfig;
use crate::engine::bios::{FragId, Kind};
use crate::engine::plugs::PlugId;
use crate::geometry::Geometry;
use crate::units::Sector;
use rustc_hash::FxHashSet;
use std::collections::{BTreeSet, VecDeque};

/// Zone write locking as an issue policy: every request with a sector range that no
/// plug orders (all of them: this policy has no plugs) goes through the scheduler.
#[derive(Debug)]
pub(crate) struct ZoneWriteLocking {
    sched: ZwlSched<FragId>,
}

impl ZoneWriteLocking {
    /// The scheduler's tags are `zwl_sched_tags`, or twice the device queue depth
    /// (the kernel's default `nr_requests`).
    pub fn new(cfg: &EngineConfig) -> ZoneWriteLocking {
        let tags = if cfg.zwl_sched_tags == 0 { 2 * cfg.queue_depth } else { cfg.zwl_sched_tags };
        ZoneWriteLocking { sched: ZwlSched::new(tags) }
    }

    /// The sequential zone a write at `sector` locks, if any.
    fn locked_zone(geo: &Geometry, sector: Sector, write: bool) -> Option<u32> {
        let z = geo.zone_no(sector);
        (write && geo.is_zoned() && !geo.zone_is_conv(z)).then_some(z.0)
    }

    /// Dispatches from the scheduler while the device has tags.
    fn pump(&mut self, q: &mut PolicyCtx<'_>) {
        while q.has_tag() {
            let zone_of = |sector: u64| Self::locked_zone(q.geo(), Sector(sector), true);
            let len_of = |f: FragId| u64::from(q.frag_sectors(f));
            let Some(f) = self.sched.next(zone_of, len_of) else { break };
            q.issue(f);
        }
    }
}

impl Policy for ZoneWriteLocking {
    fn kind(&self) -> IssuePolicy {
        IssuePolicy::Zwl
    }

    /// No operation is ever plugged; a plug left from the start-up zone report (a
    /// partially written zone) only records its write pointer.
    fn plug_changed(&mut self, _q: &mut PolicyCtx<'_>, _p: PlugId) {}

    /// The request takes a scheduler tag (or waits for one) and waits to be
    /// dispatched in elevator order.
    fn submit_unplugged(&mut self, q: &mut PolicyCtx<'_>, f: FragId) {
        let (sector, op) = q.hold_in_scheduler(f);
        self.sched.admit(f, sector.0, op.is_zone_write());
        self.pump(q);
    }

    /// A request of the scheduler frees its tag and its zone's lock, and a request
    /// waiting for a tag gets it; any completion frees a device tag for the scheduler.
    fn unplugged_done(&mut self, q: &mut PolicyCtx<'_>, done: UnpluggedDone) {
        if done.kind == Kind::Sched {
            let locked = Self::locked_zone(q.geo(), done.sector, done.op.is_zone_write());
            if let Some(w) = self.sched.done(locked) {
                let (sector, write) = (q.frag_sector(w).0, q.frag_op(w).is_zone_write());
                let admitted = self.sched.admit(w, sector, write);
                assert!(admitted, "a freed tag must admit its waiter");
            }
        }
        self.pump(q);
    }

    fn check(&self, q: &PolicyView<'_>) {
        let (out, held) = q.scheduled();
        let (queued, waiting) = self.sched.queued();
        assert_eq!(self.sched.tags_used() as usize, out + queued, "ZWL tags: in scheduler + dispatched");
        assert_eq!(held, queued + waiting, "ZWL fragments lost");
    }
}

/// The scheduler state, over requests named by `F`. The engine owns the requests;
/// this holds their names.
#[derive(Debug)]
pub(crate) struct ZwlSched<F> {
    sched_tags: u32,
    tags_used: u32,
    /// Requests waiting for a scheduler tag, oldest first (submitters sleeping in
    /// blk_mq_get_tag()).
    tag_wait: VecDeque<F>,
    /// Reads holding a tag, not dispatched, oldest first.
    reads: VecDeque<F>,
    /// Writes holding a tag, not dispatched, by (sector, request).
    writes: BTreeSet<(u64, F)>,
    /// Zones with a write on the device.
    locked: FxHashSet<u32>,
    /// Where the elevator is: the end of the last dispatched write.
    head: u64,
}

// `F::default()` must be the lowest name: writes are looked up by `(sector, F::default())..`.
impl<F: Copy + Ord + Default> ZwlSched<F> {
    pub fn new(sched_tags: u32) -> ZwlSched<F> {
        assert!(sched_tags > 0, "zone write locking needs scheduler tags");
        ZwlSched {
            sched_tags,
            tags_used: 0,
            tag_wait: VecDeque::new(),
            reads: VecDeque::new(),
            writes: BTreeSet::new(),
            locked: FxHashSet::default(),
            head: 0,
        }
    }

    /// A fragment enters: it takes a tag and waits in the scheduler, or waits for a
    /// tag. Returns false if it has to wait for a tag.
    pub fn admit(&mut self, f: F, sector: u64, write: bool) -> bool {
        if self.tags_used >= self.sched_tags {
            self.tag_wait.push_back(f);
            return false;
        }
        self.tags_used += 1;
        if write {
            self.writes.insert((sector, f));
        } else {
            self.reads.push_back(f);
        }
        true
    }

    /// The next fragment to dispatch, if any: a read, else the first write at or
    /// after the elevator head (wrapping once) whose zone is not locked. `zone_of`
    /// gives a write's sequential zone (None for a conventional zone, never locked).
    /// The chosen write's zone is locked.
    pub fn next(&mut self, zone_of: impl Fn(u64) -> Option<u32>, len_of: impl Fn(F) -> u64) -> Option<F> {
        if let Some(f) = self.reads.pop_front() {
            return Some(f);
        }
        let pick = self
            .writes
            .range((self.head, F::default())..)
            .chain(self.writes.range(..(self.head, F::default())))
            .find(|(sector, _)| zone_of(*sector).is_none_or(|z| !self.locked.contains(&z)))
            .copied();
        let (sector, f) = pick?;
        self.writes.remove(&(sector, f));
        if let Some(z) = zone_of(sector) {
            self.locked.insert(z);
        }
        self.head = sector + len_of(f);
        Some(f)
    }

    /// A fragment of the scheduler completed: its tag is free and its zone (if it was
    /// a sequential zone write) unlocked. Returns the fragment that gets the tag, if
    /// one was waiting: the caller admits it.
    pub fn done(&mut self, locked_zone: Option<u32>) -> Option<F> {
        if let Some(z) = locked_zone {
            assert!(self.locked.remove(&z), "zone {z} was not locked");
        }
        assert!(self.tags_used > 0, "tag released twice");
        self.tags_used -= 1;
        self.tag_wait.pop_front()
    }

    /// Tags in use (for checks).
    pub fn tags_used(&self) -> u32 {
        self.tags_used
    }

    /// Fragments in the scheduler (holding tags) and waiting for one.
    pub fn queued(&self) -> (usize, usize) {
        (self.reads.len() + self.writes.len(), self.tag_wait.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(s: u64) -> Option<u32> {
        Some((s / 100) as u32)
    }

    #[test]
    fn writes_go_in_elevator_order_one_per_zone() {
        let mut z = ZwlSched::new(8);
        for (f, s) in [(0, 250), (1, 110), (2, 100), (3, 300)] {
            assert!(z.admit(f, s, true));
        }
        let len = |_| 10;
        assert_eq!(z.next(zone, len), Some(2)); // lowest sector first
        assert_eq!(z.next(zone, len), Some(0)); // 110 is in zone 1, locked: skip to 250
        assert_eq!(z.next(zone, len), Some(3));
        assert_eq!(z.next(zone, len), None); // 110 waits for zone 1
        assert_eq!(z.done(Some(1)), None);
        assert_eq!(z.next(zone, len), Some(1)); // wraps round to it
    }

    #[test]
    fn tags_run_out_and_are_handed_on() {
        let mut z = ZwlSched::new(2);
        assert!(z.admit(0, 100, true));
        assert!(z.admit(1, 110, true)); // same zone: holds a tag while waiting
        assert!(!z.admit(2, 500, true)); // another zone, but no tag left
        assert_eq!(z.next(zone, |_| 10), Some(0));
        assert_eq!(z.next(zone, |_| 10), None);
        assert_eq!(z.done(Some(1)), Some(2));
        assert_eq!(z.tags_used(), 1);
    }

    #[test]
    fn reads_go_first() {
        let mut z = ZwlSched::new(4);
        z.admit(0, 100, true);
        z.admit(1, 900, false);
        assert_eq!(z.next(zone, |_| 10), Some(1));
    }
}
