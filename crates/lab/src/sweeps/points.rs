//! The points of each experiment: the x axis a sweep runs along (a queue depth, a
//! zone count K or one of the 20 TB disk's tests), each turned into the fio-like job
//! the simulated host submits, with the published figures that belong to it and the
//! region whose media rate bounds it.

use super::{Experiment, SweepError, SweepOptions};
use crate::experiments::{
    SMR_20TB_TESTS, SMR_SEQ_QD, SMR_SEQ_QD1, SMR_SEQ_ZWP, SMR_STREAMS_QD, smr_20tb_job, smr_seq_job, smr_streams_job,
    smr_zones_job,
};
use zblk_core::engine::IssuePolicy;
use zblk_workload::job::{JobSpec, Rw};

/// One point of a sweep, before any policy runs it.
pub(super) struct Point {
    /// The job every policy runs at this point.
    pub(super) job: JobSpec,
    /// I/Os in flight per job.
    pub(super) qd: u32,
    /// fio jobs.
    pub(super) jobs: u32,
    /// Zones the workload chooses from (`smr-zones`' K).
    pub(super) zones: Option<u32>,
    /// Published figures at this point, by policy.
    pub(super) published: Vec<(IssuePolicy, f64)>,
    /// The region written, where its sustained media rate bounds the run
    /// (sequential runs): start and length in bytes.
    pub(super) region: Option<(u64, u64)>,
}

/// The points `o` asks of `exp` (its own by default), refused where the experiment
/// has no such point.
pub(super) fn points(exp: Experiment, o: &SweepOptions) -> Result<Vec<Point>, SweepError> {
    let list = o.points.clone().unwrap_or_else(|| exp.default_points());
    if list.is_empty() {
        return Err(SweepError::BadOption(format!("{}: no points to run", exp.name())));
    }
    list.iter()
        .map(|&x| match exp {
            Experiment::SmrSeq | Experiment::SmrNocache => seq_point(exp, x, o),
            Experiment::SmrZones => zones_point(x, o),
            Experiment::Smr20tb => test20_point(x, o),
            Experiment::SmrStreams => streams_point(x),
        })
        .collect()
}

fn bad(exp: Experiment, point: u32, why: &str) -> SweepError {
    SweepError::BadPoint { experiment: exp.name(), point, why: why.to_string() }
}

/// `smr-seq` and `smr-nocache` at queue depth `qd`: sequential writes from the start
/// of the disk, flushed at the end so that they measure the media, not the cache.
/// Only `smr-seq` at a published queue depth has published figures.
fn seq_point(exp: Experiment, qd: u32, o: &SweepOptions) -> Result<Point, SweepError> {
    if !(1..=4096).contains(&qd) {
        return Err(bad(exp, qd, "the queue depth must be 1 to 4096"));
    }
    let published = match SMR_SEQ_QD.iter().position(|&q| q == qd) {
        Some(i) if exp == Experiment::SmrSeq => {
            vec![(IssuePolicy::Zwp, SMR_SEQ_ZWP[i]), (IssuePolicy::Qd1, SMR_SEQ_QD1[i])]
        }
        _ => Vec::new(),
    };
    Ok(Point {
        job: JobSpec { end_fsync: true, ..smr_seq_job(qd, o.seq_zones) },
        qd,
        jobs: 1,
        zones: None,
        published,
        region: Some((0, o.seq_zones * (256 << 20))),
    })
}

/// `smr-zones` with `k` zones to choose from: 16 jobs × QD 32, no published figure.
fn zones_point(k: u32, o: &SweepOptions) -> Result<Point, SweepError> {
    if !(1..=4096).contains(&k) {
        return Err(bad(Experiment::SmrZones, k, "K (zones to choose from) must be 1 to 4096"));
    }
    Ok(Point {
        job: smr_zones_job(k, o.zones_runtime_ns),
        qd: 32,
        jobs: 16,
        zones: Some(k),
        published: Vec::new(),
        region: None,
    })
}

/// The 20 TB disk's test number `index`, with its per-zone plugging and zone write
/// locking figures.
fn test20_point(index: u32, o: &SweepOptions) -> Result<Point, SweepError> {
    let Some(t) = SMR_20TB_TESTS.get(index as usize) else {
        let why = format!("the 20 TB disk has tests 0 to {}", SMR_20TB_TESTS.len() - 1);
        return Err(bad(Experiment::Smr20tb, index, &why));
    };
    let random = t.rw == Rw::RandWrite;
    Ok(Point {
        // Sequential tests flush at the end, so that they measure the media, not
        // the cache; random ones ran as published (fio's time-free defaults).
        job: JobSpec { end_fsync: !random, ..smr_20tb_job(t, o.seq20_bytes, o.rand20_ios) },
        qd: t.qd,
        jobs: 1,
        zones: None,
        published: vec![(IssuePolicy::Zwp, t.zwp_mb_s), (IssuePolicy::Zwl, t.zwl_mb_s)],
        region: if random { None } else { Some((0, o.seq20_bytes)) },
    })
}

/// `smr-streams` with `n` streams: flushed at the end, so that it measures the media,
/// not the cache; no published figure (the rate over the zones written bounds it).
fn streams_point(n: u32) -> Result<Point, SweepError> {
    if !(1..=1024).contains(&n) {
        return Err(bad(Experiment::SmrStreams, n, "the number of streams must be 1 to 1024"));
    }
    let job = JobSpec { end_fsync: true, ..smr_streams_job(n) };
    let span = job.offset_increment_bytes * u64::from(n);
    Ok(Point { job, qd: SMR_STREAMS_QD, jobs: n, zones: None, published: Vec::new(), region: Some((0, span)) })
}
