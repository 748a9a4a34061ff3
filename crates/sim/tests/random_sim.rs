//! Seeded random simulation with the checker on after every step: random devices,
//! random engine settings, random operations with faults; and the same on random
//! striped and linear stacks. A failure names its seed; replay one with
//! `ZBLK_SEED=<seed> cargo test --profile test-release -p zblk-sim --test random_sim -- --ignored --exact replay`
//! (a device) or `... -- --ignored --exact replay_stack` (a stack): the replays are
//! ignored in a normal run, where they would have nothing to replay.

use std::collections::BTreeMap;
use zblk_sim::random::{RandomReport, run_random, run_random_stack};

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn seeds() -> (u64, u64) {
    (env("ZBLK_FIRST_SEED").unwrap_or(1), env("ZBLK_SEEDS").unwrap_or(1000))
}

fn ops() -> u64 {
    env("ZBLK_OPS").unwrap_or(10_000)
}

/// Random stacks per run, and operations per stack: a few seconds in release.
fn stack_seeds() -> (u64, u64, u64) {
    (env("ZBLK_FIRST_SEED").unwrap_or(1), env("ZBLK_STACK_SEEDS").unwrap_or(300), env("ZBLK_STACK_OPS").unwrap_or(500))
}

/// What runs over many seeds did together.
#[derive(Default)]
struct Totals {
    outcomes: BTreeMap<String, u64>,
    checks: u64,
    faults: u64,
}

/// Runs `run(seed, ops)` for `n` seeds from `first`: every operation submitted and
/// completed. A failure prints its seed and `replay`, the command that replays it.
fn run_seeds(first: u64, n: u64, ops: u64, run: fn(u64, u64) -> RandomReport, replay: &str) -> Totals {
    let mut t = Totals::default();
    for seed in first..first + n {
        let report = match std::panic::catch_unwind(|| run(seed, ops)) {
            Ok(r) => r,
            Err(e) => {
                let replay = replay.replace("{seed}", &seed.to_string()).replace("{ops}", &ops.to_string());
                eprintln!("random simulation failed with seed {seed}; replay: {replay}");
                std::panic::resume_unwind(e);
            }
        };
        assert_eq!(report.ops, ops, "seed {seed}: not every operation was submitted");
        assert_eq!(report.outcomes.values().sum::<u64>(), ops, "seed {seed}: not every operation completed");
        (t.checks, t.faults) = (t.checks + report.checks, t.faults + report.faults);
        for (k, v) in report.outcomes {
            *t.outcomes.entry(k).or_insert(0u64) += v;
        }
    }
    t
}

#[test]
fn random_operations_with_checker() {
    let (first, n) = seeds();
    let ops = ops();
    let replay = "ZBLK_SEED={seed} ZBLK_OPS={ops} cargo test --profile test-release -p zblk-sim --test random_sim -- --ignored --exact replay";
    let Totals { outcomes, checks, .. } = run_seeds(first, n, ops, run_random, replay);
    eprintln!("{n} seeds x {ops} ops: {checks} checks; outcomes {outcomes:?}");
    // The runs must have exercised the paths they claim to: successes, refused
    // unaligned writes, aborts behind errors, resource limits, invalid requests.
    for needed in ["ok", "Unaligned", "Invalid"] {
        assert!(outcomes.contains_key(needed), "no {needed} outcome in {n} seeds: {outcomes:?}");
    }
}

/// The seed to replay: `ZBLK_SEED`, which a replay cannot do without.
fn replay_seed() -> u64 {
    env("ZBLK_SEED").expect("a replay needs ZBLK_SEED=<seed> (the failure printed the whole command)")
}

#[test]
#[ignore = "replays one seed: ZBLK_SEED=<seed> cargo test --profile test-release -p zblk-sim --test random_sim -- --ignored --exact replay"]
fn replay() {
    let seed = replay_seed();
    eprintln!("{:#?}", zblk_sim::random::random_config(seed));
    let report = run_random(seed, ops());
    eprintln!("{report:#?}");
}

#[test]
fn same_seed_same_run() {
    assert_eq!(run_random(7, 2_000), run_random(7, 2_000));
    assert_ne!(run_random(7, 2_000).outcomes, run_random(8, 2_000).outcomes);
}

#[test]
fn random_stacks_with_checker() {
    let (first, n, ops) = stack_seeds();
    let replay = "ZBLK_SEED={seed} ZBLK_STACK_OPS={ops} cargo test --profile test-release -p zblk-sim --test random_sim -- --ignored --exact replay_stack";
    let Totals { outcomes, checks, faults } = run_seeds(first, n, ops, run_random_stack, replay);
    eprintln!("{n} stacks x {ops} ops: {checks} checks, {faults} faults; outcomes {outcomes:?}");
    for needed in ["ok", "Unaligned", "Invalid", "NotSupported", "IoErr"] {
        assert!(outcomes.contains_key(needed), "no {needed} outcome in {n} stacks: {outcomes:?}");
    }
    assert!(faults > 0, "no fault injected in {n} stacks");
}

#[test]
#[ignore = "replays one seed: ZBLK_SEED=<seed> cargo test --profile test-release -p zblk-sim --test random_sim -- --ignored --exact replay_stack"]
fn replay_stack() {
    let seed = replay_seed();
    let r = zblk_sim::random::random_stack(seed);
    for (_, info) in r.built.stack.devices() {
        eprintln!("{info:?}");
    }
    eprintln!("{:#?}\n{:#?}", r.built.disks, r.cfg);
    let report = run_random_stack(seed, stack_seeds().2);
    eprintln!("{report:#?}");
}

#[test]
fn same_seed_same_stack_run() {
    assert_eq!(run_random_stack(7, 1_000), run_random_stack(7, 1_000));
    assert_ne!(run_random_stack(7, 1_000).outcomes, run_random_stack(8, 1_000).outcomes);
}
