//! The event loop: carrying out the stack's actions (issue to a model, complete a
//! BIO, answer a zone report, arm an anticipation timer), moving the clock to the
//! next event and executing what the disks complete then, delivering completions
//! to the workload, and the checks after each step.

use super::{Sim, SimCompletion, Workload};
use crate::disk::Arrived;
use std::io::Write as _;
use zblk_core::bio::{BioFlags, Op, Request, Status};
use zblk_core::stack::{DevId, StackAction, TraceAction, TraceEvent};
use zblk_core::units::Sector;
use zblk_dev::BlockDevice;

impl Sim {
    /// Carries out the stack's actions until there are none.
    pub(super) fn pump(&mut self) {
        if self.engines_touched {
            self.engines_touched = false;
            for i in 0..self.disks.len() {
                self.stack.pump_disk(self.disks[i].dev);
            }
        }
        if self.tracing.events.is_some() {
            self.drain_events();
        }
        while let Some(action) = self.stack.poll_action() {
            if self.tracing.debug {
                let _ = writeln!(std::io::stderr(), "{:>12} {action:?}", self.clock.now_ns);
            }
            match action {
                StackAction::Issue { dev, req } => {
                    let mut bio_flags = BioFlags::NONE;
                    if let Some(rec) = self.bios.get_mut(req.user_data as usize) {
                        rec.host.issued = true;
                        bio_flags = rec.flags;
                    }
                    let i = self.disk_index(dev);
                    let d = &mut self.disks[i];
                    // The checker learns of the issue as the engine decides it.
                    if let Some(c) = &mut d.checker {
                        let engine = self.stack.engine(dev).expect("a disk has an engine");
                        let unmap_disabled = engine.write_zeroes_unmap_max_bytes() == 0;
                        if req.flags.contains(BioFlags::PIPELINED) {
                            let z = engine.geometry().zone_no(req.sector);
                            if engine.plug(z).is_some_and(|p| p.need_wp_update) {
                                c.issued_after_failure(&req);
                            }
                        }
                        c.on_issue(&req, engine.policy_traits(), bio_flags, unmap_disabled);
                    }
                    match self.plug_work_due(dev, &req) {
                        Some(at) => self.defer_issue(at, dev, req),
                        None => {
                            self.reach_disk(i, &req);
                            self.stamp_issue_now(dev, &req);
                        }
                    }
                }
                StackAction::Complete(c) => self.bio_done(c.user_data as usize, c.result),
                StackAction::ReportZone { dev, zone } => {
                    let mem = &self.disks[self.disk_index(dev)].mem;
                    match mem.report_zone(mem.geometry().zone_start(zone)) {
                        Ok(info) => {
                            self.stats.reports += 1;
                            self.stack.zone_report(dev, &info);
                        }
                        Err(s) => self.stack.zone_report_failed(dev, zone, s),
                    }
                }
                StackAction::Anticipate { dev, token, ns } => {
                    let at = self.clock.now_ns + ns;
                    let i = self.clock.timers.partition_point(|&(t, _, _)| t <= at);
                    self.clock.timers.insert(i, (at, dev, token));
                }
            }
            if self.tracing.events.is_some() {
                self.drain_events();
            }
        }
        self.clock.after_completions = false;
        self.release_held_events();
    }

    /// Request `req` reaches disk `i` now.
    pub(super) fn reach_disk(&mut self, i: usize, req: &Request) {
        self.disks[i].model.submit(self.clock.now_ns, req);
        if self.disks[i].in_order {
            // The device takes the request now, in arrival order; only its
            // completion waits for the model.
            let (result, timed_out) = self.execute_on_disk(i, req);
            let d = &mut self.disks[i];
            d.arrivals += 1;
            let geo = d.mem.geometry();
            let pipelined_zone = req.flags.contains(BioFlags::PIPELINED).then(|| geo.zone_no(req.sector));
            let a = Arrived { result, timed_out, order: d.arrivals, pipelined_zone };
            d.arrived.insert(req.id, a);
        }
    }

    /// BIO `key` completed: a successful write's data must be where its completion
    /// says; the completion goes to the workload now or after the host's latency.
    pub(super) fn bio_done(&mut self, key: usize, result: Result<Sector, Status>) {
        let rec = self.bios.remove(key);
        if let (true, Ok(at), Op::Write | Op::ZoneAppend) = (self.checking.on, result, rec.op) {
            self.check_written(&rec, at);
        }
        if let (true, Ok(_), Op::Flush) = (self.checking.on, result, rec.op) {
            self.flushed(rec.flush_mark);
        }
        if let Some(mut host) = self.checking.host.take() {
            let verdict = host.on_complete(&rec.host, result, &mut |z| self.top_zone_wp(z));
            self.checking.host = Some(host);
            if let (Err(e), true) = (verdict, self.checking.checks.model) {
                panic!("host oracle violation (seed {}): {e}", self.seed);
            }
        }
        let deliver_at = self.clock.now_ns + self.clock.host_latency_ns;
        let c = SimCompletion {
            token: rec.token,
            submitter: rec.submitter,
            op: rec.op,
            sector: rec.sector,
            nr_sectors: rec.nr_sectors,
            result,
            latency_ns: deliver_at - rec.submit_ns,
        };
        if self.clock.host_latency_ns == 0 {
            self.completions.push_back(c);
        } else {
            self.clock.delayed.push_back((deliver_at, c));
        }
    }

    /// Moves delayed completions due by now to the workload's queue.
    pub(super) fn deliver_due(&mut self) {
        while let Some(&(t, c)) = self.clock.delayed.front() {
            if t > self.clock.now_ns {
                break;
            }
            self.clock.delayed.pop_front();
            self.completions.push_back(c);
        }
    }

    /// Executes on disk `i` a request its model completes now, and tells the stack.
    pub(super) fn execute(&mut self, i: usize, req: &Request) {
        let (result, timed_out) = self.execute_on_disk(i, req);
        self.device_completed(i, req, result, timed_out);
    }

    /// Executes `req` on disk `i` (and tells the host oracle of a device error).
    /// Returns its result and whether its completion is lost.
    fn execute_on_disk(&mut self, i: usize, req: &Request) -> (Result<Sector, Status>, bool) {
        self.stats.executed += 1;
        let stamp = self.bios[req.user_data as usize].stamp;
        let trace = self.tracing.debug.then_some(self.clock.now_ns);
        let d = &mut self.disks[i];
        let (result, executed) = d.execute(req, stamp, &mut self.buf, trace);
        if let (Some(h), Some(rec)) = (&mut self.checking.host, self.bios.get_mut(req.user_data as usize)) {
            if result.is_err() || executed.fault {
                let refused = if executed.fault { None } else { result.err() };
                h.on_device_error(&mut rec.host, req, executed.zone_failed, refused);
            } else if req.op == Op::Flush {
                rec.host.flush_executed = true;
            }
        }
        (result, executed.timed_out)
    }

    /// Disk `i` completes `req`, executed with `result`: the stack hears of it now,
    /// or from the driver's timeout if its completion is lost.
    fn device_completed(&mut self, i: usize, req: &Request, result: Result<Sector, Status>, timed_out: bool) {
        let dev = self.disks[i].dev;
        if timed_out {
            self.clock.late.push_back((self.clock.now_ns + crate::faults::TIMEOUT_NS, dev, *req, result));
            return;
        }
        let submitter = self.bios[req.user_data as usize].submitter;
        self.complete_request(dev, req, result, submitter);
    }

    /// Tells the stack that `req` of disk `dev` completed with `result`.
    pub(super) fn complete_request(
        &mut self,
        dev: DevId,
        req: &Request,
        result: Result<Sector, Status>,
        submitter: u32,
    ) {
        let i = self.disk_index(dev);
        if let (true, Some(c)) = (self.disks[i].in_order, &mut self.disks[i].checker) {
            // Executed at its arrival: out, for the checker, until the engine hears.
            c.on_done(req);
        }
        if self.tracing.events.is_some() {
            // After what the stack recorded so far, before what the completion makes.
            self.take_events();
            let done = TraceAction::Complete { error: result.err() };
            self.tracing.events.as_mut().expect("tracing").push(TraceEvent::of_request(dev, done, req, submitter));
        }
        let failed_write = result.is_err() && req.op.is_zone_write();
        if let (true, Some(h), Some(rec)) =
            (failed_write, &mut self.checking.host, self.bios.get(req.user_data as usize))
        {
            let frozen = self.stack.engine(dev).is_some_and(|e| e.frozen());
            h.on_request_failed(&rec.host, req, frozen);
        }
        self.stack.complete(dev, req.id, result);
        if let (true, true, Some(h)) = (failed_write, req.flags.contains(BioFlags::PIPELINED), &mut self.checking.host)
        {
            let engine = self.stack.engine(dev).expect("a disk's engine");
            let plug = engine.plug(engine.geometry().zone_no(req.sector));
            if let (Err(e), true) = (h.on_pipelined_failure(req, plug), self.checking.checks.model) {
                panic!("host oracle violation (seed {}): {e}", self.seed);
            }
        }
    }

    /// Moves virtual time to the next event and processes what happens then: the
    /// disks' completions (disk by disk in creation order), completions due to the
    /// workload, anticipation timers. Returns false when nothing is pending.
    pub(super) fn advance(&mut self) -> bool {
        // Executing a request submits nothing to a model (the stack's actions wait
        // for the pump): the models' next events, asked once, hold for the step.
        self.clock.next_ns.clear();
        self.clock.next_ns.extend(self.disks.iter().map(|d| d.model.next_event_ns()));
        let next_host = self.clock.host_due();
        let Some(t) = self.clock.next_ns.iter().chain(&next_host).flatten().copied().min() else {
            return false;
        };
        self.clock.now_ns = self.clock.now_ns.max(t);
        for i in 0..self.disks.len() {
            if self.clock.next_ns[i].is_none_or(|n| n > self.clock.now_ns) {
                continue;
            }
            let mut done = std::mem::take(&mut self.done);
            self.disks[i].model.advance(self.clock.now_ns, &mut done);
            self.clock.after_completions |= !done.is_empty();
            for req in done.drain(..) {
                if self.disks[i].in_order {
                    let d = &mut self.disks[i];
                    let a = d.arrived.remove(&req.id).expect("completed before it arrived");
                    if let Some(z) = a.pipelined_zone {
                        // Completed before a write that arrived before it in its zone:
                        // the engine must hold its acknowledgement.
                        if d.arrived.values().any(|b| b.pipelined_zone == Some(z) && b.order < a.order) {
                            self.stats.pipe_early += 1;
                        }
                    }
                    self.device_completed(i, &req, a.result, a.timed_out);
                } else {
                    self.execute(i, &req);
                }
            }
            self.done = done;
        }
        self.issue_unplugged();
        self.deliver_due();
        while self.clock.late.front().is_some_and(|l| l.0 <= self.clock.now_ns) {
            let (_, dev, req, result) = self.clock.late.pop_front().expect("a late completion");
            if self.tracing.debug {
                let _ = writeln!(std::io::stderr(), "{:>12} timeout {req:?} -> {result:?}", self.clock.now_ns);
            }
            let i = self.disk_index(dev);
            if let Some(c) = &mut self.disks[i].checker {
                c.completion_timed_out(&req);
            }
            let submitter = self.bios.get(req.user_data as usize).map_or(0, |r| r.submitter);
            self.complete_request(dev, &req, result, submitter);
        }
        while let Some(&(at, dev, token)) = self.clock.timers.front() {
            if at > self.clock.now_ns {
                break;
            }
            self.clock.timers.pop_front();
            self.stack.anticipation_expired(dev, token);
        }
        true
    }

    pub(super) fn check(&mut self) {
        if !self.checking.on {
            return;
        }
        // The stack's invariants, its disks' engines' among them.
        if self.checking.checks.engine_invariants {
            self.stack.check_invariants();
        }
        for d in &mut self.disks {
            if let Some(c) = &mut d.checker {
                c.check_plugs(self.stack.engine(d.dev).expect("a disk has an engine"), &d.mem);
            }
        }
    }

    /// Processes what is ready and advances time until nothing is left in flight.
    /// Completions are kept for [`Sim::take_completions`]. For scripted scenarios.
    pub fn run_until_idle(&mut self) {
        loop {
            self.pump();
            self.check();
            if !self.advance() {
                break;
            }
        }
        self.pump();
        self.check();
        assert_eq!(self.stack.bios_in_flight(), 0, "seed {}: BIOs stuck in the stack with idle disks", self.seed);
    }

    /// When the next event is due (a disk's completion, a completion on its way to
    /// the workload, an anticipation timer, a late completion), in virtual time;
    /// `None` when nothing is pending.
    pub fn next_event_ns(&self) -> Option<u64> {
        let disks = self.disks.iter().filter_map(|d| d.model.next_event_ns());
        disks.chain(self.clock.host_due().into_iter().flatten()).min()
    }

    /// Processes every event due up to `t_ns` and moves the clock to `t_ns` (never
    /// back): a driver that paces the simulation to wall-clock time calls this with
    /// the wall time before each submission and whenever the next event is due.
    /// Completions are kept for [`Sim::take_completions`].
    pub fn run_until(&mut self, t_ns: u64) {
        loop {
            self.pump();
            self.check();
            if self.next_event_ns().is_none_or(|n| n > t_ns) {
                break;
            }
            self.advance();
        }
        self.clock.now_ns = self.clock.now_ns.max(t_ns);
    }

    /// Completions gathered since the last call, in completion order.
    pub fn take_completions(&mut self) -> Vec<SimCompletion> {
        self.completions.drain(..).collect()
    }

    /// Runs `w` to its end, or until it stops submitting.
    pub fn run(&mut self, w: &mut dyn Workload) {
        w.start(self);
        loop {
            self.pump();
            if w.due_ns().is_some_and(|t| t <= self.clock.now_ns) {
                w.on_due(self);
                continue;
            }
            while let Some(c) = self.completions.pop_front() {
                w.on_complete(self, c);
                self.pump();
                self.completed += 1;
                if let Some((every, report)) = &mut self.progress {
                    if self.completed % *every == 0 {
                        report(self.clock.now_ns, self.completed);
                    }
                }
            }
            self.check();
            self.clock.workload_due = w.due_ns();
            let advanced = self.advance();
            self.clock.workload_due = None;
            if advanced {
                continue;
            }
            self.pump();
            if !self.completions.is_empty() {
                continue;
            }
            assert_eq!(self.stack.bios_in_flight(), 0, "seed {}: BIOs stuck in the stack, disks idle", self.seed);
            if w.is_done() || !w.on_idle(self) {
                break;
            }
        }
        assert_eq!(self.stack.bios_in_flight(), 0, "seed {}: BIOs stuck in the stack at the end", self.seed);
    }
}
