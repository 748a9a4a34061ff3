//! Sequential streams, one per job, each its own submitter: what `zblk trace` and
//! `zblk sweep split` run on a stack (large reads split by the stacked devices,
//! zoned writes through them).

use super::driver::{Sim, SimCompletion, Workload};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use zblk_core::bio::{Bio, Op, Status};
use zblk_core::units::{SECTOR_SIZE, Sector};

/// One sequential stream of a [`SeqJobs`] workload (one submitter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqJob {
    /// READ or WRITE.
    pub op: Op,
    /// Start of the region, on the top device.
    pub offset: Sector,
    /// Length of the region in sectors: the job ends there.
    pub len_sectors: u64,
    /// Smallest BIO, sectors.
    pub bs_min_sectors: u32,
    /// Largest BIO, sectors (sizes are drawn uniformly in whole blocks).
    pub bs_max_sectors: u32,
    /// BIOs in flight at once.
    pub iodepth: u32,
}

/// What one job did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SeqJobResult {
    /// BIOs completed.
    pub ios: u64,
    /// Bytes completed successfully.
    pub bytes: u64,
    /// BIOs that failed.
    pub errors: u64,
    /// BIOs that failed as unaligned writes.
    pub unaligned: u64,
    /// The first failure.
    pub first_error: Option<Status>,
    /// Time of the last completion.
    pub end_ns: u64,
}

impl SeqJobResult {
    /// Throughput in MB/s (10^6 bytes per second) of virtual time.
    pub fn mb_s(&self) -> f64 {
        if self.end_ns == 0 { 0.0 } else { self.bytes as f64 * 1e3 / self.end_ns as f64 }
    }
}

#[derive(Debug)]
struct JobState {
    spec: SeqJob,
    rng: ChaCha8Rng,
    next: u64,
    inflight: u32,
    result: SeqJobResult,
}

/// Sequential streams, one per job, each its own submitter: every BIO starts where
/// the job's previous one ended, sizes drawn from a seeded generator, up to
/// `iodepth` in flight. Writes carry the data pattern, stamped per BIO.
#[derive(Debug)]
pub struct SeqJobs {
    jobs: Vec<JobState>,
    lbs: u32,
    stamp: u64,
}

impl SeqJobs {
    /// Jobs `specs` on a top device of `lbs_sectors` blocks, seeded.
    pub fn new(specs: &[SeqJob], lbs_sectors: u32, seed: u64) -> SeqJobs {
        let jobs = specs
            .iter()
            .enumerate()
            .map(|(j, s)| {
                assert!(
                    s.iodepth > 0 && s.bs_min_sectors > 0 && s.bs_min_sectors <= s.bs_max_sectors,
                    "job {j}: {s:?}"
                );
                JobState {
                    spec: *s,
                    rng: ChaCha8Rng::seed_from_u64(seed ^ ((j as u64) << 32) ^ 0x5e9),
                    next: s.offset.0,
                    inflight: 0,
                    result: SeqJobResult::default(),
                }
            })
            .collect();
        SeqJobs { jobs, lbs: lbs_sectors, stamp: 0 }
    }

    /// Per job results.
    pub fn results(&self) -> Vec<SeqJobResult> {
        self.jobs.iter().map(|j| j.result.clone()).collect()
    }

    /// All jobs together: sums, the last end time.
    pub fn total(&self) -> SeqJobResult {
        let mut t = SeqJobResult::default();
        for j in &self.jobs {
            let r = &j.result;
            t.ios += r.ios;
            t.bytes += r.bytes;
            t.errors += r.errors;
            t.unaligned += r.unaligned;
            t.first_error = t.first_error.or(r.first_error);
            t.end_ns = t.end_ns.max(r.end_ns);
        }
        t
    }

    fn fill(&mut self, j: usize, sim: &mut Sim) {
        let lbs = self.lbs;
        loop {
            let job = &mut self.jobs[j];
            let end = job.spec.offset.0 + job.spec.len_sectors;
            if job.inflight >= job.spec.iodepth || job.next >= end {
                return;
            }
            let (lo, hi) = (job.spec.bs_min_sectors.div_ceil(lbs), (job.spec.bs_max_sectors / lbs).max(1));
            let blocks = if lo >= hi { lo } else { job.rng.random_range(lo..=hi) };
            let n = (u64::from(blocks * lbs)).min(end - job.next) as u32;
            let bio = Bio { op: job.spec.op, sector: Sector(job.next), nr_sectors: n, ..Bio::read(Sector(0), 0, 0) };
            job.next += u64::from(n);
            job.inflight += 1;
            self.stamp += 1;
            sim.submit_by(j as u32, bio, j as u64, self.stamp);
        }
    }
}

impl Workload for SeqJobs {
    fn start(&mut self, sim: &mut Sim) {
        for j in 0..self.jobs.len() {
            self.fill(j, sim);
        }
    }

    fn on_complete(&mut self, sim: &mut Sim, c: SimCompletion) {
        let j = c.token as usize;
        let job = &mut self.jobs[j];
        job.inflight -= 1;
        let r = &mut job.result;
        r.ios += 1;
        r.end_ns = sim.now_ns();
        match c.result {
            Ok(_) => r.bytes += u64::from(c.nr_sectors) * SECTOR_SIZE,
            Err(s) => {
                r.errors += 1;
                r.unaligned += u64::from(s == Status::Unaligned);
                r.first_error.get_or_insert(s);
            }
        }
        self.fill(j, sim);
    }

    fn is_done(&self) -> bool {
        self.jobs.iter().all(|j| j.inflight == 0 && j.next >= j.spec.offset.0 + j.spec.len_sectors)
    }
}
