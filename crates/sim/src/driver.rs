//! The simulator: drives an [`Engine`] in virtual time against an in-memory device
//! whose timing comes from a [`DeviceModel`], with seeded fault injection and the
//! [`Checker`] after every step. One thread, no wall clock: a run is a function of
//! its configuration and seed.

use super::checker::Checker;
use super::faults::{Fault, FaultConfig, Faults};
use super::model::{DeviceModel, NullModel};
use slab::Slab;
use std::collections::VecDeque;
use zblk_core::bio::{Bio, Op, Request, Status};
use zblk_core::engine::{Action, Engine, EngineConfig, EngineStats};
use zblk_core::params::{DeviceParams, ParamError};
use zblk_core::units::{SECTOR_SIZE, Sector};
use zblk_core::zone::ZoneCond;
use zblk_dev::{BlockDevice, IoBuf, MemDevice};
use zblk_workload::pattern;

/// How to build a simulation.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The device (null_blk-style parameters).
    pub device: DeviceParams,
    /// Engine settings. Its `queue_depth` is taken from the device's
    /// `hw_queue_depth`.
    pub engine: EngineConfig,
    /// Seed of every random choice of the run.
    pub seed: u64,
    /// Run the checker after every step (costs time; on in tests).
    pub check: bool,
    /// Faults to inject.
    pub faults: FaultConfig,
    /// Time from a BIO's completion in the block layer to its delivery to the
    /// workload: the application's completion path (interrupt, wake-up, reaping,
    /// the next submission's system call). Zone writes released from plugs by the
    /// engine do not pay it: the kernel issues them from its own context.
    pub host_latency_ns: u64,
}

impl SimConfig {
    /// A configuration for `device` with default engine settings, checker off.
    pub fn new(device: DeviceParams, seed: u64) -> SimConfig {
        SimConfig {
            device,
            engine: EngineConfig::default(),
            seed,
            check: false,
            faults: FaultConfig::default(),
            host_latency_ns: 0,
        }
    }
}

/// A progress callback: `(virtual now in ns, BIOs completed)`.
pub type ProgressFn = Box<dyn FnMut(u64, u64)>;

/// A BIO completed in the simulation, handed to its workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimCompletion {
    /// The workload's token for the BIO.
    pub token: u64,
    /// The BIO's operation.
    pub op: Op,
    /// The BIO's sector as submitted.
    pub sector: Sector,
    /// The BIO's length.
    pub nr_sectors: u32,
    /// Its result (for an append, the sector written).
    pub result: Result<Sector, Status>,
    /// Virtual time from submission to completion.
    pub latency_ns: u64,
}

/// Something that submits BIOs to a simulation and reacts to their completions.
pub trait Workload {
    /// Called once at time zero: submit the first BIOs.
    fn start(&mut self, sim: &mut Sim);
    /// A BIO of this workload completed.
    fn on_complete(&mut self, sim: &mut Sim, c: SimCompletion);
    /// Nothing is in flight and nothing is scheduled: submit something, or return
    /// false to end the run.
    fn on_idle(&mut self, _sim: &mut Sim) -> bool {
        false
    }
    /// Whether the workload has nothing more to do.
    fn is_done(&self) -> bool;
}

#[derive(Debug)]
struct BioRec {
    token: u64,
    submit_ns: u64,
    op: Op,
    sector: Sector,
    nr_sectors: u32,
    stamp: u64,
    epoch: u64,
}

/// Counters of a simulation run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SimStats {
    /// BIOs submitted.
    pub bios: u64,
    /// Requests the device executed.
    pub executed: u64,
    /// Faults injected.
    pub faults: u64,
    /// Zone reports answered.
    pub reports: u64,
    /// Checker checks made.
    pub checks: u64,
}

/// A simulation in progress. See the module documentation.
pub struct Sim {
    now_ns: u64,
    seed: u64,
    engine: Engine,
    dev: MemDevice,
    model: Box<dyn DeviceModel>,
    checker: Option<Checker>,
    faults: Faults,
    bios: Slab<BioRec>,
    completions: VecDeque<SimCompletion>,
    done: Vec<Request>,
    buf: Vec<u8>,
    stats: SimStats,
    /// Completions on their way to the workload: (delivery time, completion).
    delayed: VecDeque<(u64, SimCompletion)>,
    /// The engine's anticipation timers: (due time, token), earliest first.
    timers: VecDeque<(u64, u64)>,
    host_latency_ns: u64,
    /// Print every action to stderr (set `ZBLK_SIM_TRACE=1`): for debugging a seed.
    trace: bool,
    /// Progress callback and its period in completions.
    progress: Option<(u64, ProgressFn)>,
    completed: u64,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim").field("now_ns", &self.now_ns).field("seed", &self.seed).finish_non_exhaustive()
    }
}

impl Sim {
    /// A simulation of a null device (timing from `completion_nsec` and
    /// `completion_dist`).
    pub fn new(cfg: &SimConfig) -> Result<Sim, ParamError> {
        let model = NullModel::new(cfg.device.completion_nsec, cfg.device.completion_dist, cfg.seed);
        Sim::with_model(cfg, Box::new(model))
    }

    /// A simulation with the given timing model.
    pub fn with_model(cfg: &SimConfig, model: Box<dyn DeviceModel>) -> Result<Sim, ParamError> {
        let geo = cfg.device.validate()?;
        let engine_cfg = EngineConfig { queue_depth: cfg.device.hw_queue_depth, ..cfg.engine };
        let dev = MemDevice::new(&geo, cfg.device.memory_backed);
        let engine = Engine::new_empty(&geo, engine_cfg);
        let checker = cfg.check.then(|| Checker::new(&geo, engine_cfg.policy, cfg.seed));
        Ok(Sim {
            now_ns: 0,
            seed: cfg.seed,
            engine,
            dev,
            model,
            checker,
            faults: Faults::new(cfg.faults, cfg.seed),
            bios: Slab::new(),
            completions: VecDeque::new(),
            done: Vec::new(),
            buf: Vec::new(),
            stats: SimStats::default(),
            delayed: VecDeque::new(),
            timers: VecDeque::new(),
            host_latency_ns: cfg.host_latency_ns,
            trace: std::env::var_os("ZBLK_SIM_TRACE").is_some(),
            progress: None,
            completed: 0,
        })
    }

    /// Virtual time now, in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// The run's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The engine, for inspection.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine, to make zone reports or change settings as a user would.
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// The device's geometry.
    pub fn device_geometry(&self) -> zblk_core::geometry::Geometry {
        self.dev.geometry().clone()
    }

    /// Calls `report(now_ns, completions)` every `every` BIO completions while
    /// [`Sim::run`] runs: progress for long simulations.
    pub fn set_progress(&mut self, every: u64, report: ProgressFn) {
        assert!(every > 0, "progress every 0 completions");
        self.progress = Some((every, report));
    }

    /// The device.
    pub fn device(&self) -> &MemDevice {
        &self.dev
    }

    /// The device, for fault injection.
    pub fn device_mut(&mut self) -> &mut MemDevice {
        &mut self.dev
    }

    /// The timing model's description.
    pub fn model_description(&self) -> String {
        self.model.describe()
    }

    /// The timing model's counters (see [`DeviceModel::counters`]).
    pub fn model_counters(&self) -> Vec<(&'static str, f64)> {
        self.model.counters()
    }

    /// Counters.
    pub fn stats(&self) -> SimStats {
        SimStats { checks: self.checker.as_ref().map_or(0, |c| c.checks), faults: self.faults.injected, ..self.stats }
    }

    /// Engine counters.
    pub fn engine_stats(&self) -> EngineStats {
        self.engine.stats()
    }

    /// Submits `bio` now. `token` comes back in its [`SimCompletion`]; a write's
    /// data is the pattern of `stamp` (see [`pattern`]).
    pub fn submit(&mut self, mut bio: Bio, token: u64, stamp: u64) {
        self.stats.bios += 1;
        let epoch = self.checker.as_ref().map_or(0, |c| c.epoch_of(bio.sector, bio.nr_sectors));
        let key = self.bios.insert(BioRec {
            token,
            submit_ns: self.now_ns,
            op: bio.op,
            sector: bio.sector,
            nr_sectors: bio.nr_sectors,
            stamp,
            epoch,
        });
        bio.user_data = key as u64;
        if self.trace {
            eprintln!("{:>12} submit {bio:?}", self.now_ns);
        }
        if let Some(c) = &mut self.checker {
            if self.engine.validate(&bio).is_ok() {
                c.on_submit(&bio);
            }
        }
        self.engine.submit(bio);
    }

    /// Has the user report zone `sector`'s zone to the engine (what a file system
    /// does after a write error, and what the kernel's recovery waits for).
    pub fn report_zone_to_engine(&mut self, sector: Sector) {
        if let Ok(info) = self.dev.report_zone(sector) {
            self.stats.reports += 1;
            self.engine.zone_report(&info);
        }
    }

    /// Carries out the engine's actions until there are none.
    fn pump(&mut self) {
        while let Some(action) = self.engine.poll_action() {
            if self.trace {
                eprintln!("{:>12} {action:?}", self.now_ns);
            }
            match action {
                Action::Issue(req) => {
                    if let Some(c) = &mut self.checker {
                        c.on_issue(&req, self.engine.config().policy);
                    }
                    self.model.submit(self.now_ns, &req);
                }
                Action::Complete(c) => self.bio_done(c.user_data as usize, c.result),
                Action::ReportZone(z) => {
                    let start = self.dev.geometry().zone_start(z);
                    match self.dev.report_zone(start) {
                        Ok(info) => {
                            self.stats.reports += 1;
                            self.engine.zone_report(&info);
                        }
                        Err(s) => self.engine.zone_report_failed(z, s),
                    }
                }
                Action::Anticipate { token, ns } => {
                    let at = self.now_ns + ns;
                    let i = self.timers.partition_point(|&(t, _)| t <= at);
                    self.timers.insert(i, (at, token));
                }
            }
        }
    }

    fn bio_done(&mut self, key: usize, result: Result<Sector, Status>) {
        let rec = self.bios.remove(key);
        if let (Some(c), Ok(at)) = (&mut self.checker, result) {
            if matches!(rec.op, Op::Write | Op::ZoneAppend) && self.dev.memory_backed() {
                c.on_write_bio_done(rec.op, at, rec.nr_sectors, rec.stamp, rec.epoch);
            }
        }
        let deliver_at = self.now_ns + self.host_latency_ns;
        let c = SimCompletion {
            token: rec.token,
            op: rec.op,
            sector: rec.sector,
            nr_sectors: rec.nr_sectors,
            result,
            latency_ns: deliver_at - rec.submit_ns,
        };
        if self.host_latency_ns == 0 {
            self.completions.push_back(c);
        } else {
            self.delayed.push_back((deliver_at, c));
        }
    }

    /// Moves delayed completions due by now to the workload's queue.
    fn deliver_due(&mut self) {
        while let Some(&(t, c)) = self.delayed.front() {
            if t > self.now_ns {
                break;
            }
            self.delayed.pop_front();
            self.completions.push_back(c);
        }
    }

    /// Executes a request the model completes now, with injected faults, and feeds
    /// the result to the checker and the engine.
    fn execute(&mut self, req: &Request) {
        self.stats.executed += 1;
        let stamp = self.bios[req.user_data as usize].stamp;
        let geo = self.dev.geometry().clone();
        let seq_zone =
            (geo.is_zoned() && req.op.has_range()).then(|| geo.zone_no(req.sector)).filter(|z| !geo.zone_is_conv(*z));
        let fault = match (req.op, seq_zone) {
            (Op::Write | Op::ZoneAppend | Op::WriteZeroes, Some(_)) => {
                self.faults.for_write(req.nr_sectors, geo.lbs_sectors())
            }
            (Op::Read, _) => self.faults.for_read(),
            _ => Fault::None,
        };
        let mut partial = 0;
        let result = match fault {
            Fault::ZoneReadOnly | Fault::ZoneOffline => {
                let z = seq_zone.expect("zone fault on a sequential zone");
                let cond = if fault == Fault::ZoneReadOnly { ZoneCond::ReadOnly } else { ZoneCond::Offline };
                self.dev.zones_mut().expect("zoned").set_failed(z, cond);
                if let Some(c) = &mut self.checker {
                    c.on_zone_failed(z);
                }
                self.execute_data(req, stamp)
            }
            Fault::PartialWrite(k) if req.op == Op::Write => {
                if k > 0 {
                    let head = Request { nr_sectors: k, ..*req };
                    if self.execute_data(&head, stamp).is_ok() {
                        partial = k;
                    }
                }
                Err(Status::IoErr)
            }
            Fault::ReadError => Err(Status::IoErr),
            _ => self.execute_data(req, stamp),
        };
        if self.trace {
            eprintln!("{:>12} execute {req:?} -> {result:?} (fault {fault:?})", self.now_ns);
        }
        if let Some(c) = &mut self.checker {
            c.on_execute(req, result, partial, stamp);
        }
        self.engine.complete(req.id, result);
    }

    fn execute_data(&mut self, req: &Request, stamp: u64) -> Result<Sector, Status> {
        let bytes = (u64::from(req.nr_sectors) * SECTOR_SIZE) as usize;
        let with_data = self.dev.memory_backed() && bytes > 0;
        match req.op {
            Op::Write | Op::ZoneAppend if with_data => {
                self.buf.resize(bytes, 0);
                pattern::fill(stamp, req.bio_offset, &mut self.buf);
                self.dev.execute(req, IoBuf::Write(&self.buf))
            }
            Op::Read if with_data => {
                self.buf.resize(bytes, 0);
                let r = self.dev.execute(req, IoBuf::Read(&mut self.buf));
                if let (Some(c), Ok(_)) = (&mut self.checker, r) {
                    c.on_read_data(req, &self.buf);
                }
                r
            }
            _ => self.dev.execute(req, IoBuf::None),
        }
    }

    /// Moves virtual time to the model's next event and completes what completes
    /// then. Returns false when the model has nothing pending.
    fn advance(&mut self) -> bool {
        let next_delivery =
            [self.delayed.front().map(|d| d.0), self.timers.front().map(|t| t.0)].into_iter().flatten().min();
        let t = match (self.model.next_event_ns(), next_delivery) {
            (None, None) => return false,
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).expect("one is some"),
        };
        self.now_ns = self.now_ns.max(t);
        let mut done = std::mem::take(&mut self.done);
        self.model.advance(self.now_ns, &mut done);
        for req in done.drain(..) {
            self.execute(&req);
        }
        self.done = done;
        self.deliver_due();
        while let Some(&(at, token)) = self.timers.front() {
            if at > self.now_ns {
                break;
            }
            self.timers.pop_front();
            self.engine.anticipation_expired(token);
        }
        true
    }

    fn check(&mut self) {
        if let Some(c) = &mut self.checker {
            c.check_engine(&self.engine, &self.dev);
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
        assert_eq!(self.engine.bios_in_engine(), 0, "seed {}: BIOs stuck in the engine with an idle device", self.seed);
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
            while let Some(c) = self.completions.pop_front() {
                w.on_complete(self, c);
                self.pump();
                self.completed += 1;
                if let Some((every, report)) = &mut self.progress {
                    if self.completed % *every == 0 {
                        report(self.now_ns, self.completed);
                    }
                }
            }
            self.check();
            if self.advance() {
                continue;
            }
            self.pump();
            if !self.completions.is_empty() {
                continue;
            }
            assert_eq!(self.engine.bios_in_engine(), 0, "seed {}: BIOs stuck in the engine, device idle", self.seed);
            if w.is_done() || !w.on_idle(self) {
                break;
            }
        }
        assert_eq!(self.engine.bios_in_engine(), 0, "seed {}: BIOs stuck in the engine at the end", self.seed);
    }
}
