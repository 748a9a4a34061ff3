//! A panic in the set-up of a runtime seed (planted: `seed-setup-panics`, one seed
//! in three) is that seed's violation, and the seeds after it run. Before, the
//! panic ended the whole `zblk vopr --runtime` run.
//!
//! The planted bug is active on every thread of the process, so this binary holds
//! one test. Built with the planted bugs only (`scripts/test` builds the workspace
//! with `zblk-cli/mutations`); the crate's tests always are (zblk-core's `mutations` is a dev-dependency feature).

use zblk_core::mutation::{self, Mutation};
use zblk_runtime::vopr;

#[test]
fn a_panic_in_a_seed_s_set_up_fails_that_seed_alone() {
    // The crate's tests build zblk-core with its planted bugs (a dev-dependency
    // feature): a build without them does not compile, rather than skip.
    const { assert!(mutation::AVAILABLE, "zblk-core built without its `mutations` feature") };
    let dir = tempfile::tempdir().expect("temporary directory");
    mutation::set_global(Some(Mutation::SeedSetupPanics));
    let runs: Vec<_> = (1..=6).map(|seed| vopr::run_runtime_seed(seed, 100, dir.path())).collect();
    mutation::set_global(None);
    for r in &runs {
        if r.seed % 3 == 0 {
            let v = r.violation.as_deref().unwrap_or("");
            assert!(v.contains("the seed's set-up panicked: a panic planted in the set-up"), "seed {}: {v:?}", r.seed);
        } else {
            assert_eq!(r.violation, None, "seed {}", r.seed);
            assert!(r.ops > 0, "seed {} ran nothing", r.seed);
        }
    }
}
