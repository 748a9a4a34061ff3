//! The destage window families of the 30 TB disk: every (window, zone resume
//! cost) pair with the zone advance drawn per layout ([`window_family`]: with the
//! phase averaged away, no member fits QD 64 and QD 128 together), and every
//! (window, zone advance) pair with the advance fixed ([`geometry_family`]: the
//! grid revision 3 is fitted on, docs/calibration.md), each run on per-zone
//! plugging's `smr-seq` points, QD 8 to 128.

use super::points::{Pt, seq30, sim, with_window};
use super::{LooOptions, WINDOW_QDS, WINDOWS};
use crate::experiments::HOST_LATENCY_NS;
use crate::sweeps::{Experiment, SweepError};
use zblk_core::engine::IssuePolicy;
use zblk_sim::hdd::HddParams;

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
