//! `zblk sweep EXPERIMENT`: the published experiments, run on simulated devices,
//! every policy side by side, with tables, plots and JSON rows.

use crate::out::{self, errln, out, outln};
use crate::plot::{Axis, Chart, Kind, Series};
use crate::{CliError, parse, plot};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Instant;
use zblk_core::engine::IssuePolicy;
use zblk_lab::experiments::SMR_20TB_TESTS;
use zblk_lab::sweeps::{self, Experiment as Exp, SweepOptions, SweepRow};

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
    /// Policies to compare, comma-separated (default: zwp,qd1,batch,zwl).
    #[arg(long, value_delimiter = ',', value_parser = parse_policy)]
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
    pub zeroes: super::sweep_zeroes::ZeroesArgs,
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
  split        8-member striped device: split order head vs tail (see docs/split-order.md)
  zeroes       zeroing 1 GiB and 10 GiB: unmapped write zeroes vs writing zeroes vs zero
               buffers; a writer's bandwidth while another region is zeroed

Policies: zwp (per-zone plugging), qd1 (single issuer, FIFO, the kernel's zoned_qd1_writes=1),
batch (single issuer draining the deepest plug first, bounded bypass), zwl (zone write locking
under an mq-deadline-like scheduler).

Every simulated number is a simulator number (virtual time on zblk's disk models) and is labelled
so; the published figures beside them are measurements of real disks. docs/calibration.md says
which parameters were fitted to which published points.";

fn parse_policy(s: &str) -> Result<IssuePolicy, String> {
    match IssuePolicy::parse(s) {
        Some(IssuePolicy::Passthrough) => {
            Err("passthrough is not a zone write policy a sweep compares (it breaks zone writes)".to_string())
        }
        Some(p) => Ok(p),
        None => Err(format!("unknown policy '{s}' (zwp, qd1, batch, zwl)")),
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
        Experiment::Split => return super::sweep_split::run(a.seed, a.json),
        Experiment::Zeroes => return super::sweep_zeroes::run(&a.zeroes, a.seed, a.json),
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
    let bar = if std::io::stderr().is_terminal() {
        let b = ProgressBar::new(total as u64);
        b.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} runs ({elapsed}, eta {eta}) {msg}").expect("valid"),
        );
        Some(b)
    } else {
        None
    };
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

fn describe(exp: Exp, o: &SweepOptions) -> String {
    match exp {
        Exp::SmrSeq | Exp::SmrNocache => format!(
            "sequential 1 MiB direct writes from the start of the disk across {} zones of 256 MiB, 1 job, \
             zonemode=zbd, end_fsync=1",
            o.seq_zones
        ),
        Exp::SmrZones => format!(
            "16 jobs x QD 32 x 1 MiB direct writes to random zones among the first K, zonemode=zbd, \
             {} s of virtual time each",
            o.zones_runtime_ns as f64 / 1e9
        ),
        Exp::Smr20tb => format!(
            "fio-style tests, zonemode=zbd, max 128 open zones; sequential ones write {} from the start, \
             random ones {} I/Os over the whole disk",
            zblk_core::units::format_bytes_exact(o.seq20_bytes),
            o.rand20_ios
        ),
    }
}

fn x_name(exp: Exp) -> &'static str {
    match exp {
        Exp::SmrZones => "K",
        Exp::Smr20tb => "test",
        _ => "QD",
    }
}

fn x_of(exp: Exp, r: &SweepRow) -> String {
    match exp {
        Exp::SmrZones => r.zones.unwrap_or(0).to_string(),
        Exp::Smr20tb => r.workload.clone(),
        _ => r.qd.unwrap_or(0).to_string(),
    }
}

/// Rows grouped by workload, in order, then by policy.
fn by_point(rows: &[SweepRow]) -> Vec<Vec<&SweepRow>> {
    let mut out: Vec<Vec<&SweepRow>> = Vec::new();
    for r in rows {
        match out.last_mut() {
            Some(g) if g[0].workload == r.workload => g.push(r),
            _ => out.push(vec![r]),
        }
    }
    out
}

fn policy_names(rows: &[SweepRow]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for r in rows {
        if !v.contains(&r.policy) {
            v.push(r.policy.clone());
        }
    }
    v
}

/// The tables of one experiment.
pub fn report(exp: Exp, o: &SweepOptions, rows: &[SweepRow]) -> String {
    let mut s = String::new();
    let device = rows.first().map_or(String::new(), |r| r.device.clone());
    let _ = writeln!(s, "== {}: {}", exp.name(), describe(exp, o));
    let _ = writeln!(s, "disk (SIMULATED): {device}");
    // The host side of the model (docs/calibration.md, M9): without this line a
    // reader would take per-zone plugging's loss on random zones for the disk's.
    // Below 1 MiB, so that a 1 MiB write has a remainder to name.
    let max_kib = zblk_lab::experiments::AHCI_MAX_SECTORS / 2;
    const { assert!(zblk_lab::experiments::AHCI_MAX_SECTORS / 2 < 1024) };
    let _ = writeln!(
        s,
        "host: an AHCI port, requests of at most {max_kib} KiB (a 1 MiB write goes as {max_kib} KiB + {} KiB)",
        1024 - max_kib
    );
    let _ = writeln!(
        s,
        "'sim' columns are simulator numbers (virtual time, mean of {} runs); 'pub' columns are \
         published measurements of the real disk.",
        o.layouts_for(exp)
    );
    let pols = policy_names(rows);
    let has_pub = |p: &str| rows.iter().any(|r| r.policy == p && r.published_mb_s.is_some());
    let zones = exp == Exp::SmrZones;
    // Header.
    let mut h1 = format!("{:>10} |", "");
    let mut h2 = format!("{:>10} |", x_name(exp));
    for p in &pols {
        let cols = if has_pub(p) {
            format!(" {:>8} {:>8} {:>7} {:>4}", "sim MB/s", "pub MB/s", "error", "")
        } else if zones {
            format!(" {:>8} {:>10}", "sim MB/s", "p99 ms sim")
        } else {
            format!(" {:>8}", "sim MB/s")
        };
        let w = cols.len() - 1;
        let _ = write!(h1, " {p:^w$} |");
        let _ = write!(h2, "{cols} |");
    }
    let _ = writeln!(s, "{h1}\n{h2}");
    for g in by_point(rows) {
        let mut line = format!("{:>10} |", x_of(exp, g[0]));
        for p in &pols {
            let Some(r) = g.iter().find(|r| &r.policy == p) else {
                continue;
            };
            if has_pub(p) {
                match (r.published_mb_s, r.error()) {
                    (Some(pb), Some(e)) => {
                        let mark = if e.abs() <= 0.10 { "ok" } else { "MISS" };
                        let _ = write!(line, " {:>8.1} {:>8.1} {:>+6.1}% {:>4} |", r.mb_s, pb, e * 100.0, mark);
                    }
                    _ => {
                        let _ = write!(line, " {:>8.1} {:>8} {:>7} {:>4} |", r.mb_s, "-", "", "");
                    }
                }
            } else if zones {
                let _ = write!(line, " {:>8.1} {:>10.0} |", r.mb_s, r.p99_ms);
            } else {
                let _ = write!(line, " {:>8.1} |", r.mb_s);
            }
        }
        let _ = writeln!(s, "{line}");
    }
    if rows.iter().any(|r| r.published_mb_s.is_some()) {
        let _ = writeln!(s, "error: simulated / published - 1; ok: within +-10%.");
    }
    s.push_str(&summary(exp, rows));
    s
}

/// The conclusions each experiment is run for.
fn summary(exp: Exp, rows: &[SweepRow]) -> String {
    let mut s = String::new();
    let groups = by_point(rows);
    let find = |g: &Vec<&SweepRow>, p: &str| g.iter().find(|r| r.policy == p).map(|r| (*r).clone());
    match exp {
        Exp::SmrSeq | Exp::SmrNocache => {
            let _ =
                writeln!(s, "\nEach policy against the simulated disk's sustained media rate over the region written:");
            for p in policy_names(rows) {
                let ratios: Vec<f64> =
                    rows.iter().filter(|r| r.policy == p).filter_map(|r| r.media_mb_s.map(|m| r.mb_s / m)).collect();
                if let (Some(lo), Some(hi)) =
                    (ratios.iter().copied().reduce(f64::min), ratios.iter().copied().reduce(f64::max))
                {
                    let _ = writeln!(
                        s,
                        "  {p:<6} {:>6.1}% .. {:>6.1}% of the media rate (simulated)",
                        lo * 100.0,
                        hi * 100.0
                    );
                }
            }
            if let Some(m) = rows.iter().find_map(|r| r.media_mb_s) {
                let _ = writeln!(s, "  media rate: {m:.1} MB/s (simulated disk)");
            }
        }
        Exp::SmrZones => {
            let pct = |a: f64, b: f64| (a / b.max(f64::MIN_POSITIVE) - 1.0) * 100.0;
            let mut lines = Vec::new();
            for g in &groups {
                if let (Some(b), Some(q)) = (find(g, "batch"), find(g, "qd1")) {
                    lines.push(format!(
                        "  K={:<4} {:>+6.1}% MB/s   mean latency {:>5.0} vs {:>5.0} ms ({:>+4.0}%)   p99 {:>5.0} vs {:>5.0} ms ({:>+4.0}%)",
                        b.zones.unwrap_or(0),
                        pct(b.mb_s, q.mb_s),
                        b.mean_ms,
                        q.mean_ms,
                        pct(b.mean_ms, q.mean_ms),
                        b.p99_ms,
                        q.p99_ms,
                        pct(b.p99_ms, q.p99_ms),
                    ));
                }
            }
            if !lines.is_empty() {
                let _ = writeln!(s, "\nbatch against qd1 (both simulated), per K: throughput gain, latency cost:");
                for l in lines {
                    let _ = writeln!(s, "{l}");
                }
            }
        }
        Exp::Smr20tb => {}
    }
    let errs: Vec<f64> = rows.iter().filter_map(SweepRow::error).collect();
    if !errs.is_empty() {
        let worst = errs.iter().fold(0f64, |a, e| a.max(e.abs()));
        let within = errs.iter().filter(|e| e.abs() <= 0.10).count();
        let _ = writeln!(
            s,
            "\nSimulated vs published: {within} of {} points within +-10%, worst {:.1}%.",
            errs.len(),
            worst * 100.0
        );
    }
    s
}

/// The chart of one experiment.
pub fn chart(exp: Exp, rows: &[SweepRow]) -> Chart {
    let pols = policy_names(rows);
    let x = |r: &SweepRow| match exp {
        Exp::SmrZones => f64::from(r.zones.unwrap_or(1)),
        Exp::Smr20tb => SMR_20TB_TESTS.iter().position(|t| t.name == r.workload).unwrap_or(0) as f64,
        _ => f64::from(r.qd.unwrap_or(1)),
    };
    let mut series = Vec::new();
    for (i, p) in pols.iter().enumerate() {
        let mine: Vec<&SweepRow> = rows.iter().filter(|r| &r.policy == p).collect();
        series.push(Series {
            label: format!("{p} (simulated)"),
            points: mine.iter().map(|r| (x(r), r.mb_s)).collect(),
            kind: Kind::Simulated(i),
        });
        let published: Vec<(f64, f64)> = mine.iter().filter_map(|r| r.published_mb_s.map(|m| (x(r), m))).collect();
        if !published.is_empty() {
            series.push(Series { label: format!("{p} (published)"), points: published, kind: Kind::Published(i) });
        }
    }
    if matches!(exp, Exp::SmrSeq | Exp::SmrNocache) {
        let media: Vec<(f64, f64)> =
            rows.iter().filter(|r| r.policy == pols[0]).filter_map(|r| r.media_mb_s.map(|m| (x(r), m))).collect();
        if !media.is_empty() {
            series.push(Series { label: "media rate (simulated)".into(), points: media, kind: Kind::Reference });
        }
    }
    let device = rows.first().map_or("", |r| {
        let d = r.device.split(" (").next().unwrap_or("");
        d.strip_prefix("simulated ").unwrap_or(d)
    });
    let (title, x_label, xa, ya) = match exp {
        Exp::SmrSeq => (
            format!("smr-seq: {device}, sequential 1 MiB writes (SIMULATED vs published)"),
            "queue depth",
            Axis::Log2,
            Axis::Linear,
        ),
        Exp::SmrNocache => (
            format!("smr-nocache: {device}, write cache off, sequential 1 MiB writes (SIMULATED)"),
            "queue depth",
            Axis::Log2,
            Axis::Linear,
        ),
        Exp::SmrZones => (
            format!("smr-zones: {device}, 16 jobs x QD32 x 1 MiB to random zones of the first K (SIMULATED)"),
            "K (zones written at random)",
            Axis::Log2,
            Axis::Linear,
        ),
        Exp::Smr20tb => (
            format!("smr-20tb: {device} (SIMULATED vs published)"),
            "test",
            Axis::Categories(SMR_20TB_TESTS.iter().map(|t| t.name.to_string()).collect()),
            Axis::Log10,
        ),
    };
    Chart { title, x_label: x_label.to_string(), y_label: "write throughput, MB/s".to_string(), x: xa, y: ya, series }
}
