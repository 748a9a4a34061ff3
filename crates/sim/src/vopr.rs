//! `zblk vopr`: seeded, fault-injected simulation runs checked by the reference
//! model (after TigerBeetle's VOPR). Each seed draws a device or a stack, its
//! engines' settings, fault probabilities and a workload; the run is checked after
//! every step by the checker, the device oracle (every completion and every zone
//! against null_blk's rules) and the host oracle (every BIO's outcome against the
//! order it was submitted in). A violation is caught, not printed, and comes back
//! as the seed's result, with what replays it.
//!
//! docs/vopr.md describes the model's rules, the faults, the coverage and the
//! mutation check.

use super::driver::{Sim, SimChecks, null_model};
use super::faults::FaultConfig;
use super::random::{LoggedOp, RandomOps, random_config, random_stack};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::cell::Cell;
use std::collections::BTreeSet;
use std::io::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use zblk_core::engine::WpRecovery;
use zblk_core::geometry::Geometry;
use zblk_core::mutation::Mutation;
use zblk_core::stack::DevKind;
use zblk_core::units::{Sector, ZoneNo};

/// Operations per seed by default: a single device gets them all, a stack half
/// (each of its operations reaches several disks).
pub const DEFAULT_OPS: u64 = 1_000;

/// What one seed did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SeedRun {
    /// The seed.
    pub seed: u64,
    /// `device` or `stack`.
    pub kind: &'static str,
    /// Operations submitted.
    pub ops: u64,
    /// Faults injected.
    pub faults: u64,
    /// Checks made (checker, oracles).
    pub checks: u64,
    /// The violation, if one was found.
    pub violation: Option<String>,
    /// What the seed covered: device kinds, policies, zone append, operations,
    /// faults (see [`coverage`]).
    pub coverage: BTreeSet<String>,
}

/// What a simulation about to run covers, from its devices and engines.
fn coverage(sim: &Sim, rotational: &[bool]) -> BTreeSet<String> {
    let mut c = BTreeSet::new();
    let stack = sim.stack();
    for (dev, info) in stack.devices() {
        match info.kind {
            DevKind::Striped => c.insert("stack: striped".to_string()),
            DevKind::Linear => c.insert("stack: linear".to_string()),
            DevKind::Disk => {
                let e = sim.disk_engine(dev);
                let g = e.geometry();
                c.insert(format!("policy: {}", e.config().policy.name()));
                c.insert(format!("recovery: {:?}", e.config().wp_recovery).to_lowercase());
                if g.is_zoned() {
                    c.insert(if g.emulates_zone_append() { "append: emulated" } else { "append: native" }.into());
                    if g.nr_conv() > 0 {
                        c.insert("conventional zones".into());
                    }
                    if g.max_open() > 0 || g.max_active() > 0 {
                        c.insert("open/active limits".into());
                    }
                } else {
                    c.insert("regular disk".into());
                }
                if g.max_hw_wzeroes_unmap_sectors() > 0 {
                    c.insert("write zeroes: device unmaps".into());
                }
                true
            }
        };
    }
    for &r in rotational {
        c.insert(if r { "rotational" } else { "non-rotational" }.into());
    }
    c
}

/// The fault probabilities of a seed, each drawn from it (parts per million of the
/// requests they apply to); one seed in eight runs without faults.
pub fn fault_config(seed: u64) -> FaultConfig {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0fa1_75ee);
    // Drawn apart, so that the other faults are drawn as before it existed.
    let write_cache = ChaCha8Rng::seed_from_u64(seed ^ 0x00ca_c4e5).random_bool(0.5);
    if rng.random_range(0..8) == 0 {
        return FaultConfig { write_cache, ..FaultConfig::default() };
    }
    FaultConfig {
        write_error_ppm: rng.random_range(0..=10_000),
        zone_fail_ppm: rng.random_range(0..=500),
        read_error_ppm: rng.random_range(0..=5_000),
        timeout_ppm: rng.random_range(0..=3_000),
        write_cache,
        power_loss_ppm: rng.random_range(0..=10_000),
    }
}

/// Whether `seed` draws a stack (one in four) rather than a single device.
pub fn is_stack(seed: u64) -> bool {
    seed % 4 == 3
}

thread_local! {
    /// A vopr run is in progress on this thread: its panics are violations to
    /// report, not to print.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Installs (once) a panic hook that keeps quiet about the panics of vopr runs and
/// hands every other panic to the hook that was there.
fn quiet_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// Activates mutation `m` on this thread for the life of the guard.
struct MutationGuard;

impl MutationGuard {
    fn new(m: Option<Mutation>) -> MutationGuard {
        #[cfg(feature = "mutations")]
        zblk_core::mutation::set(m);
        #[cfg(not(feature = "mutations"))]
        assert!(m.is_none(), "mutations need the `mutations` feature");
        MutationGuard
    }
}

impl Drop for MutationGuard {
    fn drop(&mut self) {
        #[cfg(feature = "mutations")]
        zblk_core::mutation::set(None);
    }
}

/// Runs seed `seed` with `ops` operations (halved on a stack) and planted bug
/// `mutation`; with `log`, also returns every operation and the top device's
/// geometry (none when the seed's set-up panicked: nothing was built).
pub fn run_seed_logged(
    seed: u64,
    ops: u64,
    mutation: Option<Mutation>,
    log: bool,
) -> (SeedRun, Vec<LoggedOp>, Option<Geometry>) {
    run_seed_inner(seed, ops, mutation, log, SimChecks::default(), true)
}

/// Runs seed `seed` as [`run_seed`] does, with only the checks `checks` leaves on:
/// to show which of the independent checks catch a planted bug when the engine's
/// own invariants (or the host model's FLUSH check) do not.
pub fn run_seed_checked(seed: u64, ops: u64, mutation: Option<Mutation>, checks: SimChecks) -> SeedRun {
    run_seed_inner(seed, ops, mutation, false, checks, true).0
}

/// Runs seed `seed` as [`run_seed`] does, every power loss waiting for the BIOs in
/// flight instead of cutting them one time in two: to show which planted bugs only
/// a power loss with BIOs in flight meets.
pub fn run_seed_without_cuts(seed: u64, ops: u64, mutation: Option<Mutation>) -> SeedRun {
    run_seed_inner(seed, ops, mutation, false, SimChecks::default(), false).0
}

/// Which check a violation message comes from: `durability` (a write made durable
/// lost at a power loss), `device oracle`, `host oracle`, `checker`, `liveness` (BIOs
/// stuck), `set-up` (the seed's set-up panicked), or `invariant` (an assertion of
/// the engine, the stack or the device's zone accounting).
pub fn violation_kind(violation: &str) -> &'static str {
    if is_setup_failure(violation) {
        "set-up"
    } else if violation.contains("after a power loss, durable sector") {
        "durability"
    } else if violation.starts_with("checker violation") {
        "checker"
    } else if violation.starts_with("device oracle violation") {
        "device oracle"
    } else if violation.starts_with("host oracle violation") {
        "host oracle"
    } else if violation.contains("stuck") {
        "liveness"
    } else {
        "invariant"
    }
}

/// The simulation seed `seed` draws, and what its coverage needs of it.
struct SeedSim {
    sim: Sim,
    kernel_recovery: bool,
    /// Operations to run (a stack runs half).
    ops: u64,
    /// Each disk's `rotational`.
    rotational: Vec<bool>,
    /// The single device keeps a zone's writes in order.
    keeps_zone_order: bool,
}

/// Builds seed `seed`'s stack or single device with `faults`.
fn seed_sim(seed: u64, ops: u64, faults: FaultConfig, stack: bool) -> SeedSim {
    let debug = std::env::var_os("ZBLK_SIM_TRACE").is_some();
    if stack {
        let mut rs = random_stack(seed);
        rs.cfg.faults = faults;
        if debug {
            let _ = writeln!(std::io::stderr(), "seed {seed}: {:#?}", rs);
        }
        let rotational = rs.built.disks.iter().map(|(_, p)| p.rotational).collect();
        let kernel_recovery = rs.kernel_recovery;
        let sim = Sim::with_stack(rs.built, rs.cfg, &mut null_model);
        return SeedSim { sim, kernel_recovery, ops: (ops / 2).max(1), rotational, keeps_zone_order: false };
    }
    let mut cfg = random_config(seed);
    cfg.faults = faults;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x01a7_e4c7);
    cfg.host_latency_ns = if rng.random_bool(0.5) { 0 } else { rng.random_range(1..=5_000) };
    if debug {
        let _ = writeln!(std::io::stderr(), "seed {seed}: {cfg:#?}");
    }
    let sim = Sim::new(&cfg).unwrap_or_else(|e| panic!("seed {seed}: bad random config: {e}"));
    SeedSim {
        sim,
        kernel_recovery: cfg.engine.wp_recovery == WpRecovery::Kernel,
        ops,
        rotational: vec![cfg.device.rotational],
        keeps_zone_order: cfg.keeps_zone_order,
    }
}

/// A seed ready to run: its simulation, workload and what it covers so far.
struct Prepared {
    sim: Sim,
    w: RandomOps,
    geo: Geometry,
    covered: BTreeSet<String>,
    kernel_recovery: bool,
    keeps_zone_order: bool,
}

/// Draws and builds seed `seed` (its set-up): the simulation, its checks, the
/// workload.
fn prepare(seed: u64, ops: u64, faults: FaultConfig, log: bool, checks: SimChecks, cuts: bool) -> Prepared {
    if zblk_core::mutation::on(Mutation::SeedSetupPanics) && seed % 3 == 0 {
        panic!("a panic planted in the set-up (mutation seed-setup-panics)");
    }
    let SeedSim { mut sim, kernel_recovery, ops, rotational, keeps_zone_order } =
        seed_sim(seed, ops, faults, is_stack(seed));
    sim.set_checks(checks);
    let geo = sim.device_geometry();
    let covered = coverage(&sim, &rotational);
    let mut w =
        RandomOps::new(&geo, kernel_recovery, ops, seed).with_qd1_switch().with_power_loss(faults.power_loss_ppm, seed);
    if log {
        w = w.with_log();
    }
    if !cuts {
        w = w.without_cuts_in_flight();
    }
    Prepared { sim, w, geo, covered, kernel_recovery, keeps_zone_order }
}

/// The words that start the violation of a seed whose set-up panicked.
pub const SETUP_PANIC: &str = "the seed's set-up panicked";

/// Whether `violation` is a seed's set-up panicking rather than a check failing
/// (nothing ran: there is nothing to shrink).
pub fn is_setup_failure(violation: &str) -> bool {
    violation.starts_with(SETUP_PANIC)
}

/// The text of a panic's payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic with a non-text payload".to_string())
}

/// Runs `f` with this thread's panics kept quiet (they become the seed's
/// violation), catching a panic. A seed is a simulation of its own, sharing nothing
/// with the seeds beside it, so its panic is caught here, around the seed alone:
/// the seed fails, the run goes on. This catching is the checker's, local to a
/// seed; the product's threads are not meant to unwind (a release profile may
/// abort on panic, which would end a vopr run at its first panic instead).
fn quietly<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    QUIET.with(|q| q.set(true));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(false));
    outcome.map_err(|payload| panic_text(&*payload))
}

fn run_seed_inner(
    seed: u64,
    ops: u64,
    mutation: Option<Mutation>,
    log: bool,
    checks: SimChecks,
    cuts: bool,
) -> (SeedRun, Vec<LoggedOp>, Option<Geometry>) {
    quiet_hook();
    let _m = MutationGuard::new(mutation);
    let faults = fault_config(seed);
    let stack = is_stack(seed);
    let kind = if stack { "stack" } else { "device" };
    let prepared = match quietly(|| prepare(seed, ops, faults, log, checks, cuts)) {
        Ok(p) => p,
        Err(why) => {
            let violation = Some(format!("{SETUP_PANIC}: {why}"));
            return (SeedRun { seed, kind, violation, ..SeedRun::default() }, Vec::new(), None);
        }
    };
    let Prepared { mut sim, mut w, geo, mut covered, kernel_recovery, keeps_zone_order } = prepared;
    let violation = quietly(|| sim.run(&mut w)).err();
    let stats = sim.stats();
    covered.extend(w.report().op_kinds.keys().map(|k| format!("op: {k}")));
    covered.extend(sim.faults_by_kind().keys().map(|k| format!("fault: {k}")));
    let recovery = if kernel_recovery { "kernel recovery" } else { "report recovery" };
    covered.extend(w.report().after_write_errors.keys().map(|k| format!("after a write error ({recovery}): {k}")));
    if w.report().qd1_switches > 0 {
        covered.insert("zoned_qd1_writes written at run time".into());
    }
    if faults.write_cache {
        covered.insert("volatile write cache".into());
    }
    if keeps_zone_order {
        covered.insert("device keeps zone order".into());
    }
    if stats.pipe_early > 0 {
        covered.insert("pipelining: a completion held for zone order".into());
    }
    if stats.cuts_in_flight > 0 {
        covered.insert("power loss with BIOs in flight".into());
    }
    if stats.cuts_pipelined > 0 {
        covered.insert("power loss with pipelined writes in flight".into());
    }
    if faults != (FaultConfig { write_cache: faults.write_cache, ..FaultConfig::default() }) {
        covered.insert("faults on".into());
    }
    let run = SeedRun {
        seed,
        kind,
        ops: w.report().ops,
        faults: stats.faults,
        checks: stats.checks,
        violation,
        coverage: covered,
    };
    (run, w.log().to_vec(), Some(geo))
}

/// Runs seed `seed` (see [`run_seed_logged`]).
pub fn run_seed(seed: u64, ops: u64, mutation: Option<Mutation>) -> SeedRun {
    run_seed_logged(seed, ops, mutation, false).0
}

/// The fewest operations of seed `seed` that still fail (the workload of a seed
/// with fewer operations is a prefix of the one with more), found by bisection
/// between 1 and `ops`, which fails.
pub fn shrink(seed: u64, ops: u64, mutation: Option<Mutation>) -> u64 {
    let (mut lo, mut hi) = (1, ops);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if run_seed(seed, mid, mutation).violation.is_some() {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    hi
}

/// The operations that matter to a violation: those touching the zones its message
/// names (by sector), and those of no zone (flushes, RESET_ALL), the last `max` of
/// them, one line each.
pub fn trace(log: &[LoggedOp], geo: &Geometry, violation: &str, max: usize) -> Vec<String> {
    let sectors = named_sectors(violation);
    let zone = |s: u64| (geo.is_zoned() && s < geo.nr_sectors()).then(|| geo.zone_no(Sector(s)));
    let zones: Vec<ZoneNo> = sectors.iter().filter_map(|&s| zone(s)).collect();
    let matters = |op: &LoggedOp| {
        let b = op.bio;
        if zones.is_empty() || !b.op.has_range() && !b.op.is_zone_mgmt() {
            return true;
        }
        if b.op == zblk_core::bio::Op::ZoneResetAll {
            return true;
        }
        let last = b.sector.0 + u64::from(b.nr_sectors).max(1) - 1;
        match (zone(b.sector.0), zone(last)) {
            (Some(a), Some(z)) => zones.iter().any(|x| (a.0..=z.0).contains(&x.0)),
            _ => true,
        }
    };
    let lines: Vec<String> = log
        .iter()
        .enumerate()
        .filter(|(_, op)| matters(op))
        .map(|(i, op)| {
            let result = match op.result {
                None if op.lost => "(in flight at a power loss: never completed)".to_string(),
                None => "(in flight)".to_string(),
                Some(Ok(s)) => format!("ok at {}", s.0),
                Some(Err(e)) => format!("{e:?} (errno {})", e.errno()),
            };
            let flags = if op.bio.flags == zblk_core::bio::BioFlags::NONE {
                String::new()
            } else {
                format!(" {:?}", op.bio.flags)
            };
            format!(
                "#{:<6} {:<14} sector {:<8} +{:<5}{flags} -> {result}",
                i + 1,
                op.bio.op.name(),
                op.bio.sector.0,
                op.bio.nr_sectors
            )
        })
        .collect();
    let skip = lines.len().saturating_sub(max);
    lines[skip..].to_vec()
}

/// The sectors a violation message names (`s1234`, or `sector 1234`).
fn named_sectors(text: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    for (i, w) in bytes.windows(2).enumerate() {
        let boundary = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if boundary && w[0] == b's' && w[1].is_ascii_digit() {
            let digits: String = text[i + 1..].chars().take_while(char::is_ascii_digit).collect();
            if let Ok(v) = digits.parse() {
                out.push(v);
            }
        }
    }
    out.truncate(2);
    out
}
