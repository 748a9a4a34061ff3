//! Named scenarios: one test per behaviour of zone write plugging, zone append
//! emulation, write pointer recovery and the single issuer, each driving the engine
//! by hand on the scripted device of [`crate::testing`] (the test decides the order
//! in which the device executes requests).

use super::{IssuePolicy, WpRecovery};
use crate::bio::{Bio, BioFlags, Op, Request, Status};
use crate::testing::{Harness, geometry};
use crate::units::{Sector, ZoneNo};
use crate::zone::ZoneCond;

const Z1: u64 = 2048; // first sequential zone (zone 0 is conventional)

#[test]
fn concurrent_writers_to_one_zone_land_in_order() {
    let mut h = Harness::zwp();
    // 32 writers each submit the next 8 sectors of zone 1, all at once.
    for i in 0..32u64 {
        h.submit(Bio::write(Sector(Z1 + 8 * i), 8, i));
    }
    // One write in flight per zone: the others wait in the plug.
    assert_eq!(h.issued.len(), 1);
    assert_eq!(h.engine.plug(ZoneNo(1)).unwrap().queued, 31);
    h.run_all_reversed();
    assert_eq!(h.done.len(), 32);
    assert!(h.done.iter().all(|c| c.result.is_ok()), "{:?}", h.done);
    // The device saw them in order, each at its write pointer.
    let sectors: Vec<u64> = h.history.iter().map(|r| r.sector.0).collect();
    assert_eq!(sectors, (0..32).map(|i| Z1 + 8 * i).collect::<Vec<_>>());
    assert_eq!(h.device_wp(1), 256);
}

#[test]
fn unaligned_write_fails_without_reaching_the_device() {
    let mut h = Harness::zwp();
    h.submit(Bio::write(Sector(Z1 + 8), 8, 1));
    assert_eq!(h.result(1), Some(Err(Status::Unaligned)));
    assert!(h.history.is_empty(), "the device saw {:?}", h.history);
    // Behind an in-flight write, the check happens when its turn comes.
    h.submit(Bio::write(Sector(Z1), 8, 2));
    h.submit(Bio::write(Sector(Z1 + 16), 8, 3));
    assert_eq!(h.issued.len(), 1);
    h.run_all();
    assert_eq!(h.result(2), Some(Ok(Sector(Z1))));
    assert_eq!(h.result(3), Some(Err(Status::Unaligned)));
    assert_eq!(h.history.len(), 1);
    assert_eq!(h.engine.stats().refused, 2);
}

#[test]
fn append_emulation_returns_correct_sectors_under_concurrency() {
    let mut h = Harness::zwp();
    assert!(h.engine.geometry().emulates_zone_append());
    let sizes: Vec<u32> = (0..40).map(|i| 1 + (i * 7) % 16).collect();
    for (i, n) in sizes.iter().enumerate() {
        h.submit(Bio::append(Sector(Z1), *n, i as u64));
    }
    h.run_all_reversed();
    let mut spans: Vec<(u64, u64)> = h
        .done
        .iter()
        .map(|c| {
            let at = c.result.expect("append succeeds").0;
            (at, at + u64::from(sizes[c.user_data as usize]))
        })
        .collect();
    spans.sort();
    // Distinct and back to back from the zone start: no overlap, no hole.
    assert_eq!(spans[0].0, Z1);
    for w in spans.windows(2) {
        assert_eq!(w[0].1, w[1].0, "appends overlap or leave a hole: {spans:?}");
    }
    // Each append was issued as a WRITE at exactly the sector it reported.
    for c in &h.done {
        let req = h.history.iter().find(|r| r.user_data == c.user_data).unwrap();
        assert_eq!(req.op, Op::Write);
        assert_eq!(Ok(req.sector), c.result);
    }
    assert_eq!(h.device_wp(1), sizes.iter().map(|&n| u64::from(n)).sum::<u64>());
}

#[test]
fn write_error_fails_queued_writes_resyncs_and_new_writes_succeed() {
    let mut h = Harness::zwp();
    for i in 0..4u64 {
        h.submit(Bio::write(Sector(Z1 + 8 * i), 8, i));
    }
    // The device wrote 3 sectors of the first write, then failed it.
    let first = h.issued.remove(0);
    h.execute(&Request { nr_sectors: 3, ..first }).unwrap();
    h.engine.complete(first.id, Err(Status::IoErr));
    h.auto_report = false;
    h.engine.check_invariants();
    while let Some(a) = h.engine.poll_action() {
        match a {
            crate::engine::Action::Complete(c) => h.done.push(c),
            crate::engine::Action::ReportZone(z) => h.reports.push(z),
            crate::engine::Action::Issue(r) => panic!("issued {r:?} with the write pointer unknown"),
            crate::engine::Action::Anticipate { .. } => panic!("no anticipation under per-zone plugging"),
        }
    }
    assert_eq!(h.result(0), Some(Err(Status::IoErr)));
    for i in 1..4 {
        assert_eq!(h.result(i), Some(Err(Status::Aborted)), "queued write {i}");
    }
    assert!(h.engine.plug(ZoneNo(1)).is_none_or(|p| p.need_wp_update));
    // New writes wait for the write pointer; the engine asks for the zone.
    h.submit(Bio::write(Sector(Z1 + 3), 5, 10));
    assert_eq!(h.reports, vec![ZoneNo(1)]);
    assert!(h.issued.is_empty());
    h.auto_report = true;
    h.submit(Bio::flush(11)); // any input lets the harness answer the report
    h.run_all();
    assert_eq!(h.result(10), Some(Ok(Sector(Z1 + 3))));
    assert_eq!(h.device_wp(1), 8);
    assert_eq!(h.engine.plug(ZoneNo(1)).unwrap().wp_offset, 8);
}

#[test]
fn kernel_recovery_fails_writes_until_the_zone_is_reported() {
    let mut h = Harness::new(&geometry(|_| {}), IssuePolicy::Zwp, WpRecovery::Kernel);
    h.submit(Bio::write(Sector(Z1), 8, 0));
    h.fail(0, Status::IoErr);
    assert!(h.reports.is_empty(), "kernel recovery never asks");
    h.submit(Bio::write(Sector(Z1), 8, 1));
    assert_eq!(h.result(1), Some(Err(Status::NeedWpUpdate)));
    assert_eq!(Status::NeedWpUpdate.errno_name(), "EIO");
    // The user reports the zone, as a file system does after an error.
    let info = h.report_zone(Sector(Z1));
    h.engine.zone_report(&info);
    h.submit(Bio::write(Sector(Z1), 8, 2));
    h.run_all();
    assert_eq!(h.result(2), Some(Ok(Sector(Z1))));
}

#[test]
fn reset_with_plugged_writes_fails_them_and_is_ordered_after_the_write_in_flight() {
    let mut h = Harness::zwp();
    for i in 0..4u64 {
        h.submit(Bio::write(Sector(Z1 + 8 * i), 8, i));
    }
    h.submit(Bio::zone_op(Op::ZoneReset, Sector(Z1), 10));
    for i in 1..4 {
        assert_eq!(h.result(i), Some(Err(Status::Aborted)), "plugged write {i} raced the reset");
    }
    // The reset waits for the write on the device, and the write after it waits for
    // the reset: the device sees write, reset, write, never a write at a stale WP.
    h.submit(Bio::write(Sector(Z1), 8, 11));
    assert_eq!(h.issued.len(), 1);
    h.run_all_reversed();
    let ops: Vec<(Op, u64)> = h.history.iter().map(|r| (r.op, r.sector.0)).collect();
    assert_eq!(ops, vec![(Op::Write, Z1), (Op::ZoneReset, Z1), (Op::Write, Z1)]);
    assert_eq!(h.result(0), Some(Ok(Sector(Z1))));
    assert_eq!(h.result(10), Some(Ok(Sector(Z1))));
    assert_eq!(h.result(11), Some(Ok(Sector(Z1))));
    assert_eq!(h.device_wp(1), 8);
}

#[test]
fn finish_makes_later_writes_fail_as_zone_full() {
    let mut h = Harness::zwp();
    h.submit(Bio::write(Sector(Z1), 8, 0));
    h.submit(Bio::zone_op(Op::ZoneFinish, Sector(Z1), 1));
    h.submit(Bio::write(Sector(Z1 + 8), 8, 2));
    h.run_all();
    assert_eq!(h.result(1), Some(Ok(Sector(Z1))));
    assert_eq!(h.result(2), Some(Err(Status::ZoneFull)));
    assert_eq!(h.dev.zone(ZoneNo(1)).cond, ZoneCond::Full);
    assert_eq!(h.engine.plug_count(), 0, "FULL zone keeps no plug");
}

#[test]
fn reset_all_is_a_barrier_for_every_zone() {
    let mut h = Harness::zwp();
    h.submit(Bio::write(Sector(Z1), 8, 0));
    h.submit(Bio::write(Sector(2 * Z1), 8, 1));
    h.submit(Bio::zone_op(Op::ZoneResetAll, Sector(0), 2));
    h.submit(Bio::write(Sector(3 * Z1), 8, 3));
    // Nothing more goes out until the two writes complete and the reset-all ran.
    assert_eq!(h.issued.len(), 2);
    h.run(1).unwrap();
    h.run(0).unwrap();
    assert_eq!(h.issued.len(), 1);
    assert_eq!(h.issued[0].op, Op::ZoneResetAll);
    h.run_all();
    assert_eq!(h.result(3), Some(Ok(Sector(3 * Z1))));
    assert_eq!((h.device_wp(1), h.device_wp(2), h.device_wp(3)), (0, 0, 8));
}

#[test]
fn open_and_active_limits_give_their_errnos() {
    let geo = geometry(|p| {
        p.max_open = 2;
        p.max_active = 3;
    });
    let mut h = Harness::new(&geo, IssuePolicy::Zwp, WpRecovery::Report);
    for z in 1..=3u64 {
        h.submit(Bio::write(Sector(z * Z1), 8, z));
        h.run_all();
        assert!(h.result(z).unwrap().is_ok());
    }
    // Three zones active (one of them closed by the device to open the third).
    h.submit(Bio::write(Sector(4 * Z1), 8, 4));
    h.run_all();
    assert_eq!(h.result(4), Some(Err(Status::ZoneActiveResource)));
    assert_eq!(Status::ZoneActiveResource.errno_name(), "EOVERFLOW");
    // Explicitly open zones are never closed by the device.
    let geo = geometry(|p| p.max_open = 2);
    let mut h = Harness::new(&geo, IssuePolicy::Zwp, WpRecovery::Report);
    h.submit(Bio::zone_op(Op::ZoneOpen, Sector(Z1), 1));
    h.submit(Bio::zone_op(Op::ZoneOpen, Sector(2 * Z1), 2));
    h.run_all();
    h.submit(Bio::write(Sector(3 * Z1), 8, 3));
    h.run_all();
    assert_eq!(h.result(3), Some(Err(Status::ZoneOpenResource)));
    assert_eq!(Status::ZoneOpenResource.errno_name(), "ETOOMANYREFS");
}

#[test]
fn plug_is_released_when_its_zone_fills_or_empties() {
    let mut h = Harness::zwp();
    let cap = h.engine.geometry().zone_cap_sectors();
    for i in 0..cap / 64 {
        h.submit(Bio::write(Sector(Z1 + 64 * i), 64, i));
    }
    assert_eq!(h.engine.plug_count(), 1);
    h.run_all();
    assert!(h.done.iter().all(|c| c.result.is_ok()));
    assert_eq!(h.engine.plug_count(), 0, "a plug outlived its FULL zone");
    h.submit(Bio::write(Sector(2 * Z1), 8, 100));
    h.run_all();
    assert_eq!(h.engine.plug_count(), 1, "a partially written zone keeps its plug");
    h.submit(Bio::zone_op(Op::ZoneReset, Sector(2 * Z1), 101));
    h.run_all();
    assert_eq!(h.engine.plug_count(), 0, "a plug outlived its EMPTY zone");
}

#[test]
fn conventional_zones_bypass_plugs() {
    let mut h = Harness::zwp();
    // Overlapping random writes to the conventional zone all go out at once.
    for i in 0..16u64 {
        h.submit(Bio::write(Sector((i * 37) % 2000), 8, i));
    }
    assert_eq!(h.issued.len(), 16);
    assert_eq!(h.engine.plug_count(), 0);
    h.run_all_reversed();
    assert!(h.done.iter().all(|c| c.result.is_ok()));
    for (op, id) in [(Op::ZoneReset, 20), (Op::ZoneFinish, 21), (Op::ZoneOpen, 22)] {
        h.submit(Bio::zone_op(op, Sector(0), id));
        assert_eq!(h.result(id), Some(Err(Status::Invalid)), "{op} on a conventional zone");
    }
    h.submit(Bio::append(Sector(0), 8, 30));
    assert_eq!(h.result(30), Some(Err(Status::Invalid)));
}

#[test]
fn reads_are_never_held_back_by_a_plug() {
    let mut h = Harness::zwp();
    for i in 0..4u64 {
        h.submit(Bio::write(Sector(Z1 + 8 * i), 8, i));
    }
    h.submit(Bio::read(Sector(Z1), 32, 10));
    // The read goes out beside the one write in flight, ahead of the plugged ones.
    assert_eq!(h.issued.len(), 2);
    assert_eq!(h.issued[1].op, Op::Read);
}

#[test]
fn a_write_across_a_zone_boundary_is_split_and_both_parts_plugged() {
    let mut h = Harness::zwp();
    let cap = h.engine.geometry().zone_cap_sectors();
    for i in 0..cap / 64 - 1 {
        h.submit(Bio::write(Sector(Z1 + 64 * i), 64, i));
    }
    h.run_all();
    // 64 sectors left in zone 1; the write covers them and the first 32 of zone 2.
    h.submit(Bio::write(Sector(Z1 + cap - 64), 96, 100));
    h.run_all();
    assert_eq!(h.result(100), Some(Ok(Sector(Z1 + cap - 64))));
    let tail: Vec<(u64, u32)> = h.history.iter().rev().take(2).map(|r| (r.sector.0, r.nr_sectors)).collect();
    assert_eq!(tail, vec![(2 * Z1, 32), (Z1 + cap - 64, 64)]);
    assert_eq!((h.device_wp(1), h.device_wp(2)), (cap, 32));
    assert_eq!(h.engine.stats().splits, 1);
    // Both parts must be at their write pointers: otherwise the BIO fails. As in the
    // kernel, the part that was at its write pointer is still written.
    h.submit(Bio::write(Sector(2 * Z1 + cap - 8), 16, 101));
    h.run_all();
    assert_eq!(h.result(101), Some(Err(Status::Unaligned)));
    assert_eq!(h.device_wp(3), 8);
}

#[test]
fn single_issuer_drains_one_plug_before_the_next() {
    let mut h = Harness::new(&geometry(|_| {}), IssuePolicy::Qd1, WpRecovery::Report);
    for i in 0..3u64 {
        h.submit(Bio::write(Sector(Z1 + 8 * i), 8, i));
        h.submit(Bio::write(Sector(2 * Z1 + 8 * i), 8, 10 + i));
    }
    h.submit(Bio::read(Sector(3 * Z1), 8, 20));
    // One zone write of the whole device out; reads unaffected.
    let writes_out = h.issued.iter().filter(|r| r.op == Op::Write).count();
    assert_eq!(writes_out, 1);
    assert!(h.issued.iter().any(|r| r.op == Op::Read));
    // A new write to the zone being drained joins the drain.
    h.run(0).unwrap();
    h.submit(Bio::write(Sector(Z1 + 24), 8, 3));
    h.run_all();
    let order: Vec<u64> = h.history.iter().filter(|r| r.op == Op::Write).map(|r| r.sector.0).collect();
    let z1: Vec<u64> = (0..4).map(|i| Z1 + 8 * i).collect();
    let z2: Vec<u64> = (0..3).map(|i| 2 * Z1 + 8 * i).collect();
    assert_eq!(order, [z1, z2].concat(), "zone 1 drained completely before zone 2");
}

#[test]
fn native_append_needs_no_plugging_but_does_not_overtake_writes() {
    let geo = geometry(|p| p.max_append_sectors = 64);
    let mut h = Harness::new(&geo, IssuePolicy::Zwp, WpRecovery::Report);
    for i in 0..8u64 {
        h.submit(Bio::append(Sector(Z1), 8, i));
    }
    // Several native appends out at once.
    assert_eq!(h.issued.len(), 8);
    assert!(h.issued.iter().all(|r| r.op == Op::ZoneAppend));
    h.run_all_reversed();
    let mut at: Vec<u64> = h.done.iter().map(|c| c.result.unwrap().0).collect();
    at.sort();
    assert_eq!(at, (0..8).map(|i| Z1 + 8 * i).collect::<Vec<_>>());
    // A regular write after them learns the write pointer from a report first.
    h.submit(Bio::write(Sector(Z1 + 64), 8, 20));
    h.run_all();
    assert_eq!(h.result(20), Some(Ok(Sector(Z1 + 64))));
}

/// A native append waits while a report of its zone is pending: a device that reads
/// the zone before the append lands and answers after the append completed would
/// otherwise hand the plug a write pointer below its own, which the plug then
/// trusted (`zblk vopr --runtime` seed 700215, threads with pread/pwrite, once in
/// some 1,800 runs).
#[test]
fn a_pending_report_holds_native_appends() {
    let geo = geometry(|p| p.max_append_sectors = 64);
    let mut h = Harness::new(&geo, IssuePolicy::Zwp, WpRecovery::Report);
    h.auto_report = false;
    h.submit(Bio::write(Sector(Z1), 32, 0));
    h.run_all();
    // A write that fails leaves the write pointer unknown; the next write asks for
    // a report.
    h.submit(Bio::write(Sector(Z1 + 32), 8, 1));
    h.fail(0, Status::IoErr);
    h.submit(Bio::write(Sector(Z1 + 32), 8, 2));
    assert_eq!(h.reports, vec![ZoneNo(1)], "a report asked for");
    // The device reads the zone now (write pointer 32) and answers later. An append
    // arrives meanwhile (the write waiting in the plug is aborted, as the kernel
    // aborts regular writes mixed with appends).
    let read_now = h.report_zone(Sector(Z1));
    h.submit(Bio::append(Sector(Z1), 16, 3));
    assert_eq!(h.result(2), Some(Err(Status::Aborted)));
    // Whatever the device runs before the answer comes: an append let through lands
    // at 32 and moves the device's write pointer past the answer's.
    while !h.issued.is_empty() {
        h.run(0).ok();
    }
    h.answer_report(read_now);
    let trusted_wrong = |h: &Harness| {
        h.engine.plug(ZoneNo(1)).is_some_and(|p| !p.need_wp_update && !p.busy && p.wp_offset != h.device_wp(1))
    };
    assert!(!trusted_wrong(&h), "the plug trusts {:?}, the device is at {}", h.engine.plug(ZoneNo(1)), h.device_wp(1));
    h.run_all();
    assert_eq!(h.result(3), Some(Ok(Sector(Z1 + 32))), "the append, once the report is in");
    assert!(!trusted_wrong(&h), "{:?} against {}", h.engine.plug(ZoneNo(1)), h.device_wp(1));
}

#[test]
fn fua_and_preflush_pass_through_and_flush_is_issued() {
    let mut h = Harness::zwp();
    h.submit(Bio::write(Sector(Z1), 8, 0).with_flags(BioFlags::FUA | BioFlags::PREFLUSH));
    h.submit(Bio::flush(1));
    assert!(h.issued[0].flags.contains(BioFlags::FUA));
    assert!(h.issued[0].flags.contains(BioFlags::PREFLUSH));
    assert_eq!(h.issued[1].op, Op::Flush);
    h.run_all();
    assert_eq!(h.result(1), Some(Ok(Sector(0))));
}

#[test]
fn bios_are_split_at_max_sectors_and_complete_once() {
    let mut h = Harness::zwp();
    h.submit(Bio::read(Sector(100), 200, 7));
    let pieces: Vec<(u64, u32, u32)> = h.issued.iter().map(|r| (r.sector.0, r.nr_sectors, r.bio_offset)).collect();
    assert_eq!(pieces, vec![(100, 64, 0), (164, 64, 64), (228, 64, 128), (292, 8, 192)]);
    h.run_all_reversed();
    assert_eq!(h.done.len(), 1);
    assert_eq!(h.result(7), Some(Ok(Sector(100))));
}

#[test]
fn passthrough_shows_what_goes_wrong_without_plugging() {
    let mut h = Harness::new(&geometry(|_| {}), IssuePolicy::Passthrough, WpRecovery::Report);
    for i in 0..8u64 {
        h.submit(Bio::write(Sector(Z1 + 8 * i), 8, i));
    }
    assert_eq!(h.issued.len(), 8, "nothing holds the writes back");
    h.run_all_reversed(); // the device executes them out of order
    let unaligned = h.done.iter().filter(|c| c.result == Err(Status::Unaligned)).count();
    assert!(unaligned >= 7, "only {unaligned} unaligned");
}

#[test]
fn many_bios_are_bounded() {
    let geo = geometry(|_| {});
    let cfg = crate::engine::EngineConfig { max_bios: 4, ..Default::default() };
    let mut e = crate::engine::Engine::new_empty(&geo, cfg);
    for i in 0..5u64 {
        e.submit(Bio::read(Sector(0), 8, i));
    }
    let again: Vec<_> = std::iter::from_fn(|| e.poll_action())
        .filter_map(|a| match a {
            crate::engine::Action::Complete(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].result, Err(Status::Again));
    assert_eq!(again[0].user_data, 4);
}
