//! RESET_ALL: a barrier for every zone write of the device.
//!
//! A RESET_ALL aborts every write waiting in a plug (the user raced its own writes),
//! then waits until no zone write, reset, finish or append is out and executes
//! alone; zone operations submitted meanwhile wait behind it in their plugs. When it
//! completes, every sequential zone is EMPTY, or, if it failed, every write pointer
//! is unknown.

use super::bios::{FragId, FragState};
use super::plugs::CondCache;
use super::{Engine, Queue};
use crate::units::ZoneNo;
use std::collections::VecDeque;

/// RESET_ALL requests and the one on the device.
#[derive(Debug, Default)]
pub(crate) struct Barrier {
    /// RESET_ALL requests waiting for every zone write to drain, oldest first.
    pub waiting: VecDeque<FragId>,
    /// A RESET_ALL is on the device.
    pub out: bool,
    /// RESET_ALLs submitted so far.
    pub submitted: u64,
    /// RESET_ALLs completed so far.
    pub done: u64,
}

impl Barrier {
    /// Whether a RESET_ALL is waiting or out: zone operations must wait.
    pub fn active(&self) -> bool {
        self.out || !self.waiting.is_empty()
    }
}

impl Queue {
    /// Sends the oldest waiting RESET_ALL once nothing of any zone is out and the
    /// resets, finishes and appends submitted before it, which keep their place in
    /// their plugs, have gone ahead of it: the device sees them in submission order.
    #[inline]
    pub(crate) fn try_barrier(&mut self) {
        // Checked after every plug change: nearly always nothing waits.
        if !self.barrier.waiting.is_empty() {
            self.try_waiting_barrier();
        }
    }

    /// [`Queue::try_barrier`] with a RESET_ALL waiting.
    #[inline(never)]
    fn try_waiting_barrier(&mut self) {
        let out = self.plugs.ops_out > 0 || self.plugs.appends_out > 0;
        let out = out && !crate::mutation::on(crate::mutation::Mutation::ResetAllNoWait);
        let Some(&head) = self.barrier.waiting.front() else { return };
        if self.barrier.out || out {
            return;
        }
        let epoch = self.frags[head].ra_epoch;
        let before = self.plugs.iter().any(|(_, plug)| plug.queue.iter().any(|&f| self.frags[f].ra_epoch <= epoch));
        if before {
            return;
        }
        if let Some(f) = self.barrier.waiting.pop_front() {
            self.barrier.out = true;
            self.dispatch(f);
        }
    }

    /// The write pointer of zone `z` is no longer known.
    pub(crate) fn forget_wp(&mut self, z: ZoneNo) {
        if let Some(p) = self.plugs.get(z) {
            self.plugs[p].need_wp_update = true;
        } else if !matches!(self.cond[z.idx()], CondCache::ReadOnly | CondCache::Offline) {
            self.cond[z.idx()] = CondCache::Unknown;
        }
    }
}

impl Engine {
    /// RESET_ALL: aborts every waiting write, then waits until no zone write is out
    /// and executes alone. Zone writes submitted meanwhile wait behind it.
    pub(crate) fn submit_reset_all(&mut self, f: FragId) {
        for p in self.q.plugs.ids() {
            self.abort_queued_writes(p, crate::bio::Status::Aborted);
            self.q.maybe_release(p);
        }
        self.q.frags[f].state = FragState::Held;
        self.q.barrier.submitted += 1;
        self.q.barrier.waiting.push_back(f);
        self.q.try_barrier();
    }

    /// A RESET_ALL finished: every sequential zone is EMPTY (or, if it failed, its
    /// write pointer is unknown). Zone operations held behind it go.
    pub(crate) fn reset_all_done(&mut self, failed: bool) {
        let q = &mut self.q;
        assert!(q.barrier.out, "RESET_ALL completion without a barrier out");
        q.barrier.out = false;
        q.barrier.done += 1;
        for z in q.geo.nr_conv()..q.geo.nr_zones() {
            let z = ZoneNo(z);
            if failed {
                q.forget_wp(z);
            } else if let Some(p) = q.plugs.get(z) {
                let plug = &mut q.plugs[p];
                plug.wp_offset = 0;
                plug.need_wp_update = false;
            } else if !matches!(q.cond[z.idx()], CondCache::ReadOnly | CondCache::Offline) {
                q.cond[z.idx()] = CondCache::Empty;
            }
        }
        q.try_barrier();
        let plugs = q.plugs.ids();
        // What was submitted between this RESET_ALL and the next may go now.
        for &p in &plugs {
            if !self.q.barrier.out {
                self.q.maybe_request_report(p);
            }
            self.policy.plug_changed(&mut self.q, p);
        }
        for p in plugs {
            self.q.maybe_release(p);
        }
        self.policy.kick(&mut self.q);
    }
}
