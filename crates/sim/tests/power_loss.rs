//! Power loss with BIOs in flight: the host dies with the device, so what it had in
//! flight never completes; what the device does with it depends on the device. A
//! disk that keeps a zone's writes in order executed each write at its arrival,
//! into its volatile write cache: after the power loss it keeps its durable state
//! and a prefix of its cache, so a write in flight may or may not be there. A disk
//! that executes a request when it completes it had not executed a request in
//! flight: it is lost. Either way every write made durable is still there (the
//! checker's durability check), the device model follows the device, and the
//! engine built anew from the zone report writes on at the device's write pointer.

mod common;

use common::{results, run, zone_start};
use zblk_core::bio::{Bio, Op};
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::params::DeviceParams;
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::ZoneCond;
use zblk_sim::driver::{Sim, SimConfig};
use zblk_sim::faults::FaultConfig;
use zblk_workload::pattern::{self, Decoded};

/// A memory-backed null device of 1 MiB zones (one conventional, no native
/// append), every request completing 10 µs after it arrives, under `policy`,
/// keeping zone order or not, with a volatile write cache or not. Checker and
/// oracles on, no random faults.
fn disk(policy: IssuePolicy, keeps_zone_order: bool, write_cache: bool, seed: u64) -> Sim {
    let mut device = DeviceParams::default();
    device
        .apply("size=16,zone_size=1,zone_nr_conv=1,zone_append_max_sectors=0,memory_backed=1,completion_nsec=10000,completion_dist=fixed")
        .expect("params");
    let cfg = SimConfig {
        engine: EngineConfig { policy, ..EngineConfig::default() },
        check: true,
        keeps_zone_order,
        faults: FaultConfig { write_cache, ..FaultConfig::default() },
        ..SimConfig::new(device, seed)
    };
    Sim::new(&cfg).expect("device")
}

fn device_wp(s: &Sim, z: u32) -> (ZoneCond, u64) {
    let zone = s.report_zone(s.stack().top(), ZoneNo(z)).expect("a zone");
    (zone.cond, zone.wp.since(zone.start))
}

/// Sectors `[at, at + n)` read back the pattern of `stamp`.
fn holds(s: &Sim, at: Sector, n: u64, stamp: u64) -> bool {
    let mut sector = [0u8; 512];
    (0..n).all(|k| {
        s.peek(s.stack().top(), at + k, &mut sector);
        pattern::decode(&sector) == Decoded::Data((stamp, k as u32))
    })
}

/// Zone 1 holds A (8 sectors, stamp 1000, flushed: durable) and B (8 sectors,
/// stamp 1002, acknowledged, never flushed); then four writes of 8 sectors
/// (stamps 1010..1014, tokens 10..14) are submitted and issued, and none has
/// completed.
fn durable_then_four_in_flight(s: &mut Sim) {
    let z = zone_start(s, 1);
    assert_eq!(results(&run(s, &[Bio::write(z, 8, 0)])), [Ok(z)]);
    assert_eq!(results(&run(s, &[Bio::flush(0)])), [Ok(Sector::ZERO)]);
    s.submit(Bio::write(z + 8, 8, 0), 2, 1002);
    s.run_until_idle();
    assert_eq!(results(&s.take_completions()), [Ok(z + 8)]);
    for i in 0..4u64 {
        s.submit(Bio::write(z + 16 + 8 * i, 8, 0), 10 + i, 1010 + i);
    }
    // Issued now; their completions are 10 µs away.
    let now = s.now_ns();
    s.run_until(now);
    assert!(s.take_completions().is_empty());
}

#[test]
fn pipelined_writes_in_flight_on_a_disk_with_a_cache_may_vanish_durable_ones_stay() {
    // The worst case: the cache destaged nothing since the FLUSH. B and the four
    // writes in flight (executed into the cache at their arrival) are gone.
    let mut s = disk(IssuePolicy::Pipeline, true, true, 1);
    durable_then_four_in_flight(&mut s);
    let mut lost = s.power_loss_losing_the_caches();
    lost.sort_unstable();
    assert_eq!(lost, [10, 11, 12, 13], "the writes in flight never complete");
    assert_eq!(s.stack().bios_in_flight(), 0);
    assert_eq!((s.stats().cuts_in_flight, s.stats().cuts_pipelined), (1, 1));
    assert_eq!(device_wp(&s, 1), (ZoneCond::Closed, 8), "A stays, B and the writes in flight are gone");
    let z = zone_start(&s, 1);
    assert!(holds(&s, z, 8, 1000));
    // Nothing comes back later for the writes that died with the host.
    s.run_until_idle();
    assert!(s.take_completions().is_empty());
    // The engine was built from the zone report: writes go on at its write pointer.
    let c = run(&mut s, &[Bio::write(z + 8, 8, 0), Bio::write(z + 16, 8, 0)]);
    assert_eq!(results(&c), [Ok(z + 8), Ok(z + 16)]);
    assert_eq!(device_wp(&s, 1), (ZoneCond::ImpOpen, 24));
}

#[test]
fn pipelined_writes_in_flight_survive_as_a_prefix_of_what_arrived() {
    // The cache destaged a part drawn from the seed: the zone keeps A and a prefix
    // of B and the four writes in flight, in arrival order, never a hole.
    let mut seen = std::collections::BTreeSet::new();
    for seed in 1..=24 {
        let mut s = disk(IssuePolicy::Pipeline, true, true, seed);
        durable_then_four_in_flight(&mut s);
        assert_eq!(s.power_loss().len(), 4, "seed {seed}");
        let (_, wp) = device_wp(&s, 1);
        assert!(wp % 8 == 0 && (8..=48).contains(&wp), "seed {seed}: write pointer {wp}");
        let z = zone_start(&s, 1);
        let stamps = [1000, 1002, 1010, 1011, 1012, 1013];
        for (i, stamp) in stamps.iter().enumerate().take(wp as usize / 8) {
            assert!(holds(&s, z + 8 * i as u64, 8, *stamp), "seed {seed}: write {stamp} below the write pointer");
        }
        seen.insert(wp);
        let c = run(&mut s, &[Bio::write(z + wp, 8, 0)]);
        assert_eq!(results(&c), [Ok(z + wp)], "seed {seed}");
    }
    assert!(seen.len() > 2, "the seeds drew too few prefixes: {seen:?}");
}

#[test]
fn writes_in_flight_on_a_disk_without_a_cache_that_keeps_zone_order_are_kept() {
    // Executed at their arrival, on the medium: all four are there, although none
    // was acknowledged.
    let mut s = disk(IssuePolicy::Pipeline, true, false, 1);
    durable_then_four_in_flight(&mut s);
    assert_eq!(s.power_loss().len(), 4);
    assert_eq!(device_wp(&s, 1), (ZoneCond::Closed, 48));
    let z = zone_start(&s, 1);
    assert!(holds(&s, z + 16, 8, 1010) && holds(&s, z + 40, 8, 1013));
    assert_eq!(results(&run(&mut s, &[Bio::write(z + 48, 8, 0)])), [Ok(z + 48)]);
}

#[test]
fn a_write_in_flight_on_a_disk_that_executes_at_completion_is_lost() {
    // Per-zone plugging, one write of a zone on the device: the disk had not
    // executed it (it executes a request when it completes it). With a cache or
    // without, it is not there; the zone's write pointer is where the device says.
    for write_cache in [false, true] {
        let mut s = disk(IssuePolicy::Zwp, false, write_cache, 1);
        let (z, z2) = (zone_start(&s, 1), zone_start(&s, 2));
        assert_eq!(results(&run(&mut s, &[Bio::write(z, 8, 0), Bio::write(z2, 8, 0)])), [Ok(z), Ok(z2)]);
        assert_eq!(results(&run(&mut s, &[Bio::flush(0)])), [Ok(Sector::ZERO)]);
        s.submit(Bio::write(z + 8, 8, 0), 7, 1007);
        s.submit(Bio::zone_op(Op::ZoneReset, z2, 0), 8, 1008);
        let now = s.now_ns();
        s.run_until(now);
        let mut lost = s.power_loss();
        lost.sort_unstable();
        assert_eq!(lost, [7, 8], "cache {write_cache}");
        assert_eq!(s.stats().cuts_pipelined, 0);
        assert_eq!(device_wp(&s, 1), (ZoneCond::Closed, 8), "cache {write_cache}: the write never executed");
        assert_eq!(device_wp(&s, 2), (ZoneCond::Closed, 8), "cache {write_cache}: nor the reset");
        assert!(holds(&s, z, 8, 1000) && holds(&s, z2, 8, 1001), "cache {write_cache}");
        s.run_until_idle();
        assert!(s.take_completions().is_empty(), "cache {write_cache}");
        let c = run(&mut s, &[Bio::write(z + 8, 8, 0), Bio::write(z2 + 8, 8, 0)]);
        assert_eq!(results(&c), [Ok(z + 8), Ok(z2 + 8)], "cache {write_cache}");
    }
}
