//! Scenarios on the simulator (checker and oracles on): the devices the tests build
//! and the helpers that submit to them. The hand-driven engine harness is the
//! core's, `zblk_core::testing` (the `testing` feature), shared with the core's own
//! scenario tests.

#![allow(dead_code)]

use zblk_core::engine::{EngineConfig, IssuePolicy, WpRecovery};
use zblk_core::params::DeviceParams;
use zblk_core::{Bio, Sector, Status, ZoneNo};
use zblk_sim::driver::{Sim, SimCompletion, SimConfig};

/// A fresh zoned memory-backed null device (1 MiB zones, 1 conventional, no
/// native append), checker and oracles on, no random faults.
pub fn sim(policy: IssuePolicy, recovery: WpRecovery) -> Sim {
    let mut device = DeviceParams::default();
    device.apply("size=16,zone_size=1,zone_nr_conv=1,zone_append_max_sectors=0,memory_backed=1").expect("params");
    let cfg = SimConfig {
        engine: EngineConfig { policy, wp_recovery: recovery, ..EngineConfig::default() },
        check: true,
        ..SimConfig::new(device, 1)
    };
    Sim::new(&cfg).expect("device")
}

/// A memory-backed null device of 1 MiB zones (one conventional, no native append)
/// whose completion latencies are uniform, so that completions reorder; it keeps a
/// zone's writes in order, and its engine pipelines `depth` writes per zone (0: the
/// queue depth). Checker and oracles on, no random faults.
pub fn pipelined_sim(depth: u32, seed: u64) -> Sim {
    let mut device = DeviceParams::default();
    device
        .apply("size=16,zone_size=1,zone_nr_conv=1,zone_append_max_sectors=0,memory_backed=1,completion_dist=uniform")
        .expect("params");
    let cfg = SimConfig {
        engine: EngineConfig { policy: IssuePolicy::Pipeline, pipeline_depth: depth, ..EngineConfig::default() },
        check: true,
        keeps_zone_order: true,
        ..SimConfig::new(device, seed)
    };
    Sim::new(&cfg).expect("a disk that keeps zone order takes pipelining")
}

pub fn zone_start(sim: &Sim, z: u32) -> Sector {
    sim.device_geometry().zone_start(ZoneNo(z))
}

/// Submits `bios` at once (tokens 0, 1, ...) and runs until idle.
pub fn run(sim: &mut Sim, bios: &[Bio]) -> Vec<SimCompletion> {
    for (i, b) in bios.iter().enumerate() {
        sim.submit(*b, i as u64, 1000 + i as u64);
    }
    sim.run_until_idle();
    let mut c = sim.take_completions();
    c.sort_by_key(|c| c.token);
    c
}

pub fn results(c: &[SimCompletion]) -> Vec<Result<Sector, Status>> {
    c.iter().map(|c| c.result).collect()
}
