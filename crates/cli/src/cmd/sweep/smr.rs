//! The tables and charts of the SMR experiments (`smr-seq`, `smr-zones`, `smr-20tb`,
//! `smr-nocache`, `smr-streams`): the lab's rows side by side by policy, the published figure and
//! the error beside each simulated one, and the conclusions each experiment is run
//! for.

use crate::plot::{Axis, Chart, Kind, Series};
use std::fmt::Write as _;
use zblk_lab::experiments::SMR_20TB_TESTS;
use zblk_lab::sweeps::{Experiment as Exp, SweepOptions, SweepRow};

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
        Exp::SmrStreams => format!(
            "N sequential streams (fio's numjobs with offset_increment), each QD {} x 1 MiB direct writes in its \
             own zones from the start of the disk, {} zones of 256 MiB in all (at least one per stream), \
             zonemode=zbd, end_fsync=1",
            zblk_lab::experiments::SMR_STREAMS_QD,
            zblk_lab::experiments::SMR_STREAMS_ZONES
        ),
    }
}

fn x_name(exp: Exp) -> &'static str {
    match exp {
        Exp::SmrZones => "K",
        Exp::Smr20tb => "test",
        Exp::SmrStreams => "N",
        _ => "QD",
    }
}

fn x_of(exp: Exp, r: &SweepRow) -> String {
    match exp {
        Exp::SmrZones => r.zones.unwrap_or(0).to_string(),
        Exp::Smr20tb => r.workload.clone(),
        Exp::SmrStreams => r.jobs.unwrap_or(0).to_string(),
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
    // Random zones and streams: throughput against latency.
    let zones = matches!(exp, Exp::SmrZones | Exp::SmrStreams);
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
    match exp {
        Exp::SmrSeq | Exp::SmrNocache | Exp::SmrStreams => {
            if exp == Exp::SmrStreams {
                s.push_str(&against_qd1(&groups, "N", |r| r.jobs.unwrap_or(0)));
            }
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
        Exp::SmrZones => s.push_str(&against_qd1(&groups, "K", |r| r.zones.unwrap_or(0))),
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

/// The batching issuer against the single issuer at each point (`x` names it):
/// throughput gained, latency paid.
fn against_qd1(groups: &[Vec<&SweepRow>], x_name: &str, x: impl Fn(&SweepRow) -> u32) -> String {
    let find = |g: &Vec<&SweepRow>, p: &str| g.iter().find(|r| r.policy == p).map(|r| (*r).clone());
    let pct = |a: f64, b: f64| (a / b.max(f64::MIN_POSITIVE) - 1.0) * 100.0;
    let mut lines = Vec::new();
    for g in groups {
        if let (Some(b), Some(q)) = (find(g, "batch"), find(g, "qd1")) {
            lines.push(format!(
                "  {x_name}={:<4} {:>+6.1}% MB/s   mean latency {:>5.0} vs {:>5.0} ms ({:>+4.0}%)   p99 {:>5.0} vs {:>5.0} ms ({:>+4.0}%)",
                x(&b),
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
    if lines.is_empty() {
        return String::new();
    }
    let mut s = format!("\nbatch against qd1 (both simulated), per {x_name}: throughput gain, latency cost:\n");
    for l in lines {
        s.push_str(&l);
        s.push('\n');
    }
    s
}

/// The chart of one experiment.
pub fn chart(exp: Exp, rows: &[SweepRow]) -> Chart {
    let pols = policy_names(rows);
    let x = |r: &SweepRow| match exp {
        Exp::SmrZones => f64::from(r.zones.unwrap_or(1)),
        Exp::Smr20tb => SMR_20TB_TESTS.iter().position(|t| t.name == r.workload).unwrap_or(0) as f64,
        Exp::SmrStreams => f64::from(r.jobs.unwrap_or(1)),
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
    if matches!(exp, Exp::SmrSeq | Exp::SmrNocache | Exp::SmrStreams) {
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
        Exp::SmrStreams => (
            format!("smr-streams: {device}, N sequential streams x QD4 x 1 MiB, each in its own zones (SIMULATED)"),
            "N (streams)",
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
