//! Seeded random simulation: a random device, engine settings and fault rates drawn
//! from the seed, and a workload of random operations (writes at and off the write
//! pointer, splits across zones, appends, reads past write pointers, resets racing
//! with plugged writes, finishes, opens, closes, flushes, write zeroes, invalid
//! BIOs, zone reports), with the checker after every step.
//!
//! The same operations run on random stacks ([`random_stack`]): striped and linear
//! devices over zoned disks (or regular ones), each disk with its own engine
//! settings, faults and checker, the stack's splits and remaps between the
//! operations and the disks.
//!
//! `run_random(seed, ops)` and `run_random_stack(seed, ops)` replay exactly from
//! their seed; a failure names the seed.

use super::driver::{Sim, SimCompletion, SimConfig, Workload};
use super::faults::FaultConfig;
use rand::rngs::ChaCha8Rng;
use rand::{Rng, RngExt, SeedableRng};
use std::collections::BTreeMap;
use zblk_core::bio::{Bio, BioFlags, Op, Status};
use zblk_core::engine::{EngineConfig, IssuePolicy, WpRecovery};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::params::{DeviceParams, LatencyDist};
use zblk_core::units::{Sector, ZoneNo};

mod stack;
pub use stack::{RandomStack, random_stack, run_random_stack};

/// The fault rates of the runs with faults.
const FAULTS: FaultConfig = FaultConfig {
    write_error_ppm: 4_000,
    zone_fail_ppm: 200,
    read_error_ppm: 2_000,
    timeout_ppm: 0,
    write_cache: false,
    power_loss_ppm: 0,
};

/// A random small device and engine configuration drawn from `seed`.
pub fn random_config(seed: u64) -> SimConfig {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let lbs_bytes: u32 = if rng.random_bool(0.5) { 512 } else { 4096 };
    let zone_size_bytes: u64 = 1 << rng.random_range(15..=17);
    let nr_zones: u64 = rng.random_range(6..=24);
    let runt = if rng.random_bool(0.3) { rng.random_range(1..8) * u64::from(lbs_bytes) } else { 0 };
    let capacity_bytes = nr_zones * zone_size_bytes - runt;
    let zone_capacity_bytes = if rng.random_bool(0.3) { zone_size_bytes / 4 * 3 } else { 0 };
    let nr_conv = rng.random_range(0..=2);
    let shape = Shape { lbs_bytes, zoned: true, zone_size_bytes, zone_capacity_bytes };
    let device = random_device(&mut rng, shape, capacity_bytes, nr_conv);
    let engine = random_engine(&mut rng, device.hw_queue_depth, true);
    let faults = if rng.random_bool(0.5) { FAULTS } else { FaultConfig::default() };
    let (keeps_zone_order, engine) = zone_order(seed, engine);
    let plug_work_ns = plug_work(seed);
    SimConfig { device, engine, seed, check: true, faults, host_latency_ns: 0, plug_work_ns, keeps_zone_order }
}

/// The kernel's plug work of a random run: for one seed in four, 1 to 40 us (so that
/// requests released by completions reach the disk after later submissions, under
/// every check). Drawn apart from the run's other choices, which stay as they were.
fn plug_work(seed: u64) -> u64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x9109_3a5e);
    if rng.random_bool(0.25) { rng.random_range(1_000..=40_000) } else { 0 }
}

/// Whether a random device keeps a zone's writes in order (one in three), and if it
/// does, half the time its engine runs a policy that needs such a device (zone write
/// pipelining) instead of `engine`'s, with `pipeline_depth` 0 (the queue depth) one
/// time in four, else from 1 to one past the queue depth. Drawn from a generator of
/// its own, so that everything else a seed draws is as it was before devices kept
/// order.
fn zone_order(seed: u64, engine: EngineConfig) -> (bool, EngineConfig) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0bde_0bde);
    if !rng.random_bool(1.0 / 3.0) {
        return (false, engine);
    }
    let ordered: Vec<IssuePolicy> =
        IssuePolicy::compared_on_device(true, true).into_iter().filter(|p| p.refusal_on(false).is_some()).collect();
    if ordered.is_empty() || !rng.random_bool(0.5) {
        return (true, engine);
    }
    let policy = ordered[rng.random_range(0..ordered.len())];
    let pipeline_depth = if rng.random_bool(0.25) { 0 } else { rng.random_range(1..=engine.queue_depth + 1) };
    (true, EngineConfig { policy, pipeline_depth, ..engine })
}

/// Draws the limits and the timing of a small memory-backed device of `shape` and
/// `capacity_bytes`, the first `nr_conv` zones conventional.
fn random_device(rng: &mut impl Rng, shape: Shape, capacity_bytes: u64, nr_conv: u32) -> DeviceParams {
    let max_open = if rng.random_bool(0.5) { rng.random_range(2..=5) } else { 0 };
    let max_active = if rng.random_bool(0.5) { max_open.max(2) + rng.random_range(0..=3) } else { 0 };
    let lbs_sectors = shape.lbs_bytes / 512;
    let max_sectors = [1, 2, 4, 8, 32][rng.random_range(0..5)] * lbs_sectors;
    let max_append_sectors = if rng.random_bool(0.5) { 0 } else { max_sectors };
    // WRITE_ZEROES: none, smaller or larger than max_sectors; unmapping or not.
    let write_zeroes_max_bytes = [0, 1, 4, 64][rng.random_range(0..4)] * u64::from(shape.lbs_bytes);
    let write_zeroes_unmap_max_hw_bytes = if rng.random_bool(0.5) { write_zeroes_max_bytes } else { 0 };
    let geometry = GeometryParams {
        lbs_bytes: shape.lbs_bytes,
        capacity_bytes,
        zoned: shape.zoned,
        zone_size_bytes: shape.zone_size_bytes,
        zone_capacity_bytes: shape.zone_capacity_bytes,
        nr_conv,
        max_open,
        max_active,
        max_append_sectors,
        max_sectors,
        write_zeroes_max_bytes,
        write_zeroes_unmap_max_hw_bytes,
    };
    DeviceParams {
        geometry,
        memory_backed: true,
        rotational: rng.random_bool(0.3),
        hw_queue_depth: rng.random_range(1..=32),
        completion_nsec: rng.random_range(1_000..=20_000),
        completion_dist: [LatencyDist::Uniform, LatencyDist::Exp, LatencyDist::Fixed][rng.random_range(0..3)],
    }
}

/// What a random run did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RandomReport {
    /// The seed.
    pub seed: u64,
    /// Operations submitted.
    pub ops: u64,
    /// Completions by outcome: "ok" or the status name.
    pub outcomes: BTreeMap<String, u64>,
    /// Checker checks made.
    pub checks: u64,
    /// Faults injected.
    pub faults: u64,
    /// Plugged writes that had to wait.
    pub plugged: u64,
    /// Run-time writes of `zoned_qd1_writes`.
    pub qd1_switches: u64,
    /// Power losses.
    pub power_losses: u64,
    /// Of them, power losses that cut BIOs in flight (which never completed).
    pub power_losses_in_flight: u64,
    /// Operations submitted, by name (WRITE_ZEROES with NOUNMAP apart).
    pub op_kinds: BTreeMap<String, u64>,
    /// What the submitter did after a failed zone write: `report`, `reset`,
    /// `finish` or `nothing`.
    pub after_write_errors: BTreeMap<String, u64>,
}

/// The random-operations workload.
#[derive(Debug)]
pub struct RandomOps {
    rng: ChaCha8Rng,
    geo: Geometry,
    kernel_recovery: bool,
    ops_left: u64,
    max_inflight: u32,
    inflight: u32,
    /// Where the submitter believes each zone's write pointer is (as a file system
    /// would), offset from the zone start.
    guess_wp: Vec<u64>,
    stamp: u64,
    /// Tokens of BIOs built to be invalid: they must fail with EINVAL (or
    /// EOPNOTSUPP).
    invalid: Vec<u64>,
    /// On a regular device, the ranges being written (token, start, end): a
    /// submitter that writes a range twice at once races with itself, and what the
    /// range then holds is not defined.
    writing: Vec<(u64, u64, u64)>,
    report: RandomReport,
    /// Write `zoned_qd1_writes` at run time now and then (see
    /// [`RandomOps::with_qd1_switch`]).
    switch_qd1: bool,
    /// Every BIO submitted and its result, when logging (for a failure's trace).
    log: Option<Vec<LoggedOp>>,
    /// Power losses: their probability per operation (parts per million) and the
    /// generator drawing them, apart from the operations' so that a seed's
    /// operations are the same with or without them.
    power_loss: Option<(u32, ChaCha8Rng)>,
    /// Whether a power loss due cuts the BIOs in flight at once (one time in two)
    /// or waits for them: drawn apart, so that power losses come where they came.
    cut_at_once: ChaCha8Rng,
    /// Power losses may cut BIOs in flight (off: every one waits for them).
    cuts_in_flight: bool,
    /// A power loss is due: submit nothing until every BIO in flight is back.
    draining: bool,
    /// What the submitter does after a failed zone write (report the zone, reset or
    /// finish it, or nothing for now), drawn apart from the operations.
    recovery: ChaCha8Rng,
}

/// One operation of a logged run: what was submitted, and how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedOp {
    /// Its token.
    pub token: u64,
    /// The BIO (its `user_data` is meaningless).
    pub bio: Bio,
    /// Its result, once completed.
    pub result: Option<Result<Sector, Status>>,
    /// It was in flight at a power loss: it never completed.
    pub lost: bool,
}

const INVALID_FLAG: u64 = zblk_workload::token::RANDOM_INVALID;

impl RandomOps {
    /// `ops` random operations on `geo`, seeded.
    pub fn new(geo: &Geometry, kernel_recovery: bool, ops: u64, seed: u64) -> RandomOps {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0b5e_55ed);
        let max_inflight = rng.random_range(1..=48);
        RandomOps {
            rng,
            geo: geo.clone(),
            kernel_recovery,
            ops_left: ops,
            max_inflight,
            inflight: 0,
            guess_wp: vec![0; geo.nr_zones() as usize],
            stamp: 0,
            invalid: Vec::new(),
            writing: Vec::new(),
            report: RandomReport { seed, ..RandomReport::default() },
            switch_qd1: false,
            log: None,
            power_loss: None,
            cut_at_once: ChaCha8Rng::seed_from_u64(seed ^ 0x0c07_f11e),
            cuts_in_flight: true,
            draining: false,
            recovery: ChaCha8Rng::seed_from_u64(seed ^ 0x00ec_0e27),
        }
    }

    /// The power fails between two operations with probability `ppm` per million
    /// operations (seeded from `seed`): one time in two at once, with the BIOs in
    /// flight (which never complete), else once the workload, which stops
    /// submitting, has them all back; the simulation loses power
    /// ([`Sim::power_loss`]) and the workload re-reads every write pointer before
    /// going on.
    pub fn with_power_loss(mut self, ppm: u32, seed: u64) -> RandomOps {
        if ppm > 0 {
            self.power_loss = Some((ppm, ChaCha8Rng::seed_from_u64(seed ^ 0x9013_1055)));
        }
        self
    }

    /// Every power loss waits for the BIOs in flight: none is cut (to show what
    /// the cuts in flight catch).
    pub fn without_cuts_in_flight(mut self) -> RandomOps {
        self.cuts_in_flight = false;
        self
    }

    /// Writes `zoned_qd1_writes` at run time now and then.
    pub fn with_qd1_switch(mut self) -> RandomOps {
        self.switch_qd1 = true;
        self
    }

    /// Keeps a log of every operation (see [`RandomOps::log`]).
    pub fn with_log(mut self) -> RandomOps {
        self.log = Some(Vec::new());
        self
    }

    /// The operations submitted so far and their results, if logging.
    pub fn log(&self) -> &[LoggedOp] {
        self.log.as_deref().unwrap_or(&[])
    }

    /// The report so far.
    pub fn report(&self) -> &RandomReport {
        &self.report
    }

    fn lbs(&self) -> u64 {
        u64::from(self.geo.lbs_sectors())
    }

    fn seq_zone(&mut self) -> ZoneNo {
        ZoneNo(self.rng.random_range(self.geo.nr_conv()..self.geo.nr_zones()))
    }

    fn blocks(&mut self, max_blocks: u64) -> u32 {
        (self.rng.random_range(1..=max_blocks.max(1)) * self.lbs()) as u32
    }

    fn submit(&mut self, sim: &mut Sim, bio: Bio, token: u64) {
        self.inflight += 1;
        self.ops_left -= 1;
        self.report.ops += 1;
        self.stamp += 1;
        let name = match bio.op {
            Op::WriteZeroes if bio.flags.contains(BioFlags::NOUNMAP) => "WRITE_ZEROES NOUNMAP",
            op => op.name(),
        };
        *self.report.op_kinds.entry(name.to_string()).or_insert(0) += 1;
        if let Some(log) = &mut self.log {
            log.push(LoggedOp { token, bio, result: None, lost: false });
        }
        sim.submit(bio, token, self.stamp);
    }

    fn one_op(&mut self, sim: &mut Sim) {
        if !self.geo.is_zoned() {
            return self.one_regular_op(sim);
        }
        let token = self.stamp + 1;
        let roll = self.rng.random_range(0..1000);
        let g = self.geo.clone();
        let bio = match roll {
            0..=349 => self.write_at_guess(Op::Write),
            350..=399 => {
                let z = self.seq_zone();
                let off = self.guess_wp[z.idx()] + self.lbs() * self.rng.random_range(1..=3);
                let len = self.blocks(4).min(g.zone_len(z) as u32);
                Bio::write(g.zone_start(z) + off.min(g.zone_len(z) - u64::from(len)), len, 0)
            }
            400..=499 => {
                let z = self.seq_zone();
                let max = u64::from(g.append_limit_sectors()).min(g.zone_capacity(z)) / self.lbs();
                let len = self.blocks(max.min(8));
                Bio::append(g.zone_start(z), len, 0)
            }
            500..=649 => {
                let len = self.blocks(16);
                let max_start = (g.nr_sectors() - u64::from(len)) / self.lbs();
                Bio::read(Sector(self.rng.random_range(0..=max_start) * self.lbs()), len, 0)
            }
            650..=699 if g.nr_conv() > 0 => {
                let conv_sectors = u64::from(g.nr_conv()) * g.zone_sectors();
                let len = self.blocks(8).min(conv_sectors as u32);
                let at = self.rng.random_range(0..=(conv_sectors - u64::from(len)) / self.lbs()) * self.lbs();
                Bio::write(Sector(at), len, 0)
            }
            650..=699 => self.write_at_guess(Op::WriteZeroes),
            700..=739 => self.zone_op(Op::ZoneReset),
            740..=759 => self.zone_op(Op::ZoneFinish),
            760..=779 => self.zone_op(Op::ZoneOpen),
            780..=799 => self.zone_op(Op::ZoneClose),
            800..=801 => {
                self.guess_wp.iter_mut().for_each(|w| *w = 0);
                Bio::zone_op(Op::ZoneResetAll, Sector::ZERO, 0)
            }
            802..=839 => Bio::flush(0),
            840..=869 => {
                let z = self.seq_zone();
                sim.report_zone_to_engine(g.zone_start(z));
                self.resync_guess(sim, z);
                return;
            }
            870..=899 => {
                let bio = self.invalid_bio();
                self.invalid.push(token | INVALID_FLAG);
                self.submit(sim, bio, token | INVALID_FLAG);
                return;
            }
            _ => self.write_at_guess(Op::Write),
        };
        let bio = if bio.op == Op::Write && self.rng.random_bool(0.1) { bio.with_flags(BioFlags::FUA) } else { bio };
        let bio = self.maybe_nounmap(bio);
        self.maybe_switch_qd1(sim);
        self.submit(sim, bio, token);
    }

    /// WRITE_ZEROES asks for written zeroes (NOUNMAP) one time in two.
    fn maybe_nounmap(&mut self, bio: Bio) -> Bio {
        if bio.op == Op::WriteZeroes && self.rng.random_bool(0.5) { bio.with_flags(BioFlags::NOUNMAP) } else { bio }
    }

    /// With `switch_qd1`, one operation in 500 first writes `zoned_qd1_writes` (0
    /// or 1) of every disk that plugs: the engine freezes, drains and switches
    /// between per-zone plugging and the single issuer while BIOs keep coming.
    fn maybe_switch_qd1(&mut self, sim: &mut Sim) {
        if self.switch_qd1 && self.rng.random_range(0..500) == 0 {
            let value = self.rng.random_range(0..=1);
            sim.set_zoned_qd1_writes(value);
            self.report.qd1_switches += 1;
        }
    }

    /// A write at the guessed write pointer, sometimes long enough to cross into the
    /// next zone (split at the boundary).
    fn write_at_guess(&mut self, op: Op) -> Bio {
        let g = self.geo.clone();
        let z = self.seq_zone();
        let cap = g.zone_capacity(z);
        let wp = self.guess_wp[z.idx()].min(cap);
        let room = (g.nr_sectors() - (g.zone_start(z).0 + wp)) / self.lbs();
        let long = self.rng.random_bool(0.1);
        let len = self.blocks(room.min(if long { 64 } else { 8 }));
        self.guess_wp[z.idx()] = (wp + u64::from(len)).min(cap);
        Bio { op, sector: g.zone_start(z) + wp, nr_sectors: len, flags: BioFlags::NONE, user_data: 0 }
    }

    fn zone_op(&mut self, op: Op) -> Bio {
        let z = self.seq_zone();
        match op {
            Op::ZoneReset => self.guess_wp[z.idx()] = 0,
            Op::ZoneFinish => self.guess_wp[z.idx()] = self.geo.zone_capacity(z),
            _ => {}
        }
        Bio::zone_op(op, self.geo.zone_start(z), 0)
    }

    fn invalid_bio(&mut self) -> Bio {
        let g = self.geo.clone();
        let lbs = self.lbs() as u32;
        if !g.is_zoned() {
            return match self.rng.random_range(0..6) {
                0 => Bio::read(Sector(g.nr_sectors() - u64::from(lbs)), 2 * lbs, 0),
                1 if lbs > 1 => Bio::write(Sector(1), lbs, 0),
                2 => Bio::zone_op(Op::ZoneReset, Sector::ZERO, 0),
                3 => Bio::append(Sector::ZERO, lbs, 0),
                4 => Bio::write(Sector::ZERO, 0, 0),
                _ => Bio { nr_sectors: lbs, ..Bio::flush(0) },
            };
        }
        match self.rng.random_range(0..7) {
            0 => Bio::read(Sector(g.nr_sectors() - u64::from(lbs)), 2 * lbs, 0),
            1 if lbs > 1 => Bio::write(Sector(g.zone_start(ZoneNo(g.nr_conv())).0 + 1), lbs, 0),
            2 if g.nr_conv() > 0 => Bio::append(Sector::ZERO, lbs, 0),
            3 => Bio::append(g.zone_start(ZoneNo(g.nr_conv())), g.append_limit_sectors() + lbs, 0),
            4 => Bio::zone_op(Op::ZoneReset, g.zone_start(ZoneNo(g.nr_conv())) + u64::from(lbs), 0),
            5 => Bio::write(Sector::ZERO, 0, 0),
            _ => Bio { nr_sectors: lbs, ..Bio::flush(0) },
        }
    }

    /// An operation on a regular device: reads anywhere, writes, WRITE_ZEROES and
    /// DISCARD of ranges no other write of this submitter is changing, flushes,
    /// invalid BIOs.
    fn one_regular_op(&mut self, sim: &mut Sim) {
        let token = self.stamp + 1;
        let g = self.geo.clone();
        let long = self.rng.random_bool(0.1);
        let len = self.blocks((if long { 256 } else { 16 }).min(g.nr_sectors() / self.lbs()));
        let max_start = (g.nr_sectors() - u64::from(len)) / self.lbs();
        let at = Sector(self.rng.random_range(0..=max_start) * self.lbs());
        let roll = self.rng.random_range(0..1000);
        let op = match roll {
            0..=399 => Op::Write,
            400..=649 => Op::Read,
            650..=729 => Op::WriteZeroes,
            730..=779 => Op::Discard,
            780..=849 => Op::Flush,
            _ => {
                let bio = self.invalid_bio();
                self.invalid.push(token | INVALID_FLAG);
                self.submit(sim, bio, token | INVALID_FLAG);
                return;
            }
        };
        let end = at.0 + u64::from(len);
        let busy = self.writing.iter().any(|&(_, a, b)| at.0 < b && a < end);
        let bio = match op {
            Op::Flush => Bio::flush(0),
            Op::Read => Bio::read(at, len, 0),
            _ if busy => Bio::read(at, len, 0),
            op => {
                self.writing.push((token, at.0, end));
                Bio { op, sector: at, nr_sectors: len, flags: BioFlags::NONE, user_data: 0 }
            }
        };
        let bio = if bio.op == Op::Write && self.rng.random_bool(0.1) { bio.with_flags(BioFlags::FUA) } else { bio };
        let bio = self.maybe_nounmap(bio);
        self.submit(sim, bio, token);
    }

    /// What a file system does after a write error in zone `z`: one time in two it
    /// looks at the zone (with the kernel's recovery, the report the engine waits
    /// for); one in four it resets or finishes the zone, which sets its write pointer
    /// again without a report; one in four it does nothing for now (the next writes
    /// there fail, or wait for the engine's own report), so that every recovery path
    /// is walked.
    fn after_write_error(&mut self, sim: &mut Sim, z: ZoneNo) {
        let what = match self.recovery.random_range(0..4) {
            0 | 1 => {
                if self.kernel_recovery {
                    sim.report_zone_to_engine(self.geo.zone_start(z));
                }
                self.resync_guess(sim, z);
                "report"
            }
            2 if !self.draining && self.ops_left > 0 => {
                let op = if self.recovery.random_bool(0.5) { Op::ZoneReset } else { Op::ZoneFinish };
                self.guess_wp[z.idx()] = if op == Op::ZoneReset { 0 } else { self.geo.zone_capacity(z) };
                let token = self.stamp + 1;
                self.submit(sim, Bio::zone_op(op, self.geo.zone_start(z), 0), token);
                if op == Op::ZoneReset { "reset" } else { "finish" }
            }
            _ => "nothing",
        };
        *self.report.after_write_errors.entry(what.to_string()).or_insert(0) += 1;
    }

    fn resync_guess(&mut self, sim: &Sim, z: ZoneNo) {
        if let Ok(zone) = sim.report_zone(sim.stack().top(), z) {
            self.guess_wp[z.idx()] = zone.wp_offset().unwrap_or(zone.capacity).min(zone.capacity);
        }
    }

    /// The power fails now, with the BIOs in flight (they never complete); then
    /// every write pointer is read again.
    fn power_loss(&mut self, sim: &mut Sim) {
        self.draining = false;
        // Every BIO in flight dies with the host (marked first: a violation the
        // power loss raises shows them so).
        if let Some(log) = &mut self.log {
            log.iter_mut().filter(|o| o.result.is_none()).for_each(|o| o.lost = true);
        }
        let lost = sim.power_loss();
        assert_eq!(lost.len(), self.inflight as usize, "seed {}: BIOs in flight at the power loss", sim.seed());
        self.inflight = 0;
        self.writing.clear();
        self.report.power_losses += 1;
        if !lost.is_empty() {
            self.report.power_losses_in_flight += 1;
        }
        for z in self.geo.nr_conv()..self.geo.nr_zones() {
            self.resync_guess(sim, ZoneNo(z));
        }
    }

    fn fill(&mut self, sim: &mut Sim) {
        if self.draining && self.inflight == 0 {
            self.power_loss(sim);
        }
        while !self.draining && self.ops_left > 0 && self.inflight < self.max_inflight {
            if let Some((ppm, rng)) = &mut self.power_loss {
                if rng.random_range(0..1_000_000) < *ppm {
                    if self.inflight == 0 || self.cuts_in_flight && self.cut_at_once.random_bool(0.5) {
                        self.power_loss(sim);
                        continue;
                    }
                    self.draining = true;
                    return;
                }
            }
            self.one_op(sim);
        }
    }
}

impl Workload for RandomOps {
    fn start(&mut self, sim: &mut Sim) {
        self.fill(sim);
    }

    fn on_complete(&mut self, sim: &mut Sim, c: SimCompletion) {
        self.inflight -= 1;
        self.writing.retain(|&(t, ..)| t != c.token);
        if let Some(log) = &mut self.log {
            if let Some(op) = log.iter_mut().rev().find(|o| o.token == c.token && o.result.is_none()) {
                op.result = Some(c.result);
            }
        }
        let outcome = match c.result {
            Ok(_) => "ok".to_string(),
            Err(s) => format!("{s:?}"),
        };
        *self.report.outcomes.entry(outcome).or_insert(0) += 1;
        if c.token & INVALID_FLAG != 0 {
            let expected = c.result == Err(Status::Invalid) || c.result == Err(Status::NotSupported);
            assert!(expected, "seed {}: invalid BIO {c:?} did not fail with EINVAL", sim.seed());
        }
        if self.geo.is_zoned() && c.result.is_err() && c.op.is_zone_write() && c.sector.0 < self.geo.nr_sectors() {
            let z = self.geo.zone_no(c.sector);
            if !self.geo.zone_is_conv(z) {
                self.after_write_error(sim, z);
            }
        }
        self.fill(sim);
    }

    fn is_done(&self) -> bool {
        self.ops_left == 0 && self.inflight == 0
    }
}

/// Runs `ops` random operations on the configuration drawn from `seed`, with the
/// checker on. Panics, naming the seed, on any violation.
pub fn run_random(seed: u64, ops: u64) -> RandomReport {
    let cfg = random_config(seed);
    let mut sim = Sim::new(&cfg).unwrap_or_else(|e| panic!("seed {seed}: bad random config: {e}"));
    let geo = sim.device_geometry();
    let mut w = RandomOps::new(&geo, cfg.engine.wp_recovery == WpRecovery::Kernel, ops, seed);
    sim.run(&mut w);
    let mut report = w.report().clone();
    report.checks = sim.stats().checks;
    report.faults = sim.stats().faults;
    report.plugged = sim.engine_stats().plugged;
    report
}

/// Draws a disk's engine settings. Zone write locking is for zoned devices only
/// (mq-deadline locks zones of zoned devices).
fn random_engine(rng: &mut impl Rng, queue_depth: u32, zoned: bool) -> EngineConfig {
    // Every policy that keeps zone writes in order: a new policy is simulated as soon
    // as it is in `POLICIES`.
    let policies = IssuePolicy::compared_on(zoned);
    let n = policies.len();
    EngineConfig {
        policy: policies[rng.random_range(0..n)],
        wp_recovery: if rng.random_bool(0.7) { WpRecovery::Report } else { WpRecovery::Kernel },
        queue_depth,
        max_bios: 1 << 16,
        zwl_sched_tags: if rng.random_bool(0.5) { 0 } else { rng.random_range(1..=8) },
        batch_max_bypass: rng.random_range(0..=8),
        batch_anticipate_ns: if rng.random_bool(0.5) { 0 } else { rng.random_range(1_000..=50_000) },
        ..EngineConfig::default()
    }
}

/// The zone layout of a random device: block size, zone size and capacity (the
/// disks of a random stack share it: zoned members of a stacked device must agree
/// on it).
#[derive(Clone, Copy, Debug)]
struct Shape {
    lbs_bytes: u32,
    zoned: bool,
    zone_size_bytes: u64,
    zone_capacity_bytes: u64,
}
