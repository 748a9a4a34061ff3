//! Tracing: the stack's events, stamped with virtual time, handed to the disks'
//! checkers (a BIO queued on a disk), the seek histograms and the trace sink.

use super::{Sim, TraceSink};
use zblk_core::bio::Bio;
use zblk_core::stack::{SeekTracker, TraceAction, TraceEvent};

impl Sim {
    /// Turns tracing on in a simulation built without it (a served device whose trace
    /// is asked for): from now on every event is recorded, for the sink and the seek
    /// histograms. Does nothing when tracing is on already.
    pub fn start_tracing(&mut self) {
        if self.tracing.events.is_none() {
            self.stack.record_events(true);
            self.tracing.events = Some(Vec::new());
        }
        if self.tracing.seeks.is_none() {
            self.tracing.seeks = Some(SeekTracker::new(&self.stack));
        }
    }

    /// Hands every trace event, as it happens, to `sink` (tracing must be on).
    pub fn set_trace_sink(&mut self, sink: TraceSink) {
        assert!(self.tracing.seeks.is_some(), "trace sink set without tracing on");
        self.tracing.sink = Some(sink);
    }

    /// Removes the trace sink (dropping it, which flushes what it buffers).
    pub fn clear_trace_sink(&mut self) {
        self.tracing.sink = None;
    }

    /// The seek histograms of every device (tracing must be on).
    pub fn seeks(&self) -> Option<&SeekTracker> {
        self.tracing.seeks.as_ref()
    }

    /// Moves the stack's events to the simulator's list, in order.
    pub(super) fn take_events(&mut self) {
        if let Some(ev) = &mut self.tracing.events {
            self.stack.take_events(ev);
        }
    }

    /// Hands out the events recorded: a BIO queued on a disk to its checker (which
    /// tracks zone operations from submission), every event, stamped with the time,
    /// to the seek histograms and the sink.
    pub(super) fn drain_events(&mut self) {
        self.take_events();
        let Some(mut events) = self.tracing.events.take() else { return };
        // With the plug work, a `D` waits for its request to reach the disk.
        let hold = self.clock.plug_work_ns > 0;
        for e in events.drain(..) {
            if hold && e.action == TraceAction::Issue && self.disk_of[e.dev.idx()].is_some() {
                self.tracing.held.push(e);
                continue;
            }
            self.hand_out(e);
        }
        self.tracing.events = Some(events);
    }

    /// Hands out one event, stamped now.
    pub(super) fn hand_out(&mut self, mut e: TraceEvent) {
        if let (TraceAction::Queue, Some(i)) = (e.action, self.disk_of[e.dev.idx()]) {
            let bio = Bio { op: e.op, sector: e.sector, nr_sectors: e.nr_sectors, flags: e.flags, user_data: 0 };
            let d = &mut self.disks[i];
            let engine = self.stack.engine(d.dev).expect("a disk has an engine");
            if let (Some(c), true) = (&mut d.checker, engine.validate(&bio).is_ok()) {
                c.on_submit(&bio);
            }
        }
        e.time_ns = self.clock.now_ns;
        if let Some(s) = &mut self.tracing.seeks {
            s.record(&e);
        }
        if let Some(sink) = &mut self.tracing.sink {
            sink(&e);
        }
    }
}
