//! Seeded random simulation with the checker on after every step: random devices,
//! random engine settings, random operations with faults; and the same on random
//! striped and linear stacks. A failure names its seed; replay one with
//! `ZBLK_SEED=<seed> cargo test --release -p zblk-sim --test random_sim -- --exact replay`
//! (a device) or `... -- --exact replay_stack` (a stack).

use zblk_sim::random::{RandomReport, run_random, run_random_stack};

fn seeds() -> (u64, u64) {
    let n = std::env::var("ZBLK_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let first = std::env::var("ZBLK_FIRST_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    (first, n)
}

fn ops() -> u64 {
    std::env::var("ZBLK_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000)
}

#[test]
fn random_operations_with_checker() {
    let (first, n) = seeds();
    let ops = ops();
    let mut total_checks = 0;
    let mut outcomes = std::collections::BTreeMap::new();
    for seed in first..first + n {
        let r = std::panic::catch_unwind(|| run_random(seed, ops));
        let report = match r {
            Ok(r) => r,
            Err(e) => {
                eprintln!(
                    "random simulation failed with seed {seed}; replay: ZBLK_SEED={seed} cargo test --release -p zblk-sim --test random_sim -- --exact replay"
                );
                std::panic::resume_unwind(e);
            }
        };
        assert_eq!(report.ops, ops, "seed {seed}: not every operation was submitted");
        assert_eq!(report.outcomes.values().sum::<u64>(), ops, "seed {seed}: not every operation completed");
        total_checks += report.checks;
        for (k, v) in report.outcomes {
            *outcomes.entry(k).or_insert(0u64) += v;
        }
    }
    eprintln!("{n} seeds x {ops} ops: {total_checks} checks; outcomes {outcomes:?}");
    // The runs must have exercised the paths they claim to: successes, refused
    // unaligned writes, aborts behind errors, resource limits, invalid requests.
    for needed in ["ok", "Unaligned", "Invalid"] {
        assert!(outcomes.contains_key(needed), "no {needed} outcome in {n} seeds: {outcomes:?}");
    }
}

#[test]
fn replay() {
    if let Some(seed) = std::env::var("ZBLK_SEED").ok().and_then(|v| v.parse().ok()) {
        eprintln!("{:#?}", zblk_sim::random::random_config(seed));
        let report = run_random(seed, ops());
        eprintln!("{report:#?}");
    }
}

#[test]
fn same_seed_same_run() {
    assert_eq!(run_random(7, 2_000), run_random(7, 2_000));
    assert_ne!(run_random(7, 2_000).outcomes, run_random(8, 2_000).outcomes);
}

/// Random stacks per run, and operations per stack: a few seconds in release.
fn stack_seeds() -> (u64, u64, u64) {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse().ok());
    (env("ZBLK_FIRST_SEED").unwrap_or(1), env("ZBLK_STACK_SEEDS").unwrap_or(300), env("ZBLK_STACK_OPS").unwrap_or(500))
}

#[test]
fn random_stacks_with_checker() {
    let (first, n, ops) = stack_seeds();
    let mut outcomes = std::collections::BTreeMap::new();
    let (mut checks, mut faults) = (0, 0);
    for seed in first..first + n {
        let report: RandomReport = match std::panic::catch_unwind(|| run_random_stack(seed, ops)) {
            Ok(r) => r,
            Err(e) => {
                eprintln!(
                    "random stack simulation failed with seed {seed}; replay: ZBLK_SEED={seed} ZBLK_STACK_OPS={ops} cargo test --release -p zblk-sim --test random_sim -- --exact replay_stack"
                );
                std::panic::resume_unwind(e);
            }
        };
        assert_eq!(report.ops, ops, "seed {seed}: not every operation was submitted");
        assert_eq!(report.outcomes.values().sum::<u64>(), ops, "seed {seed}: not every operation completed");
        (checks, faults) = (checks + report.checks, faults + report.faults);
        for (k, v) in report.outcomes {
            *outcomes.entry(k).or_insert(0u64) += v;
        }
    }
    eprintln!("{n} stacks x {ops} ops: {checks} checks, {faults} faults; outcomes {outcomes:?}");
    for needed in ["ok", "Unaligned", "Invalid", "NotSupported", "IoErr"] {
        assert!(outcomes.contains_key(needed), "no {needed} outcome in {n} stacks: {outcomes:?}");
    }
    assert!(faults > 0, "no fault injected in {n} stacks");
}

#[test]
fn replay_stack() {
    if let Some(seed) = std::env::var("ZBLK_SEED").ok().and_then(|v| v.parse().ok()) {
        let r = zblk_sim::random::random_stack(seed);
        for (_, info) in r.built.stack.devices() {
            eprintln!("{info:?}");
        }
        eprintln!("{:#?}\n{:#?}", r.built.disks, r.cfg);
        let report = run_random_stack(seed, stack_seeds().2);
        eprintln!("{report:#?}");
    }
}

#[test]
fn same_seed_same_stack_run() {
    assert_eq!(run_random_stack(7, 1_000), run_random_stack(7, 1_000));
    assert_ne!(run_random_stack(7, 1_000).outcomes, run_random_stack(8, 1_000).outcomes);
}
