//! Random stacks ([`random_stack`]): striped and linear devices over zoned disks (or
//! regular ones), each disk with its own engine settings, faults and checker, under
//! the random operations of [`RandomOps`].

use super::{FAULTS, RandomOps, RandomReport, Shape, plug_work, random_device, random_engine};
use crate::driver::{Sim, StackSimConfig, null_model};
use crate::faults::FaultConfig;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use zblk_core::engine::WpRecovery;
use zblk_core::params::DeviceParams;
use zblk_core::stack::{BuiltStack, DevId, LinearTarget, SplitOrder, StackBuilder, StackConfig};
use zblk_core::units::{SECTOR_SHIFT, Sector};

/// A random stack and how to simulate it, drawn from a seed.
#[derive(Debug)]
pub struct RandomStack {
    /// The stack and its disks' parameters.
    pub built: BuiltStack,
    /// Seed, checker on, faults, host latency.
    pub cfg: StackSimConfig,
    /// Some disk's engine leaves write pointer recovery to the user (the kernel's
    /// behaviour): the workload reports zones after write errors.
    pub kernel_recovery: bool,
}

/// Builds the devices of a random stack, drawing every choice from its generator.
struct StackGen {
    seed: u64,
    rng: ChaCha8Rng,
    shape: Shape,
    b: StackBuilder,
    disks: Vec<(DevId, DeviceParams)>,
    kernel_recovery: bool,
}

impl StackGen {
    /// A disk of `nr_zones` zones (or as many zone sizes of a regular disk), the
    /// first `nr_conv` conventional, with its own engine settings.
    fn disk(&mut self, nr_zones: u64, nr_conv: u32) -> DevId {
        let p = random_device(&mut self.rng, self.shape, nr_zones * self.shape.zone_size_bytes, nr_conv);
        let geo = p.validate().unwrap_or_else(|e| panic!("seed {}: random disk {p:?}: {e}", self.seed));
        let engine = random_engine(&mut self.rng, p.hw_queue_depth, self.shape.zoned);
        self.kernel_recovery |= engine.wp_recovery == WpRecovery::Kernel;
        let d = self.b.disk(&geo, engine);
        self.disks.push((d, p));
        d
    }

    /// `n` disks with a shared number of conventional zones (striped zoned
    /// members must agree on it).
    fn disks(&mut self, n: usize, nr_conv: u32) -> Vec<DevId> {
        (0..n)
            .map(|_| {
                let nr_zones = self.rng.random_range(4..=12) + u64::from(nr_conv);
                self.disk(nr_zones, nr_conv)
            })
            .collect()
    }

    /// A power-of-two number of members for a zoned striped device, any for a
    /// regular one.
    fn stripe_width(&mut self) -> usize {
        if self.shape.zoned { 1 << self.rng.random_range(0..=2) } else { self.rng.random_range(1..=4) }
    }

    /// A `max_sectors` for a stacked device over `members`, below what they accept,
    /// one time in three.
    fn max_sectors(&mut self, members: &[DevId]) -> Option<u32> {
        let lbs = self.b.info(members[0]).geometry.lbs_sectors();
        let accepted = members.iter().map(|&m| self.b.info(m).geometry.max_sectors()).min().expect("members");
        let blocks = accepted / lbs;
        self.rng.random_bool(1.0 / 3.0).then(|| self.rng.random_range(1..=blocks) * lbs)
    }

    /// A striped device over `members`, its chunk a power of two from one block to
    /// the largest that divides the members' zone capacity (regular members: up to
    /// two zone sizes, within the smallest member).
    fn striped(&mut self, members: &[DevId]) -> DevId {
        let g = self.b.info(members[0]).geometry.clone();
        let max_chunk = if g.is_zoned() {
            1 << g.zone_cap_sectors().trailing_zeros()
        } else {
            let smallest = members.iter().map(|&m| self.b.info(m).geometry.nr_sectors()).min().expect("members");
            (2 * (self.shape.zone_size_bytes >> SECTOR_SHIFT)).min(1 << smallest.ilog2())
        };
        let lbs = u64::from(g.lbs_sectors());
        let chunk = 1u64 << self.rng.random_range(lbs.trailing_zeros()..=max_chunk.trailing_zeros());
        let max_sectors = self.max_sectors(members);
        let d = self.b.striped(members, chunk, max_sectors);
        d.unwrap_or_else(|e| panic!("seed {}: random striped device refused: {e}", self.seed))
    }

    /// A linear device over a range of each of `members`, in order. Zoned: whole
    /// zones, past the conventional ones but for the first member (conventional
    /// zones come first); regular: whole blocks. At least three zones (or 64
    /// blocks) of each, so that every operation fits.
    fn linear(&mut self, members: &[DevId]) -> DevId {
        let mut targets = Vec::new();
        for (t, &dev) in members.iter().enumerate() {
            let g = self.b.info(dev).geometry.clone();
            let unit = if g.is_zoned() { g.zone_sectors() } else { u64::from(g.lbs_sectors()) };
            let first = if g.is_zoned() && t > 0 { u64::from(g.nr_conv()) * unit } else { 0 };
            let units = (g.nr_sectors() - first) / unit;
            let least = units.min(if g.is_zoned() { 3 } else { 64 });
            let skip = self.rng.random_range(0..=(units - least) / 4);
            let len = self.rng.random_bool(0.5).then(|| self.rng.random_range(least..=units - skip) * unit);
            targets.push(LinearTarget { dev, offset: Sector(first + skip * unit), len_sectors: len });
        }
        let max_sectors = self.max_sectors(members);
        let d = self.b.linear(&targets, max_sectors);
        d.unwrap_or_else(|e| panic!("seed {}: random linear device refused: {e}", self.seed))
    }
}

/// A random stack drawn from `seed`: a striped or a linear device over small
/// memory-backed disks, sometimes over striped or linear devices of their own
/// disks, zoned (three times in four) or regular, with random limits, random
/// `max_sectors` of their own, split remainders at the head (or, one time in
/// five, at the tail), each disk with its own engine settings; faults on three
/// seeds in four, a host latency one in two, the checker on.
pub fn random_stack(seed: u64) -> RandomStack {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x57ac_c0de);
    let zone_size_bytes: u64 = 1 << rng.random_range(15..=17);
    let shape = Shape {
        lbs_bytes: if rng.random_bool(0.5) { 512 } else { 4096 },
        zoned: rng.random_bool(0.75),
        zone_size_bytes,
        zone_capacity_bytes: if rng.random_bool(0.3) { zone_size_bytes / 4 * 3 } else { 0 },
    };
    let mut g = StackGen { seed, rng, shape, b: StackBuilder::new(), disks: Vec::new(), kernel_recovery: false };
    let max_conv = if shape.zoned { 2 } else { 0 };
    let top = match g.rng.random_range(0..20) {
        0..=6 => {
            let (n, c) = (g.stripe_width(), g.rng.random_range(0..=max_conv));
            let members = g.disks(n, c);
            g.striped(&members)
        }
        7..=13 => {
            let n = g.rng.random_range(1..=3);
            let members: Vec<DevId> = (0..n)
                .map(|_| {
                    let c = g.rng.random_range(0..=max_conv);
                    g.disks(1, c)[0]
                })
                .collect();
            g.linear(&members)
        }
        14..=16 => {
            // Striped over linear devices of whole disks without conventional
            // zones (striped zoned members agree on them).
            let n = g.stripe_width();
            let members: Vec<DevId> = (0..n)
                .map(|_| {
                    let k = g.rng.random_range(1..=2);
                    let disks = g.disks(k, 0);
                    g.linear(&disks)
                })
                .collect();
            g.striped(&members)
        }
        _ => {
            // Linear over striped devices of the same width (zoned: the same
            // zone size).
            let (n, k) = (g.stripe_width(), g.rng.random_range(1..=2));
            let members: Vec<DevId> = (0..k)
                .map(|_| {
                    let c = g.rng.random_range(0..=max_conv);
                    let disks = g.disks(n, c);
                    g.striped(&disks)
                })
                .collect();
            g.linear(&members)
        }
    };
    let StackGen { mut rng, b, disks, kernel_recovery, .. } = g;
    let split_order = if rng.random_bool(0.8) { SplitOrder::Head } else { SplitOrder::Tail };
    let stack = b.build(top, StackConfig { split_order, ..StackConfig::default() });
    let faults = if rng.random_bool(0.75) { FAULTS } else { FaultConfig::default() };
    let host_latency_ns = if rng.random_bool(0.5) { 0 } else { rng.random_range(1..=5_000) };
    let cfg =
        StackSimConfig { seed, check: true, trace: false, faults, host_latency_ns, plug_work_ns: plug_work(seed) };
    RandomStack { built: BuiltStack { stack, disks }, cfg, kernel_recovery }
}

/// Runs `ops` random operations on the stack drawn from `seed`, with every disk's
/// checker on and the stack's invariants checked after every step. Panics, naming
/// the seed, on any violation.
pub fn run_random_stack(seed: u64, ops: u64) -> RandomReport {
    let RandomStack { built, cfg, kernel_recovery } = random_stack(seed);
    let mut sim = Sim::with_stack(built, cfg, &mut null_model);
    let geo = sim.device_geometry();
    let mut w = RandomOps::new(&geo, kernel_recovery, ops, seed);
    sim.run(&mut w);
    let mut report = w.report().clone();
    let stats = sim.stats();
    (report.checks, report.faults) = (stats.checks, stats.faults);
    let stack = sim.stack();
    report.plugged = stack.devices().filter_map(|(d, _)| stack.engine(d)).map(|e| e.stats().plugged).sum();
    report
}
