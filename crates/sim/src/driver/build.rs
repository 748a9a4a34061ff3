//! Building a simulation: one disk under its engine, or a built stack whose disks
//! each get an in-memory device, a timing model, seeded faults and, with checking
//! on, a checker, a device oracle and the host oracle's rules for the stack (which
//! writes reach a device in one piece, whether each zone's writes stay in order).

use super::{Checking, Clock, Durability, ModelFactory, Sim, SimConfig, SimStats, StackSimConfig, Tracing};
use crate::checker::Checker;
use crate::checks::SimChecks;
use crate::disk::{SimDisk, WriteCache};
use crate::faults::Faults;
use crate::model::{DeviceModel, NullModel};
use crate::oracle::{DeviceOracle, HostOracle, HostRules};
use slab::Slab;
use std::collections::VecDeque;
use zblk_core::engine::{Engine, EngineConfig, WpRecovery};
use zblk_core::params::DeviceParams;
use zblk_core::params::ParamError;
use zblk_core::stack::{BuiltStack, DevId, DevKind, SeekTracker, SplitOrder, Stack, StackBuilder, StackConfig};
use zblk_dev::MemDevice;
use zblk_workload::fio::HostCpus;

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
        // A simulated disk executes a request when its model completes it, in the
        // model's order: it does not keep a zone's writes in the order it was handed
        // them, so pipelining would see its writes land unaligned. Unless it is told
        // to execute each request when it arrives.
        if let Some(why) = cfg.engine.policy.refusal_on(cfg.keeps_zone_order) {
            return Err(ParamError { param: "policy".into(), message: format!("a simulated disk: {why}") });
        }
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
            plug_work_ns: cfg.plug_work_ns,
        };
        let mut model = Some(model);
        let mut sim = Sim::with_stack(built, run, &mut |_, _, _| model.take().expect("one disk"));
        if cfg.keeps_zone_order {
            sim.disks[0].in_order = true;
            if let Some(c) = &mut sim.disks[0].checker {
                c.done_at_completion = true;
            }
        }
        Ok(sim)
    }

    /// A simulation of `built`, each disk timed by the model `models` makes for it
    /// (seeded from the run's seed and the disk's place).
    pub fn with_stack(built: BuiltStack, cfg: StackSimConfig, models: ModelFactory<'_>) -> Sim {
        let BuiltStack { mut stack, disks: params } = built;
        let (disks, disk_of) = sim_disks(&stack, &params, &cfg, models);
        // Pieces are aligned unless the top device is a lone disk.
        let aligned = disks.len() > 1 || disk_of[stack.top().idx()].is_none();
        let pieces = unsplit_pieces(&stack, aligned);
        let host = cfg.check.then(|| {
            let rules = host_rules(&stack, &disks, aligned, pieces);
            HostOracle::new(&stack.info(stack.top()).geometry, rules)
        });
        // The checkers learn of the BIOs reaching each disk from the trace.
        let tracing = cfg.trace || cfg.check;
        stack.record_events(tracing);
        Sim {
            seed: cfg.seed,
            tracing: Tracing {
                events: tracing.then(Vec::new),
                held: Vec::new(),
                seeks: tracing.then(|| SeekTracker::new(&stack)),
                sink: None,
                debug: std::env::var_os("ZBLK_SIM_TRACE").is_some(),
            },
            stack,
            disks,
            disk_of,
            bios: Slab::new(),
            completions: VecDeque::new(),
            clock: Clock {
                now_ns: 0,
                host_latency_ns: cfg.host_latency_ns,
                delayed: VecDeque::new(),
                plug_work_ns: cfg.plug_work_ns,
                unplugged: VecDeque::new(),
                after_completions: false,
                timers: VecDeque::new(),
                late: VecDeque::new(),
                next_ns: Vec::new(),
                workload_due: None,
            },
            durability: Durability::default(),
            checking: Checking { on: cfg.check, checks: SimChecks::default(), host },
            done: Vec::new(),
            buf: Vec::new(),
            stats: SimStats::default(),
            progress: None,
            completed: 0,
            engines_touched: false,
            host_cpus: HostCpus::default(),
        }
    }

    /// Turns checks off (see [`SimChecks`]).
    pub fn set_checks(&mut self, checks: SimChecks) {
        self.checking.checks = checks;
        // Without them, the engines do not check themselves either.
        for i in 0..self.disks.len() {
            self.stack.engine_mut(self.disks[i].dev).set_self_check(checks.engine_invariants);
            let d = &mut self.disks[i];
            d.oracle_checks = checks.model;
            if let Some(c) = &mut d.checker {
                c.enabled = checks.checker;
            }
        }
        if let Some(h) = &mut self.checking.host {
            h.check_flush = checks.host_flush;
            h.check_errno = checks.host_errno;
        }
    }
}

/// The simulated disks of a stack, in the order `params` lists them, each with its
/// in-memory device, its timing model (seeded from the run's seed and the disk's
/// place), its faults and, with checking on, its checker and device oracle; and
/// each device's index in them (`None` for a stacked device).
fn sim_disks(
    stack: &Stack,
    params: &[(DevId, DeviceParams)],
    cfg: &StackSimConfig,
    models: ModelFactory<'_>,
) -> (Vec<SimDisk>, Vec<Option<usize>>) {
    let mut disk_of = vec![None; stack.devices().count()];
    let mut disks = Vec::with_capacity(params.len());
    for (i, (dev, p)) in params.iter().enumerate() {
        let geo = stack.info(*dev).geometry.clone();
        let traits = stack.engine(*dev).expect("a disk has an engine").policy_traits();
        disk_of[dev.idx()] = Some(i);
        let mem = MemDevice::new(&geo, p.memory_backed);
        let oracle = cfg.check.then(|| DeviceOracle::new(&geo));
        disks.push(SimDisk {
            dev: *dev,
            model: models(*dev, p, cfg.seed ^ ((i as u64 + 1) << 40)),
            checker: cfg.check.then(|| Checker::new(&geo, traits, cfg.seed)),
            faults: Faults::new(cfg.faults, cfg.seed ^ ((i as u64) << 40)),
            cache: cfg.faults.write_cache.then(|| WriteCache::new(&mem, oracle.as_ref())),
            mem,
            oracle,
            oracle_checks: true,
            seed: cfg.seed,
            in_order: false,
            arrived: Default::default(),
            arrivals: 0,
        });
    }
    (disks, disk_of)
}

/// The largest write and WRITE_ZEROES that no device of the stack splits: within
/// every max_sectors and stripe chunk (and WRITE_ZEROES limit), a power of two so
/// that it can be aligned when the top device is not a lone disk. Returns
/// `(piece_sectors, wz_piece_sectors)`.
fn unsplit_pieces(stack: &Stack, aligned: bool) -> (u64, u64) {
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
    if aligned {
        piece_sectors = 1 << piece_sectors.ilog2();
    }
    let wz_piece_sectors = match wz_piece_sectors.min(piece_sectors) {
        n if aligned => 1 << n.ilog2(),
        n => n,
    };
    (piece_sectors, wz_piece_sectors)
}

/// How the host oracle judges a run on `stack`: whether each zone's writes reach
/// the devices in order, who recovers write pointers, whether an append may be
/// unsupported, which writes arrive in one piece, and whether a zone report of the
/// top device is its write pointer. `aligned` and `pieces` are what
/// [`unsplit_pieces`] says.
fn host_rules(stack: &Stack, disks: &[SimDisk], aligned: bool, pieces: (u64, u64)) -> HostRules {
    let (piece_sectors, wz_piece_sectors) = pieces;
    let engines: Vec<&Engine> = disks.iter().map(|d| stack.engine(d.dev).expect("a disk's engine")).collect();
    HostRules {
        ordered: stack.config().split_order == SplitOrder::Head && engines.iter().all(|e| e.policy_traits().plugs),
        kernel_recovery: engines.iter().any(|e| e.config().wp_recovery == WpRecovery::Kernel),
        // Emulation needs a plug; a striped device has no zone append.
        append_may_be_unsupported: engines.iter().any(|e| !e.policy_traits().plugs)
            || stack.devices().any(|(_, info)| info.kind == DevKind::Striped),
        piece_sectors,
        piece_aligned: aligned,
        wz_piece_sectors,
        report_is_wp: stack.devices().all(|(_, info)| info.kind != DevKind::Striped),
        // Pipelining is allowed on a single disk only (it must keep a zone's writes
        // in order, which a stack does not promise).
        pipelined: !aligned && engines.iter().all(|e| e.policy_traits().acks_in_zone_order),
    }
}
