//! The kernel's plug work ([`SimConfig::plug_work_ns`](super::SimConfig)): a zone
//! write that a completion releases from its plug reaches the disk later, when the
//! block layer's work item (`blk_zone_wplug_bio_work()`) runs; a workload's own
//! submission to an idle plug goes out from its own context at once. The two race
//! at a zone boundary, and whichever wins sets the order in which the disk gets the
//! zones' writes. A request never overtakes one issued before it that addresses the
//! same zone (or, for a flush, a reset of every zone or a regular disk, any of the
//! disk's), so a zone's writes keep the order the engine gave them.

use super::{Sim, Unplugged};
use zblk_core::bio::{Op, Request};
use zblk_core::stack::{DevId, TraceAction, TraceEvent};
use zblk_core::units::ZoneNo;

impl Sim {
    /// When `req`, issued to disk `dev` now, reaches it: `None` for now. Released by
    /// a completion, after the plug work; else behind the last request of its zone
    /// still on its way.
    pub(super) fn plug_work_due(&self, dev: DevId, req: &Request) -> Option<u64> {
        if self.clock.plug_work_ns == 0 {
            return None;
        }
        let zone = self.zone_of(dev, req);
        let behind = self
            .clock
            .unplugged
            .iter()
            .filter(|u| u.dev == dev && (zone.is_none() || u.zone.is_none() || u.zone == zone))
            .map(|u| u.due_ns)
            .max();
        let released = self.clock.after_completions.then(|| self.clock.now_ns + self.clock.plug_work_ns);
        released.max(behind)
    }

    /// Keeps `req` until `at`, with its `D` trace event (stamped when it reaches the disk).
    pub(super) fn defer_issue(&mut self, at: u64, dev: DevId, req: Request) {
        let traced = self.take_held_issue(dev, &req);
        let zone = self.zone_of(dev, &req);
        // After every request due at or before `at`: the order of issue among equals.
        let k = self.clock.unplugged.partition_point(|u| u.due_ns <= at);
        self.clock.unplugged.insert(k, Unplugged { due_ns: at, dev, req, traced, zone });
    }

    /// Hands every deferred request due by now to its disk, in order.
    pub(super) fn issue_unplugged(&mut self) {
        while self.clock.unplugged.front().is_some_and(|u| u.due_ns <= self.clock.now_ns) {
            let u = self.clock.unplugged.pop_front().expect("a deferred request");
            let i = self.disk_index(u.dev);
            self.reach_disk(i, &u.req);
            self.stamp(u.traced);
        }
    }

    /// `req` reached its disk as it was issued: its held `D` is stamped now.
    pub(super) fn stamp_issue_now(&mut self, dev: DevId, req: &Request) {
        if self.clock.plug_work_ns > 0 {
            // Taking it drained the events before it: it goes out next.
            if let Some(e) = self.take_held_issue(dev, req) {
                self.hand_out(e);
            }
        }
    }

    /// The zone `req` addresses on disk `dev`; `None` for a flush, a reset of every
    /// zone, or any request to a regular disk (kept in the disk's order).
    fn zone_of(&self, dev: DevId, req: &Request) -> Option<ZoneNo> {
        let geo = self.stack.engine(dev).expect("a disk has an engine").geometry();
        (geo.is_zoned() && !matches!(req.op, Op::Flush | Op::ZoneResetAll)).then(|| geo.zone_no(req.sector))
    }

    /// Takes `req`'s `D` event out of those held back (tracing on).
    fn take_held_issue(&mut self, dev: DevId, req: &Request) -> Option<TraceEvent> {
        self.drain_events();
        let held = &mut self.tracing.held;
        let i = held.iter().position(|e| {
            e.action == TraceAction::Issue && e.dev == dev && e.sector == req.sector && e.nr_sectors == req.nr_sectors
        })?;
        Some(held.remove(i))
    }

    /// Hands out, stamped now, any held `D` no request took (none is expected).
    pub(super) fn release_held_events(&mut self) {
        if self.tracing.held.is_empty() {
            return;
        }
        for e in std::mem::take(&mut self.tracing.held) {
            self.hand_out(e);
        }
    }

    /// Hands out `event`, stamped now.
    fn stamp(&mut self, event: Option<TraceEvent>) {
        if let Some(e) = event {
            // The events before it first, in the order they happened.
            self.drain_events();
            self.hand_out(e);
        }
    }
}
