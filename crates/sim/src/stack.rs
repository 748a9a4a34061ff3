//! Simulation of a whole stack: one virtual clock, a [`Stack`] (its disks' engines
//! inside), and per disk an in-memory device, a [`DeviceModel`] for timing and,
//! with checking on, the single-device [`Checker`] watching that disk's engine and
//! device. Requests execute on a disk when its model completes them, as in
//! [`super::Sim`]. A run is a function of its configuration, its models and its seed.
//!
//! Every event of the stack (BIOs queued, split, remapped, requests issued and
//! completed) can be traced, stamped with virtual time, and each device's seek
//! histogram is kept from them.

use super::checker::Checker;
use super::model::{DeviceModel, NullModel};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use slab::Slab;
use std::collections::VecDeque;
use zblk_core::bio::{Bio, Op, Request, Status};
use zblk_core::params::DeviceParams;
use zblk_core::stack::{BuiltStack, DevId, SeekTracker, Stack, StackAction, TraceAction, TraceEvent};
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::ZoneInfo;
use zblk_dev::{BlockDevice, IoBuf, MemDevice};
use zblk_workload::pattern;

/// Makes the timing model of a disk: `(disk, its parameters, a seed for it)`.
pub type ModelFactory<'a> = &'a mut dyn FnMut(DevId, &DeviceParams, u64) -> Box<dyn DeviceModel>;

/// The null device's timing for every disk, from its `completion_nsec` and
/// `completion_dist`.
pub fn null_model(_dev: DevId, params: &DeviceParams, seed: u64) -> Box<dyn DeviceModel> {
    Box::new(NullModel::new(params.completion_nsec, params.completion_dist, seed))
}

/// Receives every trace event, in order, with its time.
pub type TraceSink = Box<dyn FnMut(&TraceEvent)>;

/// How to run a stack simulation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackSimConfig {
    /// Seed of every random choice (each disk's model gets one derived from it).
    pub seed: u64,
    /// Run the checkers after every step.
    pub check: bool,
    /// Record trace events (for the sink and the seek histograms).
    pub trace: bool,
}

/// A BIO completed, handed to its workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackCompletion {
    /// The workload's token.
    pub token: u64,
    /// The submitter it was submitted for.
    pub submitter: u32,
    /// Its operation.
    pub op: Op,
    /// Its sector on the top device.
    pub sector: Sector,
    /// Its length.
    pub nr_sectors: u32,
    /// Its result.
    pub result: Result<Sector, Status>,
    /// Virtual time from submission to completion.
    pub latency_ns: u64,
}

/// Something that submits BIOs to a stack simulation.
pub trait StackWorkload {
    /// Called once at time zero.
    fn start(&mut self, sim: &mut StackSim);
    /// A BIO of this workload completed.
    fn on_complete(&mut self, sim: &mut StackSim, c: StackCompletion);
    /// Whether the workload has nothing more to do.
    fn is_done(&self) -> bool;
}

/// Counters of a stack simulation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StackSimStats {
    /// BIOs submitted.
    pub bios: u64,
    /// Requests executed by the disks.
    pub executed: u64,
    /// Zone reports answered for the disks' engines.
    pub reports: u64,
    /// Checker checks made.
    pub checks: u64,
}

struct SimDisk {
    dev: DevId,
    mem: MemDevice,
    model: Box<dyn DeviceModel>,
    checker: Option<Checker>,
}

#[derive(Debug)]
struct TopRec {
    token: u64,
    submitter: u32,
    submit_ns: u64,
    op: Op,
    sector: Sector,
    nr_sectors: u32,
    stamp: u64,
}

/// A stack simulation in progress. See the module documentation.
pub struct StackSim {
    now_ns: u64,
    seed: u64,
    check: bool,
    stack: Stack,
    disks: Vec<SimDisk>,
    /// Device index → index in `disks`.
    disk_of: Vec<Option<usize>>,
    tops: Slab<TopRec>,
    completions: VecDeque<StackCompletion>,
    /// Engines' anticipation timers: (due time, disk, token), earliest first.
    timers: VecDeque<(u64, DevId, u64)>,
    events: Vec<TraceEvent>,
    sink: Option<TraceSink>,
    seeks: Option<SeekTracker>,
    done: Vec<Request>,
    buf: Vec<u8>,
    stats: StackSimStats,
}

impl std::fmt::Debug for StackSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackSim").field("now_ns", &self.now_ns).field("seed", &self.seed).finish_non_exhaustive()
    }
}

impl StackSim {
    /// A simulation of `built`, each disk timed by the model `models` makes for it.
    pub fn new(built: BuiltStack, cfg: StackSimConfig, models: ModelFactory<'_>) -> StackSim {
        let BuiltStack { mut stack, disks: params } = built;
        let mut disk_of = vec![None; stack.devices().count()];
        let mut disks = Vec::with_capacity(params.len());
        for (i, (dev, p)) in params.iter().enumerate() {
            let info = stack.info(*dev);
            let geo = info.geometry.clone();
            let policy = stack.engine(*dev).expect("a disk has an engine").config().policy;
            let seed = cfg.seed ^ ((i as u64 + 1) << 40);
            disk_of[dev.idx()] = Some(i);
            disks.push(SimDisk {
                dev: *dev,
                mem: MemDevice::new(&geo, p.memory_backed),
                model: models(*dev, p, seed),
                checker: cfg.check.then(|| Checker::new(&geo, policy, cfg.seed)),
            });
        }
        let tracing = cfg.trace || cfg.check;
        stack.record_events(tracing);
        let seeks = tracing.then(|| SeekTracker::new(&stack));
        StackSim {
            now_ns: 0,
            seed: cfg.seed,
            check: cfg.check,
            stack,
            disks,
            disk_of,
            tops: Slab::new(),
            completions: VecDeque::new(),
            timers: VecDeque::new(),
            events: Vec::new(),
            sink: None,
            seeks,
            done: Vec::new(),
            buf: Vec::new(),
            stats: StackSimStats::default(),
        }
    }

    /// Virtual time now.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The stack.
    pub fn stack(&self) -> &Stack {
        &self.stack
    }

    /// Counters.
    pub fn stats(&self) -> StackSimStats {
        let checks = self.disks.iter().filter_map(|d| d.checker.as_ref()).map(|c| c.checks).sum();
        StackSimStats { checks, ..self.stats }
    }

    /// The timing model of each disk, described.
    pub fn model_descriptions(&self) -> Vec<(DevId, String)> {
        self.disks.iter().map(|d| (d.dev, d.model.describe())).collect()
    }

    /// The in-memory device behind disk `dev`.
    pub fn disk(&self, dev: DevId) -> &MemDevice {
        let i = self.disk_of[dev.idx()].unwrap_or_else(|| panic!("{} is not a disk", self.stack.info(dev).name));
        &self.disks[i].mem
    }

    /// Hands every trace event, as it happens, to `sink` (tracing must be on).
    pub fn set_trace_sink(&mut self, sink: TraceSink) {
        assert!(self.seeks.is_some(), "trace sink set without tracing on");
        self.sink = Some(sink);
    }

    /// Removes the trace sink (dropping it, which flushes what it buffers).
    pub fn clear_trace_sink(&mut self) {
        self.sink = None;
    }

    /// The seek histograms of every device (tracing must be on).
    pub fn seeks(&self) -> Option<&SeekTracker> {
        self.seeks.as_ref()
    }

    /// Submits `bio` to the top device now for `submitter`; `token` comes back in its
    /// completion; a write's data is the pattern of `stamp`, sector `k` of the BIO
    /// holding `(stamp, k)` wherever the stack puts it.
    pub fn submit(&mut self, mut bio: Bio, token: u64, submitter: u32, stamp: u64) {
        self.stats.bios += 1;
        let key = self.tops.insert(TopRec {
            token,
            submitter,
            submit_ns: self.now_ns,
            op: bio.op,
            sector: bio.sector,
            nr_sectors: bio.nr_sectors,
            stamp,
        });
        bio.user_data = key as u64;
        let top = self.stack.top();
        self.stack.submit(top, bio, submitter);
    }

    /// Zone `z` of device `dev` as its disks' zones make it up.
    pub fn report_zone(&self, dev: DevId, z: ZoneNo) -> Result<ZoneInfo, Status> {
        self.stack.report_zone(dev, z, &mut |d, s| self.disk(d).report_zone(s))
    }

    /// Reads `buf.len()` bytes of device `dev` at `sector` straight from the disks'
    /// stores through the stack's mapping (for checks: no I/O, no time).
    pub fn peek(&self, dev: DevId, sector: Sector, buf: &mut [u8]) {
        for (k, chunk) in buf.chunks_mut(SECTOR_SIZE as usize).enumerate() {
            let (d, s) = self.stack.map_to_disk(dev, sector + k as u64);
            self.disk(d).peek(s, chunk);
        }
    }

    fn emit(&mut self, mut e: TraceEvent) {
        e.time_ns = self.now_ns;
        if let Some(s) = &mut self.seeks {
            s.record(&e);
        }
        if let Some(sink) = &mut self.sink {
            sink(&e);
        }
    }

    /// Takes the stack's events: stamps them, hands a disk's queued BIOs to its
    /// checker (which tracks zone operations from submission), and emits them.
    fn drain_events(&mut self) {
        if self.seeks.is_none() {
            return;
        }
        let mut events = std::mem::take(&mut self.events);
        self.stack.take_events(&mut events);
        for e in events.drain(..) {
            if let (TraceAction::Queue, Some(i)) = (e.action, self.disk_of[e.dev.idx()]) {
                let bio = Bio { op: e.op, sector: e.sector, nr_sectors: e.nr_sectors, flags: e.flags, user_data: 0 };
                let valid = self.stack.engine(e.dev).is_some_and(|eng| eng.validate(&bio).is_ok());
                if let (Some(c), true) = (&mut self.disks[i].checker, valid) {
                    c.on_submit(&bio);
                }
            }
            self.emit(e);
        }
        self.events = events;
    }

    /// Carries out the stack's actions until there are none.
    fn pump(&mut self) {
        self.drain_events();
        while let Some(a) = self.stack.poll_action() {
            match a {
                StackAction::Issue { dev, req } => {
                    let policy = self.stack.engine(dev).expect("a disk has an engine").config().policy;
                    let d = &mut self.disks[self.disk_of[dev.idx()].expect("issue to a disk")];
                    if let Some(c) = &mut d.checker {
                        c.on_issue(&req, policy);
                    }
                    d.model.submit(self.now_ns, &req);
                }
                StackAction::Complete(c) => {
                    let rec = self.tops.remove(c.user_data as usize);
                    self.completions.push_back(StackCompletion {
                        token: rec.token,
                        submitter: rec.submitter,
                        op: rec.op,
                        sector: rec.sector,
                        nr_sectors: rec.nr_sectors,
                        result: c.result,
                        latency_ns: self.now_ns - rec.submit_ns,
                    });
                }
                StackAction::ReportZone { dev, zone } => {
                    let mem = self.disk(dev);
                    match mem.report_zone(mem.geometry().zone_start(zone)) {
                        Ok(info) => {
                            self.stats.reports += 1;
                            self.stack.zone_report(dev, &info);
                        }
                        Err(s) => self.stack.zone_report_failed(dev, zone, s),
                    }
                }
                StackAction::Anticipate { dev, token, ns } => {
                    let at = self.now_ns + ns;
                    let i = self.timers.partition_point(|&(t, _, _)| t <= at);
                    self.timers.insert(i, (at, dev, token));
                }
            }
            self.drain_events();
        }
    }

    /// Executes on disk `i` a request its model completes now.
    fn execute(&mut self, i: usize, req: &Request) {
        self.stats.executed += 1;
        let stamp = self.tops[req.user_data as usize].stamp;
        let bytes = (u64::from(req.nr_sectors) * SECTOR_SIZE) as usize;
        let d = &mut self.disks[i];
        let with_data = d.mem.memory_backed() && bytes > 0;
        let result = match req.op {
            Op::Write | Op::ZoneAppend if with_data => {
                self.buf.resize(bytes, 0);
                pattern::fill(stamp, req.bio_offset, &mut self.buf);
                d.mem.execute(req, IoBuf::Write(&self.buf))
            }
            Op::Read if with_data => {
                self.buf.resize(bytes, 0);
                let r = d.mem.execute(req, IoBuf::Read(&mut self.buf));
                if let (Some(c), Ok(_)) = (&mut d.checker, r) {
                    c.on_read_data(req, &self.buf);
                }
                r
            }
            _ => d.mem.execute(req, IoBuf::None),
        };
        if let Some(c) = &mut d.checker {
            c.on_execute(req, result, 0, stamp);
        }
        let dev = d.dev;
        let submitter = self.tops[req.user_data as usize].submitter;
        if self.seeks.is_some() {
            let done = TraceAction::Complete { error: result.err() };
            self.emit(TraceEvent::of_request(dev, done, req, submitter));
        }
        self.stack.complete(dev, req.id, result);
    }

    /// Moves time to the earliest model event and completes what completes then,
    /// disk by disk in creation order. Returns false when no model has anything.
    fn advance(&mut self) -> bool {
        let next_timer = self.timers.front().map(|t| t.0);
        let Some(t) = self.disks.iter().filter_map(|d| d.model.next_event_ns()).chain(next_timer).min() else {
            return false;
        };
        self.now_ns = self.now_ns.max(t);
        while let Some(&(at, dev, token)) = self.timers.front() {
            if at > self.now_ns {
                break;
            }
            self.timers.pop_front();
            self.stack.anticipation_expired(dev, token);
            self.pump();
        }
        for i in 0..self.disks.len() {
            if self.disks[i].model.next_event_ns().is_none_or(|n| n > self.now_ns) {
                continue;
            }
            let mut done = std::mem::take(&mut self.done);
            self.disks[i].model.advance(self.now_ns, &mut done);
            for req in done.drain(..) {
                self.execute(i, &req);
                self.pump();
            }
            self.done = done;
        }
        true
    }

    fn check(&mut self) {
        if !self.check {
            return;
        }
        self.stack.check_invariants();
        for d in &mut self.disks {
            if let Some(c) = &mut d.checker {
                let engine = self.stack.engine(d.dev).expect("a disk has an engine");
                c.check_engine(engine, &d.mem);
            }
        }
    }

    /// Processes what is ready and advances time until nothing is in flight.
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

    /// Completions gathered since the last call.
    pub fn take_completions(&mut self) -> Vec<StackCompletion> {
        self.completions.drain(..).collect()
    }

    /// Runs `w` until it is done and nothing is in flight.
    pub fn run(&mut self, w: &mut dyn StackWorkload) {
        w.start(self);
        loop {
            self.pump();
            while let Some(c) = self.completions.pop_front() {
                w.on_complete(self, c);
                self.pump();
            }
            self.check();
            if self.advance() || !self.completions.is_empty() {
                continue;
            }
            assert_eq!(self.stack.bios_in_flight(), 0, "seed {}: BIOs stuck in the stack, disks idle", self.seed);
            if w.is_done() {
                break;
            }
            panic!("seed {}: workload not done and nothing in flight", self.seed);
        }
    }
}

/// One sequential stream of a [`SeqJobs`] workload (one submitter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqJob {
    /// READ or WRITE.
    pub op: Op,
    /// Start of the region, on the top device.
    pub offset: Sector,
    /// Length of the region in sectors: the job ends there.
    pub len_sectors: u64,
    /// Smallest BIO, sectors.
    pub bs_min_sectors: u32,
    /// Largest BIO, sectors (sizes are drawn uniformly in whole blocks).
    pub bs_max_sectors: u32,
    /// BIOs in flight at once.
    pub iodepth: u32,
}

/// What one job did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SeqJobResult {
    /// BIOs completed.
    pub ios: u64,
    /// Bytes completed successfully.
    pub bytes: u64,
    /// BIOs that failed.
    pub errors: u64,
    /// BIOs that failed as unaligned writes.
    pub unaligned: u64,
    /// The first failure.
    pub first_error: Option<Status>,
    /// Time of the last completion.
    pub end_ns: u64,
}

impl SeqJobResult {
    /// Throughput in MB/s (10^6 bytes per second) of virtual time.
    pub fn mb_s(&self) -> f64 {
        if self.end_ns == 0 { 0.0 } else { self.bytes as f64 * 1e3 / self.end_ns as f64 }
    }
}

#[derive(Debug)]
struct JobState {
    spec: SeqJob,
    rng: ChaCha8Rng,
    next: u64,
    inflight: u32,
    result: SeqJobResult,
}

/// Sequential streams, one per job, each its own submitter: every BIO starts where
/// the job's previous one ended, sizes drawn from a seeded generator, up to
/// `iodepth` in flight. Writes carry the data pattern, stamped per BIO.
#[derive(Debug)]
pub struct SeqJobs {
    jobs: Vec<JobState>,
    lbs: u32,
    stamp: u64,
}

impl SeqJobs {
    /// Jobs `specs` on a top device of `lbs_sectors` blocks, seeded.
    pub fn new(specs: &[SeqJob], lbs_sectors: u32, seed: u64) -> SeqJobs {
        let jobs = specs
            .iter()
            .enumerate()
            .map(|(j, s)| {
                assert!(
                    s.iodepth > 0 && s.bs_min_sectors > 0 && s.bs_min_sectors <= s.bs_max_sectors,
                    "job {j}: {s:?}"
                );
                JobState {
                    spec: *s,
                    rng: ChaCha8Rng::seed_from_u64(seed ^ ((j as u64) << 32) ^ 0x5e9),
                    next: s.offset.0,
                    inflight: 0,
                    result: SeqJobResult::default(),
                }
            })
            .collect();
        SeqJobs { jobs, lbs: lbs_sectors, stamp: 0 }
    }

    /// Per job results.
    pub fn results(&self) -> Vec<SeqJobResult> {
        self.jobs.iter().map(|j| j.result.clone()).collect()
    }

    /// All jobs together: sums, the last end time.
    pub fn total(&self) -> SeqJobResult {
        let mut t = SeqJobResult::default();
        for j in &self.jobs {
            let r = &j.result;
            t.ios += r.ios;
            t.bytes += r.bytes;
            t.errors += r.errors;
            t.unaligned += r.unaligned;
            t.first_error = t.first_error.or(r.first_error);
            t.end_ns = t.end_ns.max(r.end_ns);
        }
        t
    }

    fn fill(&mut self, j: usize, sim: &mut StackSim) {
        let lbs = self.lbs;
        loop {
            let job = &mut self.jobs[j];
            let end = job.spec.offset.0 + job.spec.len_sectors;
            if job.inflight >= job.spec.iodepth || job.next >= end {
                return;
            }
            let (lo, hi) = (job.spec.bs_min_sectors.div_ceil(lbs), (job.spec.bs_max_sectors / lbs).max(1));
            let blocks = if lo >= hi { lo } else { job.rng.random_range(lo..=hi) };
            let n = (u64::from(blocks * lbs)).min(end - job.next) as u32;
            let bio = Bio { op: job.spec.op, sector: Sector(job.next), nr_sectors: n, ..Bio::read(Sector(0), 0, 0) };
            job.next += u64::from(n);
            job.inflight += 1;
            self.stamp += 1;
            sim.submit(bio, j as u64, j as u32, self.stamp);
        }
    }
}

impl StackWorkload for SeqJobs {
    fn start(&mut self, sim: &mut StackSim) {
        for j in 0..self.jobs.len() {
            self.fill(j, sim);
        }
    }

    fn on_complete(&mut self, sim: &mut StackSim, c: StackCompletion) {
        let j = c.token as usize;
        let job = &mut self.jobs[j];
        job.inflight -= 1;
        let r = &mut job.result;
        r.ios += 1;
        r.end_ns = sim.now_ns();
        match c.result {
            Ok(_) => r.bytes += u64::from(c.nr_sectors) * SECTOR_SIZE,
            Err(s) => {
                r.errors += 1;
                r.unaligned += u64::from(s == Status::Unaligned);
                r.first_error.get_or_insert(s);
            }
        }
        self.fill(j, sim);
    }

    fn is_done(&self) -> bool {
        self.jobs.iter().all(|j| j.inflight == 0 && j.next >= j.spec.offset.0 + j.spec.len_sectors)
    }
}
