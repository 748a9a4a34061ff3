//! The published points the refits run at, and one point simulated on a disk with
//! one fitted number changed: the disk variants (another destage window, another
//! outer diameter rate) the leave-one-out rows and the families compare.

use super::LooOptions;
use crate::experiments::{SMR_20TB_TESTS, SMR_SEQ_QD, SMR_SEQ_QD1, SMR_SEQ_ZWP, smr_20tb_job, smr_seq_job};
use crate::sweeps::{Experiment, RunSetup, SweepError, run_one};
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_sim::hdd::HddParams;
use zblk_workload::job::{JobSpec, Rw};

/// A published point: which disk, which job, which policy.
pub(super) struct Pt {
    /// The point as the tables name it, e.g. `30 TB QD1 zwp`.
    pub(super) name: String,
    /// Its published figure, MB/s.
    pub(super) published: f64,
    /// The experiment whose disk and open zone limit it runs on.
    pub(super) exp: Experiment,
    /// The job, as the sweeps run it.
    pub(super) job: JobSpec,
    /// The issue policy it was published under.
    pub(super) policy: IssuePolicy,
}

/// The 30 TB disk's `smr-seq` point at queue depth `qd` under `policy`.
pub(super) fn seq30(qd: u32, policy: IssuePolicy, o: &LooOptions) -> Pt {
    let i = SMR_SEQ_QD.iter().position(|&q| q == qd).expect("a published QD");
    let published = if policy == IssuePolicy::Zwp { SMR_SEQ_ZWP[i] } else { SMR_SEQ_QD1[i] };
    Pt {
        name: format!("30 TB QD{qd} {}", policy.name()),
        published,
        exp: Experiment::SmrSeq,
        job: JobSpec { end_fsync: true, ..smr_seq_job(qd, o.seq_zones) },
        policy,
    }
}

/// The 20 TB disk's test `name` under `policy`.
pub(super) fn t20(name: &str, policy: IssuePolicy, o: &LooOptions) -> Pt {
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
pub(super) fn sim(p: &Pt, disk: &HddParams, host_ns: u64, o: &LooOptions) -> Result<f64, SweepError> {
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
pub(super) fn with_window(disk: &HddParams, window: u32) -> HddParams {
    HddParams { destage: zblk_sim::hdd::Destage { window, ..disk.destage }, ..disk.clone() }
}

/// `disk` with its outer diameter rate `od_mb_s` MB/s.
pub(super) fn with_od(disk: &HddParams, od_mb_s: f64) -> HddParams {
    // The ID rate follows the OD rate (same radius ratio).
    let ratio = disk.id_rate / disk.od_rate;
    HddParams { od_rate: od_mb_s * 1e6, id_rate: od_mb_s * 1e6 * ratio, ..disk.clone() }
}
