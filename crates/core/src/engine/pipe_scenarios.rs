//! Zone write pipelining's scenarios on the scripted device, which executes each
//! request when it is issued (as an image accepts a write) and completes it when the
//! test says, in any order.

use crate::bio::{Bio, Op, Status};
use crate::engine::{EngineConfig, IssuePolicy, WpRecovery, ZoneWrites};
use crate::testing::{Harness, geometry};
use crate::units::{Sector, ZoneNo};
use crate::zone::{ZoneCond, ZoneSet};

const Z1: u64 = 2048;

fn pipeline(depth: u32) -> Harness {
    let geo = geometry(|_| {});
    let cfg = EngineConfig {
        policy: IssuePolicy::Pipeline,
        wp_recovery: WpRecovery::Report,
        queue_depth: 64,
        pipeline_depth: depth,
        ..Default::default()
    };
    let mut h = Harness::with_config(&geo, cfg);
    h.execute_at_issue = true;
    h
}

/// Submits `n` writes of 8 sectors from the start of zone 1, user data 0..n.
fn writes(h: &mut Harness, n: u64) {
    for i in 0..n {
        h.submit(Bio::write(Sector(Z1 + 8 * i), 8, i));
    }
}

/// What a device that keeps order does when write `off` of zone `z` fails: its
/// write pointer goes back to the failed write's start (an image rolls back).
fn roll_back(h: &mut Harness, z: u32, off: u64) {
    let geo = h.engine.geometry().clone();
    let mut infos = h.dev.zones().to_vec();
    let info = &mut infos[z as usize];
    info.wp = info.start + off;
    info.cond = if off == 0 { ZoneCond::Empty } else { ZoneCond::Closed };
    h.dev = ZoneSet::from_zones(&geo, &infos).expect("rolled back");
}

#[test]
fn several_writes_of_a_zone_go_out_up_to_the_depth() {
    let mut h = pipeline(4);
    writes(&mut h, 6);
    let out: Vec<u64> = h.issued.iter().map(|r| r.sector.0 - Z1).collect();
    assert_eq!(out, vec![0, 8, 16, 24], "four out, in zone order; two wait in the plug");
    let plug = h.engine.plug(ZoneNo(1)).expect("plug");
    assert_eq!((plug.wp_offset, plug.queued), (32, 2), "the write pointer moved at submission");
    h.run(0).unwrap();
    assert_eq!(h.issued.len(), 4, "a completion lets the next one go");
    h.run_all();
    assert!((0..6).all(|i| h.result(i) == Some(Ok(Sector(Z1 + 8 * i)))));
    assert_eq!(h.device_wp(1), 48);
}

#[test]
fn completions_are_acknowledged_in_zone_order() {
    let mut h = pipeline(0);
    writes(&mut h, 8);
    h.submit(Bio::write(Sector(2 * Z1), 8, 100));
    assert_eq!(h.issued.len(), 9, "depth 0: up to the queue depth");
    // The device completes the last write of zone 1 first: it is held.
    h.run(7).unwrap();
    assert_eq!(h.done.len(), 0);
    // Another zone is not held by zone 1.
    let z2 = h.issued.iter().position(|r| r.sector.0 == 2 * Z1).unwrap();
    h.run(z2).unwrap();
    assert_eq!(h.result(100), Some(Ok(Sector(2 * Z1))));
    h.run_all_reversed();
    let order: Vec<u64> = h.done.iter().map(|c| c.user_data).filter(|&u| u < 100).collect();
    assert_eq!(order, (0..8).collect::<Vec<_>>(), "acknowledged in zone order");
}

#[test]
fn a_failed_write_fails_what_follows_it_and_the_write_pointer_goes_back() {
    let mut h = pipeline(4);
    writes(&mut h, 6);
    // Writes 2 and 3 complete first (held), then write 1 fails; write 0 is still out.
    h.run(3).unwrap();
    h.run(2).unwrap();
    roll_back(&mut h, 1, 8);
    h.fail(1, Status::IoErr);
    assert_eq!(h.result(1), None, "write 0 is still out: write 1 waits for its turn");
    assert_eq!(h.result(4), Some(Err(Status::Aborted)), "queued writes are aborted");
    assert_eq!(h.result(5), Some(Err(Status::Aborted)));
    h.run(0).unwrap();
    assert_eq!(h.result(0), Some(Ok(Sector(Z1))), "what was before it stands");
    assert_eq!(h.result(1), Some(Err(Status::IoErr)));
    // Completed on the device, never acknowledged: they fail with it.
    assert_eq!(h.result(2), Some(Err(Status::Aborted)));
    assert_eq!(h.result(3), Some(Err(Status::Aborted)));
    // Nothing waits: the zone's write pointer is unknown until the next write asks.
    assert!(h.engine.plug(ZoneNo(1)).is_none());
    h.submit(Bio::write(Sector(Z1 + 8), 8, 10));
    assert_eq!(h.engine.plug(ZoneNo(1)).unwrap().wp_offset, 16, "re-synchronised at the failed write's start");
    h.run_all();
    assert_eq!(h.result(10), Some(Ok(Sector(Z1 + 8))));
}

#[test]
fn a_failure_with_writes_still_out_after_it_waits_for_them() {
    let mut h = pipeline(4);
    writes(&mut h, 4);
    roll_back(&mut h, 1, 0);
    h.fail(0, Status::IoErr);
    assert_eq!(h.result(0), Some(Err(Status::IoErr)));
    assert_eq!(h.engine.plug(ZoneNo(1)).unwrap().wp_offset, 0);
    // The writes after it are still on the device: not ended before they come back.
    assert_eq!(h.issued.len(), 3);
    assert!(h.reports.is_empty() && h.result(1).is_none(), "no report while writes are out");
    h.run_all_reversed();
    assert!((1..4).all(|i| h.result(i) == Some(Err(Status::Aborted))));
    assert!(h.engine.plug(ZoneNo(1)).is_none(), "zone 1 empty again: its plug goes");
}

#[test]
fn reset_and_finish_wait_for_the_pipe() {
    let mut h = pipeline(0);
    writes(&mut h, 3);
    h.submit(Bio::zone_op(Op::ZoneFinish, Sector(Z1), 20));
    assert_eq!(h.issued.len(), 3, "the finish waits for the writes out");
    h.run(2).unwrap();
    h.run(1).unwrap();
    assert_eq!(h.issued.len(), 1);
    h.run(0).unwrap();
    assert_eq!(h.issued[0].op, Op::ZoneFinish);
    h.run_all();
    assert_eq!(h.result(20), Some(Ok(Sector(Z1))));
    h.submit(Bio::zone_op(Op::ZoneReset, Sector(Z1), 21));
    h.run_all();
    writes(&mut h, 2);
    h.run_all_reversed();
    assert_eq!(h.result(1), Some(Ok(Sector(Z1 + 8))));
}

#[test]
fn emulated_appends_pipeline_and_report_their_sectors() {
    let mut h = pipeline(0);
    for i in 0..4 {
        h.submit(Bio::append(Sector(Z1), 8, i));
    }
    assert_eq!(h.issued.len(), 4, "emulated appends are writes: pipelined");
    h.run_all_reversed();
    assert!((0..4).all(|i| h.result(i) == Some(Ok(Sector(Z1 + 8 * i)))));
}

#[test]
fn native_appends_wait_for_the_pipe() {
    let geo = geometry(|p| p.max_append_sectors = 64);
    let cfg = EngineConfig { policy: IssuePolicy::Pipeline, queue_depth: 64, ..Default::default() };
    let mut h = Harness::with_config(&geo, cfg);
    h.execute_at_issue = true;
    writes(&mut h, 2);
    h.submit(Bio::append(Sector(Z1), 8, 30));
    assert_eq!(h.issued.len(), 2, "the native append waits");
    h.run_all_reversed();
    h.run_all();
    assert_eq!(h.result(30), Some(Ok(Sector(Z1 + 16))));
}

#[test]
fn reset_all_waits_for_every_pipe() {
    let mut h = pipeline(0);
    writes(&mut h, 3);
    h.submit(Bio::zone_op(Op::ZoneResetAll, Sector(0), 40));
    assert_eq!(h.issued.len(), 3);
    h.run_all_reversed();
    h.run_all();
    assert_eq!(h.result(40), Some(Ok(Sector(0))));
    assert!((0..3).all(|i| h.result(i).unwrap().is_ok()));
    assert_eq!(h.device_wp(1), 0);
}

#[test]
fn pipelining_is_refused_on_a_device_that_may_reorder() {
    assert!(IssuePolicy::Pipeline.refusal_on(true).is_none());
    let why = IssuePolicy::Pipeline.refusal_on(false).expect("refused");
    assert!(why.contains("order"), "{why}");
    // A policy that lets one write of a zone out at a time runs on any device.
    let one_at_a_time = IssuePolicy::ALL.iter().filter(|p| p.zone_writes() != ZoneWrites::Pipelined);
    assert!(one_at_a_time.clone().count() >= 5);
    assert!(one_at_a_time.into_iter().all(|p| p.refusal_on(false).is_none()));
}

#[test]
fn fua_and_preflush_writes_go_alone() {
    use crate::bio::BioFlags;
    let mut h = pipeline(0);
    writes(&mut h, 2);
    h.submit(Bio::write(Sector(Z1 + 16), 8, 2).with_flags(BioFlags::FUA));
    h.submit(Bio::write(Sector(Z1 + 24), 8, 3));
    assert_eq!(h.issued.len(), 2, "the FUA write waits for the pipe to empty");
    h.run(1).unwrap();
    h.run(0).unwrap();
    assert_eq!(h.issued.len(), 1, "then it goes alone: nothing joins it");
    assert!(h.issued[0].flags.contains(BioFlags::FUA));
    assert!(!h.issued[0].flags.contains(BioFlags::PIPELINED), "the device may accept it late");
    h.run(0).unwrap();
    // (A WRITE_ZEROES goes alone the same way: the scripted device does not zero.)
    h.submit(Bio::write(Sector(Z1 + 32), 8, 4).with_flags(BioFlags::PREFLUSH));
    h.submit(Bio::write(Sector(Z1 + 40), 8, 5));
    assert_eq!(
        h.issued.len(),
        1,
        "the write after the FUA one is out; the PREFLUSH write waits, the write behind it too"
    );
    h.run(0).unwrap();
    assert_eq!(h.issued.len(), 1, "alone");
    assert!(h.issued[0].flags.contains(BioFlags::PREFLUSH));
    h.run_all();
    assert!((0..6).all(|i| h.result(i) == Some(Ok(Sector(Z1 + 8 * i)))), "{:?}", h.done);
}

/// The planted bugs of pipelining, seen on the scripted device (the runtime's
/// checks that catch them are `zblk-runtime`'s tests/pipe_mutants.rs).
#[cfg(feature = "mutations")]
mod planted {
    use super::*;
    use crate::mutation::{self, Mutation};

    fn with(m: Mutation, f: impl FnOnce()) {
        mutation::set(Some(m));
        f();
        mutation::set(None);
    }

    #[test]
    fn acknowledging_out_of_zone_order_acknowledges_past_a_write_still_out() {
        with(Mutation::PipeAckOutOfOrder, || {
            let mut h = pipeline(4);
            writes(&mut h, 2);
            h.run(1).unwrap();
            assert_eq!(h.result(1), Some(Ok(Sector(Z1 + 8))), "acknowledged with write 0 still out");
        });
    }

    #[test]
    fn a_write_pointer_left_past_a_failed_write_is_trusted() {
        with(Mutation::PipeWpPastFailed, || {
            let mut h = pipeline(4);
            writes(&mut h, 2);
            roll_back(&mut h, 1, 0);
            h.fail(0, Status::IoErr);
            h.run_all();
            let plug = h.engine.plug(ZoneNo(1));
            assert!(plug.is_some_and(|p| p.wp_offset == 16 && !p.need_wp_update), "{plug:?}");
            assert_eq!(h.device_wp(1), 0, "the device went back to the failed write");
        });
    }
}
