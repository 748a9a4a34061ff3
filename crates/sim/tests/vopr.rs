//! `zblk vopr` in CI: 2,000 seeds across the coverage with faults on and zero
//! violations; named scenarios for each fault and the recovery the kernel does; the
//! regressions the new checks found. The mutation check (each planted bug caught
//! within its stated number of seeds) is `tests/mutations.rs`.
//!
//! `ZBLK_VOPR_SEEDS=<n>` changes the number of seeds; a failing seed is replayed by
//! `zblk vopr --seed <seed>` (which also prints its shrunk trace).

mod common;

use common::{results, run, sim, zone_start};
use std::collections::BTreeMap;
use zblk_core::bio::{Bio, BioFlags, Op, Status};
use zblk_core::engine::{EngineConfig, IssuePolicy, WpRecovery};
use zblk_core::mutation::Mutation;
use zblk_core::params::DeviceParams;
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::ZoneCond;
use zblk_sim::driver::{Sim, SimConfig};
use zblk_sim::faults::FaultConfig;
use zblk_sim::faults::{Fault, TIMEOUT_NS};
use zblk_sim::vopr::{self, SeedRun};
use zblk_workload::pattern::{self, Decoded};

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs seeds `first..first + n` on two threads.
fn run_seeds(first: u64, n: u64, ops: u64, mutation: Option<Mutation>) -> Vec<SeedRun> {
    let threads = 2;
    let mut runs: Vec<SeedRun> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    (first + t..first + n)
                        .step_by(threads as usize)
                        .map(|seed| vopr::run_seed(seed, ops, mutation))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("vopr worker")).collect()
    });
    runs.sort_by_key(|r| r.seed);
    runs
}

#[test]
fn vopr_seeds_with_faults_find_no_violation_and_cover_everything() {
    let n = env("ZBLK_VOPR_SEEDS").unwrap_or(2_000);
    let runs = run_seeds(1, n, vopr::DEFAULT_OPS, None);
    let mut coverage: BTreeMap<&str, u64> = BTreeMap::new();
    for r in &runs {
        for c in &r.coverage {
            *coverage.entry(c).or_insert(0) += 1;
        }
    }
    let ops: u64 = runs.iter().map(|r| r.ops).sum();
    let faults: u64 = runs.iter().map(|r| r.faults).sum();
    let failed: Vec<&SeedRun> = runs.iter().filter(|r| r.violation.is_some()).collect();
    println!("vopr: {n} seeds, {ops} operations, {faults} faults injected, {} violations", failed.len());
    println!("coverage (seeds): {coverage:#?}");
    for r in &failed {
        println!(
            "FAIL seed {}: {}\n  replay: zblk vopr --seed {} --ops {}",
            r.seed,
            r.violation.as_deref().unwrap_or(""),
            r.seed,
            vopr::DEFAULT_OPS
        );
    }
    assert!(failed.is_empty(), "{} seeds found violations (first: seed {})", failed.len(), failed[0].seed);
    if n < 2_000 {
        println!("coverage not asserted: only {n} seeds");
        return;
    }
    let must = [
        "policy: zwp",
        "policy: qd1",
        "policy: batch",
        "policy: zwl",
        "policy: pipeline",
        "device keeps zone order",
        "pipelining: a completion held for zone order",
        "rotational",
        "non-rotational",
        "zoned_qd1_writes written at run time",
        "append: emulated",
        "append: native",
        "op: ZONE_APPEND",
        "op: WRITE_ZEROES",
        "op: WRITE_ZEROES NOUNMAP",
        "write zeroes: device unmaps",
        "op: ZONE_OPEN",
        "op: ZONE_CLOSE",
        "op: ZONE_FINISH",
        "op: ZONE_RESET",
        "op: ZONE_RESET_ALL",
        "op: FLUSH",
        "op: DISCARD",
        "conventional zones",
        "open/active limits",
        "stack: striped",
        "stack: linear",
        "regular disk",
        "recovery: kernel",
        "recovery: report",
        "fault: write error",
        "fault: partial write",
        "fault: read error",
        "fault: zone READONLY",
        "fault: zone OFFLINE",
        "fault: lost completion",
        "fault: timed out before executing",
        "fault: power loss",
        "power loss with BIOs in flight",
        "power loss with pipelined writes in flight",
        "volatile write cache",
        "after a write error (kernel recovery): report",
        "after a write error (kernel recovery): reset",
        "after a write error (kernel recovery): finish",
        "after a write error (kernel recovery): nothing",
        "after a write error (report recovery): reset",
        "after a write error (report recovery): nothing",
    ];
    for m in must {
        assert!(coverage.get(m).is_some_and(|&k| k > 0), "no seed covered '{m}'");
    }
    // Of the first 2,000 seeds, 1,268 cut BIOs in flight at a power loss and 97
    // two or more pipelined writes of a zone: the cuts must stay that common.
    for (m, least) in
        [("power loss with BIOs in flight", n / 4), ("power loss with pipelined writes in flight", n / 50)]
    {
        let k = coverage.get(m).copied().unwrap_or(0);
        assert!(k >= least, "only {k} seeds of {n} covered '{m}' (at least {least})");
    }
}

// ---- Scenarios: each fault and the recovery the kernel does ----

#[test]
fn failed_write_aborts_the_queued_writes_then_the_write_pointer_is_reread() {
    for policy in [IssuePolicy::Zwp, IssuePolicy::Qd1] {
        let mut s = sim(policy, WpRecovery::Report);
        let z = zone_start(&s, 1);
        // The first write fails after 8 of its 16 sectors: the two queued behind it
        // can no longer be aligned and are aborted, never sent.
        s.force_fault(Fault::PartialWrite(8));
        let c = run(&mut s, &[Bio::write(z, 16, 0), Bio::write(z + 16, 16, 0), Bio::write(z + 32, 16, 0)]);
        assert_eq!(results(&c), [Err(Status::IoErr), Err(Status::Aborted), Err(Status::Aborted)], "{policy:?}");
        // The engine re-read the write pointer (8): a write there succeeds.
        let c = run(&mut s, &[Bio::write(z + 8, 8, 0), Bio::write(z + 16, 8, 0)]);
        assert_eq!(results(&c), [Ok(z + 8), Ok(z + 16)], "{policy:?}");
    }
}

#[test]
fn kernel_recovery_refuses_writes_until_the_zone_is_reported() {
    let mut s = sim(IssuePolicy::Zwp, WpRecovery::Kernel);
    let z = zone_start(&s, 2);
    s.force_fault(Fault::PartialWrite(0));
    let c = run(&mut s, &[Bio::write(z, 8, 0)]);
    assert_eq!(results(&c), [Err(Status::IoErr)]);
    // As Linux: BLK_ZONE_WPLUG_NEED_WP_UPDATE until the user reports the zone.
    let c = run(&mut s, &[Bio::write(z, 8, 0)]);
    assert_eq!(results(&c), [Err(Status::NeedWpUpdate)]);
    s.report_zone_to_engine(z);
    let c = run(&mut s, &[Bio::write(z, 8, 0)]);
    assert_eq!(results(&c), [Ok(z)]);
}

#[test]
fn a_reset_or_finish_after_a_write_error_sets_the_write_pointer_without_a_report() {
    // The kernel's recovery: after a write error, writes fail until the zone is
    // reported, or until a RESET or FINISH sets its write pointer again (the
    // kernel's disk_zone_wplug_set_wp_offset()); the host model then knows it too,
    // and a write at the new write pointer must succeed.
    for op in [Op::ZoneReset, Op::ZoneFinish] {
        let mut s = sim(IssuePolicy::Zwp, WpRecovery::Kernel);
        let (z, cap) = (zone_start(&s, 2), s.device_geometry().zone_capacity(ZoneNo(2)));
        s.force_fault(Fault::PartialWrite(8));
        let c = run(&mut s, &[Bio::write(z, 16, 0)]);
        assert_eq!(results(&c), [Err(Status::IoErr)]);
        let c = run(&mut s, &[Bio::write(z + 8, 8, 0)]);
        assert_eq!(results(&c), [Err(Status::NeedWpUpdate)], "{op}: no write before the zone is known again");
        let c = run(&mut s, &[Bio::zone_op(op, z, 0)]);
        assert_eq!(results(&c), [Ok(z)], "{op}");
        let c = run(&mut s, &[Bio::write(z, 8, 0)]);
        let want = if op == Op::ZoneReset { Ok(z) } else { Err(Status::ZoneFull) };
        assert_eq!(results(&c), [want], "{op}: the write pointer is {}", if op == Op::ZoneReset { 0 } else { cap });
    }
}

#[test]
fn read_error_fails_that_read_alone() {
    let mut s = sim(IssuePolicy::Zwp, WpRecovery::Report);
    let z = zone_start(&s, 1);
    run(&mut s, &[Bio::write(z, 16, 0)]);
    s.force_fault(Fault::ReadError);
    let c = run(&mut s, &[Bio::read(z, 8, 0)]);
    assert_eq!(results(&c), [Err(Status::IoErr)]);
    let c = run(&mut s, &[Bio::read(z, 16, 0), Bio::write(z + 16, 8, 0)]);
    assert_eq!(results(&c), [Ok(z), Ok(z + 16)]);
}

#[test]
fn offline_zone_fails_its_io_and_leaves_other_zones_alone() {
    let mut s = sim(IssuePolicy::Zwp, WpRecovery::Report);
    let (z1, z2) = (zone_start(&s, 1), zone_start(&s, 2));
    run(&mut s, &[Bio::write(z1, 8, 0), Bio::write(z2, 8, 0)]);
    s.force_fault(Fault::ZoneOffline);
    let c = run(&mut s, &[Bio::write(z1 + 8, 8, 0)]);
    assert_eq!(results(&c), [Err(Status::ZoneOffline)]);
    assert_eq!(s.device().zones().expect("zoned").zone(ZoneNo(1)).cond, ZoneCond::Offline);
    // Writes, reads and resets of the OFFLINE zone fail; the next zone works.
    let c = run(&mut s, &[Bio::read(z1, 8, 0), Bio::zone_op(Op::ZoneReset, z1, 0)]);
    assert!(c.iter().all(|c| c.result.is_err()), "{c:?}");
    let c = run(&mut s, &[Bio::write(z2 + 8, 8, 0), Bio::read(z2, 16, 0)]);
    assert_eq!(results(&c), [Ok(z2 + 8), Ok(z2)]);
    let c = run(&mut s, &[Bio::write(z1 + 8, 8, 0)]);
    assert!(c[0].result.is_err(), "{c:?}");
}

#[test]
fn readonly_zone_refuses_writes_and_keeps_its_data_readable() {
    let mut s = sim(IssuePolicy::Zwp, WpRecovery::Report);
    let z = zone_start(&s, 1);
    run(&mut s, &[Bio::write(z, 8, 0)]);
    s.force_fault(Fault::ZoneReadOnly);
    let c = run(&mut s, &[Bio::write(z + 8, 8, 0)]);
    assert_eq!(results(&c), [Err(Status::ZoneReadOnly)]);
    // The checker compares what the read returns with the write's data.
    let c = run(&mut s, &[Bio::read(z, 8, 0), Bio::write(z + 8, 8, 0)]);
    assert_eq!(c[0].result, Ok(z));
    assert!(c[1].result.is_err(), "{c:?}");
}

#[test]
fn lost_completion_is_timed_out_and_the_write_pointer_reread() {
    // The device executed the write but its completion was lost: the driver's
    // timeout fails it; the engine re-reads the write pointer, which includes it.
    let mut s = sim(IssuePolicy::Zwp, WpRecovery::Report);
    let z = zone_start(&s, 1);
    s.force_fault(Fault::Timeout(true));
    let c = run(&mut s, &[Bio::write(z, 8, 0), Bio::write(z + 8, 8, 0)]);
    assert_eq!(results(&c), [Err(Status::IoErr), Err(Status::Aborted)]);
    assert!(c[0].latency_ns >= TIMEOUT_NS, "failed before the timeout: {c:?}");
    let c = run(&mut s, &[Bio::write(z + 8, 8, 0)]);
    assert_eq!(results(&c), [Ok(z + 8)]);
    // Delayed past the timeout and aborted before it executed: nothing written.
    let z2 = zone_start(&s, 2);
    s.force_fault(Fault::Timeout(false));
    let c = run(&mut s, &[Bio::write(z2, 8, 0)]);
    assert_eq!(results(&c), [Err(Status::IoErr)]);
    let c = run(&mut s, &[Bio::write(z2, 8, 0)]);
    assert_eq!(results(&c), [Ok(z2)]);
}

#[test]
fn power_loss_keeps_every_flushed_write() {
    for policy in [IssuePolicy::Zwp, IssuePolicy::Qd1, IssuePolicy::Zwl] {
        let mut device = DeviceParams::default();
        device.apply("size=16,zone_size=1,zone_nr_conv=1,zone_append_max_sectors=0,memory_backed=1").expect("params");
        let cfg = SimConfig {
            engine: EngineConfig { policy, ..EngineConfig::default() },
            check: true,
            faults: FaultConfig { write_cache: true, ..FaultConfig::default() },
            ..SimConfig::new(device, 1)
        };
        let mut s = Sim::new(&cfg).expect("device");
        let (z1, z2, z3) = (zone_start(&s, 1), zone_start(&s, 2), zone_start(&s, 3));
        // A (stamp 1000) then a FLUSH: durable. C with FUA: durable (and what the
        // cache took before it). Then B, D and a conventional write E, never
        // flushed.
        s.submit(Bio::write(z1, 8, 0), 0, 1000);
        s.run_until_idle();
        s.submit(Bio::flush(0), 1, 1001);
        s.run_until_idle();
        s.submit(Bio::write(z2, 8, 0).with_flags(BioFlags::FUA), 3, 1003);
        s.run_until_idle();
        s.submit(Bio::write(z1 + 8, 8, 0), 2, 1002);
        s.submit(Bio::write(z3, 16, 0), 4, 1004);
        s.submit(Bio::write(Sector::ZERO, 8, 0), 5, 1005);
        s.run_until_idle();
        assert!(s.take_completions().iter().all(|c| c.result.is_ok()), "{policy:?}");
        // The power fails before the cache destaged anything more.
        s.power_loss_losing_the_caches();
        let zones = s.device().zones().expect("zoned");
        let (a, b, c) = (zones.zone(ZoneNo(1)), zones.zone(ZoneNo(2)), zones.zone(ZoneNo(3)));
        assert_eq!((a.cond, a.wp), (ZoneCond::Closed, z1 + 8), "{policy:?}: B is gone, A stays");
        assert_eq!((b.cond, b.wp), (ZoneCond::Closed, z2 + 8), "{policy:?}: C (FUA) stays");
        assert_eq!((c.cond, c.wp), (ZoneCond::Empty, z3), "{policy:?}: D is gone");
        let mut sector = [0u8; 512];
        for (at, stamp) in [(z1, 1000), (z2, 1003)] {
            for k in 0..8 {
                s.peek(s.stack().top(), at + k, &mut sector);
                assert_eq!(
                    pattern::decode(&sector),
                    Decoded::Data((stamp, k as u32)),
                    "{policy:?}: sector {}",
                    at.0 + k
                );
            }
        }
        s.peek(s.stack().top(), Sector::ZERO, &mut sector);
        assert_eq!(pattern::decode(&sector), Decoded::Zeroes, "{policy:?}: E was never flushed");
        // The engine was built anew from the zone report: the writes go on at the
        // write pointers the device came back with.
        let c = run(&mut s, &[Bio::write(z1 + 8, 8, 0), Bio::write(z3, 8, 0), Bio::read(z1, 16, 0)]);
        assert_eq!(results(&c), [Ok(z1 + 8), Ok(z3), Ok(z1)], "{policy:?}");
    }
}

#[test]
fn reset_all_after_a_queued_finish_executes_after_it() {
    // Regression (found by the host oracle): a FINISH waiting in its plug behind a
    // write when a RESET_ALL came went to the device after the RESET_ALL, leaving
    // the zone FULL where the order of submission leaves it EMPTY.
    for policy in [IssuePolicy::Zwp, IssuePolicy::Qd1, IssuePolicy::Batch] {
        let mut s = sim(policy, WpRecovery::Report);
        let z = zone_start(&s, 1);
        let c = run(
            &mut s,
            &[Bio::write(z, 8, 0), Bio::zone_op(Op::ZoneFinish, z, 0), Bio::zone_op(Op::ZoneResetAll, Sector::ZERO, 0)],
        );
        assert_eq!(results(&c), [Ok(z), Ok(z), Ok(Sector::ZERO)], "{policy:?}");
        assert_eq!(s.device().zones().expect("zoned").zone(ZoneNo(1)).cond, ZoneCond::Empty, "{policy:?}");
        let c = run(&mut s, &[Bio::write(z, 8, 0)]);
        assert_eq!(results(&c), [Ok(z)], "{policy:?}");
    }
}

#[test]
fn regression_seeds() {
    // 441: a frozen queue (zoned_qd1_writes written) waited forever for BIOs a
    // zone report had ended. 97, 344, 418: a lost RESET_ALL completion. 491:
    // a striped zone after a partial failure. 1000535...: a striped zone accepts
    // a write off its write pointer that lands at its members' write pointers.
    // 4, 10, 54: an engine built anew from a zone report (after a power loss) under
    // zone write locking kept plugs it never moved. 6, 197: zone operations refused
    // before the device, counted out across a power loss.
    for seed in [
        441, 97, 344, 418, 491, 863, 1671, 1836, 1891, 1000535, 1000547, 1001115, 1002111, 1004027, 1004851, 4, 10, 54,
        6, 197,
    ] {
        let r = vopr::run_seed(seed, vopr::DEFAULT_OPS, None);
        assert_eq!(r.violation, None, "seed {seed}: replay with zblk vopr --seed {seed}");
    }
}
