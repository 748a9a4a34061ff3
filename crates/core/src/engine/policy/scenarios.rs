//! Named scenarios for the issue policies beyond per-zone plugging: the single
//! issuer's batching variant, legacy zone write locking, and switching
//! `zoned_qd1_writes` under the engine, each driven by hand on the scripted device
//! of [`crate::testing`].

use crate::bio::{Bio, Status};
use crate::engine::{AttrError, Engine, EngineConfig, IssuePolicy, PolicyTraits, WpRecovery};
use crate::testing::{Harness, geometry};
use crate::units::Sector;

const Z1: u64 = 2048;

fn harness(policy: IssuePolicy, f: impl FnOnce(&mut EngineConfig)) -> Harness {
    let geo = geometry(|_| {});
    let mut cfg = EngineConfig { policy, wp_recovery: WpRecovery::Report, queue_depth: 64, ..Default::default() };
    f(&mut cfg);
    Harness::with_config(&geo, cfg)
}

#[test]
fn zone_write_locking_dispatches_one_write_per_zone_in_sector_order() {
    let mut h = harness(IssuePolicy::Zwl, |_| {});
    // Out of order within zone 2 (as a scheduler receives them), in order in zone 1.
    h.submit(Bio::write(Sector(2 * Z1 + 8), 8, 0));
    // The first write is alone in the scheduler: it goes out at once.
    let first: Vec<u64> = h.history.iter().map(|r| r.sector.0).collect();
    assert_eq!(first, vec![2 * Z1 + 8]);
    h.submit(Bio::write(Sector(2 * Z1), 8, 1));
    h.submit(Bio::write(Sector(Z1), 8, 2));
    h.submit(Bio::write(Sector(Z1 + 8), 8, 3));
    assert_eq!(h.issued.len(), 2, "zone 2 is locked; zone 1's first write goes");
    assert_eq!(h.issued[1].sector, Sector(Z1));
    h.run_all();
    // Without a host write pointer, zone 2's out-of-order write reached the device
    // first and failed there, as it did with mq-deadline.
    assert_eq!(h.result(0), Some(Err(Status::Unaligned)));
    assert_eq!(h.result(1), Some(Ok(Sector(2 * Z1))));
    assert_eq!(h.result(2), Some(Ok(Sector(Z1))));
    assert_eq!(h.result(3), Some(Ok(Sector(Z1 + 8))));
    assert_eq!(h.engine.plug_count(), 0, "no plugs under zone write locking");
}

#[test]
fn zone_write_locking_tags_starve_other_zones() {
    let mut zwl = harness(IssuePolicy::Zwl, |c| c.zwl_sched_tags = 4);
    for i in 0..6u64 {
        zwl.submit(Bio::write(Sector(Z1 + 8 * i), 8, i));
    }
    zwl.submit(Bio::write(Sector(2 * Z1), 8, 10));
    zwl.submit(Bio::read(Sector(3 * Z1), 8, 11));
    // One write to zone 1 on the device, three hold tags waiting for the zone lock:
    // the write to zone 2 and the read wait for a tag behind them.
    assert_eq!(zwl.issued.len(), 1);
    assert_eq!(zwl.issued[0].sector, Sector(Z1));
    // With zone write plugging, writes wait in the plug without holding anything.
    let mut zwp = Harness::zwp();
    for i in 0..6u64 {
        zwp.submit(Bio::write(Sector(Z1 + 8 * i), 8, i));
    }
    zwp.submit(Bio::write(Sector(2 * Z1), 8, 10));
    zwp.submit(Bio::read(Sector(3 * Z1), 8, 11));
    assert_eq!(zwp.issued.len(), 3, "zone 2's write and the read go out at once");
    zwl.run_all();
    assert!(zwl.done.iter().all(|c| c.result.is_ok()));
}

#[test]
fn emulated_append_is_not_supported_under_zone_write_locking() {
    let mut h = harness(IssuePolicy::Zwl, |_| {});
    h.submit(Bio::append(Sector(Z1), 8, 0));
    assert_eq!(h.result(0), Some(Err(Status::NotSupported)));
}

#[test]
fn batching_issuer_drains_the_deepest_plug_first_within_its_bound() {
    for (bypass, expect_first) in [(4u32, 3u64), (0, 1)] {
        let mut h = harness(IssuePolicy::Batch, |c| c.batch_max_bypass = bypass);
        // A write in flight to zone 5 keeps the issuer busy while plugs fill.
        h.submit(Bio::write(Sector(5 * Z1), 8, 99));
        h.submit(Bio::write(Sector(Z1), 8, 0)); // zone 1: 1 write
        h.submit(Bio::write(Sector(2 * Z1), 8, 1)); // zone 2: 2 writes
        h.submit(Bio::write(Sector(2 * Z1 + 8), 8, 2));
        for i in 0..3u64 {
            h.submit(Bio::write(Sector(3 * Z1 + 8 * i), 8, 10 + i)); // zone 3: 3 writes
        }
        assert_eq!(h.issued.len(), 1);
        h.run(0).unwrap();
        let next_zone = h.issued[0].sector.0 / Z1;
        assert_eq!(next_zone, expect_first, "bypass {bypass}");
        h.run_all();
        assert!(h.done.iter().all(|c| c.result.is_ok()));
        // Each plug was drained whole: zones appear in contiguous runs.
        let order: Vec<u64> = h.history.iter().map(|r| r.sector.0 / Z1).collect();
        let mut runs = order.clone();
        runs.dedup();
        let mut sorted = runs.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(runs.len(), sorted.len(), "a zone was visited twice: {order:?}");
    }
}

#[test]
fn batching_issuer_bounds_how_long_a_shallow_plug_waits() {
    for (bypass, expect) in [(2u32, vec![1, 3, 4, 2, 5, 6, 7]), (0, vec![1, 2, 3, 4, 5, 6, 7])] {
        let mut h = harness(IssuePolicy::Batch, |c| c.batch_max_bypass = bypass);
        h.submit(Bio::write(Sector(Z1), 8, 0)); // zone 1 on the device
        h.submit(Bio::write(Sector(2 * Z1), 8, 1)); // zone 2: one write, listed first
        for z in 3..=7u64 {
            for i in 0..4u64 {
                h.submit(Bio::write(Sector(z * Z1 + 8 * i), 8, 10 * z + i)); // deeper plugs
            }
        }
        h.run_all();
        let mut visits: Vec<u64> = h.history.iter().map(|r| r.sector.0 / Z1).collect();
        visits.dedup();
        assert_eq!(visits, expect, "max_bypass {bypass}");
    }
}

#[test]
fn zoned_qd1_writes_attribute() {
    let zoned = geometry(|_| {});
    let mut e = Engine::new_empty(&zoned, EngineConfig::default());
    assert_eq!(e.zoned_qd1_writes(), 0);
    e.set_zoned_qd1_writes(1).unwrap();
    assert_eq!(e.zoned_qd1_writes(), 1);
    assert_eq!(e.config().policy, IssuePolicy::Qd1);
    assert_eq!(e.set_zoned_qd1_writes(2), Err(AttrError::BadValue(2)));
    let regular = geometry(|p| p.zoned = false);
    let mut e = Engine::new_empty(&regular, EngineConfig::default());
    assert_eq!(e.zoned_qd1_writes(), 0);
    let err = e.set_zoned_qd1_writes(1).unwrap_err();
    assert_eq!(err, AttrError::NotZoned);
    assert!(err.to_string().contains("not zoned"));
}

#[test]
fn writing_the_value_zoned_qd1_writes_reads_changes_nothing() {
    let zoned = geometry(|_| {});
    let cfg = |policy| EngineConfig { policy, ..EngineConfig::default() };
    // Pipelining reads 0: writing 0 keeps it, not per-zone plugging.
    let mut e = Engine::new_empty(&zoned, cfg(IssuePolicy::Pipeline));
    e.set_zoned_qd1_writes(0).unwrap();
    assert!(!e.frozen());
    assert_eq!(e.config().policy, IssuePolicy::Pipeline);
    // 1 then 0: the single issuer, then back to the pipelining it replaced.
    e.set_zoned_qd1_writes(1).unwrap();
    assert_eq!(e.config().policy, IssuePolicy::Qd1);
    e.set_zoned_qd1_writes(0).unwrap();
    assert_eq!(e.config().policy, IssuePolicy::Pipeline);
    assert_eq!(e.policy_traits(), PolicyTraits::of(e.config()));
    // The batching issuer reads 1: writing 1 keeps it; 0 selects per-zone plugging.
    let mut e = Engine::new_empty(&zoned, cfg(IssuePolicy::Batch));
    e.set_zoned_qd1_writes(1).unwrap();
    assert_eq!(e.config().policy, IssuePolicy::Batch);
    e.set_zoned_qd1_writes(0).unwrap();
    assert_eq!(e.config().policy, IssuePolicy::Zwp);
    // A switch under way: the value read is the one being switched to, and writing
    // the old value back switches back.
    let mut h = harness(IssuePolicy::Pipeline, |_| {});
    h.submit(Bio::write(Sector(Z1), 8, 0));
    h.engine.set_zoned_qd1_writes(1).unwrap();
    assert!(h.engine.frozen());
    assert_eq!(h.engine.zoned_qd1_writes(), 1);
    h.engine.set_zoned_qd1_writes(1).unwrap();
    h.engine.set_zoned_qd1_writes(0).unwrap();
    h.run_all();
    assert!(!h.engine.frozen());
    assert_eq!(h.engine.config().policy, IssuePolicy::Pipeline);
    assert!(h.done.iter().all(|c| c.result.is_ok()), "{:?}", h.done);
}

#[test]
fn switching_freezes_new_bios_until_the_queue_drains() {
    let mut h = Harness::zwp();
    for i in 0..3u64 {
        h.submit(Bio::write(Sector(Z1 + 8 * i), 8, i));
    }
    h.engine.set_zoned_qd1_writes(1).unwrap();
    assert!(h.engine.frozen());
    h.submit(Bio::write(Sector(2 * Z1), 8, 10));
    h.submit(Bio::read(Sector(0), 8, 11));
    assert_eq!(h.issued.len(), 1, "new BIOs wait while the queue drains");
    h.run_all();
    assert!(!h.engine.frozen());
    assert_eq!(h.engine.config().policy, IssuePolicy::Qd1);
    assert!(h.done.iter().all(|c| c.result.is_ok()), "{:?}", h.done);
    assert_eq!(h.done.len(), 5);
}

#[test]
fn batching_issuer_sweeps_zones_of_equal_depth_in_lba_order() {
    let mut h = harness(IssuePolicy::Batch, |c| c.batch_max_bypass = 8);
    h.submit(Bio::write(Sector(4 * Z1), 8, 0)); // zone 4 on the device: the sweep is there
    for (i, z) in [1u64, 6, 2, 7].into_iter().enumerate() {
        h.submit(Bio::write(Sector(z * Z1), 8, 10 + i as u64)); // one write each
    }
    h.run_all();
    assert!(h.done.iter().all(|c| c.result.is_ok()));
    let order: Vec<u64> = h.history.iter().map(|r| r.sector.0 / Z1).collect();
    // Ahead of zone 4 first (6, 7), then round to the start (1, 2): C-SCAN.
    assert_eq!(order, vec![4, 6, 7, 1, 2]);
    // The FIFO single issuer takes them as they were listed.
    let mut q = harness(IssuePolicy::Qd1, |_| {});
    q.submit(Bio::write(Sector(4 * Z1), 8, 0));
    for (i, z) in [1u64, 6, 2, 7].into_iter().enumerate() {
        q.submit(Bio::write(Sector(z * Z1), 8, 10 + i as u64));
    }
    q.run_all();
    let order: Vec<u64> = q.history.iter().map(|r| r.sector.0 / Z1).collect();
    assert_eq!(order, vec![4, 1, 6, 2, 7]);
}

#[test]
fn batching_issuer_anticipates_the_drained_zones_next_write() {
    let mut h = harness(IssuePolicy::Batch, |c| {
        c.batch_max_bypass = 2;
        c.batch_anticipate_ns = 40_000;
    });
    h.auto_expire = false;
    h.submit(Bio::write(Sector(4 * Z1), 8, 0)); // zone 4 on the device
    h.submit(Bio::write(Sector(Z1), 8, 1)); // zones 1 and 2 wait
    h.submit(Bio::write(Sector(2 * Z1), 8, 2));
    assert!(h.anticipations.is_empty());
    h.run(0).unwrap();
    // Zone 4 drained while others wait: the issuer holds the device for zone 4.
    assert_eq!(h.anticipations.len(), 1);
    assert!(h.issued.is_empty(), "nothing goes while anticipating: {:?}", h.issued);
    // The zone's next write arrives in time and goes at once (a hit) ...
    h.submit(Bio::write(Sector(4 * Z1 + 8), 8, 3));
    assert_eq!(h.issued.len(), 1);
    assert_eq!(h.issued[0].sector, Sector(4 * Z1 + 8));
    // ... and the stale token of the first window changes nothing.
    let stale = h.anticipations[0];
    h.expire(stale);
    assert_eq!(h.issued.len(), 1);
    h.run(0).unwrap();
    // A second window; a second hit passes zones 1 and 2 over twice: the bound.
    let t = h.anticipations.pop().expect("second anticipation");
    h.submit(Bio::write(Sector(4 * Z1 + 16), 8, 4));
    assert_eq!(h.issued[0].sector, Sector(4 * Z1 + 16));
    h.expire(t);
    h.run(0).unwrap();
    assert!(h.anticipations.is_empty(), "zones passed over twice: no more anticipation");
    // The sweep goes on past zone 4, wrapping to zone 1, then zone 2.
    h.run_all();
    assert!(h.done.iter().all(|c| c.result.is_ok()));
    let order: Vec<u64> = h.history.iter().map(|r| r.sector.0 / Z1).collect();
    assert_eq!(order, vec![4, 4, 4, 1, 2]);
    let st = h.engine.stats();
    assert_eq!((st.anticipations, st.anticipation_hits), (2, 2));
}

#[test]
fn batching_issuer_moves_on_when_the_anticipation_expires() {
    let mut h = harness(IssuePolicy::Batch, |c| c.batch_anticipate_ns = 40_000);
    h.auto_expire = false;
    h.submit(Bio::write(Sector(4 * Z1), 8, 0));
    h.submit(Bio::write(Sector(Z1), 8, 1));
    h.run(0).unwrap();
    let t = h.anticipations.pop().expect("anticipation");
    assert!(h.issued.is_empty());
    h.expire(t);
    assert_eq!(h.issued.len(), 1);
    assert_eq!(h.issued[0].sector, Sector(Z1));
    h.run(0).unwrap();
    // Nothing else waits: no anticipation when the device would idle anyway.
    assert!(h.anticipations.is_empty());
    assert_eq!(h.engine.stats().anticipation_hits, 0);
}
