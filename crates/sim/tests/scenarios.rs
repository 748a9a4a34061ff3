//! Named scenarios on the simulator with the checker on: zone write plugging and
//! zone append emulation under a latency model that reorders completions, checked
//! by data. The engine's own scenarios, driven by hand, are beside the engine
//! (`zblk-core`'s `engine/scenarios.rs`).

use zblk_core::params::{DeviceParams, LatencyDist};
use zblk_core::{Bio, Sector};
use zblk_sim::{Sim, SimConfig};

#[test]
fn concurrent_writers_with_random_completion_order_on_the_simulator() {
    let mut p = DeviceParams::default();
    p.apply("size=64,zone_size=4,memory_backed=1,completion_dist=uniform,hw_queue_depth=64").unwrap();
    let cfg = SimConfig { check: true, ..SimConfig::new(p, 42) };
    let mut sim = Sim::new(&cfg).unwrap();
    // Eight zones, 64 writes each, all submitted at once.
    for z in 0..8u64 {
        for i in 0..64u64 {
            sim.submit(Bio::write(Sector(z * 8192 + 8 * i), 8, 0), z * 64 + i, z * 64 + i + 1);
        }
    }
    sim.run_until_idle();
    let done = sim.take_completions();
    assert_eq!(done.len(), 512);
    assert!(done.iter().all(|c| c.result.is_ok()));
    // The checker verified, after every step, that each zone had at most one write
    // in flight and that every write's data is where its completion says.
    assert!(sim.stats().checks > 512 * 8);
}

#[test]
fn append_emulation_checked_by_data_on_the_simulator() {
    let mut p = DeviceParams::default();
    p.apply("size=32,zone_size=4,memory_backed=1,zone_append_max_sectors=0,completion_dist=exp").unwrap();
    let cfg = SimConfig { check: true, ..SimConfig::new(p, 7) };
    let mut sim = Sim::new(&cfg).unwrap();
    for i in 0..200u64 {
        let zone = i % 4;
        sim.submit(Bio::append(Sector(zone * 8192), 1 + (i % 5) as u32 * 8, 0), i, i + 1);
    }
    sim.run_until_idle();
    let done = sim.take_completions();
    assert!(done.iter().all(|c| c.result.is_ok()));
    // The checker read each append's data back at the sector it reported.
    assert_eq!(sim.engine_stats().emulated_appends, 200);
}

#[test]
fn latency_model_reorders_completions_across_zones() {
    let mut p = DeviceParams::default();
    p.apply("size=64,zone_size=4").unwrap();
    p.completion_dist = LatencyDist::Uniform;
    let mut sim = Sim::new(&SimConfig::new(p, 3)).unwrap();
    for z in 0..16u64 {
        sim.submit(Bio::write(Sector(z * 8192), 8, 0), z, 0);
    }
    sim.run_until_idle();
    let order: Vec<u64> = sim.take_completions().iter().map(|c| c.token).collect();
    assert_ne!(order, (0..16).collect::<Vec<_>>(), "completions came back in submission order");
}
