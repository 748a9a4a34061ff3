//! Seeded random simulation: a random device, engine settings and fault rates drawn
//! from the seed, and a workload of random operations (writes at and off the write
//! pointer, splits across zones, appends, reads past write pointers, resets racing
//! with plugged writes, finishes, opens, closes, flushes, write zeroes, invalid
//! BIOs, zone reports), with the checker after every step.
//!
//! `run_random(seed, ops)` replays exactly from its seed; a failure names the seed.

use super::driver::{Sim, SimCompletion, SimConfig, Workload};
use super::faults::FaultConfig;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::collections::BTreeMap;
use zblk_core::bio::{Bio, BioFlags, Op, Status};
use zblk_core::engine::{EngineConfig, IssuePolicy, WpRecovery};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::params::{DeviceParams, LatencyDist};
use zblk_core::units::{Sector, ZoneNo};

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
    let max_open = if rng.random_bool(0.5) { rng.random_range(2..=5) } else { 0 };
    let max_active = if rng.random_bool(0.5) { max_open.max(2) + rng.random_range(0..=3) } else { 0 };
    let lbs_sectors = lbs_bytes / 512;
    let max_sectors = [1, 2, 4, 8, 32][rng.random_range(0..5)] * lbs_sectors;
    let max_append_sectors = if rng.random_bool(0.5) { 0 } else { max_sectors };
    // WRITE_ZEROES: none, smaller or larger than max_sectors; unmapping or not.
    let write_zeroes_max_bytes = [0, 1, 4, 64][rng.random_range(0..4)] * u64::from(lbs_bytes);
    let write_zeroes_unmap_max_hw_bytes = if rng.random_bool(0.5) { write_zeroes_max_bytes } else { 0 };
    let geometry = GeometryParams {
        lbs_bytes,
        capacity_bytes,
        zoned: true,
        zone_size_bytes,
        zone_capacity_bytes,
        nr_conv,
        max_open,
        max_active,
        max_append_sectors,
        max_sectors,
        write_zeroes_max_bytes,
        write_zeroes_unmap_max_hw_bytes,
    };
    let device = DeviceParams {
        geometry,
        memory_backed: true,
        rotational: false,
        hw_queue_depth: rng.random_range(1..=32),
        completion_nsec: rng.random_range(1_000..=20_000),
        completion_dist: [LatencyDist::Uniform, LatencyDist::Exp, LatencyDist::Fixed][rng.random_range(0..3)],
    };
    let policies = [IssuePolicy::Zwp, IssuePolicy::Qd1, IssuePolicy::Batch, IssuePolicy::Zwl];
    let engine = EngineConfig {
        policy: policies[rng.random_range(0..policies.len())],
        wp_recovery: if rng.random_bool(0.7) { WpRecovery::Report } else { WpRecovery::Kernel },
        queue_depth: device.hw_queue_depth,
        max_bios: 1 << 16,
        zwl_sched_tags: if rng.random_bool(0.5) { 0 } else { rng.random_range(1..=8) },
        batch_max_bypass: rng.random_range(0..=8),
        batch_anticipate_ns: if rng.random_bool(0.5) { 0 } else { rng.random_range(1_000..=50_000) },
    };
    let faults = if rng.random_bool(0.5) {
        FaultConfig { write_error_ppm: 4_000, zone_fail_ppm: 200, read_error_ppm: 2_000 }
    } else {
        FaultConfig::default()
    };
    SimConfig { device, engine, seed, check: true, faults, host_latency_ns: 0 }
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
    report: RandomReport,
}

const INVALID_FLAG: u64 = 1 << 62;

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
            report: RandomReport { seed, ..RandomReport::default() },
        }
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
        sim.submit(bio, token, self.stamp);
    }

    fn one_op(&mut self, sim: &mut Sim) {
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
        self.submit(sim, bio, token);
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

    fn resync_guess(&mut self, sim: &Sim, z: ZoneNo) {
        if let Ok(zone) = sim.report_zone(sim.stack().top(), z) {
            self.guess_wp[z.idx()] = zone.wp_offset().unwrap_or(zone.capacity).min(zone.capacity);
        }
    }

    fn fill(&mut self, sim: &mut Sim) {
        while self.ops_left > 0 && self.inflight < self.max_inflight {
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
        let outcome = match c.result {
            Ok(_) => "ok".to_string(),
            Err(s) => format!("{s:?}"),
        };
        *self.report.outcomes.entry(outcome).or_insert(0) += 1;
        if c.token & INVALID_FLAG != 0 {
            let expected = matches!(c.result, Err(Status::Invalid) | Err(Status::NotSupported));
            assert!(expected, "seed {}: invalid BIO {c:?} did not fail with EINVAL", sim.seed());
        }
        if c.result.is_err() && c.op.is_zone_write() && c.sector.0 < self.geo.nr_sectors() {
            // As a file system after a write error: look at the zone.
            let z = self.geo.zone_no(c.sector);
            if !self.geo.zone_is_conv(z) {
                if self.kernel_recovery {
                    sim.report_zone_to_engine(self.geo.zone_start(z));
                }
                self.resync_guess(sim, z);
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
