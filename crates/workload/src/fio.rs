//! fio-like jobs as a sans-IO generator: `rw`, `bs`, `iodepth`, `numjobs`, `offset`,
//! `size`, `io_size`, `runtime`, `zonemode`, `max_open_zones`, `fua`, `end_fsync`,
//! with fio's meaning.
//!
//! [`FioGen`] reads no clock, does no I/O and starts no thread. Its driver tells it
//! the time with every call and feeds it what happened: [`FioGen::on_complete`]
//! for a BIO it asked for, [`FioGen::zone_report`] for a zone it asked about,
//! [`FioGen::idle`] when nothing is in flight. [`FioGen::next`] says what to do
//! next: submit a BIO, or report a zone. The simulator drives it in virtual time
//! (`zblk_sim::FioJobs`), the threaded runtime in wall-clock time
//! (`zblk_runtime::bench`): the same jobs make the same BIOs in the same order
//! for the same sequence of inputs.
//!
//! With `zonemode=zbd`, as fio's `zbd.c`:
//!
//! - fio keeps a host-side copy of every zone's write pointer (`zbd_info`), shared by
//!   the jobs of a run, read from the device's zone report at the start and advanced
//!   when a write is queued; a write goes to the write pointer of its zone;
//! - each zone has a lock, held by one job while it has I/O to the zone in flight;
//!   a job that needs a zone another job holds first waits for its own I/O to
//!   complete (`io_u_quiesce()`, so that jobs never deadlock holding locks), then
//!   blocks on it; the locks are glibc mutexes: one released is free, its first
//!   waiter is woken and tries again at its turn, and a job that runs before it may
//!   take it first;
//! - jobs that can run at the same time (the one whose completion it is, those its
//!   releases woke, every job at the start) take turns, one submission each, as
//!   fio's job threads share the host's CPUs;
//! - a random writer draws its blocks from fio's random map: every block of its range
//!   once a cycle (a used one gives the next free one), so each zone gets its share;
//! - a writing job scans its zones as it starts, and a time-based random writer
//!   again each time its map is used up (`zbd_file_reset()`): it takes every zone
//!   lock of its range in order, keeps them until it has all, then lets them go;
//! - a zone found full is reset (synchronously, after the job's own I/O drained),
//!   then written from its start;
//! - with an open zone limit (`max_open_zones`, or the device's `max_open_zones`
//!   when the job sets none), a write to a zone outside the set of open zones goes
//!   to a random open zone once the set is full; a zone leaves the set when the write
//!   that fills it completes, and until then the job holding it sends its writes there
//!   to the open zone `zbd_convert_to_open_zone()` picks; a device without limits
//!   reads Linux's 128 (the zone write plug pool) when it has more zones;
//! - after a failed write, once nothing else of the job is out to the zone, the
//!   zone's write pointer is read from the device again (a zone report);
//! - reads stay below the write pointers.

use crate::job::{JobError, JobResult, JobSpec, ZoneMode};
use crate::stats::Tally;
use crate::token::{FIO_FLUSH as FLUSH_FLAG, FIO_RESET as RESET_FLAG};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::collections::VecDeque;
use zblk_core::bio::{Bio, BioFlags, Op, Status};
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SHIFT, Sector, ZoneNo};
use zblk_core::zone::{ZoneCond, ZoneInfo};

fn job_err(option: &'static str, message: String) -> JobError {
    JobError { option, message }
}

/// A BIO the generator wants submitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FioIo {
    /// The BIO (`user_data` 0: the driver names it as it likes).
    pub bio: Bio,
    /// Handed back with the BIO's completion ([`FioDone::token`]).
    pub token: u64,
    /// The data stamp of a write: a simulator fills the buffer with this stamp's
    /// pattern (`crate::pattern`), so that every sector says which write put it
    /// there. 0 for BIOs without data.
    pub stamp: u64,
    /// The job that submits it (fio's job number, from 0): a trace names it as
    /// blktrace names the submitting process.
    pub job: u32,
}

/// What the driver must do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FioAction {
    /// Submit this BIO; answer with [`FioGen::on_complete`] when it completes.
    Submit(FioIo),
    /// Report this zone of the device and answer with [`FioGen::zone_report`]:
    /// fio reads a zone's write pointer again after a write to it failed. Nothing
    /// more comes out of [`FioGen::next`] until the answer.
    ReportZone(ZoneNo),
}

/// A completed BIO, as the generator needs it back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FioDone {
    /// The token of its [`FioIo`].
    pub token: u64,
    /// Its operation.
    pub op: Op,
    /// Its sector as submitted.
    pub sector: Sector,
    /// Its length.
    pub nr_sectors: u32,
    /// Its result.
    pub result: Result<Sector, Status>,
    /// Time from submission to completion, for the latency statistics.
    pub latency_ns: u64,
}

/// Where a job is in fio's zone locking protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JobState {
    /// Submitting I/O freely.
    Running,
    /// fio's `io_u_quiesce()`: waiting for all its own I/O to complete before it
    /// blocks on the lock of zone `z` held by another job (so that jobs never
    /// deadlock holding locks), or before it resets full zone `z` it holds.
    Quiescing(ZoneNo, Then),
    /// Blocked on the lock of zone `z`.
    Blocked(ZoneNo),
    /// Holds the lock of zone `z` (granted, or after a reset): its next I/O goes
    /// there.
    Granted(ZoneNo),
    /// Waiting for its synchronous reset of zone `z`.
    Resetting(ZoneNo),
}

/// What a quiescing job does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    Lock,
    Reset,
}

#[derive(Debug)]
struct Job {
    spec: usize,
    rng: ChaCha8Rng,
    region_start: u64,
    region_end: u64,
    next_seq: u64,
    issued_bytes: u64,
    io_limit_bytes: u64,
    inflight: u32,
    stopped: bool,
    /// The end-of-job flush was submitted.
    fsynced: bool,
    state: JobState,
    tally: Tally,
    /// fio's random map of the job's zones (a random writer in zbd mode).
    map: Option<RandMap>,
    /// The zone lock its scan of its zones (`zbd_file_reset()`) takes next, while it
    /// scans: at its start, and at each new cycle of its random map.
    scan: Option<u32>,
    /// Its start scan is part of its file open (`td_io_open_file()`), not yet over.
    opening: bool,
}

/// A zone's lock, as fio's recursive per-zone mutex shared by all jobs: held by one
/// job while it has I/O to the zone in flight (one recursion level per I/O), or
/// while it resets the zone.
#[derive(Debug, Default, Clone)]
struct ZoneLock {
    owner: Option<usize>,
    /// The owner's I/Os to the zone in flight.
    count: u32,
    /// Held outside of any I/O (granted and not used yet, or around a reset).
    pinned: bool,
    /// Held while the zone's write pointer is read again from the device.
    reporting: bool,
    waiters: VecDeque<usize>,
}

/// fio's host-side zone table (`zbd_info`), shared by the jobs of a run.
#[derive(Debug)]
struct ZbdState {
    /// Write pointer offsets as the jobs believe them, advanced when a write is queued.
    wp: Vec<u64>,
    /// Zones open for writing (with an open zone limit).
    open: Vec<u32>,
    locks: Vec<ZoneLock>,
}

/// What a job does next.
enum Next {
    /// An I/O to zone `z` in zbd mode (the offset is decided once the lock is held).
    Zone(ZoneNo),
    /// An I/O at this place (no zones involved).
    Plain(Op, Sector, u32),
    /// Nothing now.
    Wait,
    /// The random map was used up: the job scans its zones again first.
    Rescan,
    /// The job is done.
    Stop,
}

/// An input waiting to be processed by [`FioGen::next`], in arrival order.
#[derive(Clone, Copy, Debug)]
enum Work {
    /// Every job submits what it may (the start, or an idle driver).
    FillAll,
    /// A BIO completed.
    Done(FioDone, u64),
    /// Job `job`'s failed write to `zone` was processed up to the zone report,
    /// which has been answered.
    Resume { job: usize, zone: ZoneNo },
}

/// A set of fio jobs as a sans-IO generator. See the module documentation.
#[derive(Debug)]
pub struct FioGen {
    specs: Vec<JobSpec>,
    jobs: Vec<Job>,
    geo: Geometry,
    zbd: Option<ZbdState>,
    stamp: u64,
    /// Jobs woken by a released zone lock they wait for, with the zone: each tries
    /// the lock again at its turn, after the job whose event it is has had its own.
    woken: Vec<(usize, ZoneNo)>,
    /// Submissions left in the running job's turn ([`FioGen::take_turns`]).
    turn_left: Option<u32>,
    /// The jobs waiting for their turn, and the zone a woken one tries again.
    turns: VecDeque<(usize, Option<ZoneNo>)>,
    /// The host's CPUs in time, when set ([`FioGen::set_host`]).
    host: host::Host,
    /// Inputs not processed yet.
    work: VecDeque<Work>,
    /// Actions decided and not taken by the driver yet.
    out: VecDeque<FioAction>,
    /// The zone report being waited for, and the job whose completion needs it.
    awaiting: Option<(usize, ZoneNo)>,
    /// The job whose start scan ended its step: its file open goes on first
    /// ([`HostCpus::open_ns`]).
    opened: Option<usize>,
    /// The run's seed (the host's wake-ups are drawn from it).
    seed: u64,
}

impl FioGen {
    /// Jobs for `specs` (validated here) on a device of geometry `geo` whose zones
    /// the device reported as `zones` (empty for a device that is not zoned),
    /// seeded. Zones open in the report count against the open zone limit, as fio
    /// counts them at start-up.
    pub fn new(specs: &[JobSpec], geo: &Geometry, zones: &[ZoneInfo], seed: u64) -> Result<FioGen, JobError> {
        if specs.is_empty() {
            return Err(job_err("rw", "no job given".to_string()));
        }
        let mut jobs = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            spec.validate(geo)?;
            for n in 0..spec.numjobs {
                // fio's offset_increment: copy n's region starts n increments further.
                let (start_bytes, len_bytes) = spec.copy_region(geo, n);
                let start = start_bytes >> SECTOR_SHIFT;
                let end = start + (len_bytes >> SECTOR_SHIFT);
                let job_seed = seed ^ ((i as u64) << 48) ^ (u64::from(n) << 32) ^ 0x5eed;
                jobs.push(Job {
                    spec: i,
                    rng: ChaCha8Rng::seed_from_u64(job_seed),
                    region_start: start,
                    region_end: end,
                    next_seq: start,
                    issued_bytes: 0,
                    io_limit_bytes: spec.io_size_bytes.unwrap_or(len_bytes),
                    inflight: 0,
                    stopped: false,
                    fsynced: false,
                    state: JobState::Running,
                    tally: Tally { jobs: 1, ..Tally::default() },
                    map: None,
                    scan: None,
                    opening: false,
                });
            }
        }
        let zbd = match specs.iter().any(|s| s.zonemode == ZoneMode::Zbd) {
            true => Some(Self::zbd_state(specs, geo, zones)?),
            false => None,
        };
        let mut fio = FioGen {
            specs: specs.to_vec(),
            jobs,
            geo: geo.clone(),
            zbd,
            stamp: 0,
            woken: Vec::new(),
            turn_left: None,
            turns: VecDeque::new(),
            host: host::Host::default(),
            work: VecDeque::new(),
            out: VecDeque::new(),
            awaiting: None,
            opened: None,
            seed,
        };
        for j in 0..fio.jobs.len() {
            let spec = fio.spec(j);
            if spec.zonemode == ZoneMode::Zbd && spec.rw.is_write() {
                // fio's zbd_file_reset() as the job starts: a scan of its zones.
                let (first, last) = fio.zone_range(j);
                fio.jobs[j].map = Self::map_for(fio.spec(j), geo, first, last);
                fio.jobs[j].scan = (first <= last).then_some(first);
                fio.jobs[j].opening = first <= last;
            }
        }
        Ok(fio)
    }

    /// fio's zone table from the device's report: write pointers, and the zones
    /// already open (fio refuses to start with more than its open zone limit).
    fn zbd_state(specs: &[JobSpec], geo: &Geometry, zones: &[ZoneInfo]) -> Result<ZbdState, JobError> {
        let n = geo.nr_zones() as usize;
        if zones.len() != n {
            return Err(job_err("zonemode", format!("zone report of {} zones for {n} zones", zones.len())));
        }
        let conv = |z: usize| geo.zone_is_conv(ZoneNo(z as u32));
        let wp = zones.iter().enumerate().map(|(z, info)| if conv(z) { 0 } else { fio_wp(info) }).collect();
        let open: Vec<u32> = (0..n)
            .filter(|&z| !conv(z) && matches!(zones[z].cond, ZoneCond::ImpOpen | ZoneCond::ExpOpen))
            .map(|z| z as u32)
            .collect();
        for s in specs.iter().filter(|s| s.zonemode == ZoneMode::Zbd && s.rw.is_write()) {
            let limit = if s.max_open_zones == 0 { geo.max_open() } else { s.max_open_zones };
            if limit > 0 && open.len() > limit as usize {
                return Err(job_err(
                    "max_open_zones",
                    format!("{} zones are open on the device, more than the limit of {limit}", open.len()),
                ));
            }
        }
        Ok(ZbdState { wp, open, locks: std::iter::repeat_with(ZoneLock::default).take(n).collect() })
    }

    /// Runs the jobs on `cpus` in time ([`HostCpus`]) instead of at each event's
    /// instant. Set before [`FioGen::start`]; the driver then also calls
    /// [`FioGen::next`] at [`FioGen::next_due`].
    pub fn set_host(&mut self, cpus: HostCpus) {
        self.host = host::Host::new(cpus, self.jobs.len(), self.seed);
    }

    /// When a job's step on the host's CPUs is next due ([`FioGen::set_host`]):
    /// the driver calls [`FioGen::next`] then, whatever else happens.
    pub fn next_due(&self) -> Option<u64> {
        self.host.due()
    }

    /// Starts the jobs: every job submits up to its `iodepth` (on the host in time,
    /// each from its start: [`HostCpus::start_ns`]).
    pub fn start(&mut self) {
        if self.host.timed() {
            return self.book_start();
        }
        self.work.push_back(Work::FillAll);
    }

    /// The driver has nothing in flight and nothing scheduled: every job tries to
    /// submit again. If [`FioGen::next`] then gives nothing, the run is over (a job
    /// that is not done can no longer make progress).
    pub fn idle(&mut self) {
        self.work.push_back(Work::FillAll);
    }

    /// A BIO completed at time `now_ns` (from the start of the run).
    pub fn on_complete(&mut self, now_ns: u64, done: FioDone) {
        self.work.push_back(Work::Done(done, now_ns));
    }

    /// The device's answer to [`FioAction::ReportZone`] for `zone`: its descriptor,
    /// or why it could not be reported (fio then keeps what it believed).
    pub fn zone_report(&mut self, zone: ZoneNo, info: Result<ZoneInfo, Status>) {
        let (job, z) = self.awaiting.take().expect("a zone report nobody asked for");
        assert_eq!(z, zone, "report of zone {zone}, zone {z} was asked for");
        let zbd = self.zbd.as_mut().expect("zbd");
        if let Ok(info) = info {
            zbd.wp[z.idx()] = fio_wp(&info);
        }
        zbd.locks[z.idx()].reporting = false;
        self.work.push_front(Work::Resume { job, zone });
    }

    /// The next thing to do at time `now_ns`, or `None` until the next input.
    pub fn next(&mut self, now_ns: u64) -> Option<FioAction> {
        loop {
            if let Some(a) = self.out.pop_front() {
                return Some(a);
            }
            if self.awaiting.is_some() {
                return None;
            }
            if self.run_step(now_ns) {
                continue;
            }
            match self.work.pop_front()? {
                Work::FillAll => self.take_turns(0..self.jobs.len(), now_ns),
                Work::Done(c, at_ns) => self.done(c, at_ns, now_ns),
                Work::Resume { job, zone } => {
                    self.maybe_release(zone);
                    self.after_done(job, now_ns);
                }
            }
        }
    }

    /// Whether every job has ended: its I/O done, its final flush completed.
    pub fn is_done(&self) -> bool {
        self.work.is_empty()
            && self.host.idle()
            && self.out.is_empty()
            && self.awaiting.is_none()
            && self.jobs.iter().all(|j| j.stopped && j.inflight == 0 && j.fsynced)
    }

    /// Bytes read and written by the I/Os completed so far, every job (for progress).
    pub fn done_bytes(&self) -> u64 {
        self.jobs.iter().map(|j| j.tally.read.bytes() + j.tally.write.bytes()).sum()
    }

    /// BIOs submitted and not completed.
    pub fn inflight(&self) -> u32 {
        self.jobs.iter().map(|j| j.inflight).sum()
    }

    /// Per-job results; with `group`, one result per job description (fio's
    /// `group_reporting`).
    pub fn results(&self, group: bool) -> Vec<JobResult> {
        let mut merged: Vec<(usize, Tally)> = Vec::new();
        for job in &self.jobs {
            match merged.iter_mut().find(|(spec, _)| group && *spec == job.spec) {
                Some((_, tally)) => tally.merge(&job.tally),
                None => merged.push((job.spec, job.tally.clone())),
            }
        }
        merged.iter().map(|(spec, tally)| tally.result(&self.specs[*spec].name)).collect()
    }

    fn spec(&self, j: usize) -> &JobSpec {
        &self.specs[self.jobs[j].spec]
    }

    fn out_of_budget(&self, j: usize, now_ns: u64) -> bool {
        let job = &self.jobs[j];
        match self.spec(j).runtime_ns {
            Some(rt) => now_ns >= rt,
            None => job.issued_bytes >= job.io_limit_bytes,
        }
    }

    fn submit(&mut self, j: usize, bio: Bio, token: u64, stamp: u64) {
        let job = u32::try_from(j).expect("job numbers fit u32 (fio's numjobs is bounded)");
        self.out.push_back(FioAction::Submit(FioIo { bio, token, stamp, job }));
    }

    /// Submits as much as job `j` may: up to its iodepth, until its budget is spent,
    /// its turn is over or it has to wait for a zone.
    pub(super) fn fill(&mut self, j: usize, now_ns: u64) {
        loop {
            let job = &self.jobs[j];
            if job.stopped && !job.fsynced && job.inflight == 0 {
                // end_fsync: everything written is flushed before the job ends.
                self.jobs[j].fsynced = true;
                self.jobs[j].inflight += 1;
                self.submit(j, Bio::flush(0), (j as u64) | FLUSH_FLAG, 0);
                return;
            }
            if job.stopped || job.inflight >= self.spec(j).iodepth || self.turn_left == Some(0) {
                return;
            }
            if self.out_of_budget(j, now_ns) {
                self.stop(j);
                return;
            }
            if self.jobs[j].scan.is_some() {
                if !self.scan(j) {
                    return;
                }
                if std::mem::take(&mut self.jobs[j].opening)
                    && self.host.timed()
                    && self.host.cpus.open_ns > 0
                    && self.turn_left.is_some()
                {
                    // The rest of the file open before the first I/O: on the host in
                    // time, a step of its own (jobs the scan's unlocks woke may run).
                    self.turn_left = Some(0);
                    self.opened = Some(j);
                    return;
                }
                continue;
            }
            let job = &self.jobs[j];
            let next = match job.state {
                JobState::Granted(z) => Next::Zone(z),
                JobState::Running => self.next_target(j),
                _ => return, // quiescing, blocked or resetting
            };
            match next {
                Next::Plain(op, sector, n) => self.submit_io(j, op, sector, n),
                Next::Zone(z) => {
                    if !self.zone_io(j, z) {
                        return;
                    }
                }
                Next::Wait => return,
                Next::Rescan => continue,
                Next::Stop => {
                    self.stop(j);
                    return;
                }
            }
        }
    }

    fn stop(&mut self, j: usize) {
        if self.jobs[j].scan.is_some() {
            let (first, last) = self.zone_range(j);
            if let JobState::Granted(z) = self.jobs[j].state {
                // Handed the zone its scan waited for: let it go with the others.
                self.jobs[j].state = JobState::Running;
                self.jobs[j].scan = Some(z.0 + 1);
            }
            self.end_scan(j, first, last);
        }
        self.jobs[j].stopped = true;
        self.jobs[j].fsynced |= !self.spec(j).end_fsync;
        if let JobState::Granted(z) = self.jobs[j].state {
            // Granted a zone it will not use: give the lock back.
            self.jobs[j].state = JobState::Running;
            self.unpin(z);
        }
    }

    fn read_offset(&mut self, j: usize, z: ZoneNo, bs: u32, wp: u64) -> Option<(Sector, u32)> {
        if wp == 0 {
            return None;
        }
        let lbs = u64::from(self.geo.lbs_sectors());
        let start = self.geo.zone_start(z).0;
        let len = u64::from(bs).min(wp);
        if self.spec(j).rw.is_random() {
            let slots = (wp - len) / lbs + 1;
            let at = start + self.jobs[j].rng.random_range(0..slots) * lbs;
            return Some((Sector(at), len as u32));
        }
        let at = self.jobs[j].next_seq.max(start);
        if at >= start + wp {
            return None;
        }
        let len = len.min(start + wp - at);
        self.jobs[j].next_seq = at + len;
        Some((Sector(at), len as u32))
    }

    fn submit_reset(&mut self, j: usize, z: ZoneNo) {
        let zbd = self.zbd.as_mut().expect("zbd");
        zbd.wp[z.idx()] = 0;
        zbd.open.retain(|&o| o != z.0);
        let job = &mut self.jobs[j];
        job.state = JobState::Resetting(z);
        job.inflight += 1;
        job.tally.zone_resets += 1;
        self.submit(j, Bio::zone_op(Op::ZoneReset, self.geo.zone_start(z), 0), (j as u64) | RESET_FLAG, 0);
    }

    fn submit_io(&mut self, j: usize, op: Op, sector: Sector, nr_sectors: u32) {
        let spec = &self.specs[self.jobs[j].spec];
        let mut bio = Bio { op, sector, nr_sectors, flags: BioFlags::NONE, user_data: 0 };
        if spec.fua && op == Op::Write {
            bio = bio.with_flags(BioFlags::FUA);
        }
        if op == Op::Write {
            if let Some(zbd) = &mut self.zbd {
                let z = self.geo.zone_no(sector);
                if !self.geo.zone_is_conv(z) {
                    // As fio's zbd_queue_io(): the write pointer moves when queued.
                    // (The zone stays open until this write completes: zone_io_done.)
                    zbd.wp[z.idx()] = sector.since(self.geo.zone_start(z)) + u64::from(nr_sectors);
                }
            }
        }
        if let Some(t) = &mut self.turn_left {
            *t = t.saturating_sub(1);
        }
        let job = &mut self.jobs[j];
        job.inflight += 1;
        job.issued_bytes += u64::from(nr_sectors) << SECTOR_SHIFT;
        self.stamp += 1;
        self.submit(j, bio, j as u64, self.stamp);
    }

    /// The next target of job `j`: a zone (zbd mode) or a plain offset.
    fn next_target(&mut self, j: usize) -> Next {
        let spec = self.spec(j);
        let bs = (spec.bs_bytes >> SECTOR_SHIFT) as u32;
        match spec.zonemode {
            ZoneMode::None => self.next_plain(j, bs, if spec.rw.is_write() { Op::Write } else { Op::Read }),
            ZoneMode::Zbd if spec.rw.is_write() => self.next_write_zone(j),
            ZoneMode::Zbd => self.next_read_zone(j),
        }
    }

    fn next_plain(&mut self, j: usize, bs: u32, op: Op) -> Next {
        let random = self.spec(j).rw.is_random();
        let time_based = self.spec(j).runtime_ns.is_some();
        let job = &mut self.jobs[j];
        let bs64 = u64::from(bs);
        if random {
            let blocks = (job.region_end - job.region_start) / bs64;
            let b = job.rng.random_range(0..blocks);
            return Next::Plain(op, Sector(job.region_start + b * bs64), bs);
        }
        if job.next_seq + bs64 > job.region_end {
            if !time_based && job.issued_bytes >= job.io_limit_bytes {
                return Next::Stop;
            }
            job.next_seq = job.region_start; // wrap: time based, or io_size > size
        }
        let at = job.next_seq;
        job.next_seq += bs64;
        Next::Plain(op, Sector(at), bs)
    }

    /// The open zone limit fio works with: the job's `max_open_zones`, else the one
    /// the device reports through Linux's sysfs. A device with neither an open nor an
    /// active zone limit and more sequential zones than Linux's default zone write plug
    /// pool (128) reads 128 there (`disk_revalidate_zone_resources()`: "set its max
    /// open zone limit to the mempool size"), and fio takes that as the device's limit.
    fn max_open(&self, j: usize) -> usize {
        match self.spec(j).max_open_zones {
            0 => linux_max_open(&self.geo) as usize,
            n => n as usize,
        }
    }

    fn zone_range(&self, j: usize) -> (u32, u32) {
        let job = &self.jobs[j];
        let first = self.geo.zone_no(Sector(job.region_start)).0;
        let last = self.geo.zone_no(Sector(job.region_end - 1)).0;
        (first.max(self.geo.nr_conv()), last)
    }

    /// The zone a write goes to, as fio's `zbd_adjust_block()`: sequential jobs
    /// follow their offset (wrapping at the region end), random ones pick a random
    /// zone; with an open zone limit (the job's, or the device's), a zone not open
    /// when the limit is reached is replaced by a random open one.
    fn next_write_zone(&mut self, j: usize) -> Next {
        let (first, last) = self.zone_range(j);
        let max_open = self.max_open(j);
        let z = if self.jobs[j].map.is_some() {
            match self.next_mapped_zone(j, first) {
                Next::Zone(z) => z.0,
                other => return other,
            }
        } else if self.spec(j).rw.is_random() {
            self.jobs[j].rng.random_range(first..=last)
        } else {
            let job = &mut self.jobs[j];
            if job.next_seq >= job.region_end {
                job.next_seq = job.region_start;
            }
            self.geo.zone_no(Sector(job.next_seq)).0
        };
        let zbd = self.zbd.as_mut().expect("zbd");
        if max_open > 0 && !zbd.open.contains(&z) {
            if zbd.open.len() >= max_open {
                let pick = self.jobs[j].rng.random_range(0..zbd.open.len());
                return Next::Zone(ZoneNo(zbd.open[pick]));
            }
            zbd.open.push(z);
        }
        Next::Zone(ZoneNo(z))
    }

    /// The zone a read goes to: one holding data (fio's `zbd_find_zone()`).
    fn next_read_zone(&mut self, j: usize) -> Next {
        let (first, last) = self.zone_range(j);
        let random = self.spec(j).rw.is_random();
        let zbd = self.zbd.as_ref().expect("zbd");
        if random {
            for _ in 0..32 {
                let z = self.jobs[j].rng.random_range(first..=last);
                if zbd.wp[z as usize] > 0 {
                    return Next::Zone(ZoneNo(z));
                }
            }
        } else {
            let job = &mut self.jobs[j];
            for _ in first..=last + 1 {
                if job.next_seq >= job.region_end {
                    job.next_seq = job.region_start;
                }
                let z = self.geo.zone_no(Sector(job.next_seq));
                let start = self.geo.zone_start(z).0;
                if job.next_seq < start + zbd.wp[z.idx()] {
                    return Next::Zone(z);
                }
                job.next_seq = start + self.geo.zone_len(z);
            }
        }
        // Nothing written to read: fio ends such a job.
        if self.jobs[j].inflight == 0 { Next::Stop } else { Next::Wait }
    }

    /// Processes completion `c` (at `at_ns`): the job's statistics, its zone lock,
    /// then (unless the zone's write pointer must be reported first) what the job
    /// does next.
    fn done(&mut self, c: FioDone, at_ns: u64, now_ns: u64) {
        let j = (c.token & !(RESET_FLAG | FLUSH_FLAG)) as usize;
        let reset = c.token & RESET_FLAG != 0;
        let flush = c.token & FLUSH_FLAG != 0;
        let job = &mut self.jobs[j];
        job.inflight -= 1;
        job.tally.end_ns = at_ns;
        if let Err(s) = c.result {
            job.tally.errors += 1;
            job.tally.first_error.get_or_insert(s);
        }
        if !reset && !flush && c.result.is_ok() {
            let bytes = u64::from(c.nr_sectors) << SECTOR_SHIFT;
            match c.op {
                Op::Read => job.tally.read.record(bytes, c.latency_ns),
                _ => job.tally.write.record(bytes, c.latency_ns),
            }
        }
        if self.zbd.is_some() && self.spec(j).zonemode == ZoneMode::Zbd && !flush {
            let z = self.geo.zone_no(c.sector);
            if !self.geo.zone_is_conv(z) && !self.zone_io_done(j, z, reset, &c) {
                return; // resumed by the zone report
            }
        }
        self.after_done(j, now_ns);
    }

    /// Job `j`'s I/O (or reset) to zone `z` completed. Returns false when the
    /// zone's write pointer must be read from the device first: the lock stays held
    /// and processing resumes with the answer.
    fn zone_io_done(&mut self, j: usize, z: ZoneNo, reset: bool, c: &FioDone) -> bool {
        let zbd = self.zbd.as_mut().expect("zbd");
        if reset {
            // Keep the lock: the write that found the zone full goes there now.
            self.jobs[j].state = JobState::Granted(z);
            return true;
        }
        if c.op == Op::Write
            && (c.sector + u64::from(c.nr_sectors)).since(self.geo.zone_start(z)) >= self.geo.zone_capacity(z)
        {
            // fio's zbd_end_zone_io(): the write that fills the zone closes it.
            zbd.open.retain(|&o| o != z.0);
        }
        let lock = &mut zbd.locks[z.idx()];
        assert_eq!(lock.owner, Some(j), "zone {z} I/O completed for a job not holding its lock");
        lock.count -= 1;
        if c.result.is_err() && c.op == Op::Write && lock.count == 0 {
            // As fio after an error: take the write pointer from the device.
            lock.reporting = true;
            self.awaiting = Some((j, z));
            self.out.push_back(FioAction::ReportZone(z));
            return false;
        }
        self.maybe_release(z);
        true
    }

    /// After job `j`'s completion: a quiescing job whose I/O has drained goes on to
    /// what it waited for; then the job, and the jobs its completion woke, submit.
    fn after_done(&mut self, j: usize, now_ns: u64) {
        if let JobState::Quiescing(z, then) = self.jobs[j].state {
            if self.jobs[j].inflight == 0 {
                match then {
                    Then::Reset => self.submit_reset(j, z),
                    Then::Lock => {
                        self.jobs[j].state = JobState::Running;
                        if self.acquire(j, z) {
                            self.jobs[j].state = JobState::Granted(z);
                            self.zbd.as_mut().expect("zbd").locks[z.idx()].pinned = true;
                        }
                    }
                }
            }
        }
        self.take_turns([j], now_ns);
    }
}

mod host;
mod randmap;
#[cfg(test)]
mod tests;
mod zones;

pub use host::HostCpus;
use zones::fio_wp;
pub use zones::linux_max_open;

use randmap::RandMap;
