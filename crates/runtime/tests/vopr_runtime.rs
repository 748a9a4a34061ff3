//! `zblk vopr --runtime` in CI: a handful of seeds of the real runtime (threads,
//! io_uring or the thread pool) over images whose device injects media errors,
//! checked by the order-independent checks of `zblk_runtime::vopr`.
//!
//! `ZBLK_VOPR_RUNTIME_SEEDS=<n>` changes the number of seeds (`ZBLK_VOPR_RUNTIME_FIRST`
//! the first, 1 by default; `ZBLK_VOPR_TRACE=1` prints each round's replay); a failing seed is
//! replayed by `zblk vopr --runtime --seed <seed>` (its threads race: the same seed
//! draws the same setup and workload, not the same interleaving).

use zblk_runtime::vopr::{self, RuntimeSeedRun};

/// I/Os per seed in CI.
const OPS: u64 = 400;

#[test]
fn runtime_seeds_with_media_errors_find_no_violation() {
    let n: u64 = std::env::var("ZBLK_VOPR_RUNTIME_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let first: u64 = std::env::var("ZBLK_VOPR_RUNTIME_FIRST").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let dir = tempfile::tempdir().expect("temporary directory");
    let runs: Vec<RuntimeSeedRun> =
        (first..first + n).map(|seed| vopr::run_runtime_seed(seed, OPS, dir.path())).collect();
    for r in &runs {
        println!(
            "seed {}: {} {}, {} I/Os, {} faults, {} checks{}",
            r.seed,
            r.backend,
            r.policy,
            r.ops,
            r.faults,
            r.checks,
            r.violation.as_deref().map(|v| format!(": {v}")).unwrap_or_default()
        );
    }
    let failed: Vec<_> = runs.iter().filter(|r| r.violation.is_some()).collect();
    assert!(failed.is_empty(), "{} runtime seeds found violations (first: seed {})", failed.len(), failed[0].seed);
    let faults: u64 = runs.iter().map(|r| r.faults).sum();
    assert!(faults > 0, "no fault injected in {n} seeds: the faulty device does nothing");
}

#[test]
fn runtime_seeds_cover_pipelining_with_media_errors() {
    // Of the CI seeds, those that draw pipelining, and faults among them: the policy
    // is checked under errors mid-pipeline, not only drawn.
    let n: u64 = std::env::var("ZBLK_VOPR_RUNTIME_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    let dir = tempfile::tempdir().expect("temporary directory");
    let piped: Vec<RuntimeSeedRun> = (1..=n)
        .map(|seed| vopr::run_runtime_seed_as(seed, OPS, dir.path(), Some(zblk_core::engine::IssuePolicy::Pipeline)))
        .take(12)
        .collect();
    for r in &piped {
        assert!(r.violation.is_none(), "seed {} under pipelining: {:?}", r.seed, r.violation);
    }
    let faults: u64 = piped.iter().map(|r| r.faults).sum();
    assert!(faults > 0, "no fault injected under pipelining");
    let drawn = (1..=n).filter(|&s| vopr::drawn_policy(s) == zblk_core::engine::IssuePolicy::Pipeline).count();
    assert!(drawn > 0, "none of the {n} CI seeds draws pipelining");
}
