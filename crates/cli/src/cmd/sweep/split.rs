//! `zblk sweep split`: the split-order experiment (`zblk_lab::split`: sequential
//! reads through a striped device, split remainders at the head or at the tail of
//! the BIO list) printed as tables, the members' seek histograms side by side, or
//! as JSON rows. Every number is simulated.

use crate::CliError;
use crate::out::{out, outln};
use std::fmt::Write as _;
use zblk_core::stack::SplitOrder;
use zblk_core::units::{SECTOR_SIZE, format_bytes_exact};
use zblk_lab::split::{Row, SETUP, Setup, run_order};

/// Runs `zblk sweep split` with `seed`, as tables or as JSON.
pub fn run(seed: u64, json: bool) -> Result<(), CliError> {
    let head = run_order(&SETUP, SplitOrder::Head, seed).map_err(CliError::msg)?;
    let rows = [head, run_order(&SETUP, SplitOrder::Tail, seed).map_err(CliError::msg)?];
    if json {
        outln!("{}", serde_json::to_string_pretty(&rows).map_err(CliError::msg)?);
    } else {
        out!("{}", report(&SETUP, &rows));
    }
    Ok(())
}

/// The tables: throughput and seeks per order, the member seek histograms side by
/// side, each member's fraction of zero-distance seeks.
pub fn report(s: &Setup, rows: &[Row]) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "split order: {}-member striped device, {} chunk, max_sectors {} ({}), sequential direct reads of {}, \
         iodepth {}, {} in all",
        s.members,
        format_bytes_exact(s.chunk_bytes),
        s.max_sectors,
        format_bytes_exact(u64::from(s.max_sectors) * SECTOR_SIZE),
        format_bytes_exact(s.bs_bytes),
        s.iodepth,
        format_bytes_exact(s.reads * s.bs_bytes),
    );
    if let Some(r) = rows.first() {
        let _ = writeln!(o, "members: {}", r.model);
    }
    let _ = writeln!(o, "All numbers are simulated (virtual time).\n");
    let _ = writeln!(
        o,
        "{:<6} {:>18} {:>26} {:>20}",
        "order", "MB/s (simulated)", "zero-distance seeks (sim.)", "seeks (simulated)"
    );
    for r in rows {
        let _ = writeln!(o, "{:<6} {:>18.1} {:>25.1}% {:>20}", r.order, r.mb_s, r.zero_seek_fraction * 100.0, r.seeks);
    }
    if let [head, tail] = rows {
        let _ =
            writeln!(o, "\nhead / tail throughput: {:.2}x (simulated)", head.mb_s / tail.mb_s.max(f64::MIN_POSITIVE));
        let _ = writeln!(o, "\nSeek distances of all members together (simulated):");
        let _ = writeln!(
            o,
            "{:>14} | {:>8} {:>7} {:<22}| {:>8} {:>7} {:<22}",
            "distance", "head", "ratio", "", "tail", "ratio", ""
        );
        let (hr, tr) = (head.hist.rows(), tail.hist.rows());
        for k in 0..hr.len().max(tr.len()) {
            let cell = |rows: &[(String, u64, f64)]| rows.get(k).map_or((0, 0.0), |r| (r.1, r.2));
            let label = hr.get(k).or(tr.get(k)).map_or(String::new(), |r| r.0.clone());
            let ((hc, hx), (tc, tx)) = (cell(&hr), cell(&tr));
            let (hb, tb) = (zblk_core::stack::trace::bar(hx, 20), zblk_core::stack::trace::bar(tx, 20));
            let _ = writeln!(o, "{label:>14} | {hc:>8} {hx:>7.4} {hb:<22}| {tc:>8} {tx:>7.4} {tb:<22}");
        }
        let _ = writeln!(o, "\nZero-distance seeks per member (simulated):");
        let _ = writeln!(o, "{:<8} {:>8} {:>8}", "member", "head", "tail");
        for ((name, h), (_, t)) in head.per_member.iter().zip(&tail.per_member) {
            let _ = writeln!(o, "{name:<8} {:>7.1}% {:>7.1}%", h * 100.0, t * 100.0);
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_say_simulated_and_show_the_seek_distances() {
        let s = Setup { reads: 12, ..SETUP };
        let head = run_order(&s, SplitOrder::Head, 1).unwrap();
        let tail = run_order(&s, SplitOrder::Tail, 1).unwrap();
        let text = report(&s, &[head, tail]);
        assert!(text.contains("simulated"));
        assert!(text.contains("<= 64KiB"), "{text}");
    }
}
