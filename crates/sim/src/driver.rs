//! The simulator: one virtual clock driving a [`Stack`] (a single device is a stack
//! of one disk) and, per disk, an in-memory device (data and device-side zone
//! state), a [`DeviceModel`] deciding when each request completes, seeded fault
//! injection and, with checking on, the [`Checker`] after every step. One thread,
//! no wall clock: a run is a function of its configuration, its models and its seed.
//!
//! A request executes on its disk when the disk's model completes it, so a model
//! that reorders completions reorders execution too, as a device with a queue does.
//! Every event of the stack (BIOs queued, split, remapped, requests issued and
//! completed) can be traced, stamped with virtual time, and each device's seek
//! histogram is kept from them.
//!
//! One step of the event loop: move the clock to the earliest event (a model's, a
//! completion due to the workload, an engine's anticipation timer); execute what
//! the disks complete then, in disk order; deliver what is due; expire the timers
//! due; carry out the stack's actions (issue to the models, complete BIOs, answer
//! zone reports); hand the completions to the workload one by one; check.

use super::checker::Acked;
use super::checker::Checker;
use super::disk::{SimDisk, WriteCache};
use super::faults::{FaultConfig, Faults};
use super::model::{DeviceModel, NullModel};
use super::oracle::{DeviceOracle, HostBio, HostOracle, HostRules};
pub use crate::checks::SimChecks;
use slab::Slab;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::Write as _;
use zblk_core::bio::{Bio, BioFlags, Op, Request, Status};
use zblk_core::engine::{Engine, EngineConfig, EngineStats, WpRecovery};
use zblk_core::geometry::Geometry;
use zblk_core::params::{DeviceParams, ParamError};
use zblk_core::stack::{
    BuiltStack, DevId, DevKind, SeekTracker, SplitOrder, Stack, StackAction, StackBuilder, StackConfig, TraceAction,
    TraceEvent,
};
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::{ZoneCond, ZoneInfo};
use zblk_dev::{BlockDevice, MemDevice};

/// How to build a simulation of one device.
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

/// How to run a simulation of a stack (its devices come with the stack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackSimConfig {
    /// Seed of every random choice (each disk's model and faults get one derived
    /// from it).
    pub seed: u64,
    /// Run the checkers after every step.
    pub check: bool,
    /// Record trace events (for the sink and the seek histograms).
    pub trace: bool,
    /// Faults to inject, on every disk.
    pub faults: FaultConfig,
    /// As [`SimConfig::host_latency_ns`].
    pub host_latency_ns: u64,
}

impl StackSimConfig {
    /// Seeded, checker and tracing off, no faults, no host latency.
    pub fn new(seed: u64) -> StackSimConfig {
        StackSimConfig { seed, check: false, trace: false, faults: FaultConfig::default(), host_latency_ns: 0 }
    }
}

/// Makes the timing model of a disk: `(disk, its parameters, a seed for it)`.
pub type ModelFactory<'a> = &'a mut dyn FnMut(DevId, &DeviceParams, u64) -> Box<dyn DeviceModel>;

/// The null device's timing for every disk, from its `completion_nsec` and
/// `completion_dist`.
pub fn null_model(_dev: DevId, params: &DeviceParams, seed: u64) -> Box<dyn DeviceModel> {
    Box::new(NullModel::new(params.completion_nsec, params.completion_dist, seed))
}

/// Receives every trace event, in order, with its time.
pub type TraceSink = Box<dyn FnMut(&TraceEvent)>;

/// A progress callback: `(virtual now in ns, BIOs completed)`.
pub type ProgressFn = Box<dyn FnMut(u64, u64)>;

/// A BIO completed in the simulation, handed to its workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimCompletion {
    /// The workload's token for the BIO.
    pub token: u64,
    /// The submitter it was submitted for (0 unless [`Sim::submit_by`] said).
    pub submitter: u32,
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
    submitter: u32,
    submit_ns: u64,
    op: Op,
    sector: Sector,
    nr_sectors: u32,
    stamp: u64,
    /// The reset epochs of what the BIO covers, at submission (see
    /// [`Checker::epoch_of`]).
    epoch: u64,
    /// What the host-side oracle recorded of it.
    host: HostBio,
    /// Its flags (FUA).
    flags: BioFlags,
    /// For a FLUSH: the writes acknowledged before its submission, which it makes
    /// durable.
    flush_mark: u64,
}

/// The sectors of one acknowledged write, on each disk (by index) it reached.
type AckedWrite = Vec<(usize, Vec<Acked>)>;

/// Counters of a simulation run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SimStats {
    /// BIOs submitted.
    pub bios: u64,
    /// Requests the disks executed.
    pub executed: u64,
    /// Faults injected.
    pub faults: u64,
    /// Zone reports answered to the disks' engines.
    pub reports: u64,
    /// Checker checks made.
    pub checks: u64,
}

/// A piece of a BIO's range on one disk: `(disk index, sector on the disk, length,
/// offset in the BIO)`.
type Extent = (usize, Sector, u32, u32);

/// A simulation in progress. See the module documentation.
pub struct Sim {
    now_ns: u64,
    seed: u64,
    check: bool,
    stack: Stack,
    disks: Vec<SimDisk>,
    /// Device index → index in `disks`.
    disk_of: Vec<Option<usize>>,
    bios: Slab<BioRec>,
    completions: VecDeque<SimCompletion>,
    /// Completions on their way to the workload: (delivery time, completion).
    delayed: VecDeque<(u64, SimCompletion)>,
    /// The engines' anticipation timers: (due time, disk, token), earliest first.
    timers: VecDeque<(u64, DevId, u64)>,
    host_latency_ns: u64,
    /// Trace events taken from the stack (with the disks' completions between them,
    /// in the order they happened) and not handed out yet; `None` when not tracing.
    events: Option<Vec<TraceEvent>>,
    seeks: Option<SeekTracker>,
    sink: Option<TraceSink>,
    done: Vec<Request>,
    /// Each disk model's next event, during a step.
    next_ns: Vec<Option<u64>>,
    buf: Vec<u8>,
    stats: SimStats,
    /// Print every action to stderr (set `ZBLK_SIM_TRACE=1`): for debugging a seed.
    debug: bool,
    /// Progress callback and its period in completions.
    progress: Option<(u64, ProgressFn)>,
    completed: u64,
    /// An engine was handed out mutably: what it decided must be collected.
    engines_touched: bool,
    /// The host-side oracle (checking on).
    host: Option<HostOracle>,
    /// Completions lost by the disks, which the driver's timeout fails: (time,
    /// disk, request, result), earliest first.
    late: VecDeque<(u64, DevId, Request, Result<Sector, Status>)>,
    /// Writes acknowledged and not yet made durable by a FLUSH: (their number,
    /// their sectors on each disk).
    acked: VecDeque<(u64, AckedWrite)>,
    /// Writes acknowledged so far.
    acks: u64,
    /// Power losses so far.
    power_losses: u64,
    checks: SimChecks,
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

    /// A simulation of one device with the given timing model: a stack of that one
    /// disk, which the engine configured by `cfg.engine` drives.
    pub fn with_model(cfg: &SimConfig, model: Box<dyn DeviceModel>) -> Result<Sim, ParamError> {
        let geo = cfg.device.validate()?;
        let engine_cfg = EngineConfig { queue_depth: cfg.device.hw_queue_depth, ..cfg.engine };
        let mut b = StackBuilder::new();
        let disk = b.disk(&geo, engine_cfg);
        // The engine holds the device's BIO limit: the stack adds none of its own.
        let stack = b.build(disk, StackConfig { split_order: SplitOrder::Head, max_bios: u32::MAX });
        let built = BuiltStack { stack, disks: vec![(disk, cfg.device.clone())] };
        let run = StackSimConfig {
            seed: cfg.seed,
            check: cfg.check,
            trace: false,
            faults: cfg.faults,
            host_latency_ns: cfg.host_latency_ns,
        };
        let mut model = Some(model);
        Ok(Sim::with_stack(built, run, &mut |_, _, _| model.take().expect("one disk")))
    }

    /// A simulation of `built`, each disk timed by the model `models` makes for it
    /// (seeded from the run's seed and the disk's place).
    pub fn with_stack(built: BuiltStack, cfg: StackSimConfig, models: ModelFactory<'_>) -> Sim {
        let BuiltStack { mut stack, disks: params } = built;
        let mut disk_of = vec![None; stack.devices().count()];
        let mut disks = Vec::with_capacity(params.len());
        for (i, (dev, p)) in params.iter().enumerate() {
            let geo = stack.info(*dev).geometry.clone();
            let policy = stack.engine(*dev).expect("a disk has an engine").config().policy;
            disk_of[dev.idx()] = Some(i);
            let mem = MemDevice::new(&geo, p.memory_backed);
            let oracle = cfg.check.then(|| DeviceOracle::new(&geo));
            disks.push(SimDisk {
                dev: *dev,
                model: models(*dev, p, cfg.seed ^ ((i as u64 + 1) << 40)),
                checker: cfg.check.then(|| Checker::new(&geo, policy, cfg.seed)),
                faults: Faults::new(cfg.faults, cfg.seed ^ ((i as u64) << 40)),
                cache: cfg.faults.write_cache.then(|| WriteCache::new(&mem, oracle.as_ref())),
                mem,
                oracle,
                oracle_checks: true,
                seed: cfg.seed,
            });
        }
        // The largest write that no device of the stack splits: within every
        // max_sectors and stripe chunk, a power of two so that it can be aligned.
        let mut piece_sectors = u64::MAX;
        let mut wz_piece_sectors = u64::MAX;
        for (_, info) in stack.devices() {
            let wz = u64::from(info.geometry.max_write_zeroes_sectors().min(info.limits.max_write_zeroes_sectors));
            if wz > 0 {
                wz_piece_sectors = wz_piece_sectors.min(wz);
            }
            piece_sectors = piece_sectors.min(u64::from(info.geometry.max_sectors()));
            piece_sectors = piece_sectors.min(u64::from(info.limits.max_sectors));
            if info.kind != DevKind::Disk && info.limits.chunk_sectors > 0 {
                piece_sectors = piece_sectors.min(info.limits.chunk_sectors);
            }
        }
        if disks.len() > 1 || disk_of[stack.top().idx()].is_none() {
            piece_sectors = 1 << piece_sectors.ilog2();
        }
        let wz_piece_sectors = match wz_piece_sectors.min(piece_sectors) {
            n if disks.len() > 1 || disk_of[stack.top().idx()].is_none() => 1 << n.ilog2(),
            n => n,
        };
        let host = cfg.check.then(|| {
            let engines: Vec<&Engine> = disks.iter().map(|d| stack.engine(d.dev).expect("a disk's engine")).collect();
            let rules = HostRules {
                ordered: stack.config().split_order == SplitOrder::Head
                    && engines.iter().all(|e| e.config().policy.plugs()),
                kernel_recovery: engines.iter().any(|e| e.config().wp_recovery == WpRecovery::Kernel),
                // Emulation needs a plug; a striped device has no zone append.
                append_may_be_unsupported: engines.iter().any(|e| !e.config().policy.plugs())
                    || stack.devices().any(|(_, info)| info.kind == DevKind::Striped),
                piece_sectors,
                piece_aligned: disks.len() > 1 || disk_of[stack.top().idx()].is_none(),
                wz_piece_sectors,
                report_is_wp: stack.devices().all(|(_, info)| info.kind != DevKind::Striped),
            };
            HostOracle::new(&stack.info(stack.top()).geometry, rules)
        });
        // The checkers learn of the BIOs reaching each disk from the trace.
        let tracing = cfg.trace || cfg.check;
        stack.record_events(tracing);
        Sim {
            now_ns: 0,
            seed: cfg.seed,
            check: cfg.check,
            seeks: tracing.then(|| SeekTracker::new(&stack)),
            stack,
            disks,
            disk_of,
            bios: Slab::new(),
            completions: VecDeque::new(),
            delayed: VecDeque::new(),
            timers: VecDeque::new(),
            host_latency_ns: cfg.host_latency_ns,
            events: tracing.then(Vec::new),
            sink: None,
            done: Vec::new(),
            next_ns: Vec::new(),
            buf: Vec::new(),
            stats: SimStats::default(),
            debug: std::env::var_os("ZBLK_SIM_TRACE").is_some(),
            progress: None,
            completed: 0,
            engines_touched: false,
            host,
            late: VecDeque::new(),
            acked: VecDeque::new(),
            acks: 0,
            power_losses: 0,
            checks: SimChecks::default(),
        }
    }

    /// Turns checks off (see [`SimChecks`]).
    pub fn set_checks(&mut self, checks: SimChecks) {
        self.checks = checks;
        // Without them, the engines do not check themselves either.
        for i in 0..self.disks.len() {
            self.stack.engine_mut(self.disks[i].dev).set_self_check(checks.engine_invariants);
            let d = &mut self.disks[i];
            d.oracle_checks = checks.model;
            if let Some(c) = &mut d.checker {
                c.enabled = checks.checker;
            }
        }
        if let Some(h) = &mut self.host {
            h.check_flush = checks.host_flush;
        }
    }

    /// The power fails and comes back: the disks keep what is durable and what
    /// their caches destaged by then (drawn from the seed; see docs/vopr.md),
    /// and the host restarts: each disk's engine is built anew from a zone report,
    /// as at start-up, and the host model re-reads every write pointer. Every
    /// write made durable must still be there. Nothing may be in flight.
    pub fn power_loss(&mut self) {
        self.power_loss_with(None);
    }

    /// A power loss (see [`Sim::power_loss`]) at the worst moment: the caches had
    /// destaged nothing since their last durable point.
    pub fn power_loss_losing_the_caches(&mut self) {
        self.power_loss_with(Some(0));
    }

    fn power_loss_with(&mut self, destaged: Option<usize>) {
        self.pump();
        assert_eq!(self.stack.bios_in_flight(), 0, "seed {}: a power loss with BIOs in flight", self.seed);
        assert!(self.completions.is_empty() && self.delayed.is_empty() && self.late.is_empty());
        if self.debug {
            let _ = writeln!(std::io::stderr(), "{:>12} power loss", self.now_ns);
        }
        self.power_losses += 1;
        // The host restarts: its timers and what it waited for go with it.
        self.timers.clear();
        self.acked.clear();
        for i in 0..self.disks.len() {
            let d = &mut self.disks[i];
            d.power_loss(destaged, &mut self.buf);
            let zones = d.mem.zones().map_or_else(Vec::new, |z| z.zones().to_vec());
            let engine = self.stack.engine_mut(d.dev);
            let (geo, cfg) = (engine.geometry().clone(), *engine.config());
            *engine = Engine::new(&geo, cfg, &zones);
            engine.set_self_check(self.checks.engine_invariants);
        }
        self.engines_touched = true;
        if let Some(mut host) = self.host.take() {
            host.restart(&mut |z| self.top_zone_wp(z));
            self.host = Some(host);
        }
        self.pump();
        self.check();
    }

    /// Zone `z` of the top device's write pointer offset as the host model reads it
    /// back (after an error, or a restart): `None` for a zone that takes no more
    /// writes (READONLY, OFFLINE) or cannot be reported.
    fn top_zone_wp(&self, z: ZoneNo) -> Option<u64> {
        let info = self.report_zone(self.stack.top(), z).ok()?;
        match info.cond {
            ZoneCond::ReadOnly | ZoneCond::Offline => None,
            ZoneCond::Full => Some(info.capacity),
            _ => Some(info.wp.since(info.start).min(info.capacity)),
        }
    }

    /// Virtual time now, in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// The run's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The stack.
    pub fn stack(&self) -> &Stack {
        &self.stack
    }

    fn disk_index(&self, dev: DevId) -> usize {
        self.disk_of[dev.idx()].unwrap_or_else(|| panic!("{} is not a disk", self.stack.info(dev).name))
    }

    /// The top device as a disk: what a simulation of one device has.
    fn top_disk(&self) -> usize {
        let top = self.stack.top();
        self.disk_of[top.idx()].unwrap_or_else(|| {
            panic!("the top device {} is a stacked device: name the disk", self.stack.info(top).name)
        })
    }

    /// The engine of the device (the top device must be a disk), for inspection.
    pub fn engine(&self) -> &Engine {
        self.disk_engine(self.disks[self.top_disk()].dev)
    }

    /// The engine of the device (the top device must be a disk), to make zone
    /// reports or change settings as a user would.
    pub fn engine_mut(&mut self) -> &mut Engine {
        let dev = self.disks[self.top_disk()].dev;
        self.engines_touched = true;
        self.stack.engine_mut(dev)
    }

    /// Writes `zoned_qd1_writes` (0 or 1) of every zoned disk whose engine plugs
    /// (per-zone plugging, the single issuer or the batching issuer), as a user
    /// writing the queue attribute while I/O runs: each engine freezes, drains and
    /// switches.
    pub fn set_zoned_qd1_writes(&mut self, value: u64) {
        if self.debug {
            let _ = writeln!(std::io::stderr(), "{:>12} zoned_qd1_writes={value}", self.now_ns);
        }
        for i in 0..self.disks.len() {
            let dev = self.disks[i].dev;
            let e = self.stack.engine_mut(dev);
            if e.geometry().is_zoned() && e.config().policy.plugs() {
                e.set_zoned_qd1_writes(value).expect("zoned_qd1_writes of a zoned disk");
                self.engines_touched = true;
            }
        }
    }

    /// Forces `fault` on the next request of the top device (a disk) it applies
    /// to (see [`Faults::force`]): scenarios script their faults.
    pub fn force_fault(&mut self, fault: super::faults::Fault) {
        let i = self.top_disk();
        self.disks[i].faults.force(fault);
    }

    /// The engine of disk `dev`.
    pub fn disk_engine(&self, dev: DevId) -> &Engine {
        self.stack.engine(dev).unwrap_or_else(|| panic!("{} is not a disk", self.stack.info(dev).name))
    }

    /// The top device's geometry.
    pub fn device_geometry(&self) -> Geometry {
        self.stack.info(self.stack.top()).geometry.clone()
    }

    /// Calls `report(now_ns, completions)` every `every` BIO completions while
    /// [`Sim::run`] runs: progress for long simulations.
    pub fn set_progress(&mut self, every: u64, report: ProgressFn) {
        assert!(every > 0, "progress every 0 completions");
        self.progress = Some((every, report));
    }

    /// The device (the top device must be a disk).
    pub fn device(&self) -> &MemDevice {
        &self.disks[self.top_disk()].mem
    }

    /// The device (the top device must be a disk), for fault injection.
    pub fn device_mut(&mut self) -> &mut MemDevice {
        let i = self.top_disk();
        &mut self.disks[i].mem
    }

    /// The in-memory device behind disk `dev`.
    pub fn disk(&self, dev: DevId) -> &MemDevice {
        &self.disks[self.disk_index(dev)].mem
    }

    /// The in-memory device behind disk `dev`, for fault injection.
    pub fn disk_mut(&mut self, dev: DevId) -> &mut MemDevice {
        let i = self.disk_index(dev);
        &mut self.disks[i].mem
    }

    /// The timing model's description; for a stack, every disk's, named.
    pub fn model_description(&self) -> String {
        if let [d] = &self.disks[..] {
            return d.model.describe();
        }
        let each: Vec<String> =
            self.model_descriptions().into_iter().map(|(d, m)| format!("{}: {m}", self.stack.info(d).name)).collect();
        each.join("; ")
    }

    /// The timing model of each disk, described.
    pub fn model_descriptions(&self) -> Vec<(DevId, String)> {
        self.disks.iter().map(|d| (d.dev, d.model.describe())).collect()
    }

    /// The timing model's counters (see [`DeviceModel::counters`]); for a stack,
    /// each counter summed over the disks.
    pub fn model_counters(&self) -> Vec<(&'static str, f64)> {
        let mut sum: Vec<(&'static str, f64)> = Vec::new();
        for d in &self.disks {
            for (name, v) in d.model.counters() {
                match sum.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, s)) => *s += v,
                    None => sum.push((name, v)),
                }
            }
        }
        sum
    }

    /// Counters.
    pub fn stats(&self) -> SimStats {
        let checks = self.disks.iter().filter_map(|d| d.checker.as_ref()).map(|c| c.checks).sum();
        let faults = self.disks.iter().map(|d| d.faults.injected).sum::<u64>() + self.power_losses;
        SimStats { checks, faults, ..self.stats }
    }

    /// Faults injected so far, by kind, over every disk.
    pub fn faults_by_kind(&self) -> std::collections::BTreeMap<&'static str, u64> {
        let mut sum = std::collections::BTreeMap::new();
        for d in &self.disks {
            for (k, n) in &d.faults.by_kind {
                *sum.entry(*k).or_insert(0) += n;
            }
        }
        if self.power_losses > 0 {
            sum.insert(super::faults::POWER_LOSS, self.power_losses);
        }
        sum
    }

    /// Engine counters of the device (the top device must be a disk).
    pub fn engine_stats(&self) -> EngineStats {
        self.engine().stats()
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

    /// Zone `z` of device `dev` as its disks' zones make it up.
    pub fn report_zone(&self, dev: DevId, z: ZoneNo) -> Result<ZoneInfo, Status> {
        let (disks, disk_of) = (&self.disks, &self.disk_of);
        self.stack.report_zone(dev, z, &mut |d, s| disks[disk_of[d.idx()].expect("a disk")].mem.report_zone(s))
    }

    /// Every zone of device `dev` (none if it is not zoned): a disk's zone table as
    /// it is, a stacked device's made up zone by zone.
    pub fn report_zones(&self, dev: DevId) -> Cow<'_, [ZoneInfo]> {
        if let Some(i) = self.disk_of[dev.idx()] {
            return self.disks[i].mem.zones().map_or(Cow::Borrowed(&[]), |z| Cow::Borrowed(z.zones()));
        }
        let geo = &self.stack.info(dev).geometry;
        if !geo.is_zoned() {
            return Cow::Borrowed(&[]);
        }
        (0..geo.nr_zones()).filter_map(|z| self.report_zone(dev, ZoneNo(z)).ok()).collect()
    }

    /// Reads `buf.len()` bytes of device `dev` at `sector` straight from the disks'
    /// stores through the stack's mapping (for checks: no I/O, no time).
    pub fn peek(&self, dev: DevId, sector: Sector, buf: &mut [u8]) {
        for (k, chunk) in buf.chunks_mut(SECTOR_SIZE as usize).enumerate() {
            let (d, s) = self.stack.map_to_disk(dev, sector + k as u64);
            self.disk(d).peek(s, chunk);
        }
    }

    /// Submits `bio` to the top device now. `token` comes back in its
    /// [`SimCompletion`]; a write's data is the pattern of `stamp` (see
    /// [`zblk_workload::pattern`]), sector `k` of the BIO holding `(stamp, k)`
    /// wherever the stack puts it.
    pub fn submit(&mut self, bio: Bio, token: u64, stamp: u64) {
        self.submit_by(0, bio, token, stamp);
    }

    /// As [`Sim::submit`], for `submitter` (a number naming the submitting
    /// context, in traces and completions).
    pub fn submit_by(&mut self, submitter: u32, mut bio: Bio, token: u64, stamp: u64) {
        if self.host.is_some() && matches!(bio.op, Op::ZoneReset | Op::ZoneFinish | Op::ZoneResetAll) {
            // Carry out what the engines decided so far: the oracle must see which
            // writes are on their way to the device and which wait in a plug.
            self.pump();
        }
        self.stats.bios += 1;
        let top = self.stack.top();
        let epoch = if self.check { self.epoch(top, bio.sector, bio.nr_sectors) } else { 0 };
        let host = match &mut self.host {
            Some(h) => {
                // Every zone write in flight and not issued waits in its plug (so that
                // a reset or finish must abort it) when a single disk's engine has a
                // free tag: none waits for one.
                let plugs_exact = self.disk_of[top.idx()].is_some() && {
                    let e = self.stack.engine(top).expect("a disk's engine");
                    // A frozen queue (zoned_qd1_writes being written) holds BIOs at
                    // its door, before their plugs: they enter in order afterwards,
                    // a write ahead of a reset goes before it.
                    e.config().policy.plugs() && e.inflight() < e.config().queue_depth && !e.frozen()
                };
                h.on_submit(&bio, self.bios.iter_mut().map(|(_, r)| &mut r.host), plugs_exact)
            }
            None => HostBio::default(),
        };
        let key = self.bios.insert(BioRec {
            token,
            submitter,
            submit_ns: self.now_ns,
            op: bio.op,
            sector: bio.sector,
            nr_sectors: bio.nr_sectors,
            stamp,
            epoch,
            host,
            flags: bio.flags,
            flush_mark: self.acks,
        });
        bio.user_data = key as u64;
        if self.debug {
            let r = &self.bios[key].host;
            let _ = writeln!(std::io::stderr(), "{:>12} submit {bio:?} (oracle: {:?})", self.now_ns, r.prediction());
        }
        self.stack.submit(top, bio, submitter);
    }

    /// Has the user report the zone holding `sector` of the top device to the
    /// engines of the disks it lies on (what a file system does after a write
    /// error, and what the kernel's recovery waits for).
    pub fn report_zone_to_engine(&mut self, sector: Sector) {
        let top = self.stack.top();
        let geo = &self.stack.info(top).geometry;
        if !geo.is_zoned() || sector.0 >= geo.nr_sectors() {
            return;
        }
        let z = geo.zone_no(sector);
        if let Some(h) = &mut self.host {
            h.on_user_report(z);
        }
        let mut parts = Vec::new();
        let (disks, disk_of) = (&self.disks, &self.disk_of);
        let _ = self.stack.report_zone(top, z, &mut |d, s| {
            let info = disks[disk_of[d.idx()].expect("a disk")].mem.report_zone(s);
            if let Ok(i) = info {
                parts.push((d, i));
            }
            info
        });
        for (d, info) in parts {
            self.stats.reports += 1;
            self.stack.zone_report(d, &info);
        }
    }

    /// The disk extents of `[sector, sector + nr_sectors)` of stacked device `dev`,
    /// in BIO order; none for a range outside the device.
    fn extents(&self, dev: DevId, sector: Sector, nr_sectors: u32) -> Vec<Extent> {
        let end = sector.0.checked_add(u64::from(nr_sectors));
        if end.is_none_or(|e| e > self.stack.info(dev).geometry.nr_sectors()) {
            return Vec::new();
        }
        let mut out: Vec<Extent> = Vec::new();
        for k in 0..nr_sectors {
            let (d, s) = self.stack.map_to_disk(dev, sector + u64::from(k));
            let i = self.disk_index(d);
            match out.last_mut() {
                Some((li, ls, ln, _)) if *li == i && *ls + u64::from(*ln) == s => *ln += 1,
                _ => out.push((i, s, 1, k)),
            }
        }
        out
    }

    /// The sum of the disks' reset epochs over `[sector, sector + nr_sectors)` of
    /// device `dev`: unchanged between a write's submission and its completion when
    /// nothing threw its data away.
    fn epoch(&self, dev: DevId, sector: Sector, nr_sectors: u32) -> u64 {
        match self.disk_of[dev.idx()] {
            Some(i) => self.epoch_sum(&[(i, sector, nr_sectors, 0)]),
            None => self.epoch_sum(&self.extents(dev, sector, nr_sectors)),
        }
    }

    fn epoch_sum(&self, extents: &[Extent]) -> u64 {
        extents.iter().map(|&(i, s, n, _)| self.disks[i].checker.as_ref().map_or(0, |c| c.epoch_of(s, n))).sum()
    }

    /// Moves the stack's events to the simulator's list, in order.
    fn take_events(&mut self) {
        if let Some(ev) = &mut self.events {
            self.stack.take_events(ev);
        }
    }

    /// Hands out the events recorded: a BIO queued on a disk to its checker (which
    /// tracks zone operations from submission), every event, stamped with the time,
    /// to the seek histograms and the sink.
    fn drain_events(&mut self) {
        self.take_events();
        let Some(mut events) = self.events.take() else { return };
        for mut e in events.drain(..) {
            if let (TraceAction::Queue, Some(i)) = (e.action, self.disk_of[e.dev.idx()]) {
                let bio = Bio { op: e.op, sector: e.sector, nr_sectors: e.nr_sectors, flags: e.flags, user_data: 0 };
                let d = &mut self.disks[i];
                let engine = self.stack.engine(d.dev).expect("a disk has an engine");
                if let (Some(c), true) = (&mut d.checker, engine.validate(&bio).is_ok()) {
                    c.on_submit(&bio);
                }
            }
            e.time_ns = self.now_ns;
            if let Some(s) = &mut self.seeks {
                s.record(&e);
            }
            if let Some(sink) = &mut self.sink {
                sink(&e);
            }
        }
        self.events = Some(events);
    }

    /// Carries out the stack's actions until there are none.
    fn pump(&mut self) {
        if self.engines_touched {
            self.engines_touched = false;
            for i in 0..self.disks.len() {
                self.stack.pump_disk(self.disks[i].dev);
            }
        }
        if self.events.is_some() {
            self.drain_events();
        }
        while let Some(action) = self.stack.poll_action() {
            if self.debug {
                let _ = writeln!(std::io::stderr(), "{:>12} {action:?}", self.now_ns);
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
                    if let Some(c) = &mut d.checker {
                        let engine = self.stack.engine(dev).expect("a disk has an engine");
                        let unmap_disabled = engine.write_zeroes_unmap_max_bytes() == 0;
                        c.on_issue(&req, engine.config().policy, bio_flags, unmap_disabled);
                    }
                    d.model.submit(self.now_ns, &req);
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
                    let at = self.now_ns + ns;
                    let i = self.timers.partition_point(|&(t, _, _)| t <= at);
                    self.timers.insert(i, (at, dev, token));
                }
            }
            if self.events.is_some() {
                self.drain_events();
            }
        }
    }

    /// BIO `key` completed: a successful write's data must be where its completion
    /// says; the completion goes to the workload now or after the host's latency.
    fn bio_done(&mut self, key: usize, result: Result<Sector, Status>) {
        let rec = self.bios.remove(key);
        if let (true, Ok(at), Op::Write | Op::ZoneAppend) = (self.check, result, rec.op) {
            self.check_written(&rec, at);
        }
        if let (true, Ok(_), Op::Flush) = (self.check, result, rec.op) {
            // Every write acknowledged before the FLUSH was submitted is durable.
            while self.acked.front().is_some_and(|(n, _)| *n < rec.flush_mark) {
                let (_, sectors) = self.acked.pop_front().expect("an acknowledged write");
                for (i, list) in sectors {
                    if let Some(c) = &mut self.disks[i].checker {
                        c.make_durable(&list);
                    }
                }
            }
        }
        if let Some(mut host) = self.host.take() {
            let verdict = host.on_complete(&rec.host, result, &mut |z| self.top_zone_wp(z));
            self.host = Some(host);
            if let (Err(e), true) = (verdict, self.checks.model) {
                panic!("host oracle violation (seed {}): {e}", self.seed);
            }
        }
        let deliver_at = self.now_ns + self.host_latency_ns;
        let c = SimCompletion {
            token: rec.token,
            submitter: rec.submitter,
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

    /// A write or append BIO completed at `at` of the top device: each disk it
    /// landed on must hold its data, unless a reset or overwrite raced with it.
    fn check_written(&mut self, rec: &BioRec, at: Sector) {
        let top = self.stack.top();
        let extents = match self.disk_of[top.idx()] {
            Some(i) => vec![(i, at, rec.nr_sectors, 0)],
            None => self.extents(top, at, rec.nr_sectors),
        };
        if extents.iter().any(|&(i, ..)| !self.disks[i].mem.memory_backed()) || self.epoch_sum(&extents) != rec.epoch {
            return;
        }
        let mut sectors = Vec::with_capacity(extents.len());
        for (i, s, n, k) in extents {
            if let Some(c) = &mut self.disks[i].checker {
                c.check_written(rec.op, s, n, rec.stamp, k);
                sectors.push((i, c.acked(s, n, rec.stamp, k)));
            }
        }
        self.acks += 1;
        if rec.flags.contains(BioFlags::FUA) {
            for (i, list) in sectors {
                if let Some(c) = &mut self.disks[i].checker {
                    c.make_durable(&list);
                }
            }
        } else {
            self.acked.push_back((self.acks - 1, sectors));
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

    /// Executes on disk `i` a request its model completes now, and tells the stack.
    fn execute(&mut self, i: usize, req: &Request) {
        self.stats.executed += 1;
        let rec = &self.bios[req.user_data as usize];
        let (stamp, submitter) = (rec.stamp, rec.submitter);
        let trace = self.debug.then_some(self.now_ns);
        let d = &mut self.disks[i];
        let (result, executed) = d.execute(req, stamp, &mut self.buf, trace);
        let dev = d.dev;
        if let (Some(h), Some(rec)) = (&mut self.host, self.bios.get_mut(req.user_data as usize)) {
            if result.is_err() || executed.fault {
                let refused = if executed.fault { None } else { result.err() };
                h.on_device_error(&mut rec.host, req, executed.zone_failed, refused);
            } else if req.op == Op::Flush {
                rec.host.flush_executed = true;
            }
        }
        if executed.timed_out {
            self.late.push_back((self.now_ns + super::faults::TIMEOUT_NS, dev, *req, result));
            return;
        }
        self.complete_request(dev, req, result, submitter);
    }

    /// Tells the stack that `req` of disk `dev` completed with `result`.
    fn complete_request(&mut self, dev: DevId, req: &Request, result: Result<Sector, Status>, submitter: u32) {
        if self.events.is_some() {
            // After what the stack recorded so far, before what the completion makes.
            self.take_events();
            let done = TraceAction::Complete { error: result.err() };
            self.events.as_mut().expect("tracing").push(TraceEvent::of_request(dev, done, req, submitter));
        }
        self.stack.complete(dev, req.id, result);
    }

    /// Moves virtual time to the next event and processes what happens then: the
    /// disks' completions (disk by disk in creation order), completions due to the
    /// workload, anticipation timers. Returns false when nothing is pending.
    fn advance(&mut self) -> bool {
        // Executing a request submits nothing to a model (the stack's actions wait
        // for the pump): the models' next events, asked once, hold for the step.
        self.next_ns.clear();
        self.next_ns.extend(self.disks.iter().map(|d| d.model.next_event_ns()));
        let next_host =
            [self.delayed.front().map(|d| d.0), self.timers.front().map(|t| t.0), self.late.front().map(|l| l.0)];
        let Some(t) = self.next_ns.iter().chain(&next_host).flatten().copied().min() else {
            return false;
        };
        self.now_ns = self.now_ns.max(t);
        for i in 0..self.disks.len() {
            if self.next_ns[i].is_none_or(|n| n > self.now_ns) {
                continue;
            }
            let mut done = std::mem::take(&mut self.done);
            self.disks[i].model.advance(self.now_ns, &mut done);
            for req in done.drain(..) {
                self.execute(i, &req);
            }
            self.done = done;
        }
        self.deliver_due();
        while self.late.front().is_some_and(|l| l.0 <= self.now_ns) {
            let (_, dev, req, result) = self.late.pop_front().expect("a late completion");
            if self.debug {
                let _ = writeln!(std::io::stderr(), "{:>12} timeout {req:?} -> {result:?}", self.now_ns);
            }
            let i = self.disk_index(dev);
            if let Some(c) = &mut self.disks[i].checker {
                c.completion_timed_out(&req);
            }
            let submitter = self.bios.get(req.user_data as usize).map_or(0, |r| r.submitter);
            self.complete_request(dev, &req, result, submitter);
        }
        while let Some(&(at, dev, token)) = self.timers.front() {
            if at > self.now_ns {
                break;
            }
            self.timers.pop_front();
            self.stack.anticipation_expired(dev, token);
        }
        true
    }

    fn check(&mut self) {
        if !self.check {
            return;
        }
        // The stack's invariants, its disks' engines' among them.
        if self.checks.engine_invariants {
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
        let host =
            [self.delayed.front().map(|d| d.0), self.timers.front().map(|t| t.0), self.late.front().map(|l| l.0)];
        disks.chain(host.into_iter().flatten()).min()
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
        self.now_ns = self.now_ns.max(t_ns);
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
            assert_eq!(self.stack.bios_in_flight(), 0, "seed {}: BIOs stuck in the stack, disks idle", self.seed);
            if w.is_done() || !w.on_idle(self) {
                break;
            }
        }
        assert_eq!(self.stack.bios_in_flight(), 0, "seed {}: BIOs stuck in the stack at the end", self.seed);
    }
}
