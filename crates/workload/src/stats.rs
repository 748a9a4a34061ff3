//! Per-job I/O statistics as fio reports them: bytes, IOPS, bandwidth, completion
//! latency with percentiles.

use hdrhistogram::Histogram;

/// The percentiles fio prints by default.
pub const FIO_PERCENTILES: [f64; 17] =
    [1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99];

/// Largest latency recorded exactly: one hour of virtual time.
const MAX_LATENCY_NS: u64 = 3_600_000_000_000;

/// Statistics of one direction (read or write) of a job, as it runs.
#[derive(Clone, Debug)]
pub struct DirStats {
    ios: u64,
    bytes: u64,
    hist: Histogram<u64>,
    sum_ns: f64,
    sum_sq_ns: f64,
}

impl Default for DirStats {
    fn default() -> Self {
        DirStats {
            ios: 0,
            bytes: 0,
            // 1 ns to one virtual hour, 3 significant figures; longer saturates.
            hist: Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).expect("valid bounds"),
            sum_ns: 0.0,
            sum_sq_ns: 0.0,
        }
    }
}

impl DirStats {
    /// Bytes of the I/Os completed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Records one completed I/O of `bytes` with completion latency `lat_ns`.
    pub fn record(&mut self, bytes: u64, lat_ns: u64) {
        self.ios += 1;
        self.bytes += bytes;
        self.hist.saturating_record(lat_ns.clamp(1, MAX_LATENCY_NS));
        let l = lat_ns as f64;
        self.sum_ns += l;
        self.sum_sq_ns += l * l;
    }

    /// Adds `other` into `self` (fio's group reporting).
    pub fn merge(&mut self, other: &DirStats) {
        self.ios += other.ios;
        self.bytes += other.bytes;
        self.hist.add(&other.hist).expect("histograms of the same shape");
        self.sum_ns += other.sum_ns;
        self.sum_sq_ns += other.sum_sq_ns;
    }

    /// The summary over `runtime_ns`.
    pub fn summary(&self, runtime_ns: u64) -> DirSummary {
        let secs = runtime_ns as f64 / 1e9;
        let n = self.ios as f64;
        let mean = if self.ios > 0 { self.sum_ns / n } else { 0.0 };
        let var = if self.ios > 1 { (self.sum_sq_ns - n * mean * mean) / (n - 1.0) } else { 0.0 };
        DirSummary {
            ios: self.ios,
            io_bytes: self.bytes,
            runtime_ns,
            bw_bytes: if secs > 0.0 { self.bytes as f64 / secs } else { 0.0 },
            iops: if secs > 0.0 { n / secs } else { 0.0 },
            clat: LatSummary {
                min_ns: if self.ios > 0 { self.hist.min() } else { 0 },
                max_ns: if self.ios > 0 { self.hist.max() } else { 0 },
                mean_ns: mean,
                stddev_ns: var.max(0.0).sqrt(),
                percentiles: FIO_PERCENTILES
                    .iter()
                    .map(|&p| (p, if self.ios > 0 { self.hist.value_at_quantile(p / 100.0) } else { 0 }))
                    .collect(),
            },
        }
    }
}

/// Latency summary (fio's `clat_ns`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct LatSummary {
    /// Smallest latency.
    pub min_ns: u64,
    /// Largest latency.
    pub max_ns: u64,
    /// Mean.
    pub mean_ns: f64,
    /// Standard deviation.
    pub stddev_ns: f64,
    /// (percentile, latency) pairs, fio's default percentiles.
    pub percentiles: Vec<(f64, u64)>,
}

/// What one direction of a job did (fio's `read`/`write` objects).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DirSummary {
    /// I/Os completed.
    pub ios: u64,
    /// Bytes transferred.
    pub io_bytes: u64,
    /// The job's runtime.
    pub runtime_ns: u64,
    /// Bandwidth, bytes per second.
    pub bw_bytes: f64,
    /// I/Os per second.
    pub iops: f64,
    /// Completion latency.
    pub clat: LatSummary,
}

/// What a job did, mergeable for group reporting: the simulator's fio-like jobs and
/// the real runtime's both keep one per job.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Reads completed.
    pub read: DirStats,
    /// Writes completed.
    pub write: DirStats,
    /// I/Os that failed.
    pub errors: u64,
    /// The first failure's status.
    pub first_error: Option<zblk_core::bio::Status>,
    /// Zone resets issued.
    pub zone_resets: u64,
    /// Time of the last completion, from the run's start.
    pub end_ns: u64,
    /// Jobs merged into this tally.
    pub jobs: u32,
}

impl Tally {
    /// Adds `other` (group reporting).
    pub fn merge(&mut self, other: &Tally) {
        self.read.merge(&other.read);
        self.write.merge(&other.write);
        self.errors += other.errors;
        self.first_error = self.first_error.or(other.first_error);
        self.zone_resets += other.zone_resets;
        self.end_ns = self.end_ns.max(other.end_ns);
        self.jobs += other.jobs;
    }

    /// The result as fio reports it, named `name`.
    pub fn result(&self, name: &str) -> crate::job::JobResult {
        crate::job::JobResult {
            name: name.to_string(),
            jobs: self.jobs,
            read: self.read.summary(self.end_ns),
            write: self.write.summary(self.end_ns),
            errors: self.errors,
            first_error: self.first_error,
            zone_resets: self.zone_resets,
            runtime_ns: self.end_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_matches_the_samples() {
        let mut d = DirStats::default();
        for lat in 1..=1000u64 {
            d.record(4096, lat * 1000);
        }
        let s = d.summary(1_000_000_000);
        assert_eq!(s.ios, 1000);
        assert_eq!(s.io_bytes, 4096 * 1000);
        assert!((s.iops - 1000.0).abs() < 1e-9);
        assert_eq!(s.clat.min_ns, 1000);
        assert!((s.clat.max_ns as f64 - 1e6).abs() / 1e6 < 1e-3);
        assert!((s.clat.mean_ns - 500_500.0).abs() < 1e-6);
        let p50 = s.clat.percentiles.iter().find(|(p, _)| *p == 50.0).unwrap().1;
        assert!((p50 as f64 - 500_000.0).abs() / 500_000.0 < 2e-3, "p50 {p50}");
        let mut e = DirStats::default();
        e.record(4096, 7);
        d.merge(&e);
        assert_eq!(d.summary(1).clat.min_ns, 7);
    }
}
