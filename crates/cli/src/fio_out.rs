//! fio-style results: the text report fio prints, and fio's
//! `--output-format=json` structure for the fields zblk has, so that scripts written
//! for fio read zblk's output. Every simulated result says that it is simulated.

use crate::CliError;
use indicatif::ProgressBar;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::path::Path;
use zblk_core::geometry::Geometry;
use zblk_core::params::DeviceParams;
use zblk_sim::presets::DeviceSpec;
use zblk_sim::{BenchReport, HostCpus, JobSpec, Sim, SimConfig, run_jobs_on};
use zblk_workload::stats::DirSummary;

/// Progress on stderr while a long simulation runs (only on a terminal).
pub struct Progress {
    bar: Option<ProgressBar>,
    runtime_ns: Option<u64>,
}

impl Progress {
    /// A progress display for `job` on a device of geometry `geo`.
    pub fn start(job: &JobSpec, geo: &Geometry) -> Progress {
        let (total, unit) = match job.runtime_ns {
            Some(rt) => (rt / 1_000_000, "ms (virtual)"),
            None => (job.io_bytes(geo) / job.bs_bytes.max(1) * u64::from(job.numjobs), "I/Os"),
        };
        let bar = crate::out::progress_bar(
            total.max(1),
            &format!("{{bar:40}} {{pos}}/{{len}} {unit} ({{elapsed}}, eta {{eta}})"),
        );
        Progress { bar, runtime_ns: job.runtime_ns }
    }

    /// Runs `jobs` on a simulation built from `cfg`, showing progress.
    pub fn run(
        self,
        spec: &DeviceSpec,
        cfg: &SimConfig,
        host: HostCpus,
        jobs: &[JobSpec],
        group: bool,
        trace: Option<&Path>,
    ) -> Result<BenchReport, CliError> {
        let mut sim = spec.sim(cfg).map_err(|e| CliError(format!("--dev: {e}")))?;
        sim.set_host_cpus(host);
        if let Some(path) = trace {
            trace_to(&mut sim, path)?;
        }
        if let Some(bar) = &self.bar {
            let bar = bar.clone();
            let time_based = self.runtime_ns.is_some();
            sim.set_progress(
                1 << 14,
                Box::new(move |now_ns, done| bar.set_position(if time_based { now_ns / 1_000_000 } else { done })),
            );
        }
        let report = run_jobs_on(&mut sim, jobs, group).map_err(CliError::msg)?;
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
        Ok(report)
    }
}

/// Writes every event of `sim` to `path` (`zblk bench --trace`), blkparse-style as
/// `zblk trace` prints them, a header naming the devices first.
fn trace_to(sim: &mut Sim, path: &Path) -> Result<(), CliError> {
    use std::io::Write;
    let shown = path.display().to_string();
    let file = std::fs::File::create(path).map_err(|e| CliError(format!("--trace {shown}: {e}")))?;
    let mut out = std::io::BufWriter::new(file);
    sim.start_tracing();
    let mut head = vec!["# zblk bench: a simulated device, virtual time (SIMULATED)".to_string()];
    head.extend(crate::cmd::trace::describe_devices(sim.stack()).into_iter().map(|l| format!("# {l}")));
    let mut failed = head.iter().try_for_each(|l| writeln!(out, "{l}")).err();
    let mut writer = zblk_core::stack::TraceWriter::new(sim.stack());
    let mut said = false;
    sim.set_trace_sink(Box::new(move |e| {
        if failed.is_none() {
            failed = writeln!(out, "{}", writer.line(e)).err();
        }
        if let (Some(err), false) = (&failed, said) {
            said = true;
            crate::out::errln!("zblk: --trace {shown}: {err}: the trace stops here");
        }
    }));
    Ok(())
}

/// fio's `num2str` style: 3 significant digits with k/M/G.
fn si(v: f64) -> String {
    let (v, unit) = if v >= 1e9 {
        (v / 1e9, "G")
    } else if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    if v >= 100.0 || unit.is_empty() { format!("{v:.0}{unit}") } else { format!("{v:.1}{unit}") }
}

fn bw(bytes_per_s: f64) -> String {
    let mib = bytes_per_s / (1u64 << 20) as f64;
    let mb = bytes_per_s / 1e6;
    if mib >= 1.0 {
        format!("{mib:.0}MiB/s ({mb:.0}MB/s)")
    } else {
        format!("{:.0}KiB/s ({:.0}kB/s)", bytes_per_s / 1024.0, bytes_per_s / 1e3)
    }
}

pub(crate) fn direction(out: &mut String, name: &str, d: &DirSummary) {
    if d.ios == 0 {
        return;
    }
    let _ = writeln!(
        out,
        "  {name}: IOPS={}, BW={}({}MiB/{}msec)",
        si(d.iops),
        bw(d.bw_bytes),
        d.io_bytes >> 20,
        d.runtime_ns / 1_000_000
    );
    let c = &d.clat;
    let (div, unit) = if c.max_ns < 10_000 {
        (1.0, "nsec")
    } else if c.max_ns < 10_000_000 {
        (1e3, "usec")
    } else {
        (1e6, "msec")
    };
    let _ = writeln!(
        out,
        "    clat ({unit}): min={:.0}, max={:.0}, avg={:.2}, stdev={:.2}",
        c.min_ns as f64 / div,
        c.max_ns as f64 / div,
        c.mean_ns / div,
        c.stddev_ns / div
    );
    let _ = writeln!(out, "     clat percentiles ({unit}):");
    for row in c.percentiles.chunks(4) {
        let cells: Vec<String> = row.iter().map(|(p, v)| format!("{p:5.2}th=[{:>6.0}]", *v as f64 / div)).collect();
        let _ = writeln!(out, "     | {}", cells.join(", "));
    }
}

/// The text report.
pub fn text(r: &BenchReport, device: &DeviceParams) -> String {
    let mut out = String::new();
    let g = &device.geometry;
    let _ = writeln!(
        out,
        "zblk bench [SIMULATED: {}; {} zones of {}; policy {}; seed {}; {} virtual]",
        r.device,
        if g.zoned { (g.capacity_bytes / g.zone_size_bytes.max(1)).to_string() } else { "no".to_string() },
        zblk_core::units::format_bytes_exact(g.zone_size_bytes),
        r.policy,
        r.seed,
        fmt_ns(r.virtual_ns)
    );
    for j in &r.jobs {
        job_text(&mut out, j, "simulated");
    }
    let e = &r.engine;
    let _ = writeln!(
        out,
        "engine: {} BIOs, {} requests, {} split, {} plugged, {} refused before the device, {} aborted, {} zone reports, {} plugs (peak {})",
        e.bios, e.requests, e.splits, e.plugged, e.refused, e.aborted, e.reports, e.plugs_allocated, e.plugs_peak
    );
    if !r.model.is_empty() {
        let items: Vec<String> = r.model.iter().map(|(k, v)| format!("{k}={}", trim_num(*v))).collect();
        let _ = writeln!(out, "device model (simulated): {}", items.join(" "));
    }
    if e.issuer_visits > 0 {
        let writes = r.jobs.iter().map(|j| j.write.ios).sum::<u64>();
        let _ = writeln!(
            out,
            "single issuer: {} zone visits, {:.2} writes per visit",
            e.issuer_visits,
            writes as f64 / e.issuer_visits as f64
        );
    }
    out
}

fn trim_num(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{v:.0}") } else { format!("{v:.3}") }
}

fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000_000 { format!("{:.3}s", ns as f64 / 1e9) } else { format!("{:.3}ms", ns as f64 / 1e6) }
}

pub(crate) fn dir_json(d: &DirSummary) -> Value {
    let percentile: serde_json::Map<String, Value> =
        d.clat.percentiles.iter().map(|(p, v)| (format!("{p:.6}"), json!(v))).collect();
    let clat = json!({
        "min": d.clat.min_ns,
        "max": d.clat.max_ns,
        "mean": d.clat.mean_ns,
        "stddev": d.clat.stddev_ns,
        "N": d.ios,
        "percentile": percentile,
    });
    json!({
        "io_bytes": d.io_bytes,
        "io_kbytes": d.io_bytes / 1024,
        "bw_bytes": d.bw_bytes.round() as u64,
        "bw": (d.bw_bytes / 1024.0).round() as u64,
        "iops": d.iops,
        "runtime": d.runtime_ns / 1_000_000,
        "total_ios": d.ios,
        "clat_ns": clat,
        // The simulator has no submission latency: total latency is completion latency.
        "lat_ns": clat,
    })
}

/// fio's text for one job: its header line (`origin` says where it ran: `simulated`
/// or `pid=N`), both directions, errors and zone resets.
pub(crate) fn job_text(out: &mut String, j: &zblk_sim::JobResult, origin: &str) {
    let err = j.first_error.map_or(0, |s| s.errno());
    let _ = writeln!(out, "{}: (groupid=0, jobs={}): err={err:>2}: {origin}", j.name, j.jobs);
    direction(out, "read", &j.read);
    direction(out, "write", &j.write);
    if j.errors > 0 {
        let first = j.first_error.map(|s| format!("{}: {s}", s.errno_name())).unwrap_or_default();
        let _ = writeln!(out, "  errors: {} I/Os failed, first: {first}", j.errors);
    }
    if j.zone_resets > 0 {
        let _ = writeln!(out, "  zone resets: {}", j.zone_resets);
    }
}

/// fio's `jobs` array for job results (the fields zblk has, and zblk's own under
/// `zblk`).
pub(crate) fn jobs_json(jobs: &[zblk_sim::JobResult]) -> Vec<Value> {
    jobs.iter()
        .map(|j| {
            json!({
                "jobname": j.name,
                "groupid": 0,
                "error": j.first_error.map_or(0, |s| s.errno()),
                "job_runtime": j.runtime_ns / 1_000_000,
                "read": dir_json(&j.read),
                "write": dir_json(&j.write),
                "zblk": {
                    "jobs": j.jobs,
                    "errors": j.errors,
                    "first_error": j.first_error.map(|s| format!("{}: {s}", s.errno_name())),
                    "zone_resets": j.zone_resets,
                },
            })
        })
        .collect()
}

/// fio's JSON output structure, with a `zblk` object saying what was simulated.
pub fn json(r: &BenchReport, device: &DeviceParams) -> String {
    let jobs = jobs_json(&r.jobs);
    let doc = json!({
        "fio version": format!("zblk-{}", env!("CARGO_PKG_VERSION")),
        "zblk": {
            "simulated": true,
            "device": r.device,
            "device_params": device,
            "policy": r.policy,
            "seed": r.seed,
            "virtual_time_ns": r.virtual_ns,
            "engine": r.engine,
            "sim": r.sim,
            "model": r.model.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        },
        "jobs": jobs,
    });
    serde_json::to_string_pretty(&doc).expect("JSON of plain values")
}
