//! `zblk corebench`: the engine's own cost, on the engine alone (no simulator, no
//! timing model), in four shapes, with and without zone write plugging.

use crate::CliError;
use crate::out::outln;
use clap::Args;
use std::time::Instant;
use zblk_core::corebench::{CoreBenchSpec, Shape, run_corebench};
use zblk_core::engine::IssuePolicy;

/// Measures BIOs per second of wall time through the engine alone, driven by a
/// minimal loop whose device completes every request at once, oldest first. Four
/// shapes: `uncontended` (4 KiB writes round-robin over 1024 zones at QD 16: no BIO
/// ever waits in a plug), `queued` (sequential 4 KiB writes over 4 zones at QD 64:
/// nearly every BIO waits in its zone's plug), `append` (4 KiB zone appends over 4
/// zones at QD 64: emulated with plugging, native and passed through without),
/// `pipelined` (the queued shape under zone write pipelining, `pipeline`, on a device
/// completing newest first: completions wait for the writes before them). Each
/// shape runs with per-zone plugging (`zwp`; `pipeline` for the last) and with plugging bypassed
/// (`passthrough`), alternating, on one thread; the best run of each is kept (noise
/// only ever slows a run down).
#[derive(Args, Debug)]
#[command(after_long_help = "Targets (best of several runs, one core): uncontended with plugging at least \
10 M BIOs/s, queued at least 5 M, plugging at most 1.5x passthrough's time per BIO.")]
pub struct CorebenchArgs {
    /// BIOs per run.
    #[arg(long, default_value_t = 2_000_000)]
    pub bios: u64,
    /// Runs per policy and shape.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// Shapes to run, comma-separated (uncontended, queued, append, pipelined).
    #[arg(long, value_delimiter = ',', default_value = "uncontended,queued,append,pipelined")]
    pub shapes: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The best of one shape.
#[derive(Debug, serde::Serialize)]
struct ShapeResult {
    shape: &'static str,
    spec: CoreBenchSpec,
    /// The policy that keeps zone writes in order: `zwp`, or `pipeline` for the
    /// pipelined shape (the `zwp_` fields are its).
    policy: &'static str,
    zwp_bios_per_s: f64,
    passthrough_bios_per_s: f64,
    /// Time per BIO with plugging over time per BIO without.
    plugging_over_passthrough: f64,
    /// BIOs that waited in a plug (zwp run).
    plugged: u64,
}

/// Runs `shape` `a.rounds` times with its ordered policy and with passthrough, the
/// best run of each kept; `bar` moves after each run.
fn measure(shape: Shape, a: &CorebenchArgs, bar: Option<&indicatif::ProgressBar>) -> Result<ShapeResult, CliError> {
    let spec = shape.spec(a.bios);
    let policies = [shape.ordered_policy(), IssuePolicy::Passthrough];
    let mut best = [f64::MAX; 2];
    let mut plugged = 0;
    for _ in 0..a.rounds {
        for (i, policy) in policies.iter().enumerate() {
            let t = Instant::now();
            let r = run_corebench(&spec, *policy);
            let secs = t.elapsed().as_secs_f64();
            if r.errors != 0 {
                return Err(CliError(format!("{} {} run had {} failed BIOs", shape.name(), policy.name(), r.errors)));
            }
            // What waited in a plug, from the run that plugs (the baseline has none).
            if policy.plugs() {
                plugged = r.engine.plugged;
            }
            best[i] = best[i].min(secs);
            if let Some(b) = bar {
                b.set_message(format!("{} {}", shape.name(), policy.name()));
                b.inc(1);
            }
        }
    }
    let rate = |secs: f64| a.bios as f64 / secs;
    Ok(ShapeResult {
        shape: shape.name(),
        spec,
        policy: policies[0].name(),
        zwp_bios_per_s: rate(best[0]),
        passthrough_bios_per_s: rate(best[1]),
        plugging_over_passthrough: best[0] / best[1],
        plugged,
    })
}

/// Runs `zblk corebench`.
pub fn run(a: &CorebenchArgs) -> Result<(), CliError> {
    if a.bios == 0 || a.rounds == 0 {
        return Err(CliError::msg("--bios and --rounds must be at least 1"));
    }
    let shapes = a
        .shapes
        .iter()
        .map(|s| {
            Shape::ALL.into_iter().find(|sh| sh.name() == s).ok_or_else(|| {
                CliError(format!("--shapes: unknown shape {s:?} (uncontended, queued, append, pipelined)"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Progress on stderr, only on a terminal, moved between runs (never inside one).
    let bar = crate::out::progress_bar(
        shapes.len() as u64 * u64::from(a.rounds) * 2,
        "{bar:40} {pos}/{len} runs ({elapsed}, eta {eta}) {msg}",
    );
    let mut results = Vec::new();
    for shape in shapes {
        results.push(measure(shape, a, bar.as_ref())?);
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if a.json {
        let doc = serde_json::json!({ "rounds": a.rounds, "bios": a.bios, "shapes": results });
        outln!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
        return Ok(());
    }
    outln!("core cost: the engine alone, {} BIOs per run, best of {} runs, one thread", a.bios, a.rounds);
    outln!(
        "{:<12} {:>9} {:>6} {:>14} {:>14} {:>10} {:>9}",
        "shape",
        "zones",
        "QD",
        "zwp M/s",
        "pass M/s",
        "zwp/pass",
        "plugged"
    );
    for r in &results {
        outln!(
            "{:<12} {:>9} {:>6} {:>14.2} {:>14.2} {:>9.2}x {:>8.0}%",
            r.shape,
            r.spec.zones,
            r.spec.iodepth,
            r.zwp_bios_per_s / 1e6,
            r.passthrough_bios_per_s / 1e6,
            r.plugging_over_passthrough,
            100.0 * r.plugged as f64 / a.bios as f64
        );
    }
    outln!("(zwp/pass: time per BIO with plugging over time per BIO without; plugged: BIOs that waited in a plug)");
    Ok(())
}
