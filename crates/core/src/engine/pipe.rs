//! Zone write pipelining: several writes of one zone on the device at once, on a
//! device that keeps a zone's writes in the order it was handed them (a zblk image,
//! the memory device; the kernel's discussion of write pipelining for UFS assumes the
//! same of a device that preserves order).
//!
//! The rules, which the pipelining policy (`policy/pipeline.rs`) relies on:
//!
//! - a write is checked against `wp_offset` and moves it when it is released (as
//!   every plugged write), so the next write of the zone may be released at once, up
//!   to [`Queue::pipe_depth`] writes out per zone; the plug's `pipe` lists them in
//!   zone order;
//! - a write is acknowledged (its fragment ended) only once every write before it in
//!   its zone is acknowledged: a completion that comes early is held
//!   ([`super::bios::FragState::Completed`]). So no acknowledged write ever sits
//!   beyond a write that may still fail: the acknowledged writes of a zone are always
//!   a prefix of what was written to it;
//! - a failed write fails every write after it in its zone that is not acknowledged
//!   (all of them, by the rule above), when each leaves the device; `wp_offset` goes
//!   back to the failed write's start and the zone needs a write pointer update, as
//!   after any failed write; the writes queued behind are aborted;
//! - anything else of the zone (a reset, a finish, a native append) waits until the
//!   pipe is empty, as it waits for a single write out under per-zone plugging; so
//!   does a write that is not a plain one (FUA, PREFLUSH, WRITE_ZEROES), which then
//!   goes alone (`plugs.rs`, `pipelinable`).

use super::bios::{Frag, FragId, FragState};
use super::dispatch::end_removed;
use super::plugs::PlugId;
use super::{Engine, Queue};
use crate::bio::Status;
use crate::mutation::{Mutation, on};
use crate::units::Sector;

impl Queue {
    /// Writes of one zone out at once: the pipeline depth under a policy that
    /// acknowledges in zone order, one otherwise (the policy's traits, set with it).
    pub(crate) fn pipe_depth(&self) -> usize {
        self.traits.zone_writes_in_flight.unwrap_or(1)
    }

    /// Pipelined write `f` of plug `p` failed: every write after it in the pipe
    /// fails too, and the zone's write pointer goes back to where `f` started.
    #[cold]
    fn pipe_failed(&mut self, p: PlugId, f: FragId) {
        self.stats.write_errors += 1;
        let off = self.geo.offset_in_zone(self.frags[f].sector);
        let plug = &mut self.plugs[p];
        let i = plug.pipe.iter().position(|&g| g == f).expect("failed write not in its pipe");
        if !on(Mutation::PipeFailureSpared) {
            for &g in plug.pipe.iter().skip(i + 1) {
                self.frags[g].doomed = true;
            }
        }
        if on(Mutation::PipeWpPastFailed) {
            return; // planted: the write pointer stays past the failed write, trusted
        }
        plug.wp_offset = plug.wp_offset.min(off);
        plug.need_wp_update = true;
    }

    /// Acknowledges the completed writes at the front of plug `p`'s pipe, in zone
    /// order, up to the first one still on the device.
    fn pipe_ack(&mut self, p: PlugId) {
        if on(Mutation::PipeAckOutOfOrder) {
            return self.pipe_ack_any(p);
        }
        // The pipe stays borrowed while its front is acknowledged: one lookup of the
        // plug for the whole run of held completions.
        let pipe = &mut self.plugs[p].pipe;
        while let Some(&f) = pipe.front() {
            if self.frags[f].state != FragState::Completed {
                break;
            }
            pipe.pop_front();
            let frag = self.frags.remove(f);
            let result = acked(&frag);
            end_removed(&mut self.bios, &mut self.actions, &frag, result);
        }
    }

    /// Planted: acknowledges every completed write of the pipe, in whatever order
    /// the device completed them.
    fn pipe_ack_any(&mut self, p: PlugId) {
        let pipe = std::mem::take(&mut self.plugs[p].pipe);
        let (done, out): (Vec<FragId>, Vec<FragId>) =
            pipe.into_iter().partition(|&f| self.frags[f].state == FragState::Completed);
        self.plugs[p].pipe = out.into();
        for f in done {
            self.ack(f);
        }
    }

    /// Ends pipelined write `f` with what the device said, or failed if a write
    /// before it failed.
    fn ack(&mut self, f: FragId) {
        let frag = self.frags.remove(f);
        let result = acked(&frag);
        end_removed(&mut self.bios, &mut self.actions, &frag, result);
    }
}

/// What pipelined write `frag`, completed and out of the fragment table, is
/// acknowledged with: what the device said, or failed if a write before it failed.
fn acked(frag: &Frag) -> Result<Sector, Status> {
    let result = frag.held.expect("acknowledging a write the device has not completed");
    if frag.doomed { result.and(Err(Status::Aborted)) } else { result }
}

impl Engine {
    /// The device completed pipelined write `f` of plug `p`: acknowledge what zone
    /// order now allows, apply the failure rules, let the plug release more.
    pub(super) fn pipe_completed(&mut self, p: PlugId, f: FragId, failed: bool) {
        self.q.plugs.ops_out -= 1;
        if !failed && self.q.plugs[p].pipe.front() != Some(&f) && !on(Mutation::PipeAckOutOfOrder) {
            // Held behind an earlier write still out: the plug releases nothing more
            // (its pipe is as long), keeps its write pointer, and holds back any
            // RESET_ALL by that earlier write. The common case on a device that
            // completes out of order: nothing else to do.
            return;
        }
        let first_failure = failed && !self.q.frags[f].doomed;
        if first_failure {
            self.q.pipe_failed(p, f);
        }
        self.q.pipe_ack(p);
        if first_failure {
            self.abort_queued_writes(p, Status::Aborted);
        }
        self.after_plug_change(p);
    }
}
