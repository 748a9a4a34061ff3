//! `zblk vopr`: seeded, fault-injected simulation runs checked by the reference
//! model (docs/vopr.md). One line per failing seed, a summary line at the end; a
//! failing `--seed` replay prints the shrunk trace of the operations that matter.

use crate::out::outln;
use crate::{CliError, parse};
use clap::Args;
use indicatif::ProgressBar;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zblk_core::mutation::Mutation;
use zblk_sim::vopr::{self, SeedRun};

/// Runs random simulated devices and stacks (every issue policy, rotational and
/// not, zoned_qd1_writes switched at run time, native and emulated zone append,
/// WRITE_ZEROES with and without unmap, zone management with RESET_ALL,
/// conventional zones, striped and linear stacks) with faults drawn from each seed
/// (failed and partial writes, read errors, zones turning READONLY or OFFLINE,
/// lost and timed-out completions, power loss over volatile write caches, random
/// completion order), every completion
/// checked against a reference model of the kernel's zoned block layer and
/// null_blk. Simulated devices only: nothing here measures real hardware.
#[derive(Args, Debug)]
#[command(after_long_help = "Examples:\n  zblk vopr --seeds 200\n  zblk vopr --time 10m --json\n  \
zblk vopr --seed 1234            # replay one seed; on failure, its shrunk trace")]
pub struct VoprArgs {
    /// Seeds to run, from --first-seed on (default 100 unless --time or --seed).
    #[arg(long, conflicts_with = "seed")]
    pub seeds: Option<u64>,
    /// Run seeds until this much wall time has passed (e.g. 90s, 10m, 1h).
    #[arg(long, value_parser = parse::duration_ns, conflicts_with = "seed")]
    pub time: Option<u64>,
    /// Replay this one seed exactly; on failure print its shrunk trace.
    #[arg(long)]
    pub seed: Option<u64>,
    /// First seed of a run of seeds.
    #[arg(long, default_value_t = 1)]
    pub first_seed: u64,
    /// Operations per seed (a stack runs half as many).
    #[arg(long, default_value_t = vopr::DEFAULT_OPS, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub ops: u64,
    /// Worker threads (default: the available parallelism).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub jobs: Option<u64>,
    /// Plant a deliberate bug (builds with the `mutations` feature only): see
    /// docs/vopr.md for the list.
    #[arg(long)]
    pub mutation: Option<String>,
    /// Print the summary (and failures) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Run the real runtime (its threads, io_uring or the thread pool) over
    /// temporary images whose device injects media errors and, in one seed in
    /// three, loses its power, instead of the simulator: seeds one after the
    /// other, each request's outcome predicted by a model of the image and the
    /// simulator's host model (docs/vopr.md). Default 10 seeds. With --mutation,
    /// the bug is planted on every thread of the run.
    #[arg(long)]
    pub runtime: bool,
}

/// The summary of a run.
#[derive(Debug, Default, serde::Serialize)]
struct Summary {
    seeds: u64,
    operations: u64,
    faults_injected: u64,
    checks: u64,
    violations: u64,
    failures: Vec<SeedRun>,
    /// Seeds that covered each feature.
    coverage: std::collections::BTreeMap<String, u64>,
    wall_seconds: f64,
    simulated: bool,
}

fn replay_command(r: &SeedRun, ops: u64, mutation: Option<&str>) -> String {
    let m = mutation.map(|m| format!(" --mutation {m}")).unwrap_or_default();
    format!("zblk vopr --seed {} --ops {ops}{m}", r.seed)
}

/// The planted bug `--mutation` names, if any: refused when unknown, or when this
/// build has no mutation hooks.
fn parse_mutation(a: &VoprArgs) -> Result<Option<Mutation>, CliError> {
    let Some(name) = &a.mutation else { return Ok(None) };
    let m = Mutation::parse(name).ok_or_else(|| {
        let all: Vec<&str> = Mutation::ALL.iter().map(|m| m.name()).collect();
        CliError(format!("unknown mutation '{name}' (one of: {})", all.join(", ")))
    })?;
    if !zblk_core::mutation::AVAILABLE {
        return Err(CliError(
            "this zblk was built without the `mutations` feature: cargo build --release --features zblk-cli/mutations"
                .into(),
        ));
    }
    Ok(Some(m))
}

/// Runs `zblk vopr`.
pub fn run(a: &VoprArgs) -> Result<(), CliError> {
    let mutation = parse_mutation(a)?;
    if a.runtime {
        // The runtime's engine and device run on whichever thread submits or
        // completes: the planted bug goes on every thread.
        zblk_core::mutation::set_global(mutation);
        return run_runtime(a);
    }
    if let Some(seed) = a.seed {
        return replay(seed, a.ops, mutation, a.mutation.as_deref(), a.json);
    }
    let limit = match (a.seeds, a.time) {
        (Some(0), _) => return Err(CliError("--seeds must be at least 1".into())),
        (Some(n), _) => Some(n),
        (None, Some(_)) => None,
        (None, None) => Some(100),
    };
    let started = Instant::now();
    let mut sum = run_seeds(a, mutation, limit);
    sum.wall_seconds = started.elapsed().as_secs_f64();
    sum.failures.sort_by_key(|r| r.seed);
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&sum).map_err(CliError::msg)?);
    } else {
        let m = a.mutation.as_deref().map(|m| format!(", mutation {m}")).unwrap_or_default();
        outln!(
            "vopr (simulated devices{m}): {} seeds, {} operations, {} faults injected, {} checks, {} violations, {:.1} s",
            sum.seeds,
            sum.operations,
            sum.faults_injected,
            sum.checks,
            sum.violations,
            sum.wall_seconds
        );
    }
    if sum.violations > 0 {
        return Err(CliError(format!("{} of {} seeds found violations", sum.violations, sum.seeds)));
    }
    Ok(())
}

/// Runs seeds from `--first-seed` on `--jobs` threads until `limit` seeds or
/// `--time` have passed; each failure is said as it is found (unless `--json`).
fn run_seeds(a: &VoprArgs, mutation: Option<Mutation>, limit: Option<u64>) -> Summary {
    let started = Instant::now();
    let deadline = a.time.map(|ns| started + Duration::from_nanos(ns));
    let jobs = a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64));
    let next = AtomicU64::new(0);
    let summary = Mutex::new(Summary { simulated: true, ..Summary::default() });
    let bar = progress_bar(limit, a.time);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                loop {
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if limit.is_some_and(|n| i >= n) {
                        break;
                    }
                    let Some(seed) = a.first_seed.checked_add(i) else { break };
                    let r = vopr::run_seed(seed, a.ops, mutation);
                    if let (Some(v), false) = (&r.violation, a.json) {
                        let line = format!(
                            "FAIL seed {} ({}, {} ops): {}\n  replay: {}",
                            r.seed,
                            r.kind,
                            r.ops,
                            v.lines().next().unwrap_or(""),
                            replay_command(&r, a.ops, a.mutation.as_deref())
                        );
                        say(bar.as_ref(), &line);
                    }
                    let mut sum = summary.lock().expect("summary lock");
                    add_seed(&mut sum, r);
                    tick(bar.as_ref(), limit, started, sum.seeds, sum.violations);
                }
            });
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    summary.into_inner().expect("summary lock")
}

/// Progress on stderr while seeds run, only on a terminal: seeds done of `limit`, or
/// seconds of `--time` (whichever bounds the run), with the seeds and violations so far.
fn progress_bar(limit: Option<u64>, time_ns: Option<u64>) -> Option<ProgressBar> {
    let (len, unit) = match (limit, time_ns) {
        (Some(n), _) => (n, "seeds"),
        (None, Some(ns)) => (ns.div_ceil(1_000_000_000), "s"),
        (None, None) => return None,
    };
    crate::out::progress_bar(
        len.max(1),
        &format!("{{bar:40}} {{pos}}/{{len}} {unit} ({{elapsed}}, eta {{eta}}) {{msg}}"),
    )
}

/// Moves the progress bar, if any, after a seed: `seeds` done (or the seconds since
/// `started`, when no `limit` bounds the run), `violations` so far.
fn tick(bar: Option<&ProgressBar>, limit: Option<u64>, started: Instant, seeds: u64, violations: u64) {
    let Some(b) = bar else { return };
    b.set_message(format!("{seeds} seeds, {violations} violations"));
    b.set_position(if limit.is_some() { seeds } else { started.elapsed().as_secs() });
}

/// Prints `line` above the progress bar, if any.
fn say(bar: Option<&ProgressBar>, line: &str) {
    match bar {
        Some(b) => b.suspend(|| outln!("{line}")),
        None => outln!("{line}"),
    }
}

/// Counts one seed's run into the summary.
fn add_seed(sum: &mut Summary, r: SeedRun) {
    sum.seeds += 1;
    sum.operations += r.ops;
    sum.faults_injected += r.faults;
    sum.checks += r.checks;
    for c in &r.coverage {
        *sum.coverage.entry(c.clone()).or_insert(0) += 1;
    }
    if r.violation.is_some() {
        sum.violations += 1;
        sum.failures.push(r);
    }
}

/// `--seed S`: one seed; on failure, its shrunk trace.
fn replay(seed: u64, ops: u64, mutation: Option<Mutation>, name: Option<&str>, json: bool) -> Result<(), CliError> {
    let r = vopr::run_seed(seed, ops, mutation);
    let Some(v) = r.violation.clone() else {
        if json {
            outln!("{}", serde_json::to_string_pretty(&r).map_err(CliError::msg)?);
        } else {
            outln!(
                "vopr (simulated devices): seed {seed} ({}): {} operations, {} faults injected, {} checks, 0 violations",
                r.kind,
                r.ops,
                r.faults,
                r.checks
            );
        }
        return Ok(());
    };
    // A seed whose set-up panicked ran nothing: nothing to shrink or trace.
    let shrunk = if vopr::is_setup_failure(&v) { ops } else { vopr::shrink(seed, ops, mutation) };
    let (sr, log, geo) = vopr::run_seed_logged(seed, shrunk, mutation, true);
    let shown = sr.violation.clone().unwrap_or(v);
    let trace = geo.map(|geo| vopr::trace(&log, &geo, &shown, 40)).unwrap_or_default();
    if json {
        #[derive(serde::Serialize)]
        struct Failure<'a> {
            run: &'a SeedRun,
            shrunk_ops: u64,
            shrunk_violation: &'a str,
            trace: &'a [String],
            replay: String,
        }
        let f = Failure {
            run: &r,
            shrunk_ops: shrunk,
            shrunk_violation: &shown,
            trace: &trace,
            replay: replay_command(&r, shrunk, name),
        };
        outln!("{}", serde_json::to_string_pretty(&f).map_err(CliError::msg)?);
    } else {
        outln!("FAIL seed {seed} ({}, {} ops): {}", r.kind, r.ops, r.violation.as_deref().unwrap_or(""));
        outln!("shrunk: the first {shrunk} operations of the seed fail too: {shown}");
        outln!("replay: {}", replay_command(&r, shrunk, name));
        outln!("operations on the zones it names, and RESET_ALLs and flushes (the last {}):", trace.len());
        for line in &trace {
            outln!("  {line}");
        }
        outln!("(ZBLK_SIM_TRACE=1 prints every action of the replay to stderr)");
    }
    Err(CliError(format!("seed {seed}: violation")))
}

/// The summary of a `--runtime` run.
#[derive(Debug, Default, serde::Serialize)]
struct RuntimeSummary {
    seeds: u64,
    ios: u64,
    faults_injected: u64,
    checks: u64,
    violations: u64,
    failures: Vec<zblk_runtime::vopr::RuntimeSeedRun>,
    wall_seconds: f64,
    simulated: bool,
}

/// `--runtime`: runtime seeds, one after the other (each runs the runtime's threads
/// and up to four submitting threads), their images in a temporary directory.
fn run_runtime(a: &VoprArgs) -> Result<(), CliError> {
    let dir = std::env::temp_dir().join(format!("zblk-vopr-runtime-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| CliError(format!("{}: {e}", dir.display())))?;
    let (first, limit) = match (a.seed, a.seeds, a.time) {
        (Some(s), _, _) => (s, Some(1)),
        (None, Some(0), _) => return Err(CliError("--seeds must be at least 1".into())),
        (None, Some(n), _) => (a.first_seed, Some(n)),
        (None, None, Some(_)) => (a.first_seed, None),
        (None, None, None) => (a.first_seed, Some(10)),
    };
    let started = Instant::now();
    let deadline = a.time.map(|ns| started + Duration::from_nanos(ns));
    let bar = progress_bar(limit, a.time);
    let mut sum = RuntimeSummary::default();
    for i in 0.. {
        if limit.is_some_and(|n| i >= n) || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let Some(seed) = first.checked_add(i) else { break };
        let r = zblk_runtime::vopr::run_runtime_seed(seed, a.ops, &dir);
        sum.seeds += 1;
        sum.ios += r.ops;
        sum.faults_injected += r.faults;
        sum.checks += r.checks;
        if let Some(v) = &r.violation {
            sum.violations += 1;
            if !a.json {
                let line = format!(
                    "FAIL seed {seed} ({}, {}): {v}\n  replay: zblk vopr --runtime --seed {seed} --ops {}",
                    r.backend, r.policy, a.ops
                );
                say(bar.as_ref(), &line);
            }
            sum.failures.push(r);
        }
        tick(bar.as_ref(), limit, started, sum.seeds, sum.violations);
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let _ = std::fs::remove_dir_all(&dir);
    sum.wall_seconds = started.elapsed().as_secs_f64();
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&sum).map_err(CliError::msg)?);
    } else {
        outln!(
            "vopr --runtime (the real runtime over temporary images, media errors injected, power cut in some): {} seeds, {} I/Os, {} faults injected, {} checks, {} violations, {:.1} s",
            sum.seeds,
            sum.ios,
            sum.faults_injected,
            sum.checks,
            sum.violations,
            sum.wall_seconds
        );
    }
    if sum.violations > 0 {
        return Err(CliError(format!("{} of {} runtime seeds found violations", sum.violations, sum.seeds)));
    }
    Ok(())
}
