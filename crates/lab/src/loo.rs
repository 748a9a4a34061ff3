//! Leave-one-out over the published points: each fitted number of the SMR disk model
//! refitted without each point it was fitted to, and the simulated error at that
//! point with the refitted value (a held-out error). Every number produced here is a
//! simulator number. The criteria are the ones docs/calibration.md states:
//!
//! - `od_rate`: least squares on the QD 1 sequential 1 MiB points of both disks.
//! - the cache size (`cache_segments`): the 20 TB disk's 4 KiB random writes; left
//!   out, it is refitted to the 128 KiB random writes (the nearest on a grid).
//! - the host turnaround: the 20 TB disk's seqw4K1 with per-zone plugging; left out,
//!   it is refitted to the same test under zone write locking.
//! - the 30 TB destage window and zone advance, together: the most per-zone
//!   plugging points of QD 8 to 128 within ±10 %, ties broken by the smaller worst
//!   error, over [`geometry_family`]'s grid.
//!
//! The structural choices (M1, M2, the 20 TB destage order, the host's request
//! split) are not refitted here: they are not numbers a point moves.
//!
//! [`window_family`] runs the 30 TB disk's family of destage windows and zone resume
//! costs on per-zone plugging, QD 8 to 128, with the zone advance drawn per layout
//! (revisions 1 and 2 drew each zone's origin): with the phase averaged away, no
//! member fits QD 64 and QD 128 together. [`geometry_family`] fixes the advance and
//! runs windows × advances: the grid revision 3 is fitted on (docs/calibration.md).

use crate::experiments::{HOST_LATENCY_NS, SMR_20TB_TESTS, SMR_SEQ_QD1, SMR_SEQ_ZWP, smr_20tb_job, smr_seq_job};
use crate::sweeps::{Experiment, RunSetup, SweepError, run_one};
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_sim::hdd::{HddParams, OD_RATE};
use zblk_workload::job::{JobSpec, Rw};

/// One left-out point.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LooRow {
    /// The point left out, e.g. `30 TB QD1 zwp`.
    pub point: String,
    /// Its published figure, MB/s.
    pub published_mb_s: f64,
    /// The parameter refitted without it.
    pub parameter: &'static str,
    /// The parameter's value fitted on every point.
    pub fitted: String,
    /// The value refitted without this point.
    pub refitted: String,
    /// Simulated / published − 1 with the fitted value (in-sample).
    pub in_sample_error: f64,
    /// Simulated / published − 1 with the refitted value (held out).
    pub held_out_error: f64,
}

/// How much to simulate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LooOptions {
    /// Runs each point is averaged over (as `zblk sweep --layouts`); `None`: the
    /// experiment's own, as the sweeps.
    pub layouts: Option<u32>,
    /// Zones each 30 TB sequential run writes.
    pub seq_zones: u64,
    /// Bytes of each 20 TB sequential test.
    pub seq20_bytes: u64,
    /// I/Os of each 20 TB random test.
    pub rand20_ios: u64,
}

impl Default for LooOptions {
    /// The sweeps' defaults (`zblk sweep`), so that the in-sample errors are the
    /// tables' own.
    fn default() -> Self {
        LooOptions { layouts: None, seq_zones: 32, seq20_bytes: 4 << 30, rand20_ios: 60_000 }
    }
}

/// The 30 TB disk's destage windows the refit chooses among.
pub const WINDOWS: [u32; 5] = [1, 2, 3, 4, 5];
/// The per-zone plugging QDs of `smr-seq` the window is fitted to (and the window
/// family is run on).
pub const WINDOW_QDS: [u32; 5] = [8, 16, 32, 64, 128];
/// The cache sizes (segments of 64 KiB) the refit chooses among.
pub const CACHE_GRID: [u32; 9] = [5400, 6000, 6600, 7200, 7800, 8400, 9000, 9600, 10200];

/// A published point: which disk, which job, which policy.
struct Pt {
    name: String,
    published: f64,
    exp: Experiment,
    job: JobSpec,
    policy: IssuePolicy,
}

fn seq30(qd: u32, policy: IssuePolicy, o: &LooOptions) -> Pt {
    let i = crate::experiments::SMR_SEQ_QD.iter().position(|&q| q == qd).expect("a published QD");
    let published = if policy == IssuePolicy::Zwp { SMR_SEQ_ZWP[i] } else { SMR_SEQ_QD1[i] };
    Pt {
        name: format!("30 TB QD{qd} {}", policy.name()),
        published,
        exp: Experiment::SmrSeq,
        job: JobSpec { end_fsync: true, ..smr_seq_job(qd, o.seq_zones) },
        policy,
    }
}

fn t20(name: &str, policy: IssuePolicy, o: &LooOptions) -> Pt {
    let t = SMR_20TB_TESTS.iter().find(|t| t.name == name).expect("a 20 TB test");
    let random = t.rw == Rw::RandWrite;
    Pt {
        name: format!("20 TB {name} {}", policy.name()),
        published: if policy == IssuePolicy::Zwl { t.zwl_mb_s } else { t.zwp_mb_s },
        exp: Experiment::Smr20tb,
        job: JobSpec { end_fsync: !random, ..smr_20tb_job(t, o.seq20_bytes, o.rand20_ios) },
        policy,
    }
}

/// Simulated MB/s at `p` on `disk`, mean over the layouts (the sweeps' seeds).
fn sim(p: &Pt, disk: &HddParams, host_ns: u64, o: &LooOptions) -> Result<f64, SweepError> {
    let engine = EngineConfig { policy: p.policy, ..EngineConfig::default() };
    let mut bw = 0.0;
    let n = o.layouts.unwrap_or(p.exp.default_layouts());
    for i in 0..u64::from(n) {
        let setup = RunSetup { host_latency_ns: host_ns, ..RunSetup::for_disk(disk, p.exp.max_open(), i, 1 + i) };
        let r = run_one(disk, engine, &p.job, &setup)?;
        bw += r.jobs[0].write.bw_bytes;
    }
    Ok(bw / f64::from(n) / 1e6)
}

/// `disk` destaging among its `window` oldest dirty extents.
fn with_window(disk: &HddParams, window: u32) -> HddParams {
    HddParams { destage: zblk_sim::hdd::Destage { window, ..disk.destage }, ..disk.clone() }
}

fn with_od(disk: &HddParams, od_mb_s: f64) -> HddParams {
    // The ID rate follows the OD rate (same radius ratio).
    let ratio = disk.id_rate / disk.od_rate;
    HddParams { od_rate: od_mb_s * 1e6, id_rate: od_mb_s * 1e6 * ratio, ..disk.clone() }
}

/// Every leave-one-out row; `progress` is told each point as it starts.
pub fn leave_one_out(o: &LooOptions, progress: &mut dyn FnMut(&str)) -> Result<Vec<LooRow>, SweepError> {
    let mut rows = Vec::new();
    od_rate_rows(o, progress, &mut rows)?;
    cache_rows(o, progress, &mut rows)?;
    turnaround_rows(o, progress, &mut rows)?;
    geometry_rows(o, progress, &mut rows)?;
    Ok(rows)
}

fn od_rate_rows(o: &LooOptions, progress: &mut dyn FnMut(&str), rows: &mut Vec<LooRow>) -> Result<(), SweepError> {
    let pts = [seq30(1, IssuePolicy::Zwp, o), seq30(1, IssuePolicy::Qd1, o), t20("seqw1M1", IssuePolicy::Zwp, o)];
    let mut s = Vec::new();
    for p in &pts {
        progress(&p.name);
        s.push(sim(p, &p.exp.disk(), HOST_LATENCY_NS, o)?);
    }
    // The media-bound QD 1 rate is proportional to od_rate: least squares of a scale.
    let fit = |skip: Option<usize>| {
        let keep = |i: &usize| Some(*i) != skip;
        let num: f64 = (0..pts.len()).filter(keep).map(|i| s[i] * pts[i].published).sum();
        let den: f64 = (0..pts.len()).filter(keep).map(|i| s[i] * s[i]).sum();
        OD_RATE / 1e6 * num / den
    };
    for (j, p) in pts.iter().enumerate() {
        let od = (fit(Some(j)) * 10.0).round() / 10.0;
        progress(&format!("{} (od_rate {od} MB/s)", p.name));
        let held = sim(p, &with_od(&p.exp.disk(), od), HOST_LATENCY_NS, o)?;
        rows.push(LooRow {
            point: p.name.clone(),
            published_mb_s: p.published,
            parameter: "od_rate (MB/s)",
            fitted: format!("{}", OD_RATE / 1e6),
            refitted: format!("{od}"),
            in_sample_error: s[j] / p.published - 1.0,
            held_out_error: held / p.published - 1.0,
        });
    }
    Ok(())
}

fn cache_rows(o: &LooOptions, progress: &mut dyn FnMut(&str), rows: &mut Vec<LooRow>) -> Result<(), SweepError> {
    let (left, other) = (t20("rndw4K16", IssuePolicy::Zwp, o), t20("rndw128K16", IssuePolicy::Zwp, o));
    let disk = left.exp.disk();
    let with = |segs: u32| HddParams { cache_segments: segs, ..disk.clone() };
    // Refit on the other random point: the grid value nearest its published figure.
    let mut best: Option<(f64, u32)> = None;
    for segs in CACHE_GRID {
        progress(&format!("{} (cache {segs} segments)", other.name));
        let e = (sim(&other, &with(segs), HOST_LATENCY_NS, o)? / other.published - 1.0).abs();
        progress(&format!("{} (cache {segs} segments): |error| {:.1} %", other.name, e * 100.0));
        if best.is_none_or(|(b, _)| e < b) {
            best = Some((e, segs));
        }
    }
    let segs = best.expect("a grid").1;
    progress(&left.name);
    let in_sample = sim(&left, &disk, HOST_LATENCY_NS, o)?;
    let held = if segs == disk.cache_segments { in_sample } else { sim(&left, &with(segs), HOST_LATENCY_NS, o)? };
    rows.push(LooRow {
        point: left.name.clone(),
        published_mb_s: left.published,
        parameter: "cache (64 KiB segments)",
        fitted: disk.cache_segments.to_string(),
        refitted: segs.to_string(),
        in_sample_error: in_sample / left.published - 1.0,
        held_out_error: held / left.published - 1.0,
    });
    Ok(())
}

fn turnaround_rows(o: &LooOptions, progress: &mut dyn FnMut(&str), rows: &mut Vec<LooRow>) -> Result<(), SweepError> {
    let (left, other) = (t20("seqw4K1", IssuePolicy::Zwp, o), t20("seqw4K1", IssuePolicy::Zwl, o));
    let disk = left.exp.disk();
    // At QD 1 below the media rate, each 4 KiB write costs the turnaround plus the
    // disk's own time: 1/rate is linear in the turnaround. Two runs give the line.
    let (l1, l2) = (HOST_LATENCY_NS, HOST_LATENCY_NS + 6_000);
    progress(&format!("{} (two turnarounds)", other.name));
    let (r1, r2) = (sim(&other, &disk, l1, o)?, sim(&other, &disk, l2, o)?);
    let slope = (1.0 / r2 - 1.0 / r1) / (l2 - l1) as f64;
    let l = l1 as f64 + (1.0 / other.published - 1.0 / r1) / slope;
    let l = ((l / 100.0).round() * 100.0).max(0.0) as u64;
    progress(&format!("{} (turnaround {} ns)", left.name, l));
    let in_sample = sim(&left, &disk, HOST_LATENCY_NS, o)?;
    let held = sim(&left, &disk, l, o)?;
    rows.push(LooRow {
        point: left.name.clone(),
        published_mb_s: left.published,
        parameter: "host turnaround (µs)",
        fitted: format!("{}", HOST_LATENCY_NS as f64 / 1e3),
        refitted: format!("{}", l as f64 / 1e3),
        in_sample_error: in_sample / left.published - 1.0,
        held_out_error: held / left.published - 1.0,
    });
    Ok(())
}

/// The member a set of per-zone plugging points chooses: the most within ±10 %,
/// then the smallest worst error. `err[m][i]`: error of member m at point i.
fn choose(err: &[Vec<f64>], keep: &[usize]) -> usize {
    let score = |m: usize| {
        let within = keep.iter().filter(|&&i| err[m][i].abs() <= 0.10).count();
        let worst = keep.iter().map(|&i| err[m][i].abs()).fold(0.0, f64::max);
        (within, -worst)
    };
    (0..err.len()).max_by(|&a, &b| score(a).partial_cmp(&score(b)).expect("finite errors")).expect("members")
}

/// The 30 TB disk's destage window and zone advance, refitted together on the
/// geometry grid ([`geometry_family`]) without each per-zone plugging point.
fn geometry_rows(o: &LooOptions, progress: &mut dyn FnMut(&str), rows: &mut Vec<LooRow>) -> Result<(), SweepError> {
    let pts: Vec<Pt> = WINDOW_QDS.iter().map(|&q| seq30(q, IssuePolicy::Zwp, o)).collect();
    let grid = geometry_family(o, progress)?;
    let err: Vec<Vec<f64>> = grid.iter().map(|m| m.errors.clone()).collect();
    let name = |m: &FamilyRow| format!("{} / {:.2}", m.window, m.zone_advance.expect("a fixed advance"));
    let all: Vec<usize> = (0..pts.len()).collect();
    let fitted = choose(&err, &all);
    for (j, p) in pts.iter().enumerate() {
        let keep: Vec<usize> = all.iter().copied().filter(|&i| i != j).collect();
        let m = choose(&err, &keep);
        rows.push(LooRow {
            point: p.name.clone(),
            published_mb_s: p.published,
            parameter: "30 TB destage window / zone advance (rev)",
            fitted: name(&grid[fitted]),
            refitted: name(&grid[m]),
            in_sample_error: err[fitted][j],
            held_out_error: err[m][j],
        });
    }
    Ok(())
}

/// The zone advances (revolutions) the 30 TB refit chooses among: 0 to 0.95 in
/// steps of 0.05.
pub fn advance_grid() -> impl Iterator<Item = f64> {
    (0..20).map(|i| f64::from(i) / 20.0)
}

/// Runs the 30 TB disk with every destage window of [`WINDOWS`] and every zone
/// advance of [`advance_grid`] (zone resume cost: one revolution, M2) on
/// per-zone plugging, QD 8 to 128: the grid the window and the advance are
/// fitted on together. With the advance fixed, `smr-seq` has nothing left to
/// draw, so each member runs once, whatever `o.layouts` says.
pub fn geometry_family(o: &LooOptions, progress: &mut dyn FnMut(&str)) -> Result<Vec<FamilyRow>, SweepError> {
    let one = LooOptions { layouts: Some(1), ..*o };
    let pts: Vec<Pt> = WINDOW_QDS.iter().map(|&q| seq30(q, IssuePolicy::Zwp, &one)).collect();
    let base = Experiment::SmrSeq.disk();
    let mut rows = Vec::new();
    for w in WINDOWS {
        for a in advance_grid() {
            progress(&format!("window {w}, zone advance {a:.2} rev"));
            let disk = HddParams { zone_advance: Some(a), ..with_window(&base, w) };
            rows.push(family_row(&pts, &disk, &one)?);
        }
    }
    Ok(rows)
}

/// The destage windows and zone resume costs (revolutions) [`window_family`] runs.
pub const FAMILY_WINDOWS: [u32; 6] = [1, 2, 3, 4, 5, 6];
/// See [`FAMILY_WINDOWS`].
pub const FAMILY_RESUME_REVS: [f64; 6] = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5];

/// One member of the window family: the 30 TB disk with destage window `window`
/// and zone resume cost `resume_revs`, and its per-zone plugging `smr-seq` errors
/// (simulated / published − 1) at QD 8, 16, 32, 64 and 128.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FamilyRow {
    /// Destage window (oldest extents the destager chooses among).
    pub window: u32,
    /// Zone resume cost, revolutions (M2).
    pub resume_revs: f64,
    /// Zone advance, revolutions; `None`: drawn from each layout's seed and
    /// averaged over the layouts.
    pub zone_advance: Option<f64>,
    /// Simulated MB/s at QD 8, 16, 32, 64, 128.
    pub mb_s: Vec<f64>,
    /// Errors against the published points, same order.
    pub errors: Vec<f64>,
}

impl FamilyRow {
    /// Whether every point is within ±10 %.
    pub fn fits(&self) -> bool {
        self.errors.iter().all(|e| e.abs() <= 0.10)
    }
}

/// `disk` on the per-zone plugging points `pts`: the member's row, its window,
/// resume cost and advance read from the disk it ran.
fn family_row(pts: &[Pt], disk: &HddParams, o: &LooOptions) -> Result<FamilyRow, SweepError> {
    let mb_s = pts.iter().map(|p| sim(p, disk, HOST_LATENCY_NS, o)).collect::<Result<Vec<_>, _>>()?;
    let errors = mb_s.iter().zip(pts).map(|(m, p)| m / p.published - 1.0).collect();
    Ok(FamilyRow {
        window: disk.destage.window,
        resume_revs: disk.zone_resume_revs,
        zone_advance: disk.zone_advance,
        mb_s,
        errors,
    })
}

/// Runs every (window, resume cost) pair of the family on the 30 TB disk: whether
/// any destage order of this kind (the best positioned of the W oldest dirty
/// extents, a zone switch costing a short seek, the rotational wait and a resume
/// of R revolutions) fits per-zone plugging from QD 8 to QD 128.
pub fn window_family(o: &LooOptions, progress: &mut dyn FnMut(&str)) -> Result<Vec<FamilyRow>, SweepError> {
    let pts: Vec<Pt> = WINDOW_QDS.iter().map(|&q| seq30(q, IssuePolicy::Zwp, o)).collect();
    let base = Experiment::SmrSeq.disk();
    let mut rows = Vec::new();
    for w in FAMILY_WINDOWS {
        for r in FAMILY_RESUME_REVS {
            progress(&format!("window {w}, resume {r} rev"));
            // The advance drawn per layout and averaged: the phase averaged away,
            // as revisions 1 and 2 had it.
            let disk = HddParams { zone_resume_revs: r, zone_advance: None, ..with_window(&base, w) };
            rows.push(family_row(&pts, &disk, o)?);
        }
    }
    Ok(rows)
}

/// The family as a markdown table (SIMULATED errors against published figures).
pub fn family_table(rows: &[FamilyRow]) -> String {
    let mut s = String::from("| window | resume (rev) | zone advance (rev) |");
    for q in WINDOW_QDS {
        s += &format!(" QD{q} |");
    }
    s += " all within ±10 % |\n|---|---|---|";
    s += &"---|".repeat(WINDOW_QDS.len() + 1);
    s += "\n";
    for r in rows {
        let advance = r.zone_advance.map_or("drawn".to_string(), |a| format!("{a:.2}"));
        s += &format!("| {} | {} | {advance} |", r.window, r.resume_revs);
        for (m, e) in r.mb_s.iter().zip(&r.errors) {
            s += &format!(" {m:.0} ({:+.0} %) |", e * 100.0);
        }
        s += if r.fits() { " yes |\n" } else { " no |\n" };
    }
    s
}

/// The rows as a markdown table (SIMULATED errors against published figures).
pub fn table(rows: &[LooRow]) -> String {
    let mut s = String::from(
        "| point left out | published MB/s | parameter | fitted on all | refitted without it | error in-sample | error held out (SIMULATED) |\n|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        s += &format!(
            "| {} | {:.1} | {} | {} | {} | {:+.1} % | {:+.1} % |\n",
            r.point,
            r.published_mb_s,
            r.parameter,
            r.fitted,
            r.refitted,
            r.in_sample_error * 100.0,
            r.held_out_error * 100.0
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_choice_counts_points_within_ten_percent_then_the_worst() {
        // Window 0 fits two points of three, window 1 all three: 1. Without point 2,
        // both fit both; window 0's worst is smaller: 0.
        let err = vec![vec![0.01, 0.02, 0.30], vec![0.05, -0.08, 0.09]];
        assert_eq!(choose(&err, &[0, 1, 2]), 1);
        assert_eq!(choose(&err, &[0, 1]), 0);
    }

    /// The leave-one-out table of docs/calibration.md (several minutes):
    /// `cargo test --release -p zblk-lab loo -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn leave_one_out_table() {
        let rows = leave_one_out(&LooOptions::default(), &mut |p| eprintln!("loo: {p}")).unwrap();
        println!("{}", table(&rows));
        assert_eq!(rows.len(), 3 + 1 + 1 + 5);
    }

    /// The window family table of docs/calibration.md (about 30 s):
    /// `cargo test --release -p zblk-lab window_family -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn window_family_table() {
        let rows = window_family(&LooOptions::default(), &mut |p| eprintln!("family: {p}")).unwrap();
        println!("{}", family_table(&rows));
        assert_eq!(rows.len(), FAMILY_WINDOWS.len() * FAMILY_RESUME_REVS.len());
    }

    /// The geometry grid of docs/calibration.md, *Revision 3* (about 15 s):
    /// `cargo test --release -p zblk-lab geometry_family -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn geometry_family_table() {
        let rows = geometry_family(&LooOptions::default(), &mut |p| eprintln!("geometry: {p}")).unwrap();
        println!("{}", family_table(&rows));
        let err: Vec<Vec<f64>> = rows.iter().map(|m| m.errors.clone()).collect();
        let best = &rows[choose(&err, &[0, 1, 2, 3, 4])];
        println!("chosen: window {}, zone advance {:?}", best.window, best.zone_advance);
        assert_eq!(rows.len(), WINDOWS.len() * advance_grid().count());
    }
}
