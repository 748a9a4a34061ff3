//! The mutation check of `zblk vopr` (docs/vopr.md, "The mutation check"): every
//! bug planted in `zblk_core::mutation` is caught within its stated number of seeds
//! with the engine's own invariants off; and, check by check (the reference model,
//! the checker, the engine's invariants), which of them each catches alone.
//!
//! Built only with the planted bugs (`--features zblk-sim/mutations`, as
//! `scripts/test` builds the tests): without them there is nothing to catch, and
//! these tests do not exist rather than pass.

#![cfg(feature = "mutations")]

mod common;

use common::{pipelined_sim, results, run, sim, zone_start};
use zblk_core::bio::{Bio, Op, Status};
use zblk_core::engine::{IssuePolicy, WpRecovery};
use zblk_core::mutation::{self, Mutation};
use zblk_core::params::DeviceParams;
use zblk_core::units::Sector;
use zblk_sim::driver::{Sim, SimChecks, SimConfig};
use zblk_sim::faults::{Fault, FaultConfig};
use zblk_sim::vopr;

/// Each planted bug, the number of seeds (from seed 1) within which the checks
/// independent of the engine (the checker and the reference model, the engine's
/// and the stack's own invariants off) must catch it, and the check that does
/// first. Most are caught by the first seeds; a split remainder put at the tail
/// matters only on stacks whose BIOs split twice (one seed in four is a stack, few
/// split so); a WRITE_ZEROES limit below `max_sectors`, a WRITE_ZEROES with NOUNMAP
/// where unmap is allowed, a reset after a write error under the kernel's recovery
/// take tens of seeds to meet. The planted bugs of zone write pipelining meet only
/// the devices that keep a zone's writes in order and pipeline (one seed in eight or
/// so); a failed write acknowledging the writes after it shows only when those
/// succeeded on the device, after a lost completion: 6 seeds in 1,000. A restart
/// that trusts the writes in flight at a power loss meets only the power losses
/// that cut writes in flight (never the ones that wait for them:
/// [`RESTART_WITHOUT_CUTS`]). An aborted write told as EAGAIN meets the first
/// seed with a write error: only the host model's errno check sees it
/// ([`an_aborted_write_told_as_eagain_is_seen_by_the_errno_check_alone`]).
const BOUNDS: [(Mutation, u64, &str); 19] = [
    (Mutation::TwoWritesReleased, 10, "checker"),
    (Mutation::AppendSectorEarly, 20, "checker"),
    (Mutation::ActiveLimitOffByOne, 10, "device oracle"),
    (Mutation::ResetKeepsPlugged, 10, "host oracle"),
    (Mutation::ImplicitCloseWrongZone, 40, "device oracle"),
    (Mutation::SplitRemainderTail, 400, "host oracle"),
    (Mutation::FlushAckEarly, 10, "host oracle"),
    (Mutation::ResetAllNoWait, 60, "checker"),
    (Mutation::PieceOverMaxSectors, 10, "checker"),
    (Mutation::WriteZeroesOverLimit, 100, "checker"),
    (Mutation::NounmapDropped, 100, "checker"),
    (Mutation::NounmapNotForced, 20, "checker"),
    (Mutation::RecoveryIgnoresReset, 100, "host oracle"),
    (Mutation::PipeAckOutOfOrder, 40, "host oracle"),
    (Mutation::PipeWpPastFailed, 20, "host oracle"),
    (Mutation::PipeFailureSpared, 300, "host oracle"),
    (Mutation::RestartTrustsInFlight, 10, "checker"),
    (Mutation::AbortedAsEagain, 10, "host oracle"),
    (Mutation::DeviceStatusLost, 10, "host oracle"),
];

/// The planted bugs the reference model alone catches, each within the seeds given
/// (the model follows the kernel's and null_blk's answers; it cannot see a NOUNMAP
/// flag, which changes no answer: only the checker's request check sees it).
const MODEL_CATCHES: [(Mutation, u64); 17] = [
    (Mutation::TwoWritesReleased, 10),
    (Mutation::AppendSectorEarly, 20),
    (Mutation::ActiveLimitOffByOne, 10),
    (Mutation::ResetKeepsPlugged, 10),
    (Mutation::ImplicitCloseWrongZone, 40),
    (Mutation::SplitRemainderTail, 400),
    (Mutation::FlushAckEarly, 10),
    (Mutation::ResetAllNoWait, 300),
    (Mutation::PieceOverMaxSectors, 10),
    (Mutation::WriteZeroesOverLimit, 100),
    (Mutation::RecoveryIgnoresReset, 100),
    (Mutation::PipeAckOutOfOrder, 40),
    (Mutation::PipeWpPastFailed, 20),
    (Mutation::PipeFailureSpared, 300),
    (Mutation::RestartTrustsInFlight, 40),
    (Mutation::AbortedAsEagain, 10),
    (Mutation::DeviceStatusLost, 10),
];

/// Checks with some off, and the kinds of violation (`vopr::violation_kind`) that
/// come from the checks left on. A seed that ends on another kind (an assertion
/// inside the core that a broken state tripped) is not a catch of these checks.
#[derive(Clone, Copy, Debug)]
struct Config {
    name: &'static str,
    checks: SimChecks,
    kinds: &'static [&'static str],
}

/// Everything but the engine's (and the stack's) own invariants.
const INDEPENDENT: Config = Config {
    name: "without the engine's invariants",
    checks: SimChecks::INDEPENDENT,
    kinds: &["checker", "durability", "device oracle", "host oracle", "liveness"],
};
/// The reference model alone: the device model and the host model.
const MODEL: Config =
    Config { name: "the model alone", checks: SimChecks::MODEL_ONLY, kinds: &["device oracle", "host oracle"] };
/// The checker alone (its durability check among its checks).
const CHECKER: Config =
    Config { name: "the checker alone", checks: SimChecks::CHECKER_ONLY, kinds: &["checker", "durability"] };
/// The engine's and the stack's own invariants alone.
const INVARIANTS: Config =
    Config { name: "the engine's invariants alone", checks: SimChecks::INVARIANTS_ONLY, kinds: &["invariant"] };

/// The first seed (from 1, within `bound`) at which `m` is caught by the checks of
/// `c`: the seed, the kind of check, the violation.
fn first_catch(m: Mutation, bound: u64, c: Config) -> Option<(u64, &'static str, String)> {
    (1..=bound).find_map(|seed| {
        let r = vopr::run_seed_checked(seed, vopr::DEFAULT_OPS, Some(m), c.checks);
        let v = r.violation?;
        let kind = vopr::violation_kind(&v);
        c.kinds.contains(&kind).then_some((seed, kind, v))
    })
}

/// [`first_catch`] of each `(mutation, bound)`, on two threads.
fn first_catches(cases: &[(Mutation, u64)], c: Config) -> Vec<Option<(u64, &'static str, String)>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|t| {
                s.spawn(move || {
                    let mine = cases.iter().enumerate().filter(|(i, _)| i % 2 == t);
                    mine.map(|(i, &(m, b))| (i, first_catch(m, b, c))).collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<_> = handles.into_iter().flat_map(|h| h.join().expect("a worker")).collect();
        all.sort_by_key(|(i, _)| *i);
        all.into_iter().map(|(_, c)| c).collect()
    })
}

#[test]
fn every_planted_bug_is_caught_without_the_engines_invariants() {
    let simulated: Vec<Mutation> = Mutation::ALL
        .into_iter()
        .filter(|m| !m.image_only() && !m.harness_only() && !m.kernel_only() && !m.planted_panic())
        .collect();
    assert_eq!(BOUNDS.map(|b| b.0).to_vec(), simulated, "a bound for each planted bug, in order");
    let cases: Vec<(Mutation, u64)> = BOUNDS.iter().map(|&(m, b, _)| (m, b)).collect();
    let mut missed = Vec::new();
    for (&(m, bound, by), caught) in BOUNDS.iter().zip(first_catches(&cases, INDEPENDENT)) {
        match caught {
            Some((seed, kind, v)) => {
                println!("{:<26} caught at seed {seed:>3} (bound {bound}) by {kind}: {}", m.name(), first_line(&v));
                if kind != by {
                    missed.push(format!("{}: caught by {kind}, docs/vopr.md says {by}: {v}", m.name()));
                }
            }
            None => missed.push(format!("{}: not caught within {bound} seeds", m.name())),
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn the_model_alone_catches_seventeen_of_the_nineteen() {
    let mut missed = Vec::new();
    for (&(m, bound), caught) in MODEL_CATCHES.iter().zip(first_catches(&MODEL_CATCHES, MODEL)) {
        match caught {
            Some((seed, kind, v)) => {
                println!("{:<26} the model: seed {seed:>3} ({kind}): {}", m.name(), first_line(&v))
            }
            None => missed.push(format!("{}: the model alone misses it within {bound} seeds", m.name())),
        }
    }
    // What the model cannot see, within the bound the checker catches them in.
    let unseen: Vec<(Mutation, u64)> =
        BOUNDS.iter().filter(|b| !MODEL_CATCHES.iter().any(|c| c.0 == b.0)).map(|&(m, b, _)| (m, b)).collect();
    assert_eq!(unseen.iter().map(|u| u.0).collect::<Vec<_>>(), [Mutation::NounmapDropped, Mutation::NounmapNotForced]);
    for (&(m, bound), caught) in unseen.iter().zip(first_catches(&unseen, MODEL)) {
        if let Some((seed, kind, v)) = caught {
            missed.push(format!(
                "{} is now caught by the model ({kind}, seed {seed} of {bound}): update docs/vopr.md: {v}",
                m.name()
            ));
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

fn first_line(v: &str) -> &str {
    v.lines().next().unwrap_or("")
}

/// Runs `f` with `m` planted on this thread; returns the violation it raised.
fn planted(m: Mutation, f: impl FnOnce()) -> String {
    mutation::set(Some(m));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    mutation::set(None);
    let payload = caught.expect_err("the planted bug went unseen");
    payload.downcast_ref::<String>().cloned().unwrap_or_default()
}

#[test]
fn a_piece_over_max_sectors_is_refused_by_the_device_and_not_excused_by_the_model() {
    // max_sectors 64: a write of 72 sectors is split one block too late; the
    // device refuses the 65-sector piece with EINVAL, as a real one refuses a
    // command above its transfer limit, and the host model, which knows the BIO
    // was valid, does not take the EINVAL for a device error.
    let mut device = DeviceParams::default();
    device.apply("size=16,zone_size=1,zone_nr_conv=1,max_sectors=64,memory_backed=1").expect("params");
    let mut s = Sim::new(&SimConfig { check: true, ..SimConfig::new(device, 1) }).expect("device");
    s.set_checks(SimChecks::MODEL_ONLY);
    let z = zone_start(&s, 1);
    let v = planted(Mutation::PieceOverMaxSectors, || {
        run(&mut s, &[Bio::write(z, 72, 0)]);
    });
    assert_eq!(vopr::violation_kind(&v), "host oracle", "{v}");
    assert!(v.contains("the device refused its request"), "{v}");
}

#[test]
fn recovery_that_ignores_a_reset_is_seen_by_the_model() {
    // The scenario of tests/vopr.rs: a write error under the kernel's recovery, then
    // a RESET; the model knows the write pointer again and expects the next write
    // at it to succeed. An engine that keeps distrusting it refuses the write.
    let mut s = sim(IssuePolicy::Zwp, WpRecovery::Kernel);
    s.set_checks(SimChecks::MODEL_ONLY);
    let z = zone_start(&s, 2);
    let v = planted(Mutation::RecoveryIgnoresReset, || {
        s.force_fault(Fault::PartialWrite(8));
        assert_eq!(results(&run(&mut s, &[Bio::write(z, 16, 0)])), [Err(Status::IoErr)]);
        assert_eq!(results(&run(&mut s, &[Bio::zone_op(Op::ZoneReset, z, 0)])), [Ok(z)]);
        run(&mut s, &[Bio::write(z, 8, 0)]);
    });
    assert_eq!(vopr::violation_kind(&v), "host oracle", "{v}");
    assert!(v.contains("refused by the host with NeedWpUpdate"), "{v}");
}

#[test]
fn flush_ack_early_is_caught_by_the_durability_check_at_a_power_loss() {
    // Without the host model's "a successful FLUSH reached the device", a FLUSH
    // acknowledged early shows as writes it made durable lost at a power loss.
    let c = Config { checks: SimChecks { host_flush: false, ..SimChecks::default() }, ..INDEPENDENT };
    let caught = first_catch(Mutation::FlushAckEarly, FLUSH_ACK_EARLY_DATA_BOUND, c);
    let (seed, kind, v) = caught.expect("flush-ack-early caught by the durability check");
    println!("flush-ack-early without the host FLUSH check: caught at seed {seed} by {kind}: {v}");
    assert_eq!(kind, "durability", "seed {seed}: {v}");
}

/// Seeds within which the durability check alone catches `flush-ack-early`.
const FLUSH_ACK_EARLY_DATA_BOUND: u64 = 100;

#[test]
fn flush_ack_early_loses_a_flushed_write_at_a_power_loss() {
    // A write, a FLUSH acknowledged without reaching the device, then the power
    // fails before the cache destaged anything: the write is gone, and the
    // checker says so.
    let mut device = DeviceParams::default();
    device.apply("size=16,zone_size=1,zone_nr_conv=1,zone_append_max_sectors=0,memory_backed=1").expect("params");
    let cfg = SimConfig {
        check: true,
        faults: FaultConfig { write_cache: true, ..FaultConfig::default() },
        ..SimConfig::new(device, 1)
    };
    let mut s = Sim::new(&cfg).expect("device");
    s.set_checks(SimChecks { host_flush: false, ..SimChecks::default() });
    let z = zone_start(&s, 1);
    let v = planted(Mutation::FlushAckEarly, || {
        run(&mut s, &[Bio::write(z, 8, 0)]);
        run(&mut s, &[Bio::flush(0)]);
        s.power_loss_losing_the_caches();
    });
    assert_eq!(vopr::violation_kind(&v), "durability", "{v}");
}

/// Seeds within which an aborted write told as EAGAIN is looked for with every
/// check on but the host model's errno check: none of the others sees an errno the
/// host gives (the device model compares the device's errnos only).
const ABORTED_AS_EAGAIN_UNSEEN: u64 = 300;

#[test]
fn an_aborted_write_told_as_eagain_is_seen_by_the_errno_check_alone() {
    let m = Mutation::AbortedAsEagain;
    let all_but_errno = SimChecks { host_errno: false, ..SimChecks::default() };
    let unseen = (1..=ABORTED_AS_EAGAIN_UNSEEN)
        .find_map(|seed| vopr::run_seed_checked(seed, vopr::DEFAULT_OPS, Some(m), all_but_errno).violation);
    assert_eq!(unseen, None, "another check sees it: update docs/vopr.md");
    let caught = first_catch(m, 10, INDEPENDENT).expect("the errno check catches it");
    assert_eq!(caught.0, 1, "{caught:?}");
    assert!(caught.2.contains("which its user sees as EAGAIN (11); the kernel gives EIO (5)"), "{}", caught.2);
}

#[test]
#[ignore = "measures the tables of docs/vopr.md (ZBLK_MUTATION_ONLY=<name> for one): cargo test --release -p zblk-sim --features mutations --test mutations -- --ignored --nocapture measure"]
fn measure() {
    let bound: u64 = std::env::var("ZBLK_MUTATION_BOUND").ok().and_then(|v| v.parse().ok()).unwrap_or(400);
    // ZBLK_MUTATION_ONLY=<name>: that one alone.
    let only = std::env::var("ZBLK_MUTATION_ONLY").ok();
    let planted: Vec<Mutation> = Mutation::ALL
        .into_iter()
        .filter(|m| {
            !m.harness_only() && !m.kernel_only() && !m.planted_panic() && only.as_deref().is_none_or(|o| o == m.name())
        })
        .collect();
    let cases: Vec<(Mutation, u64)> = planted.iter().map(|&m| (m, bound)).collect();
    for c in [INDEPENDENT, MODEL, CHECKER, INVARIANTS] {
        println!("== {}", c.name);
        for (m, caught) in planted.iter().zip(first_catches(&cases, c)) {
            match caught {
                Some((seed, kind, v)) => println!("{:<26} seed {seed:>4} {kind:<14} {}", m.name(), first_line(&v)),
                None => println!("{:<26} not within {bound}", m.name()),
            }
        }
    }
}

// ---- Zone write pipelining: each planted bug against the host model's rule ----

#[test]
fn acknowledging_out_of_zone_order_is_seen_by_the_model() {
    // 32 writes of one zone on a disk whose completions reorder: the engine that
    // acknowledges each as the device completes it breaks zone order.
    let mut s = pipelined_sim(0, 7);
    s.set_checks(SimChecks::MODEL_ONLY);
    let z = zone_start(&s, 1);
    let v = planted(Mutation::PipeAckOutOfOrder, || {
        run(&mut s, &(0..32).map(|i| Bio::write(z + 8 * i, 8, 0)).collect::<Vec<_>>());
    });
    assert_eq!(vopr::violation_kind(&v), "host oracle", "{v}");
    assert!(v.contains("acknowledged in zone order"), "{v}");
}

#[test]
fn acknowledging_the_writes_after_a_failed_one_is_seen_by_the_model() {
    // The first write's completion is lost (it executed; the timeout fails it):
    // the three after it, which the device completed, must fail with it.
    let mut s = pipelined_sim(0, 3);
    s.set_checks(SimChecks::MODEL_ONLY);
    let z = zone_start(&s, 1);
    let v = planted(Mutation::PipeFailureSpared, || {
        s.force_fault(Fault::Timeout(true));
        run(&mut s, &(0..4).map(|i| Bio::write(z + 8 * i, 8, 0)).collect::<Vec<_>>());
    });
    assert_eq!(vopr::violation_kind(&v), "host oracle", "{v}");
    assert!(v.contains("failed on the device while it was in flight"), "{v}");
}

#[test]
fn a_write_pointer_left_past_a_failed_write_is_seen_by_the_model() {
    // A partial write with two writes behind it: the plug must go back to its start
    // and ask the device, not trust the write pointer the writes after it left.
    let mut s = pipelined_sim(0, 5);
    s.set_checks(SimChecks::MODEL_ONLY);
    let z = zone_start(&s, 2);
    let v = planted(Mutation::PipeWpPastFailed, || {
        s.force_fault(Fault::PartialWrite(8));
        run(&mut s, &[Bio::write(z, 16, 0), Bio::write(z + 16, 16, 0), Bio::write(Sector(z.0 + 32), 16, 0)]);
    });
    assert_eq!(vopr::violation_kind(&v), "host oracle", "{v}");
    assert!(v.contains("must go back to the failed write's start"), "{v}");
}

// ---- A restart after a power loss with writes in flight ----

/// Seeds (from 1) over which `restart-trusts-in-flight` must go unseen when every
/// power loss waits for the BIOs in flight (none of 3,000 catches it).
const RESTART_WITHOUT_CUTS: u64 = 300;

#[test]
fn a_restart_trusting_the_writes_in_flight_is_met_only_by_a_power_loss_that_cuts_them() {
    // Waiting for what is in flight leaves no zone with writes on the device at
    // the restart: the planted bug has nothing to act on.
    let m = Mutation::RestartTrustsInFlight;
    let caught: Vec<u64> = (1..=RESTART_WITHOUT_CUTS)
        .filter(|&seed| vopr::run_seed_without_cuts(seed, vopr::DEFAULT_OPS, Some(m)).violation.is_some())
        .collect();
    assert!(caught.is_empty(), "caught without a power loss cutting BIOs in flight, at seeds {caught:?}");
}

#[test]
fn a_restart_trusting_the_writes_in_flight_is_seen_by_the_checker() {
    // Four pipelined writes on a disk with a volatile cache when the power fails,
    // and the cache had destaged nothing: the device comes back with the zone
    // empty; the engine that believes the writes landed has a plug 32 sectors on.
    let mut device = DeviceParams::default();
    device
        .apply("size=16,zone_size=1,zone_nr_conv=1,zone_append_max_sectors=0,memory_backed=1,completion_dist=fixed")
        .expect("params");
    let cfg = SimConfig {
        engine: zblk_core::engine::EngineConfig { policy: IssuePolicy::Pipeline, ..Default::default() },
        check: true,
        keeps_zone_order: true,
        faults: FaultConfig { write_cache: true, ..FaultConfig::default() },
        ..SimConfig::new(device, 1)
    };
    let mut s = Sim::new(&cfg).expect("device");
    s.set_checks(SimChecks::CHECKER_ONLY);
    let z = zone_start(&s, 1);
    let v = planted(Mutation::RestartTrustsInFlight, || {
        for i in 0..4u64 {
            s.submit(Bio::write(z + 8 * i, 8, 0), i, 1000 + i);
        }
        let now = s.now_ns();
        s.run_until(now);
        s.power_loss_losing_the_caches();
    });
    assert_eq!(vopr::violation_kind(&v), "checker", "{v}");
    assert!(v.contains("idle plug of zone 1 has wp_offset 32, the device's write pointer is at 0"), "{v}");
}
