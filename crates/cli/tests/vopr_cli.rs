//! `zblk vopr` as a user runs it: a run of seeds and its summary, JSON, replay of a
//! seed, the mutation check from the command line, and bad arguments.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::{stderr, stdout, zblk};

#[test]
fn two_hundred_seeds_pass_and_print_the_summary() {
    let o = zblk(&["vopr", "--seeds", "200"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    let last = out.lines().last().unwrap_or("");
    assert!(last.starts_with("vopr (simulated devices): 200 seeds, "), "{out}");
    assert!(last.contains(" faults injected, ") && last.contains(" 0 violations"), "{out}");
    assert!(!out.contains("FAIL"), "{out}");
}

/// A progress bar on a terminal (seeds done of those asked, then cleared before the
/// summary), and nothing on standard error through a pipe.
#[test]
fn progress_shows_on_a_terminal_only() {
    let o = zblk(&["vopr", "--seeds", "20", "--jobs", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "nothing on a pipe");
    let Some(seen) =
        common::on_terminal("progress_shows_on_a_terminal_only", &["vopr", "--seeds", "20", "--jobs", "1"])
    else {
        return;
    };
    assert!(seen.contains("/20 seeds"), "{seen}");
    assert!(seen.contains("vopr (simulated devices): 20 seeds, "), "{seen}");
    // The real runtime's seeds too.
    let Some(seen) = common::on_terminal("progress_shows_on_a_terminal_only", &["vopr", "--runtime", "--seeds", "2"])
    else {
        return;
    };
    assert!(seen.contains("/2 seeds"), "{seen}");
    assert!(seen.contains("vopr --runtime (the real runtime over temporary images"), "{seen}");
}

#[test]
fn json_summary_and_replay() {
    let o = zblk(&["vopr", "--seeds", "8", "--first-seed", "40", "--json", "--jobs", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(v["seeds"], 8);
    assert_eq!(v["violations"], 0);
    assert_eq!(v["simulated"], true);
    assert!(v["operations"].as_u64().is_some_and(|n| n > 1000), "{v}");
    assert!(v["coverage"]["op: WRITE"].as_u64().is_some_and(|n| n > 0), "{v}");
    // One seed replays exactly: the same counts twice.
    let a = zblk(&["vopr", "--seed", "43"]);
    let b = zblk(&["vopr", "--seed", "43"]);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(stdout(&a), stdout(&b));
    assert!(stdout(&a).contains("seed 43 (stack)"), "{}", stdout(&a));
}

#[cfg(feature = "mutations")]
#[test]
fn a_planted_bug_fails_with_the_seed_replay_and_shrunk_trace() {
    let o = zblk(&["vopr", "--seeds", "3", "--mutation", "flush-ack-early"]);
    assert!(!o.status.success());
    let out = stdout(&o);
    assert!(out.contains("FAIL seed 1 ("), "{out}");
    assert!(out.contains("replay: zblk vopr --seed 1 --ops 1000 --mutation flush-ack-early"), "{out}");
    assert!(out.contains("3 violations"), "{out}");
    assert!(stderr(&o).contains("3 of 3 seeds found violations"), "{}", stderr(&o));
    let o = zblk(&["vopr", "--seed", "1", "--mutation", "flush-ack-early"]);
    assert!(!o.status.success());
    let out = stdout(&o);
    assert!(out.contains("acknowledged without a flush reaching the device"), "{out}");
    assert!(out.contains("shrunk: the first "), "{out}");
    assert!(out.lines().any(|l| l.contains("FLUSH")), "{out}");
}

#[cfg(feature = "mutations")]
#[test]
fn a_restart_trusting_the_writes_in_flight_fails_with_the_writes_the_power_loss_cut() {
    let o = zblk(&["vopr", "--seed", "1", "--mutation", "restart-trusts-in-flight"]);
    assert!(!o.status.success());
    let out = stdout(&o);
    assert!(out.contains("FAIL seed 1 ("), "{out}");
    assert!(out.contains("idle plug of zone"), "{out}");
    assert!(out.contains("-> (in flight at a power loss: never completed)"), "{out}");
}

/// A seed whose set-up panics (planted in one seed in three) is that seed's
/// failure, reported with its replay; the seeds after it run and the summary counts
/// it. Before, the panic ended the whole run: no summary, the other seeds unrun.
#[cfg(feature = "mutations")]
#[test]
fn a_panic_in_a_seed_s_set_up_fails_that_seed_and_the_run_goes_on() {
    let o = zblk(&["vopr", "--seeds", "10", "--jobs", "2", "--mutation", "seed-setup-panics"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    for seed in [3, 6, 9] {
        assert!(out.contains(&format!("FAIL seed {seed} (")), "{out}");
        assert!(
            out.contains(&format!("replay: zblk vopr --seed {seed} --ops 1000 --mutation seed-setup-panics")),
            "{out}"
        );
    }
    assert!(out.contains("the seed's set-up panicked: a panic planted in the set-up"), "{out}");
    assert!(out.contains("vopr (simulated devices, mutation seed-setup-panics): 10 seeds,"), "{out}");
    assert!(out.contains(" 3 violations, "), "{out}");
    assert!(stderr(&o).contains("3 of 10 seeds found violations"), "{}", stderr(&o));
    let o = zblk(&["vopr", "--seed", "6", "--mutation", "seed-setup-panics"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("FAIL seed 6 (device, 0 ops): the seed's set-up panicked"), "{out}");
    assert!(out.contains("replay: zblk vopr --seed 6 --ops 1000 --mutation seed-setup-panics"), "{out}");
}

/// A plugged write aborted and told to its user as EAGAIN (planted in
/// `Status::errno`) is caught by the host model's errno check, with the errno
/// named.
#[cfg(feature = "mutations")]
#[test]
fn an_aborted_write_told_as_eagain_is_caught() {
    let o = zblk(&["vopr", "--seed", "1", "--mutation", "aborted-as-eagain"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("which its user sees as EAGAIN (11); the kernel gives EIO (5) for it"), "{out}");
}

#[test]
fn bad_arguments_are_refused_clearly() {
    for (args, want) in [
        (&["vopr", "--seeds", "0"][..], "--seeds must be at least 1"),
        (&["vopr", "--mutation", "nope"][..], "unknown mutation 'nope'"),
        (&["vopr", "--time", "soon"][..], "invalid duration"),
        (&["vopr", "--ops", "0"][..], "0 is not in 1..=10000000"),
        (&["vopr", "--seeds", "-3"][..], "unexpected argument"),
        (&["vopr", "--seed", "1", "--seeds", "2"][..], "cannot be used with"),
        (&["vopr", "--jobs", "0"][..], "0 is not in 1..=1024"),
    ] {
        let o = zblk(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
}
