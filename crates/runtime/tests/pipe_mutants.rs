//! The planted bugs of zone write pipelining (`zblk_core::mutation`), each caught by
//! `zblk vopr --runtime` under the pipelining policy within its stated number of
//! seeds: acknowledging out of zone order, leaving the write pointer past a failed
//! write, and acknowledging the writes after a failed one. (The third, a flush that covers a hole, is the image's: the crash
//! tests catch it, tests/crash_pipe.rs.)
//!
//! A planted bug here is active on every thread of the process (the runtime's
//! engine runs on whichever thread submits or completes), so this binary holds one
//! test. Built with the planted bugs only (`scripts/test` builds the workspace with
//! `zblk-cli/mutations`); the crate's tests always are (zblk-core's `mutations` is a dev-dependency feature).

use zblk_core::engine::IssuePolicy;
use zblk_core::mutation::{self, Mutation};
use zblk_runtime::vopr;

/// I/Os per seed, as in CI's runtime seeds.
const OPS: u64 = 400;

/// Each planted bug and the seeds (from 1) within which the runtime's checks catch
/// it under pipelining.
const BOUNDS: [(Mutation, u64); 5] = [
    (Mutation::PipeAckOutOfOrder, 20),
    (Mutation::PipeWpPastFailed, 20),
    (Mutation::PipeFailureSpared, 20),
    (Mutation::FuaJoinsPipeline, 200),
    (Mutation::DeviceStatusLost, 200),
];

#[test]
fn the_planted_bugs_of_pipelining_are_caught() {
    // The crate's tests build zblk-core with its planted bugs (a dev-dependency
    // feature): a build without them does not compile, rather than skip.
    const { assert!(mutation::AVAILABLE, "zblk-core built without its `mutations` feature") };
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut missed = Vec::new();
    for (m, bound) in BOUNDS {
        set(Some(m));
        let caught = (1..=bound).find_map(|seed| {
            let r = vopr::run_runtime_seed_as(seed, OPS, dir.path(), Some(IssuePolicy::Pipeline));
            r.violation.map(|v| (seed, v))
        });
        set(None);
        match caught {
            Some((seed, v)) => {
                println!("{:<24} caught at seed {seed:>3} (bound {bound}): {}", m.name(), first_line(&v))
            }
            None => missed.push(format!("{}: not caught within {bound} seeds", m.name())),
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
    // And without a planted bug, the same seeds find nothing.
    for seed in 1..=5 {
        let r = vopr::run_runtime_seed_as(seed, OPS, dir.path(), Some(IssuePolicy::Pipeline));
        assert!(r.violation.is_none(), "seed {seed} without a planted bug: {:?}", r.violation);
    }
}

fn set(m: Option<Mutation>) {
    mutation::set_global(m);
}

fn first_line(v: &str) -> &str {
    v.lines().next().unwrap_or(v)
}
