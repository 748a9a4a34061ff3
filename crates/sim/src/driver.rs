//! The simulator: one virtual clock driving a [`Stack`] (a single device is a stack
//! of one disk) and, per disk, an in-memory device (data and device-side zone
//! state), a [`DeviceModel`] deciding when each request completes, seeded fault
//! injection and, with checking on, the [`Checker`](crate::Checker) after every
//! step. One thread, no wall clock: a run is a function of its configuration, its
//! models and its seed.
//!
//! A request executes on its disk when the disk's model completes it, so a model
//! that reorders completions reorders execution too, as a device with a queue does;
//! on a disk that keeps a zone's writes in order ([`SimConfig::keeps_zone_order`])
//! it executes when it arrives, and only its completion waits for the model.
//! Every event of the stack (BIOs queued, split, remapped, requests issued and
//! completed) can be traced, stamped with virtual time, and each device's seek
//! histogram is kept from them.
//!
//! One step of the event loop: move the clock to the earliest event (a model's, a
//! completion due to the workload, an engine's anticipation timer); execute what
//! the disks complete then, in disk order; deliver what is due; expire the timers
//! due; carry out the stack's actions (issue to the models, complete BIOs, answer
//! zone reports); hand the completions to the workload one by one; check.
//!
//! [`Sim`]'s state comes in parts: the clock (virtual time and what is due on it),
//! durability tracking, checking (the host oracle among it) and tracing. Its
//! methods are grouped by what they do: `build`, `inspect`, `submit`,
//! `durability`, `tracing` and `event_loop`.

mod build;
mod durability;
mod event_loop;
mod inspect;
mod plug_work;
mod submit;
mod tracing;

use super::checker::Acked;
use super::disk::SimDisk;
use super::faults::FaultConfig;
use super::model::{DeviceModel, NullModel};
use super::oracle::{HostBio, HostOracle};
pub use crate::checks::SimChecks;
use slab::Slab;
use std::collections::VecDeque;
use zblk_core::bio::{BioFlags, Op, Request, Status};
use zblk_core::engine::EngineConfig;
use zblk_core::params::DeviceParams;
use zblk_core::stack::{DevId, SeekTracker, Stack, TraceEvent};
use zblk_core::units::{Sector, ZoneNo};
use zblk_workload::fio::HostCpus;

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
    /// The kernel's plug work: a zone write that a completion releases from its plug
    /// reaches the device this long after the completion, the time the block layer's
    /// work item (`blk_zone_wplug_bio_work()`) takes to run. 0: at the completion.
    /// A workload's own submission to an idle plug goes out from its own context,
    /// without it, so the two race once this passes [`SimConfig::host_latency_ns`].
    pub plug_work_ns: u64,
    /// The device keeps a zone's writes in the order it is handed them: it executes
    /// each request on its data and zone state when the request arrives, while its
    /// completions still come back when the timing model says, in whatever order
    /// (as a UFS device or a file does). Zone write pipelining
    /// (`IssuePolicy::Pipeline`) is allowed only on such a device. Off, the device
    /// executes a request when the model completes it, so a model that reorders
    /// completions reorders execution too (a disk with a queue).
    pub keeps_zone_order: bool,
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
            plug_work_ns: 0,
            keeps_zone_order: false,
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
    /// As [`SimConfig::plug_work_ns`].
    pub plug_work_ns: u64,
}

impl StackSimConfig {
    /// Seeded, checker and tracing off, no faults, no host latency.
    pub fn new(seed: u64) -> StackSimConfig {
        StackSimConfig {
            seed,
            check: false,
            trace: false,
            faults: FaultConfig::default(),
            host_latency_ns: 0,
            plug_work_ns: 0,
        }
    }
}

/// Makes the timing model of a disk: `(disk, its parameters, a seed for it)`.
pub type ModelFactory<'a> = &'a mut dyn FnMut(DevId, &DeviceParams, u64) -> Box<dyn DeviceModel>;

/// Joins a thread that owned a [`Sim`] (the simulator is not `Send`, so a server
/// or a handle runs it on a thread of its own); a panic that ended the thread (a
/// simulator assertion: an invariant broken) is raised again in the joiner, its
/// message kept, so that it stops the process as any failed assertion does.
pub fn join_or_raise(thread: std::thread::JoinHandle<()>) {
    if let Err(panic) = thread.join() {
        std::panic::resume_unwind(panic);
    }
}

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
    /// When the workload next acts by itself (its host's CPU time: see
    /// [`HostCpus`]), whatever else happens; `None`: only when told of something.
    fn due_ns(&self) -> Option<u64> {
        None
    }
    /// The time [`Workload::due_ns`] named has come.
    fn on_due(&mut self, _sim: &mut Sim) {}
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
    /// Pipelined writes a disk that keeps zone order completed before a write that
    /// arrived before them in their zone (the engine holds their acknowledgement).
    pub pipe_early: u64,
    /// Power losses that cut BIOs in flight (see [`Sim::power_loss`]).
    pub cuts_in_flight: u64,
    /// Power losses that cut two or more pipelined writes of one zone on a disk
    /// (executed at their arrival, not completed yet).
    pub cuts_pipelined: u64,
}

/// A piece of a BIO's range on one disk: `(disk index, sector on the disk, length,
/// offset in the BIO)`.
type Extent = (usize, Sector, u32, u32);

/// A simulation in progress. See the module documentation.
pub struct Sim {
    seed: u64,
    stack: Stack,
    disks: Vec<SimDisk>,
    /// Device index → index in `disks`.
    disk_of: Vec<Option<usize>>,
    bios: Slab<BioRec>,
    /// Completions ready for the workload, in completion order.
    completions: VecDeque<SimCompletion>,
    clock: Clock,
    durability: Durability,
    checking: Checking,
    tracing: Tracing,
    /// What a disk model completes in a step (kept to reuse its allocation).
    done: Vec<Request>,
    /// A disk's data buffer (kept to reuse its allocation).
    buf: Vec<u8>,
    stats: SimStats,
    /// Progress callback and its period in completions.
    progress: Option<(u64, ProgressFn)>,
    completed: u64,
    /// An engine was handed out mutably: what it decided must be collected.
    engines_touched: bool,
    /// The CPUs fio's jobs run on ([`Sim::set_host_cpus`]).
    host_cpus: HostCpus,
}

/// Virtual time, and what is due on it besides the models' own events: the
/// completions on their way to the workload, the engines' anticipation timers and
/// the completions the driver's timeout fails.
struct Clock {
    /// Virtual time now, in nanoseconds.
    now_ns: u64,
    /// What a completion takes to reach the workload, ns.
    host_latency_ns: u64,
    /// Completions on their way to the workload: (delivery time, completion).
    delayed: VecDeque<(u64, SimCompletion)>,
    /// The plug work's delay ([`SimConfig::plug_work_ns`]).
    plug_work_ns: u64,
    /// Requests on their way to their disk ([`SimConfig::plug_work_ns`]), earliest
    /// first.
    unplugged: VecDeque<Unplugged>,
    /// The stack's next actions follow disk completions: its issues are the plug
    /// work's.
    after_completions: bool,
    /// The engines' anticipation timers: (due time, disk, token), earliest first.
    timers: VecDeque<(u64, DevId, u64)>,
    /// Completions lost by the disks, which the driver's timeout fails: (time,
    /// disk, request, result), earliest first.
    late: VecDeque<(u64, DevId, Request, Result<Sector, Status>)>,
    /// Each disk model's next event, during a step.
    next_ns: Vec<Option<u64>>,
    /// When the running workload next acts by itself ([`Workload::due_ns`]).
    workload_due: Option<u64>,
}

impl Clock {
    /// When each of the host's queues is next due: the workload's next step of its
    /// own, a completion reaching the workload, an anticipation timer, a late
    /// completion, a request the plug work hands its disk.
    fn host_due(&self) -> [Option<u64>; 5] {
        [
            self.workload_due,
            self.delayed.front().map(|d| d.0),
            self.timers.front().map(|t| t.0),
            self.late.front().map(|l| l.0),
            self.unplugged.front().map(|u| u.due_ns),
        ]
    }
}

/// A request the plug work has yet to hand its disk ([`SimConfig::plug_work_ns`]).
struct Unplugged {
    /// When it reaches the disk, ns.
    due_ns: u64,
    dev: DevId,
    req: Request,
    /// Its `D` trace event, held back until then (tracing on).
    traced: Option<TraceEvent>,
    /// The zone it addresses (`None`: it keeps its place among all of the disk's).
    zone: Option<ZoneNo>,
}

/// Which acknowledged writes are durable: a FLUSH makes the writes acknowledged
/// before its submission durable, a FUA write itself; a power loss must keep them.
#[derive(Default)]
struct Durability {
    /// Writes acknowledged and not yet made durable by a FLUSH: (their number,
    /// their sectors on each disk).
    acked: VecDeque<(u64, AckedWrite)>,
    /// Writes acknowledged so far.
    acks: u64,
    /// Power losses so far.
    power_losses: u64,
}

/// What checks the run: the disks' checkers and oracles, the engines' invariants
/// and the host-side oracle of the top device.
struct Checking {
    /// Checking is on.
    on: bool,
    /// Which checks are on (see [`SimChecks`]).
    checks: SimChecks,
    /// The host-side oracle (checking on).
    host: Option<HostOracle>,
}

/// Where the stack's events go: the disks' checkers, the seek histograms, the
/// trace sink, and (for debugging a seed) stderr.
struct Tracing {
    /// Trace events taken from the stack (with the disks' completions between them,
    /// in the order they happened) and not handed out yet; `None` when not tracing.
    events: Option<Vec<TraceEvent>>,
    /// `D` events of requests the plug work has yet to issue
    /// ([`SimConfig::plug_work_ns`]), stamped when it does.
    held: Vec<TraceEvent>,
    seeks: Option<SeekTracker>,
    sink: Option<TraceSink>,
    /// Print every action to stderr (set `ZBLK_SIM_TRACE=1`): for debugging a seed.
    debug: bool,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim").field("now_ns", &self.clock.now_ns).field("seed", &self.seed).finish_non_exhaustive()
    }
}
