//! The power cuts of `zblk vopr --runtime` bite: the planted bugs of an image's
//! durable state (`zblk_core::mutation`: a flush that records a write pointer over
//! writes still in flight, a recovery that keeps what lies past the write pointers)
//! are each caught by the
//! runtime's seeds that cut the power, within the stated number of seeds; without a
//! planted bug the same seeds find nothing. (A recovery that counts an announced
//! commit as complete needs a cut in the middle of a commit, which a cut between two
//! submissions seldom meets: tests/crash_commit.rs cuts at every step of one.)
//!
//! A planted bug here is active on every thread of the process (the image's
//! recovery runs on the checker's thread, its commits on the runtime's), so this
//! binary holds one test. The crate's tests build zblk-core with its planted bugs
//! (a dev-dependency feature).

use zblk_core::mutation::{self, Mutation};
use zblk_runtime::vopr;

/// I/Os per seed, as in CI's runtime seeds.
const OPS: u64 = 400;

/// Each planted bug and the seeds (from 1, the ones that cut the power among them)
/// within which the runtime's checks catch it. A seed replays its workload, not its
/// threads' interleaving, so where a bug that needs a race is caught varies from run
/// to run: a flush that covers a write still in flight needs the flush to meet one,
/// caught between seed 6 and 75 in ten runs on a loaded host, past 60 in three of
/// them; its bound leaves room for that. The walk stops
/// at the first catch, so the bound costs time only when the checks are blind.
const BOUNDS: [(Mutation, u64); 2] = [(Mutation::FlushCoversHole, 300), (Mutation::StaleTailKept, 60)];

#[test]
fn the_power_cuts_catch_the_planted_bugs_of_durable_state() {
    const { assert!(mutation::AVAILABLE, "zblk-core built without its `mutations` feature") };
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut missed = Vec::new();
    for (m, bound) in BOUNDS {
        mutation::set_global(Some(m));
        let caught = (1..=bound).filter(|&s| vopr::cuts_power(s)).find_map(|seed| {
            let r = vopr::run_runtime_seed(seed, OPS, dir.path());
            r.violation.map(|v| (seed, v))
        });
        mutation::set_global(None);
        match caught {
            Some((seed, v)) => {
                println!("{:<24} caught at seed {seed:>3} (bound {bound}): {}", m.name(), first_line(&v))
            }
            None => missed.push(format!("{}: not caught within {bound} seeds", m.name())),
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
    let clean: Vec<u64> = (1..=30).filter(|&s| vopr::cuts_power(s)).collect();
    for &seed in &clean {
        let r = vopr::run_runtime_seed(seed, OPS, dir.path());
        assert!(r.violation.is_none(), "seed {seed} without a planted bug: {:?}", r.violation);
    }
}

fn first_line(v: &str) -> &str {
    v.lines().next().unwrap_or(v)
}
