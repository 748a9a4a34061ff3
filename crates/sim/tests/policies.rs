//! Named scenarios for the issue policies on the simulator with the checker on:
//! legacy zone write locking under a latency model, and switching
//! `zoned_qd1_writes` while a workload runs. The policies' scenarios driven by hand
//! are beside them (`zblk-core`'s `engine/policy/scenarios.rs`).

use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::params::DeviceParams;
use zblk_core::{Bio, Op, Sector, ZoneNo};
use zblk_sim::{Sim, SimCompletion, SimConfig, Workload};

/// Writers on several zones, each keeping a few writes in flight at its zone's next
/// offset, flipping `zoned_qd1_writes` every `flip_every` completions.
struct Flipper {
    zones: u64,
    next: Vec<u64>,
    inflight: u32,
    per_zone_qd: u32,
    budget: u64,
    completed: u64,
    flips: u64,
    flip_every: u64,
    stamp: u64,
}

impl Flipper {
    fn fill(&mut self, sim: &mut Sim) {
        while self.inflight < self.per_zone_qd * self.zones as u32 && self.budget > 0 {
            let z = self.stamp % self.zones;
            let bio = Bio::write(Sector((1 + z) * 8192 + self.next[z as usize]), 8, 0);
            self.next[z as usize] += 8;
            self.stamp += 1;
            self.budget -= 1;
            self.inflight += 1;
            sim.submit(bio, self.stamp, self.stamp);
        }
    }
}

impl Workload for Flipper {
    fn start(&mut self, sim: &mut Sim) {
        self.fill(sim);
    }

    fn on_complete(&mut self, sim: &mut Sim, c: SimCompletion) {
        assert_eq!(c.result.map(|_| ()), Ok(()), "completion {c:?}");
        self.inflight -= 1;
        self.completed += 1;
        if self.completed % self.flip_every == 0 {
            let v = u64::from(sim.engine().zoned_qd1_writes() == 0);
            sim.engine_mut().set_zoned_qd1_writes(v).unwrap();
            self.flips += 1;
        }
        self.fill(sim);
    }

    fn is_done(&self) -> bool {
        self.budget == 0 && self.inflight == 0
    }
}

#[test]
fn switching_zoned_qd1_writes_during_a_workload_loses_and_reorders_nothing() {
    for seed in 1..=5u64 {
        let mut p = DeviceParams::default();
        p.apply("size=64,zone_size=4,memory_backed=1,completion_dist=uniform,hw_queue_depth=32").unwrap();
        let cfg = SimConfig { check: true, ..SimConfig::new(p, seed) };
        let mut sim = Sim::new(&cfg).unwrap();
        let zones = 6;
        let mut w = Flipper {
            zones,
            next: vec![0; zones as usize],
            inflight: 0,
            per_zone_qd: 4,
            budget: 3000,
            completed: 0,
            flips: 0,
            flip_every: 97,
            stamp: 0,
        };
        sim.run(&mut w);
        assert_eq!(w.completed, 3000, "seed {seed}");
        assert!(w.flips >= 30, "seed {seed}: only {} switches", w.flips);
        // Every write landed in order: each zone's write pointer is what was written,
        // and the checker verified data and ordering after every step.
        for z in 0..zones {
            let zone = sim.device().zones().unwrap().zone(ZoneNo(1 + z as u32));
            assert_eq!(zone.wp.since(zone.start), w.next[z as usize], "seed {seed} zone {}", 1 + z);
        }
        assert!(sim.stats().checks > 3000);
    }
}

#[test]
fn zone_write_locking_keeps_one_write_per_zone_on_the_simulator() {
    let mut p = DeviceParams::default();
    p.apply("size=64,zone_size=4,memory_backed=1,completion_dist=exp,zone_append_max_sectors=64").unwrap();
    let engine = EngineConfig { policy: IssuePolicy::Zwl, zwl_sched_tags: 8, ..Default::default() };
    let cfg = SimConfig { check: true, engine, ..SimConfig::new(p, 11) };
    let mut sim = Sim::new(&cfg).unwrap();
    for z in 1..5u64 {
        for i in 0..32u64 {
            sim.submit(Bio::write(Sector(z * 8192 + 8 * i), 8, 0), z * 100 + i, z * 100 + i + 1);
        }
    }
    sim.submit(Bio::zone_op(Op::ZoneFinish, Sector(5 * 8192), 0), 999, 0);
    sim.run_until_idle();
    let done = sim.take_completions();
    assert_eq!(done.len(), 129);
    assert!(done.iter().all(|c| c.result.is_ok()), "{done:?}");
}

#[test]
fn pipelining_is_refused_on_a_simulated_disk() {
    // A simulated disk executes in its model's order: it may reorder a zone's writes.
    let mut cfg = SimConfig::new(DeviceParams::default(), 1);
    cfg.engine = EngineConfig { policy: IssuePolicy::Pipeline, ..EngineConfig::default() };
    let Err(e) = Sim::new(&cfg) else { panic!("pipelining ran on a simulated disk") };
    assert_eq!(e.param, "policy");
    assert!(e.message.contains("keeps a zone's writes"), "{}", e.message);
}
