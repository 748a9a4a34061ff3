//! Zone write pipelining on a simulated disk that keeps a zone's writes in order
//! (`SimConfig::keeps_zone_order`): the disk executes each request when it arrives
//! and completes it when its timing model says, so a zone's writes complete out of
//! order while its write pointer stays right, and the engine's rules (acknowledge in
//! zone order; a failed write fails the writes after it; the write pointer goes back
//! and is read again) meet completions that come early. The checker and both halves
//! of the reference model are on. The planted bugs these scenarios catch are in
//! `tests/mutations.rs`.

mod common;

use common::{pipelined_sim as ordered, results, run, zone_start};
use zblk_core::bio::{Bio, Status};
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::params::DeviceParams;
use zblk_core::units::{Sector, ZoneNo};
use zblk_sim::driver::{Sim, SimConfig};
use zblk_sim::faults::Fault;

fn device_wp(s: &Sim, z: u32) -> u64 {
    let zone = s.report_zone(s.stack().top(), ZoneNo(z)).expect("a zone");
    zone.wp.since(zone.start)
}

#[test]
fn completions_out_of_order_are_acknowledged_in_zone_order() {
    for depth in [0, 4] {
        let mut s = ordered(depth, 7);
        let z = zone_start(&s, 1);
        for i in 0..32u64 {
            s.submit(Bio::write(z + 8 * i, 8, 0), i, 1000 + i);
        }
        s.run_until_idle();
        let done = s.take_completions();
        // Acknowledged in the order they were submitted, each where it was sent.
        let tokens: Vec<u64> = done.iter().map(|c| c.token).collect();
        assert_eq!(tokens, (0..32).collect::<Vec<_>>(), "depth {depth}");
        assert!(done.iter().all(|c| c.result == Ok(z + 8 * c.token)), "depth {depth}: {done:?}");
        assert_eq!(device_wp(&s, 1), 256);
        // While the device completed some of them before writes ahead of them.
        assert!(s.stats().pipe_early > 0, "depth {depth}: no completion came early");
    }
}

#[test]
fn a_lost_completion_fails_the_writes_after_it_and_the_write_pointer_is_read_again() {
    let mut s = ordered(0, 3);
    let z = zone_start(&s, 1);
    // The first write executes, but its completion is lost: the driver's timeout
    // fails it. The three after it, already executed too, fail with it.
    s.force_fault(Fault::Timeout(true));
    let bios: Vec<Bio> = (0..4).map(|i| Bio::write(z + 8 * i, 8, 0)).collect();
    let c = run(&mut s, &bios);
    assert_eq!(results(&c), [Err(Status::IoErr), Err(Status::Aborted), Err(Status::Aborted), Err(Status::Aborted)]);
    // The device holds all four; the engine reads its write pointer again.
    assert_eq!(device_wp(&s, 1), 32);
    assert_eq!(results(&run(&mut s, &[Bio::write(z + 32, 8, 0)])), [Ok(z + 32)]);
}

#[test]
fn a_partial_write_fails_the_writes_after_it_on_the_device_as_null_blk_would() {
    let mut s = ordered(0, 5);
    let z = zone_start(&s, 2);
    // 8 of the first write's 16 sectors land, then EIO: the two writes after it
    // arrive at a write pointer they no longer start at, and the device refuses them
    // as unaligned (null_blk's answer, EIO), and they end with it.
    s.force_fault(Fault::PartialWrite(8));
    let c = run(&mut s, &[Bio::write(z, 16, 0), Bio::write(z + 16, 16, 0), Bio::write(z + 32, 16, 0)]);
    assert_eq!(results(&c), [Err(Status::IoErr), Err(Status::Unaligned), Err(Status::Unaligned)]);
    assert!(results(&c).iter().all(|r| r.is_err_and(|s| s.errno() == 5)));
    assert_eq!(device_wp(&s, 2), 8);
    let c = run(&mut s, &[Bio::write(z + 8, 8, 0), Bio::write(z + 16, 8, 0)]);
    assert_eq!(results(&c), [Ok(z + 8), Ok(Sector(z.0 + 16))]);
}

#[test]
fn pipelining_needs_a_disk_that_keeps_zone_order() {
    let mut device = DeviceParams::default();
    device.apply("size=16,zone_size=1,memory_backed=1").expect("params");
    let engine = EngineConfig { policy: IssuePolicy::Pipeline, ..EngineConfig::default() };
    let cfg = SimConfig { engine, ..SimConfig::new(device, 1) };
    let Err(e) = Sim::new(&cfg) else { panic!("pipelining ran on a disk that may reorder") };
    assert!(e.message.contains("keeps a zone's writes"), "{}", e.message);
    assert!(Sim::new(&SimConfig { keeps_zone_order: true, ..cfg }).is_ok());
}
