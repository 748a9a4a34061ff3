//! `zblk corebench`: the core's own cost (the stack's submission path and the
//! engine), with and without zone write plugging.

use crate::CliError;
use clap::Args;
use std::time::Instant;
use zblk_core::engine::IssuePolicy;
use zblk_sim::corebench::{CoreBenchSpec, run_corebench};

/// Runs the same workload (4 KiB writes round-robin over 128 zones at QD 16 on the
/// simulated null device, no data) with per-zone plugging and with plugging bypassed,
/// alternating, and reports the best of each: BIOs per second of wall time through
/// submit → issue → complete, and their ratio. One thread, so per core.
#[derive(Args, Debug)]
pub struct CorebenchArgs {
    /// BIOs per run.
    #[arg(long, default_value_t = 2_000_000)]
    pub bios: u64,
    /// Runs per policy (the best is kept: noise only ever slows a run down).
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// Zones written round-robin.
    #[arg(long, default_value_t = 128)]
    pub zones: u32,
    /// BIOs in flight.
    #[arg(long, default_value_t = 16)]
    pub iodepth: u32,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `zblk corebench`.
pub fn run(a: &CorebenchArgs) -> Result<(), CliError> {
    if a.bios == 0 || a.rounds == 0 || a.zones == 0 || a.iodepth == 0 {
        return Err(CliError::msg("--bios, --rounds, --zones and --iodepth must be at least 1"));
    }
    let spec = CoreBenchSpec { bios: a.bios, zones: a.zones, iodepth: a.iodepth, bs_bytes: 4096 };
    let mut best = [f64::MAX; 2];
    let policies = [IssuePolicy::Zwp, IssuePolicy::Passthrough];
    for _ in 0..a.rounds {
        for (i, policy) in policies.iter().enumerate() {
            let t = Instant::now();
            let r = run_corebench(&spec, *policy);
            let secs = t.elapsed().as_secs_f64();
            if r.errors != 0 {
                return Err(CliError(format!("{} run had {} failed BIOs", policy.name(), r.errors)));
            }
            best[i] = best[i].min(secs);
        }
    }
    let rate = |secs: f64| a.bios as f64 / secs;
    let (zwp, pass) = (rate(best[0]), rate(best[1]));
    if a.json {
        let doc = serde_json::json!({
            "workload": spec,
            "rounds": a.rounds,
            "zwp_bios_per_s": zwp,
            "passthrough_bios_per_s": pass,
            "passthrough_over_zwp": pass / zwp,
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
    } else {
        println!(
            "core cost: {} x 4KiB writes over {} zones at QD {} on the simulated null device (best of {})",
            a.bios, a.zones, a.iodepth, a.rounds
        );
        println!("  zone write plugging (zwp): {:>8.2} M BIOs/s", zwp / 1e6);
        println!("  passthrough (no plugs):    {:>8.2} M BIOs/s", pass / 1e6);
        println!("  plugging costs {:.2}x passthrough time per BIO", pass / zwp);
    }
    Ok(())
}
