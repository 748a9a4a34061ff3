//! `zblk sweep EXPERIMENT`: the published experiments, run on simulated devices,
//! every policy side by side, with tables, plots and JSON rows.

mod smr;
pub mod split;
pub mod zeroes;

use crate::out::{self, errln, out, outln};
use crate::{CliError, parse, plot};
use clap::{Args, ValueEnum};
use smr::{chart, report};
use std::time::Instant;
use zblk_core::engine::IssuePolicy;
use zblk_lab::experiments::SMR_20TB_TESTS;
use zblk_lab::sweeps::{self, Experiment as Exp, SweepOptions};

/// Runs one of the published experiments on simulated devices and prints the
/// simulated numbers beside the published ones where they exist.
///
/// Every number printed is a simulator number (virtual time on zblk's disk model),
/// labelled as such; published numbers are measurements of real disks. See
/// docs/calibration.md for what was fitted to what.
#[derive(Args, Debug)]
#[command(after_help = EXPERIMENTS_HELP)]
pub struct SweepArgs {
    /// Which experiment.
    #[arg(value_enum)]
    pub experiment: Experiment,
    /// Print one JSON array of rows instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Directory for plots (`EXPERIMENT.png` and `EXPERIMENT.svg`).
    #[arg(long, default_value = "target/zblk-plots", value_name = "DIR")]
    pub out: std::path::PathBuf,
    /// Draw no plots.
    #[arg(long = "no-plot")]
    pub no_plot: bool,
    /// Seed of every random choice: layout `i` of a point uses layout seed
    /// `seed - 1 + i` and simulation seed `seed + i`.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Policies to compare, comma-separated (the help names the default: every
    /// policy that keeps zone writes in order).
    #[arg(long, value_delimiter = ',', value_parser = parse_policy, help = policies_help())]
    pub policies: Vec<IssuePolicy>,
    /// Points to run, comma-separated: queue depths (smr-seq, smr-nocache), zone
    /// counts K (smr-zones) or test names (smr-20tb). Default: the published ones.
    #[arg(long, value_delimiter = ',')]
    pub points: Vec<String>,
    /// Runs each point is averaged over (default: 16 for smr-20tb, 4 for the
    /// others). Run `i` draws the disk's layout (its zone advance) from its layout
    /// seed where the preset does not fix it (smr-20tb; smr-30tb's is fitted, so
    /// its runs differ only in the simulation seed).
    #[arg(long)]
    pub layouts: Option<u32>,
    /// smr-seq, smr-nocache: zones each run writes (256 MiB each).
    #[arg(long = "seq-zones", default_value_t = SweepOptions::default().seq_zones)]
    pub seq_zones: u64,
    /// smr-zones: virtual time each run lasts (e.g. 20s).
    #[arg(long = "zones-runtime", default_value = "20s", value_parser = parse::duration_ns)]
    pub zones_runtime: u64,
    /// smr-20tb: bytes each sequential test writes.
    #[arg(long = "seq20-size", default_value = "4G", value_parser = parse::size)]
    pub seq20_size: u64,
    /// batch policy: how many times a waiting zone may be passed over by deeper or
    /// nearer zones before it goes first.
    #[arg(long = "batch-max-bypass", default_value_t = SweepOptions::default().batch_max_bypass)]
    pub batch_max_bypass: u32,
    /// batch policy: after draining a zone while others wait, keep the device for
    /// the zone's next write this long (0: never).
    #[arg(long = "batch-anticipate", default_value = "50us", value_parser = parse::duration_or_zero_ns)]
    pub batch_anticipate: u64,
    /// The zeroes experiment's options.
    #[command(flatten)]
    pub zeroes: zeroes::ZeroesArgs,
    /// smr-20tb: I/Os each random test makes.
    #[arg(long = "rand20-ios", default_value_t = SweepOptions::default().rand20_ios)]
    pub rand20_ios: u64,
}

const EXPERIMENTS_HELP: &str = "\
Experiments:
  smr-seq      30 TB SMR disk: sequential 1 MiB direct writes across zones, 1 job, QD 1..128,
               end_fsync (published: zwp and qd1)
  smr-zones    30 TB SMR disk: 16 jobs x QD 32 x 1 MiB writes to random zones among the first K,
               K = 1..128, 20 s each (published without numbers)
  smr-20tb     20 TB SMR disk: seqw4K1, seqw4K16, seqw1M1, seqw1M16, rndw4K16, rndw128K16
               (published: zwp and zwl)
  smr-nocache  smr-seq with the disk's write cache off: what QD=1 costs without a cache
  all          the four above
  smr-streams  30 TB SMR disk: N = 1..64 sequential streams, each QD 4 x 1 MiB in its own
               zones (offset_increment), end_fsync; throughput and p99 (no published figure)
  split        8-member striped device: split order head vs tail (see docs/split-order.md)
  zeroes       zeroing 1 GiB and 10 GiB: unmapped write zeroes vs writing zeroes vs zero
               buffers; a writer's bandwidth while another region is zeroed

Policies: zwp (per-zone plugging), qd1 (single issuer, FIFO, the kernel's zoned_qd1_writes=1),
batch (single issuer draining the deepest plug first, bounded bypass), zwl (zone write locking
under an mq-deadline-like scheduler).

Every simulated number is a simulator number (virtual time on zblk's disk models) and is labelled
so; the published figures beside them are measurements of real disks. docs/calibration.md says
which parameters were fitted to which published points.";

/// `--policies`' help: the policies a sweep compares by default.
fn policies_help() -> String {
    let names = crate::jobargs::policy_names(&IssuePolicy::compared(), ",");
    format!("Policies to compare, comma-separated (default: {names})")
}

/// One `--policies` name: a policy that keeps zone writes in order (a baseline
/// such as passthrough is refused).
fn parse_policy(s: &str) -> Result<IssuePolicy, String> {
    match IssuePolicy::parse(s) {
        Some(p) if p.info().baseline => {
            Err(format!("{} is not a zone write policy a sweep compares (it breaks zone writes)", p.name()))
        }
        Some(p) if p.needs_ordered_device() => Err(format!("{}: the sweeps' disks are simulated: {}", p.name(), {
            p.refusal_on(false).unwrap_or_default()
        })),
        Some(p) => Ok(p),
        None => {
            let names = crate::jobargs::policy_names(&IssuePolicy::compared(), ", ");
            Err(format!("unknown policy '{s}' ({names})"))
        }
    }
}

/// The experiments.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Experiment {
    /// Sequential 1 MiB writes across zones at QD 1..128 on the 30 TB SMR disk.
    SmrSeq,
    /// 16 jobs x QD 32 x 1 MiB writes to random zones among the first K zones.
    SmrZones,
    /// The 20 TB SMR disk's six published tests.
    #[value(name = "smr-20tb")]
    Smr20tb,
    /// smr-seq with the write cache off.
    SmrNocache,
    /// N sequential streams (1..64), each QD 4 x 1 MiB writes in its own zones, on
    /// the 30 TB SMR disk (not part of `all`).
    SmrStreams,
    /// smr-seq, smr-zones, smr-20tb and smr-nocache.
    All,
    /// Split order on a striped device: sequential reads with split remainders at
    /// the head or the tail of the BIO list, member seeks and throughput.
    Split,
    /// Zeroing 1 GiB and 10 GiB with unmap, with write zeroes and with zero
    /// buffers, and a writer's bandwidth under background zeroing.
    Zeroes,
}

impl Experiment {
    fn sweeps(self) -> Vec<Exp> {
        match self {
            Experiment::SmrSeq => vec![Exp::SmrSeq],
            Experiment::SmrZones => vec![Exp::SmrZones],
            Experiment::Smr20tb => vec![Exp::Smr20tb],
            Experiment::SmrNocache => vec![Exp::SmrNocache],
            Experiment::SmrStreams => vec![Exp::SmrStreams],
            Experiment::All => Exp::ALL.to_vec(),
            Experiment::Split | Experiment::Zeroes => Vec::new(),
        }
    }
}

fn options(a: &SweepArgs, exp: Exp) -> Result<SweepOptions, CliError> {
    let points = if a.points.is_empty() {
        None
    } else {
        let mut v = Vec::new();
        for p in &a.points {
            let x = match exp {
                Exp::Smr20tb => match SMR_20TB_TESTS.iter().position(|t| t.name.eq_ignore_ascii_case(p)) {
                    Some(i) => i as u32,
                    None => {
                        let names: Vec<&str> = SMR_20TB_TESTS.iter().map(|t| t.name).collect();
                        return Err(CliError(format!("--points: '{p}' is not a test ({})", names.join(", "))));
                    }
                },
                _ => p.parse().map_err(|_| CliError(format!("--points: '{p}' is not a number")))?,
            };
            v.push(x);
        }
        Some(v)
    };
    Ok(SweepOptions {
        policies: a.policies.clone(),
        points,
        layouts: a.layouts,
        seq_zones: a.seq_zones,
        zones_runtime_ns: a.zones_runtime,
        seq20_bytes: a.seq20_size,
        rand20_ios: a.rand20_ios,
        seed: a.seed,
        batch_max_bypass: a.batch_max_bypass,
        batch_anticipate_ns: a.batch_anticipate,
    })
}

/// Runs `zblk sweep`.
pub fn run(a: &SweepArgs) -> Result<(), CliError> {
    match a.experiment {
        Experiment::Split => return split::run(a.seed, a.json),
        Experiment::Zeroes => return zeroes::run(&a.zeroes, a.seed, a.json),
        _ => {}
    }
    let exps = a.experiment.sweeps();
    if !a.points.is_empty() && exps.len() > 1 {
        return Err(CliError::msg("--points: give one experiment, not 'all' (points differ between them)"));
    }
    let opts: Vec<(Exp, SweepOptions)> =
        exps.iter().map(|&e| options(a, e).map(|o| (e, o))).collect::<Result<_, _>>()?;
    let mut total = 0;
    for (e, o) in &opts {
        total += sweeps::runs(*e, o).map_err(CliError::msg)?;
    }
    let bar = crate::out::progress_bar(total as u64, "{bar:30} {pos}/{len} runs ({elapsed}, eta {eta}) {msg}");
    let started = Instant::now();
    let mut all_rows = Vec::new();
    let mut text = String::new();
    let mut plots = Vec::new();
    let mut offset = 0;
    for (exp, o) in &opts {
        let mut step = |s: &sweeps::SweepStep<'_>| {
            if let Some(b) = &bar {
                b.set_position((offset + s.done) as u64);
                b.set_message(format!("{} {} {}", s.experiment.name(), s.workload, s.policy.name()));
            }
        };
        let rows = sweeps::run(*exp, o, &mut step).map_err(CliError::msg)?;
        offset += sweeps::runs(*exp, o).map_err(CliError::msg)?;
        if !a.json {
            text.push_str(&report(*exp, o, &rows));
            text.push('\n');
        }
        if !a.no_plot {
            plots.extend(plot::draw(&chart(*exp, &rows), &a.out.join(exp.name()))?);
        }
        all_rows.extend(rows);
    }
    for p in &plots {
        out::done(format!("plot written: {}", p.display()));
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let wall = started.elapsed().as_secs_f64();
    let ios: u64 = all_rows.iter().map(|r| r.ios).sum();
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&all_rows).map_err(CliError::msg)?);
    } else {
        out!("{text}");
        for p in &plots {
            outln!("plot: {}", p.display());
        }
    }
    // Wall-clock figures vary from run to run: on stderr, apart from the results.
    errln!(
        "simulated {ios} I/Os in {wall:.1} s of wall time: {:.0} simulated I/Os per second",
        ios as f64 / wall.max(1e-9)
    );
    Ok(())
}
