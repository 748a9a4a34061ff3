//! What a policy may see of the engine and do to it: the one door between a policy
//! and the engine's [`Queue`].
//!
//! A policy decides *when* plugged operations go; the engine keeps the accounting
//! (plugs, `wp_offset`, tags, fragments, the barrier). The kernel draws the same
//! line between an I/O scheduler and blk-mq: mq-deadline sees requests and calls
//! `blk_mq_*` helpers, it does not edit the tag sets. Here a policy gets a
//! [`PolicyCtx`] (or, to check its invariants, a [`PolicyView`]): a handle whose
//! only field is private to this file, with the engine's operations a policy may
//! call (list and unlist a plug, drain its front, dispatch, hold a request in the
//! policy's scheduler, release an idle plug, anticipate, count) and the few facts it
//! may read. A policy file cannot name a field of `Queue`, so it cannot break the
//! engine's accounting: `scripts/check-architecture` checks that no policy file but
//! this one and the dispatch in `mod.rs` names `Queue` at all.
//!
//! Every method is a forwarding call the compiler inlines: the handle costs nothing
//! on the paths that call a policy.

use crate::bio::Op;
use crate::engine::Queue;
use crate::engine::bios::{FragId, FragState, Kind};
use crate::engine::plugs::PlugId;
use crate::geometry::Geometry;
use crate::units::{Sector, ZoneNo};
use std::ops::Deref;

/// The engine as a policy sees it: `Q` is `&Queue` ([`PolicyView`], for checks) or
/// `&mut Queue` ([`PolicyCtx`], for the hooks that act).
#[derive(Debug)]
pub(crate) struct Ctx<Q> {
    q: Q,
}

/// The engine as a policy's hooks see it: its facts and its operations.
pub(crate) type PolicyCtx<'a> = Ctx<&'a mut Queue>;

/// The engine as a policy's checker sees it: its facts only.
pub(crate) type PolicyView<'a> = Ctx<&'a Queue>;

impl<'a> PolicyCtx<'a> {
    /// The handle the engine's dispatch to a policy passes on (`mod.rs`).
    #[inline]
    pub(super) fn new(q: &'a mut Queue) -> PolicyCtx<'a> {
        Ctx { q }
    }
}

impl<'a> PolicyView<'a> {
    /// The handle the engine's checker passes on (`mod.rs`).
    #[inline]
    pub(super) fn view(q: &'a Queue) -> PolicyView<'a> {
        Ctx { q }
    }
}

/// What a policy may read.
impl<Q: Deref<Target = Queue>> Ctx<Q> {
    /// The device's geometry.
    #[inline]
    pub fn geo(&self) -> &Geometry {
        &self.q.geo
    }

    /// The zone plug `p` plugs.
    #[inline]
    pub fn zone(&self, p: PlugId) -> ZoneNo {
        self.q.plugs[p].zone
    }

    /// Whether the policy holds plug `p` (it listed it).
    #[inline]
    pub fn listed(&self, p: PlugId) -> bool {
        self.q.plugs[p].listed
    }

    /// Whether operations wait in plug `p`.
    #[inline]
    pub fn has_queued(&self, p: PlugId) -> bool {
        !self.q.plugs[p].queue.is_empty()
    }

    /// Whether a write, reset or finish of plug `p` is on the device (one at a time;
    /// pipelined writes are counted by [`Ctx::pipelined`]).
    #[inline]
    pub fn busy(&self, p: PlugId) -> bool {
        self.q.plugs[p].busy
    }

    /// Pipelined writes of plug `p` released and not acknowledged.
    #[inline]
    pub fn pipelined(&self, p: PlugId) -> usize {
        self.q.plugs[p].pipe.len()
    }

    /// Sectors waiting in plug `p` (the batch a visit of the plug would issue).
    #[inline]
    pub fn queued_sectors(&self, p: PlugId) -> u64 {
        self.q.queued_sectors(p)
    }

    /// Every plug alive.
    #[inline]
    pub fn plugs(&self) -> impl Iterator<Item = PlugId> + '_ {
        self.q.plugs.iter().map(|(p, _)| p)
    }

    /// Plugged writes, resets and finishes of the whole device on the device
    /// (pipelined writes included).
    #[inline]
    pub fn zone_ops_out(&self) -> u32 {
        self.q.plugs.ops_out
    }

    /// Native zone appends of the whole device on the device.
    #[inline]
    pub fn appends_out(&self) -> u32 {
        self.q.plugs.appends_out
    }

    /// The most writes of one zone the policy's traits let out.
    #[inline]
    pub fn pipe_depth(&self) -> usize {
        self.q.pipe_depth()
    }

    /// A RESET_ALL is on the device.
    #[inline]
    pub fn barrier_out(&self) -> bool {
        self.q.barrier.out
    }

    /// A RESET_ALL waits or is on the device: the queue drains for it.
    #[inline]
    pub fn barrier_active(&self) -> bool {
        self.q.barrier.active()
    }

    /// A policy switch waits for the queue to drain.
    #[inline]
    pub fn freezing(&self) -> bool {
        self.q.freeze.is_some()
    }

    /// Whether the device has a free tag.
    #[inline]
    pub fn has_tag(&self) -> bool {
        self.q.has_tag()
    }

    /// Fragment `f`'s first sector.
    #[inline]
    pub fn frag_sector(&self, f: FragId) -> Sector {
        self.q.frags[f].sector
    }

    /// Fragment `f`'s length in sectors.
    #[inline]
    pub fn frag_sectors(&self, f: FragId) -> u32 {
        self.q.frags[f].nr_sectors
    }

    /// Fragment `f`'s operation.
    #[inline]
    pub fn frag_op(&self, f: FragId) -> Op {
        self.q.frags[f].op
    }

    /// Of the fragments the policy's scheduler took ([`PolicyCtx::hold_in_scheduler`]):
    /// how many it dispatched and are not done, and how many it still holds.
    pub fn scheduled(&self) -> (usize, usize) {
        let frags = || self.q.frags.iter().map(|(_, fr)| fr);
        let out = frags().filter(|fr| fr.kind == Kind::Sched && fr.state != FragState::Sched).count();
        let held = frags().filter(|fr| fr.state == FragState::Sched).count();
        (out, held)
    }
}

/// What a policy may do.
impl PolicyCtx<'_> {
    /// Marks plug `p` held by the policy (the single issuer's list).
    #[inline]
    pub fn list(&mut self, p: PlugId) {
        self.q.list(p);
    }

    /// Lets plug `p` go from the policy's hold.
    #[inline]
    pub fn unlist(&mut self, p: PlugId) {
        self.q.unlist(p);
    }

    /// Takes off plug `p` what may go now, as far as the plug's own rules let it
    /// ([`Queue::drain_front`]: one write of the zone out, or the pipeline depth).
    #[inline]
    pub fn drain_front(&mut self, p: PlugId) {
        self.q.drain_front(p, crate::engine::plugs::NO_CAP);
    }

    /// [`PolicyCtx::drain_front`], stopping once `device_cap` zone writes (resets
    /// and finishes included) of the whole device are out: a single issuer's 1, or
    /// the registry's `device_zone_writes`.
    #[inline]
    pub fn drain_front_within(&mut self, p: PlugId, device_cap: u32) {
        self.q.drain_front(p, device_cap);
    }

    /// Releases plug `p` if nothing uses it any more.
    #[inline]
    pub fn maybe_release(&mut self, p: PlugId) {
        self.q.maybe_release(p);
    }

    /// Sends fragment `f`, which no plug orders, to the device or its tag wait list.
    #[inline]
    pub fn dispatch(&mut self, f: FragId) {
        self.q.dispatch(f);
    }

    /// Issues fragment `f`, held in the policy's scheduler, on a free tag
    /// ([`Ctx::has_tag`]).
    #[inline]
    pub fn issue(&mut self, f: FragId) {
        self.q.issue(f);
    }

    /// Keeps fragment `f`, which no plug orders, in the policy's scheduler; returns
    /// its sector and operation.
    #[inline]
    pub fn hold_in_scheduler(&mut self, f: FragId) -> (Sector, Op) {
        let frag = self.q.hold_in_scheduler(f);
        (frag.sector, frag.op)
    }

    /// Asks the driver to call back after `ns` ([`crate::engine::Action::Anticipate`]);
    /// returns the anticipation's token.
    #[inline]
    pub fn anticipate(&mut self, ns: u64) -> u64 {
        self.q.anticipate(ns)
    }

    /// Counts an anticipated write that came in time.
    #[inline]
    pub fn count_anticipation_hit(&mut self) {
        self.q.count_anticipation_hit();
    }

    /// Counts a visit of the single issuer to a plug.
    #[inline]
    pub fn count_issuer_visit(&mut self) {
        self.q.count_issuer_visit();
    }
}
