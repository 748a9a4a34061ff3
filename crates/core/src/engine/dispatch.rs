//! The device side of the queue: tags, issuing requests, and completions coming back
//! (the kernel's blk-mq dispatch and `blk_mq_end_request()`).
//!
//! The device accepts `queue_depth` requests at once; a released request beyond that
//! waits for a tag in FIFO order. A completion frees the tag, ends the fragment (and
//! its BIO with its last fragment), then tells whoever ordered the request: its plug,
//! the RESET_ALL barrier, or the issue policy.

use super::bios::{BioId, BioTable, Frag, FragId, FragState, Kind};
use super::policy::UnpluggedDone;
use super::{Action, Engine, Queue};
use crate::bio::{Completion, ReqId, Request, Status};
use crate::units::Sector;
use std::collections::VecDeque;

/// The device's tags.
#[derive(Debug, Default)]
pub(crate) struct Tags {
    /// Requests on the device.
    pub inflight: u32,
    /// Requests waiting for a tag, oldest first.
    pub wait: VecDeque<FragId>,
}

impl Queue {
    /// Whether the device has a free tag.
    pub(crate) fn has_tag(&self) -> bool {
        self.tags.inflight < self.cfg.queue_depth
    }

    /// Fragment `f`, which no plug orders, waits in the policy's scheduler (zone
    /// write locking's mq-deadline) instead of going to the device.
    pub(crate) fn hold_in_scheduler(&mut self, f: FragId) -> &Frag {
        let frag = &mut self.frags[f];
        frag.kind = Kind::Sched;
        frag.state = FragState::Sched;
        frag
    }

    /// Sends fragment `f` to the device, or to the tag wait list.
    pub(crate) fn dispatch(&mut self, f: FragId) {
        if self.has_tag() {
            self.issue(f);
        } else {
            self.frags[f].state = FragState::WaitTag;
            self.tags.wait.push_back(f);
        }
    }

    /// Issues fragment `f` to the device: it takes a tag.
    pub(crate) fn issue(&mut self, f: FragId) {
        let id = self.frags.req_id(f);
        let frag = &mut self.frags[f];
        frag.state = FragState::InFlight;
        self.tags.inflight += 1;
        self.stats.requests += 1;
        let user_data = self.bios.user_data(frag.bio);
        self.actions.push_back(Action::Issue(Request {
            id,
            op: frag.op,
            sector: frag.sector,
            nr_sectors: frag.nr_sectors,
            flags: frag.flags,
            user_data,
            bio_offset: frag.bio_offset,
        }));
    }

    /// Ends fragment `f` with `result` (for a zone append, where the data landed);
    /// its BIO completes with its last fragment.
    pub(crate) fn end_frag(&mut self, f: FragId, result: Result<Sector, Status>) {
        let frag = self.frags.remove(f);
        end_removed(&mut self.bios, &mut self.actions, &frag, result);
    }

    /// Drops the submission's own reference on BIO `b` (it is fully split).
    pub(crate) fn put_bio(&mut self, b: BioId) {
        if let Some(c) = self.bios.put(b, Ok(()), None) {
            self.actions.push_back(Action::Complete(c));
        }
    }

    /// Completes a BIO that never entered the engine (refused, or too many BIOs).
    pub(crate) fn complete_bio_now(&mut self, user_data: u64, result: Result<Sector, Status>) {
        self.actions.push_back(Action::Complete(Completion { user_data, result }));
    }
}

/// Ends fragment `frag`, already taken out of the fragment table, with `result`;
/// its BIO completes with its last fragment. Apart from the queue, so that a caller
/// may hold a plug's list while it ends the fragments it takes off it.
pub(crate) fn end_removed(
    bios: &mut BioTable,
    actions: &mut VecDeque<Action>,
    frag: &Frag,
    result: Result<Sector, Status>,
) {
    // Native append: where the device put the data. Emulated append: the sector of
    // the write it became.
    let at = match result {
        Ok(sector) if frag.append => Some(sector),
        _ => None,
    };
    let write = matches!(frag.op, crate::bio::Op::Write | crate::bio::Op::ZoneAppend);
    let result = if write && crate::mutation::on(crate::mutation::Mutation::DeviceStatusLost) {
        // Planted: a zone resource limit told to the writer as a media error.
        result.map_err(|s| if s.errno() == 109 || s.errno() == 75 { Status::IoErr } else { s })
    } else {
        result
    };
    if let Some(c) = bios.put(frag.bio, result.map(|_| ()), at) {
        actions.push_back(Action::Complete(c));
    }
}

/// What a completed request was, for whoever ordered it.
struct Finished {
    /// A pipelined zone write, kept until its turn to be acknowledged.
    piped: Option<FragId>,
    kind: Kind,
    op: crate::bio::Op,
    plug: Option<super::plugs::PlugId>,
    sector: Sector,
}

impl Engine {
    /// The device finished request `id`: `Ok(sector)` with the sector it was executed
    /// at (for a native zone append, where the data landed), or the error status.
    ///
    /// Panics on an id that is not on the device: that is a driver bug.
    pub fn complete(&mut self, id: ReqId, result: Result<Sector, Status>) {
        self.request_completed(id, result);
        self.after_input();
    }

    fn request_completed(&mut self, id: ReqId, result: Result<Sector, Status>) {
        let done = self.q.request_done(id, result);
        let failed = result.is_err();
        match done.kind {
            Kind::ZoneWrite if done.piped.is_some() => {
                let p = done.plug.expect("pipelined write without plug");
                self.pipe_completed(p, done.piped.expect("checked"), failed);
            }
            Kind::ZoneWrite | Kind::WpOp => {
                let p = done.plug.expect("plugged operation without plug");
                if self.q.zone_op_done(p, done.kind, done.op, failed) {
                    self.abort_queued_writes(p, Status::Aborted);
                }
                self.after_plug_change(p);
            }
            Kind::NativeAppend => {
                let p = done.plug.expect("native append without plug");
                self.q.append_done(p);
                self.after_plug_change(p);
            }
            Kind::ResetAll => self.reset_all_done(failed),
            Kind::Free | Kind::Sched => {
                let d = UnpluggedDone { kind: done.kind, op: done.op, sector: done.sector };
                self.policy.unplugged_done(&mut self.q, d);
            }
        }
        if self.q.freeze.is_some() {
            self.maybe_unfreeze();
        }
    }
}

impl Queue {
    /// Takes request `id` off the device, ends its fragment and hands the freed tag
    /// to the oldest waiting request.
    fn request_done(&mut self, id: ReqId, result: Result<Sector, Status>) -> Finished {
        let f = self.frags.lookup(id).unwrap_or_else(|| panic!("completion of unknown request {id:?}"));
        let frag = &mut self.frags[f];
        assert_eq!(frag.state, FragState::InFlight, "completion of request {id:?} not in flight");
        let piped = frag.piped.then_some(f);
        let done = Finished { piped, kind: frag.kind, op: frag.op, plug: frag.plug, sector: frag.sector };
        if piped.is_some() {
            // Not acknowledged yet: the writes before it in its zone go first.
            frag.state = FragState::Completed;
            frag.held = Some(result);
        }
        self.tags.inflight -= 1;
        if piped.is_none() {
            self.end_frag(f, result);
        }
        while self.has_tag() {
            let Some(next) = self.tags.wait.pop_front() else { break };
            self.issue(next);
        }
        done
    }
}
