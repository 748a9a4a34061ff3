//! I/O traces of a stack and the seek histograms made from them.
//!
//! Events follow blktrace's actions: `Q` a BIO enters a device's submission path,
//! `X` a stacked device splits it, `A` it is remapped to a member (logged on the
//! member, with where it came from), `D` a disk's engine issues a request to the
//! device, `C` the device completes it. [`TraceWriter`] prints them in blkparse's
//! default line shape:
//!
//! ```text
//!   8,16   0        3     0.000125000     0  D   R 1024 + 128 [job0]
//! ```
//!
//! device (major,minor), cpu (always 0: one simulated context), sequence number per
//! device, time in seconds (virtual), pid (the submitter's number), action, RWBS
//! (`R`, `W`, `D` discard, `F` flush, `N` anything else; `F` before for PREFLUSH,
//! after for FUA, as the kernel's `blk_fill_rwbs()`), then as blkparse does per
//! action: `sector + length [comm]` for Q and D, `sector + length [error]` for C,
//! `sector / split sector [comm]` for X, `sector + length <- (major,minor) sector`
//! for A. The comm is `job<pid>`, followed by the operation's name for `N` requests
//! (zone operations, write zeroes).
//!
//! A seek histogram ([`SeekHist`]) counts, per device in issue order, the distance
//! `|next start - (previous start + previous length)|` in power-of-two KiB buckets.

use super::device::{DevId, DevKind};
use super::submit::Stack;
use crate::bio::{BioFlags, Op, Request, Status};
use crate::units::{SECTOR_SIZE, Sector, format_bytes_exact};
use std::fmt::Write as _;

/// What happened to a BIO or request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceAction {
    /// `Q`: the BIO entered the device's submission path (a stacked device's submit
    /// function, or a disk's engine).
    Queue,
    /// `X`: the device split the BIO; the remainder starts at `at`.
    Split {
        /// First sector of the remainder.
        at: Sector,
    },
    /// `A`: the BIO was remapped to this device from `from`, where it started at
    /// `from_sector`.
    Remap {
        /// The stacked device it came from.
        from: DevId,
        /// Its sector there.
        from_sector: Sector,
    },
    /// `D`: the disk's engine issued the request to the device.
    Issue,
    /// `C`: the device completed the request.
    Complete {
        /// The error, if it failed.
        error: Option<Status>,
    },
}

impl TraceAction {
    /// blktrace's letter for the action.
    pub fn letter(&self) -> char {
        match self {
            TraceAction::Queue => 'Q',
            TraceAction::Split { .. } => 'X',
            TraceAction::Remap { .. } => 'A',
            TraceAction::Issue => 'D',
            TraceAction::Complete { .. } => 'C',
        }
    }
}

/// One event of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TraceEvent {
    /// Virtual time, nanoseconds (filled in by the driver).
    pub time_ns: u64,
    /// The device it happened on.
    pub dev: DevId,
    /// What happened.
    pub action: TraceAction,
    /// The operation.
    pub op: Op,
    /// Its flags.
    pub flags: BioFlags,
    /// First sector, on `dev`.
    pub sector: Sector,
    /// Length in sectors.
    pub nr_sectors: u32,
    /// The submitter's number (blktrace's pid).
    pub submitter: u32,
    /// Where this piece starts in the submitter's BIO, in sectors.
    pub bio_offset: u32,
}

impl TraceEvent {
    /// The event of `action` on request `req` of disk `dev` (its `bio_offset`
    /// relative to the submitted BIO).
    pub fn of_request(dev: DevId, action: TraceAction, req: &Request, submitter: u32) -> TraceEvent {
        TraceEvent {
            time_ns: 0,
            dev,
            action,
            op: req.op,
            flags: req.flags,
            sector: req.sector,
            nr_sectors: req.nr_sectors,
            submitter,
            bio_offset: req.bio_offset,
        }
    }
}

/// The RWBS field of blkparse, as the kernel's `blk_fill_rwbs()`.
pub fn rwbs(op: Op, flags: BioFlags) -> String {
    let mut s = String::new();
    if flags.contains(BioFlags::PREFLUSH) {
        s.push('F');
    }
    s.push(match op {
        Op::Read => 'R',
        Op::Write => 'W',
        Op::Discard => 'D',
        Op::Flush => 'F',
        _ => 'N',
    });
    if flags.contains(BioFlags::FUA) {
        s.push('F');
    }
    s
}

/// Prints events as blkparse does (see the module documentation).
#[derive(Clone, Debug)]
pub struct TraceWriter {
    devno: Vec<(u32, u32)>,
    seq: Vec<u64>,
}

impl TraceWriter {
    /// A writer for the devices of `stack`.
    pub fn new(stack: &Stack) -> TraceWriter {
        let devno: Vec<(u32, u32)> = stack.devices().map(|(_, i)| i.devno).collect();
        TraceWriter { seq: vec![0; devno.len()], devno }
    }

    /// The line of event `e` (no newline). Sequence numbers count per device.
    pub fn line(&mut self, e: &TraceEvent) -> String {
        let (maj, min) = self.devno[e.dev.idx()];
        self.seq[e.dev.idx()] += 1;
        let mut s = format!(
            "{maj:>3},{min:<3} {:>2} {:>8} {:>5}.{:09} {:>5} {:>2} {:>3} ",
            0,
            self.seq[e.dev.idx()],
            e.time_ns / 1_000_000_000,
            e.time_ns % 1_000_000_000,
            e.submitter,
            e.action.letter(),
            rwbs(e.op, e.flags),
        );
        let comm = match rwbs(e.op, BioFlags::NONE).as_str() {
            // WRITE_ZEROES says whether the device may unmap: NOUNMAP is the one flag
            // blkparse's letters do not show.
            "N" if e.flags.contains(BioFlags::NOUNMAP) => format!("job{} {} nounmap", e.submitter, e.op.name()),
            "N" => format!("job{} {}", e.submitter, e.op.name()),
            _ => format!("job{}", e.submitter),
        };
        let _ = match e.action {
            TraceAction::Queue | TraceAction::Issue => write!(s, "{} + {} [{comm}]", e.sector, e.nr_sectors),
            TraceAction::Complete { error } => {
                write!(s, "{} + {} [{}]", e.sector, e.nr_sectors, error.map_or(0, |st| st.errno()))
            }
            TraceAction::Split { at } => write!(s, "{} / {at} [{comm}]", e.sector),
            TraceAction::Remap { from, from_sector } => {
                let (fmaj, fmin) = self.devno[from.idx()];
                write!(s, "{} + {} <- ({fmaj},{fmin}) {from_sector}", e.sector, e.nr_sectors)
            }
        };
        s
    }
}

/// Seek distances of one device, in power-of-two KiB buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SeekHist {
    /// Requests that started exactly where the previous one ended.
    pub zero: u64,
    /// `buckets[k]`: distances in `(2^(k-1), 2^k]` KiB (`buckets[0]`: up to 1 KiB).
    pub buckets: Vec<u64>,
    #[serde(skip)]
    last_end: Option<Sector>,
}

impl SeekHist {
    /// An empty histogram.
    pub fn new() -> SeekHist {
        SeekHist::default()
    }

    /// Records a request of `nr_sectors` at `sector`, after the previous one.
    pub fn record(&mut self, sector: Sector, nr_sectors: u32) {
        if let Some(end) = self.last_end {
            self.record_distance(sector.0.abs_diff(end.0));
        }
        self.last_end = Some(sector + u64::from(nr_sectors));
    }

    /// Records one seek of `nr_sectors` sectors.
    pub fn record_distance(&mut self, nr_sectors: u64) {
        if nr_sectors == 0 {
            self.zero += 1;
            return;
        }
        let kib = (nr_sectors * SECTOR_SIZE).div_ceil(1024);
        let k = (64 - (kib - 1).leading_zeros()) as usize;
        if self.buckets.len() <= k {
            self.buckets.resize(k + 1, 0);
        }
        self.buckets[k] += 1;
    }

    /// Adds `other`'s counts (its last position is not carried over).
    pub fn merge(&mut self, other: &SeekHist) {
        self.zero += other.zero;
        if self.buckets.len() < other.buckets.len() {
            self.buckets.resize(other.buckets.len(), 0);
        }
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
    }

    /// Distances recorded (one fewer than requests).
    pub fn total(&self) -> u64 {
        self.zero + self.buckets.iter().sum::<u64>()
    }

    /// Distances that were not zero: the seeks.
    pub fn seeks(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The fraction of zero distances; `None` before two requests.
    pub fn zero_fraction(&self) -> Option<f64> {
        let t = self.total();
        (t > 0).then(|| self.zero as f64 / t as f64)
    }

    /// The label of bucket `k`: `<= 4KiB`.
    pub fn bucket_label(k: usize) -> String {
        format!("<= {}", format_bytes_exact(1024u64 << k))
    }

    /// The rows of the histogram: `(label, count, ratio of all distances)`, the zero
    /// row first, then every bucket up to the last non-empty one.
    pub fn rows(&self) -> Vec<(String, u64, f64)> {
        let t = self.total().max(1) as f64;
        let mut rows = vec![("0".to_string(), self.zero, self.zero as f64 / t)];
        let last = self.buckets.iter().rposition(|&c| c > 0).map_or(0, |k| k + 1);
        for (k, &c) in self.buckets[..last].iter().enumerate() {
            rows.push((SeekHist::bucket_label(k), c, c as f64 / t));
        }
        rows
    }

    /// The histogram as a table: distance, count, ratio and a bar, then the fraction
    /// of zero-distance seeks.
    pub fn render(&self) -> String {
        let mut s = format!("{:>14} {:>10} {:>8}\n", "seek distance", "count", "ratio");
        for (label, count, ratio) in self.rows() {
            let _ = writeln!(s, "{label:>14} {count:>10} {ratio:>8.4}  {}", bar(ratio, 40));
        }
        match self.zero_fraction() {
            Some(f) => {
                let _ = writeln!(s, "zero-distance seeks: {:.1}% of {}", f * 100.0, self.total());
            }
            None => s.push_str("zero-distance seeks: n/a (fewer than two requests)\n"),
        }
        s
    }
}

/// A bar of `ratio * width` `#`s.
pub fn bar(ratio: f64, width: usize) -> String {
    "#".repeat((ratio * width as f64).round() as usize)
}

/// Seek histograms of every device of a stack, fed with trace events: a disk's from
/// the requests its engine issues (`D`); a stacked device's from the BIOs that
/// arrive at it, before it splits them: remapped to it from the device above (`A`),
/// or submitted to it as the top device (its `Q` at offset 0 of the submitted BIO;
/// the `Q` of a split remainder is not an arrival).
#[derive(Clone, Debug)]
pub struct SeekTracker {
    hists: Vec<SeekHist>,
    disk: Vec<bool>,
    top: DevId,
}

impl SeekTracker {
    /// Empty histograms for the devices of `stack`.
    pub fn new(stack: &Stack) -> SeekTracker {
        let disk: Vec<bool> = stack.devices().map(|(_, i)| i.kind == DevKind::Disk).collect();
        SeekTracker { hists: vec![SeekHist::new(); disk.len()], disk, top: stack.top() }
    }

    /// Takes an event into account.
    pub fn record(&mut self, e: &TraceEvent) {
        let d = e.dev.idx();
        let counted = match e.action {
            TraceAction::Issue => self.disk[d],
            TraceAction::Remap { .. } => !self.disk[d],
            TraceAction::Queue => !self.disk[d] && e.dev == self.top && e.bio_offset == 0,
            _ => false,
        };
        if counted && e.op.has_range() {
            self.hists[d].record(e.sector, e.nr_sectors);
        }
    }

    /// The histogram of device `d`.
    pub fn hist(&self, d: DevId) -> &SeekHist {
        &self.hists[d.idx()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_kib() {
        let mut h = SeekHist::new();
        h.record(Sector(0), 8);
        h.record(Sector(8), 8); // 0
        h.record(Sector(17), 8); // 1 sector = 512 B -> <= 1KiB
        h.record(Sector(25 + 4), 8); // 2 KiB -> <= 2KiB
        h.record(Sector(37 + 6), 8); // 3 KiB -> <= 4KiB
        h.record(Sector(0), 8); // back 51 sectors = 25.5 KiB -> <= 32KiB
        assert_eq!(h.zero, 1);
        assert_eq!(h.buckets, vec![1, 1, 1, 0, 0, 1]);
        assert_eq!(h.total(), 5);
        assert_eq!(h.seeks(), 4);
        assert_eq!(h.zero_fraction(), Some(0.2));
        let rows = h.rows();
        assert_eq!(rows.len(), 7);
        assert_eq!(rows[6].0, "<= 32KiB");
        assert!(h.render().contains("zero-distance seeks: 20.0% of 5"));
        assert_eq!(SeekHist::new().zero_fraction(), None);
    }

    #[test]
    fn rwbs_like_the_kernel() {
        assert_eq!(rwbs(Op::Read, BioFlags::NONE), "R");
        assert_eq!(rwbs(Op::Write, BioFlags::FUA | BioFlags::PREFLUSH), "FWF");
        assert_eq!(rwbs(Op::ZoneReset, BioFlags::NONE), "N");
        assert_eq!(rwbs(Op::Discard, BioFlags::NONE), "D");
    }
}
