//! The `split` experiment: large sequential direct reads through an 8-member
//! striped device (64 KiB chunk, max_sectors 1 MiB), split remainders at the head
//! or at the tail of the BIO list (the order `submit_bio_noacct()` gives them), the
//! members' seek histograms and the throughput side by side. Every number is
//! simulated.
//!
//! Each 4480 KiB read is split at max_sectors (1 MiB), then each piece at the
//! chunk; with the tail order the pieces reach the members out of order and every
//! member seeks back and forth inside what should be one sequential stream.
//! docs/split-order.md tells the story; `zblk sweep split` prints the rows.

use zblk_core::bio::Op;
use zblk_core::params::DeviceParams;
use zblk_core::stack::{DevKind, SeekHist, SplitOrder, StackConfig, StackSpec};
use zblk_core::units::{SECTOR_SHIFT, Sector};
use zblk_sim::hdd::{HddModel, HddParams};
use zblk_sim::presets::DeviceSpec;
use zblk_sim::{DeviceModel, ModelFactory, SeqJob, SeqJobs, Sim, StackSimConfig};

/// The experiment's set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// Members of the striped device.
    pub members: u32,
    /// Stripe chunk, bytes.
    pub chunk_bytes: u64,
    /// The members' (and so the striped device's) max_sectors.
    pub max_sectors: u32,
    /// Size of each read, bytes.
    pub bs_bytes: u64,
    /// Reads in flight.
    pub iodepth: u32,
    /// Reads in the run.
    pub reads: u64,
}

/// As the original report: 8 members, 64 KiB chunk, 1 MiB max_sectors, 4480 KiB
/// direct reads one at a time; 128 of them (560 MiB).
pub const SETUP: Setup =
    Setup { members: 8, chunk_bytes: 64 << 10, max_sectors: 2048, bs_bytes: 4480 << 10, iodepth: 1, reads: 128 };

/// What one split order gave.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Row {
    /// Always `split`.
    pub experiment: &'static str,
    /// `head` or `tail`.
    pub order: &'static str,
    /// Throughput of the reads, MB/s of virtual time (simulated).
    pub mb_s: f64,
    /// Fraction of the members' requests that started where the previous one on the
    /// same member ended (simulated).
    pub zero_seek_fraction: f64,
    /// Member requests that did not (simulated).
    pub seeks: u64,
    /// The numbers come from the simulator.
    pub simulated: bool,
    /// All members' seek distances together.
    #[serde(skip)]
    pub hist: SeekHist,
    /// Each member's name and its fraction of zero-distance seeks.
    #[serde(skip)]
    pub per_member: Vec<(String, f64)>,
    /// The members' timing model.
    #[serde(skip)]
    pub model: String,
}

/// A refused or failed split-order run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct SplitError(pub String);

/// The stack of the experiment, in the text `zblk trace --stack` takes, its disks
/// as `--dev` takes them.
fn spec(s: &Setup) -> Result<StackSpec, SplitError> {
    let disk = format!("nullb:size=64g,zoned=0,rotational=1,max_sectors={},hw_queue_depth=32", s.max_sectors);
    let text = format!("striped:chunk={}[{}*{disk}]", s.chunk_bytes, s.members);
    let mut resolve = |t: &str| DeviceSpec::parse(t).map(|d| d.params).map_err(|e| e.to_string());
    StackSpec::parse(&text, &mut resolve).map_err(|e| SplitError(format!("--stack: {e}")))
}

/// The simulation of `spec` with split order `order`, every device's I/O traced
/// (the seek histograms are read from the trace).
fn build_sim(spec: &StackSpec, order: SplitOrder, seed: u64, models: ModelFactory<'_>) -> Result<Sim, SplitError> {
    let built = spec
        .build(StackConfig { split_order: order, ..StackConfig::default() }, None)
        .map_err(|e| SplitError(format!("--stack: {e}")))?;
    Ok(Sim::with_stack(built, StackSimConfig { check: false, trace: true, ..StackSimConfig::new(seed) }, models))
}

/// The members' timing: the HDD model with a conventional (CMR) 7200 rpm disk's
/// parameters (`HddParams::cmr_hdd`): seeks, rotation, NCQ reordering, read-ahead.
fn member_model(_dev: zblk_core::stack::DevId, p: &DeviceParams, seed: u64) -> Box<dyn DeviceModel> {
    let disk = HddParams { layout_seed: seed, ..HddParams::cmr_hdd(p.geometry.capacity_bytes) };
    Box::new(HddModel::new(disk))
}

/// Runs the experiment with split order `order`.
pub fn run_order(s: &Setup, order: SplitOrder, seed: u64) -> Result<Row, SplitError> {
    let mut sim = build_sim(&spec(s)?, order, seed, &mut member_model)?;
    let top = sim.stack().top();
    let job = SeqJob {
        op: Op::Read,
        offset: Sector(0),
        len_sectors: s.reads * (s.bs_bytes >> SECTOR_SHIFT),
        bs_min_sectors: (s.bs_bytes >> SECTOR_SHIFT) as u32,
        bs_max_sectors: (s.bs_bytes >> SECTOR_SHIFT) as u32,
        iodepth: s.iodepth,
    };
    let mut w = SeqJobs::new(&[job], sim.stack().info(top).geometry.lbs_sectors(), seed);
    sim.run(&mut w);
    let t = w.total();
    if t.errors > 0 {
        return Err(SplitError(format!("{} reads failed: {:?}", t.errors, t.first_error)));
    }
    let seeks = sim.seeks().expect("tracing on");
    let mut hist = SeekHist::new();
    let mut per_member = Vec::new();
    let mut model = String::new();
    for (d, info) in sim.stack().devices().filter(|(_, i)| i.kind == DevKind::Disk) {
        hist.merge(seeks.hist(d));
        per_member.push((info.name.clone(), seeks.hist(d).zero_fraction().unwrap_or(0.0)));
        model = sim.model_descriptions().into_iter().find(|(m, _)| *m == d).map(|(_, s)| s).unwrap_or_default();
    }
    Ok(Row {
        experiment: "split",
        order: order.name(),
        mb_s: t.mb_s(),
        zero_seek_fraction: hist.zero_fraction().unwrap_or(0.0),
        seeks: hist.seeks(),
        simulated: true,
        hist,
        per_member,
        model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_order_beats_tail_order_on_seeking_disks() {
        let s = Setup { reads: 12, ..SETUP };
        let head = run_order(&s, SplitOrder::Head, 1).unwrap();
        let tail = run_order(&s, SplitOrder::Tail, 1).unwrap();
        // 70 chunks per read over 8 members: each member's requests are one
        // sequential stream with the head order; only the first request of each
        // member has no predecessor.
        assert_eq!(head.seeks, 0, "{head:?}");
        assert!(tail.seeks > 0, "{tail:?}");
        assert!(head.zero_seek_fraction > tail.zero_seek_fraction);
        assert!(head.mb_s >= 1.5 * tail.mb_s, "head {} MB/s, tail {} MB/s", head.mb_s, tail.mb_s);
    }
}
