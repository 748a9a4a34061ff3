//! fio-like jobs on a real image, in wall-clock time: the same job description
//! ([`JobSpec`]: `rw`, `bs`, `iodepth`, `numjobs`, `offset`, `size`, `io_size`,
//! `runtime`, `zonemode`, `max_open_zones`, `fua`) and the same results
//! ([`JobResult`]) as the simulator's, measured.
//!
//! One thread per job keeps `iodepth` asynchronous I/Os in flight through the
//! [`Runtime`], as fio's io_uring engine does. With `zonemode=zbd`, as fio's `zbd.c`:
//! the jobs share a host-side table of write pointers (read from the device at the
//! start, advanced when a write is queued); a write goes to the write pointer of its
//! zone; a zone found full is reset first (when no write to it is in flight).

use super::{AlignedBuf, Buffer, Io, IoDone, Runtime, Submitter};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use zblk_core::bio::{BioFlags, Op};
use zblk_core::engine::EngineStats;
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SHIFT, Sector, ZoneNo};
use zblk_core::zone::ZoneCond;
use zblk_workload::job::{JobError, JobResult, JobSpec, ZoneMode};
use zblk_workload::stats::Tally;

/// What a benchmark run on an image produced.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RealReport {
    /// The image.
    pub image: String,
    /// The I/O driver, in words.
    pub backend: String,
    /// The engine's issue policy.
    pub policy: String,
    /// The seed of the random offsets.
    pub seed: u64,
    /// Wall-clock time of the run.
    pub elapsed_ns: u64,
    /// Per job (or per group) results.
    pub jobs: Vec<JobResult>,
    /// Engine counters over the run.
    pub engine: EngineStats,
}

/// fio's host-side zone table, shared by the jobs.
#[derive(Debug)]
struct Zbd {
    /// Write pointer offsets as the jobs believe them, advanced when a write is queued.
    wp: Vec<u64>,
    writes_out: Vec<u32>,
    resetting: Vec<bool>,
    /// Zones open for writing (only with `max_open_zones`).
    open: Vec<u32>,
}

enum Next {
    Io(Op, Sector, u32),
    Reset(ZoneNo),
    Wait,
    Stop,
}

/// Where a job's next I/O goes (fio's offset generation and `zbd.c` rules).
struct Job {
    random: bool,
    write: bool,
    zonemode: ZoneMode,
    bs: u32,
    max_open: usize,
    geo: Geometry,
    rng: ChaCha8Rng,
    region_start: u64,
    region_end: u64,
    next_seq: u64,
}

/// A completed I/O as the job thread sees it.
struct Done {
    op: Op,
    sector: Sector,
    nr_sectors: u32,
    reset: bool,
    latency: Duration,
    done: IoDone,
}

/// Runs `specs` on the runtime's image and measures them.
pub fn run_jobs(rt: &Runtime, specs: &[JobSpec], seed: u64, group: bool) -> Result<RealReport, JobError> {
    let geo = rt.geometry().clone();
    if specs.is_empty() {
        return Err(JobError { option: "rw", message: "no job given".to_string() });
    }
    for s in specs {
        s.validate(&geo)?;
    }
    let zbd = Arc::new(Mutex::new(Zbd {
        wp: rt
            .report_zones()
            .map_err(|s| JobError { option: "zonemode", message: format!("zone report failed: {s}") })?
            .iter()
            .map(|z| match z.cond {
                ZoneCond::Full | ZoneCond::ReadOnly | ZoneCond::Offline => z.capacity,
                _ => z.wp.since(z.start).min(z.capacity),
            })
            .collect(),
        writes_out: vec![0; geo.nr_zones() as usize],
        resetting: vec![false; geo.nr_zones() as usize],
        open: Vec::new(),
    }));
    let before = rt.engine_stats();
    let start = Instant::now();
    let mut tallies: Vec<(usize, Tally)> = Vec::new();
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            for n in 0..spec.numjobs {
                let job_seed = seed ^ ((i as u64) << 48) ^ (u64::from(n) << 32) ^ 0x5eed;
                let (zbd, geo) = (zbd.clone(), &geo);
                handles.push((i, s.spawn(move || run_job(rt, spec, geo, zbd, job_seed, start))));
            }
        }
        for (i, h) in handles {
            tallies.push((i, h.join().expect("job thread panicked")));
        }
    });
    let elapsed_ns = start.elapsed().as_nanos() as u64;
    let after = rt.engine_stats();
    let mut merged: Vec<(usize, Tally)> = Vec::new();
    for (i, t) in tallies {
        match merged.iter_mut().find(|(j, _)| group && *j == i) {
            Some((_, m)) => m.merge(&t),
            None => merged.push((i, t)),
        }
    }
    Ok(RealReport {
        image: rt.device().name(),
        backend: rt.backend().to_string(),
        policy: rt.sh().lock_core().engine.config().policy.name().to_string(),
        seed,
        elapsed_ns,
        jobs: merged.iter().map(|(i, t)| t.result(&specs[*i].name)).collect(),
        engine: diff_stats(&before, &after),
    })
}

fn diff_stats(a: &EngineStats, b: &EngineStats) -> EngineStats {
    EngineStats {
        bios: b.bios - a.bios,
        invalid: b.invalid - a.invalid,
        requests: b.requests - a.requests,
        splits: b.splits - a.splits,
        plugged: b.plugged - a.plugged,
        refused: b.refused - a.refused,
        aborted: b.aborted - a.aborted,
        write_errors: b.write_errors - a.write_errors,
        reports: b.reports - a.reports,
        emulated_appends: b.emulated_appends - a.emulated_appends,
        plugs_allocated: b.plugs_allocated - a.plugs_allocated,
        plugs_peak: b.plugs_peak,
        issuer_visits: b.issuer_visits - a.issuer_visits,
        anticipations: b.anticipations - a.anticipations,
        anticipation_hits: b.anticipation_hits - a.anticipation_hits,
    }
}

/// One running job: its state behind a lock, shared by the thread that starts it and
/// the completion callbacks that keep it going. Each callback records its I/O and
/// submits the next ones itself (from the completion thread, batched), as fio's
/// single job thread reaps and resubmits: no thread hand-off per I/O.
struct JobRun {
    sub: Submitter,
    spec: JobSpec,
    geo: Geometry,
    zbd: Arc<Mutex<Zbd>>,
    t0: Instant,
    deadline: Option<Instant>,
    io_limit: u64,
    st: Mutex<JobState>,
    finished: Condvar,
}

struct JobState {
    job: Job,
    tally: Tally,
    pool: Vec<AlignedBuf>,
    inflight: u32,
    issued: u64,
    stopped: bool,
}

fn run_job(rt: &Runtime, spec: &JobSpec, geo: &Geometry, zbd: Arc<Mutex<Zbd>>, seed: u64, t0: Instant) -> Tally {
    let region_start = spec.offset_bytes >> SECTOR_SHIFT;
    let region_end = region_start + (spec.region_bytes(geo) >> SECTOR_SHIFT);
    let mut job = Job {
        random: spec.rw.is_random(),
        write: spec.rw.is_write(),
        zonemode: spec.zonemode,
        bs: (spec.bs_bytes >> SECTOR_SHIFT) as u32,
        max_open: spec.max_open_zones as usize,
        geo: geo.clone(),
        rng: ChaCha8Rng::seed_from_u64(seed),
        region_start,
        region_end,
        next_seq: region_start,
    };
    // fio fills its buffers with random data once; so do we.
    let pool = (0..spec.iodepth)
        .map(|_| {
            let mut b = AlignedBuf::zeroed(spec.bs_bytes as usize);
            job.rng.fill(&mut b[..]);
            b
        })
        .collect();
    let run = Arc::new(JobRun {
        sub: rt.submitter(),
        spec: spec.clone(),
        geo: geo.clone(),
        zbd,
        t0,
        deadline: spec.runtime_ns.map(|ns| t0 + Duration::from_nanos(ns)),
        io_limit: spec.io_size_bytes.unwrap_or(spec.region_bytes(geo)),
        st: Mutex::new(JobState {
            job,
            tally: Tally { jobs: 1, ..Tally::default() },
            pool,
            inflight: 0,
            issued: 0,
            stopped: false,
        }),
        finished: Condvar::new(),
    });
    loop {
        JobRun::refill(&run);
        let st = run.lock();
        if st.stopped && st.inflight == 0 {
            break;
        }
        // Woken when the job ends; a job with nothing in flight that is not done
        // (every zone it could write busy with other jobs) tries again shortly.
        let (st, _) = run.finished.wait_timeout(st, Duration::from_millis(1)).unwrap_or_else(|p| p.into_inner());
        if st.stopped && st.inflight == 0 {
            break;
        }
    }
    let st = run.lock();
    st.tally.clone()
}

impl JobRun {
    fn lock(&self) -> std::sync::MutexGuard<'_, JobState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Submits I/Os until `iodepth` are in flight (or the job ends).
    fn refill(run: &Arc<JobRun>) {
        let mut ios = Vec::new();
        {
            let mut st = run.lock();
            while !st.stopped && st.inflight < run.spec.iodepth {
                if run.deadline.map_or(st.issued >= run.io_limit, |d| Instant::now() >= d) {
                    st.stopped = true;
                    break;
                }
                let next = st.job.next(&mut run.zbd.lock().unwrap_or_else(|p| p.into_inner()));
                match next {
                    Next::Io(op, sector, nr) => {
                        let len = (u64::from(nr) << SECTOR_SHIFT) as usize;
                        let buf = match st.pool.pop() {
                            Some(b) if b.len() == len => b,
                            Some(b) => {
                                st.pool.push(b);
                                AlignedBuf::zeroed(len)
                            }
                            None => AlignedBuf::zeroed(len),
                        };
                        let io = if op == Op::Read { Io::read(sector, buf) } else { Io::write(sector, buf) };
                        let io = if run.spec.fua && op == Op::Write { io.with_flags(BioFlags::FUA) } else { io };
                        ios.push((io, op, sector, nr, false));
                        st.issued += len as u64;
                        st.inflight += 1;
                    }
                    Next::Reset(z) => {
                        st.tally.zone_resets += 1;
                        let sector = run.geo.zone_start(z);
                        ios.push((Io::zone(Op::ZoneReset, sector), Op::ZoneReset, sector, 0, true));
                        st.inflight += 1;
                    }
                    Next::Wait => break,
                    Next::Stop => st.stopped = true,
                }
            }
            if st.stopped && st.inflight == 0 {
                run.finished.notify_all();
            }
        }
        // Submitted without the job's lock: a completion may run inline.
        run.sub.batch(|| {
            for (io, op, sector, nr_sectors, reset) in ios {
                let (r, t) = (run.clone(), Instant::now());
                run.sub.submit(io, move |done| {
                    let d = Done { op, sector, nr_sectors, reset, latency: t.elapsed(), done };
                    JobRun::done(&r, d);
                });
            }
        });
    }

    fn done(run: &Arc<JobRun>, d: Done) {
        {
            let mut st = run.lock();
            st.inflight -= 1;
            st.tally.end_ns = run.t0.elapsed().as_nanos() as u64;
            run.record(&mut st, &d);
            if let Some(Buffer::Aligned(b)) = d.done.buf {
                if b.len() as u64 == run.spec.bs_bytes {
                    st.pool.push(b);
                }
            }
        }
        JobRun::refill(run);
    }

    fn record(&self, st: &mut JobState, d: &Done) {
        let tally = &mut st.tally;
        if let Err(s) = d.done.result {
            tally.errors += 1;
            tally.first_error.get_or_insert(s);
        }
        let bytes = u64::from(d.nr_sectors) << SECTOR_SHIFT;
        let lat = d.latency.as_nanos() as u64;
        match (d.reset, d.op, d.done.result.is_ok()) {
            (true, ..) => {
                let z = self.geo.zone_no(d.sector);
                self.zbd.lock().unwrap_or_else(|p| p.into_inner()).resetting[z.idx()] = false;
            }
            (false, Op::Read, true) => tally.read.record(bytes, lat),
            (false, _, ok) => {
                if ok {
                    tally.write.record(bytes, lat);
                }
                self.write_done(d.sector, ok);
            }
        }
    }

    fn write_done(&self, sector: Sector, ok: bool) {
        if self.spec.zonemode != ZoneMode::Zbd || self.geo.zone_is_conv(self.geo.zone_no(sector)) {
            return;
        }
        let z = self.geo.zone_no(sector);
        let mut zbd = self.zbd.lock().unwrap_or_else(|p| p.into_inner());
        zbd.writes_out[z.idx()] -= 1;
        if !ok && zbd.writes_out[z.idx()] == 0 {
            // As fio after an error: take the write pointer from the device.
            if let Ok(info) = self.sub.zone_info(sector) {
                zbd.wp[z.idx()] = info.wp_offset().unwrap_or(info.capacity).min(info.capacity);
            }
        }
    }
}

impl Job {
    fn next(&mut self, zbd: &mut Zbd) -> Next {
        let bs = self.bs;
        match (self.zonemode, self.write) {
            (ZoneMode::Zbd, true) => self.next_zbd_write(zbd, bs),
            (ZoneMode::Zbd, false) => self.next_zbd_read(zbd, bs),
            (ZoneMode::None, w) => self.next_plain(bs, if w { Op::Write } else { Op::Read }),
        }
    }

    fn next_plain(&mut self, bs: u32, op: Op) -> Next {
        let bs64 = u64::from(bs);
        if self.random {
            let blocks = (self.region_end - self.region_start) / bs64;
            let b = self.rng.random_range(0..blocks);
            return Next::Io(op, Sector(self.region_start + b * bs64), bs);
        }
        if self.next_seq + bs64 > self.region_end {
            self.next_seq = self.region_start;
        }
        let at = self.next_seq;
        self.next_seq += bs64;
        Next::Io(op, Sector(at), bs)
    }

    fn zone_range(&self) -> (u32, u32) {
        let first = self.geo.zone_no(Sector(self.region_start)).0;
        let last = self.geo.zone_no(Sector(self.region_end - 1)).0;
        (first.max(self.geo.nr_conv()), last)
    }

    fn next_zbd_write(&mut self, zbd: &mut Zbd, bs: u32) -> Next {
        let (first, last) = self.zone_range();
        let random = self.random;
        let max_open = self.max_open;
        let lbs = self.geo.lbs_sectors();
        let tries = if random { 16 } else { (last - first + 2) as usize };
        for _ in 0..tries {
            let z = if random {
                let mut z = self.rng.random_range(first..=last);
                if max_open > 0 && !zbd.open.contains(&z) {
                    if zbd.open.len() >= max_open {
                        z = zbd.open[self.rng.random_range(0..zbd.open.len())];
                    } else {
                        zbd.open.push(z);
                    }
                }
                ZoneNo(z)
            } else {
                if self.next_seq >= self.region_end {
                    self.next_seq = self.region_start;
                }
                self.geo.zone_no(Sector(self.next_seq))
            };
            let cap = self.geo.zone_capacity(z);
            let (wp, out, resetting) = (zbd.wp[z.idx()], zbd.writes_out[z.idx()], zbd.resetting[z.idx()]);
            if resetting || wp + u64::from(lbs) > cap {
                if !resetting && out == 0 {
                    zbd.resetting[z.idx()] = true;
                    zbd.wp[z.idx()] = 0;
                    zbd.open.retain(|&o| o != z.0);
                    return Next::Reset(z);
                }
                if !random {
                    self.next_seq = self.geo.zone_start(z).0 + self.geo.zone_len(z);
                }
                continue;
            }
            let len = (u64::from(bs).min(cap - wp) as u32) / lbs * lbs;
            let at = self.geo.zone_start(z) + wp;
            if !random {
                self.next_seq = at.0 + u64::from(len);
            }
            zbd.writes_out[z.idx()] += 1;
            zbd.wp[z.idx()] = wp + u64::from(len);
            if zbd.wp[z.idx()] >= cap {
                zbd.open.retain(|&o| o != z.0);
            }
            return Next::Io(Op::Write, at, len);
        }
        Next::Wait
    }

    fn next_zbd_read(&mut self, zbd: &mut Zbd, bs: u32) -> Next {
        let (first, last) = self.zone_range();
        let random = self.random;
        let lbs = u64::from(self.geo.lbs_sectors());
        let tries = if random { 32 } else { (last - first + 2) as usize };
        for _ in 0..tries {
            let z = if random {
                ZoneNo(self.rng.random_range(first..=last))
            } else {
                if self.next_seq >= self.region_end {
                    self.next_seq = self.region_start;
                }
                self.geo.zone_no(Sector(self.next_seq))
            };
            let wp = zbd.wp[z.idx()];
            let start = self.geo.zone_start(z).0;
            if wp == 0 || (!random && self.next_seq >= start + wp) {
                if !random {
                    self.next_seq = start + self.geo.zone_len(z);
                }
                continue;
            }
            let len = u64::from(bs).min(wp);
            if random {
                let slots = (wp - len) / lbs + 1;
                let at = start + self.rng.random_range(0..slots) * lbs;
                return Next::Io(Op::Read, Sector(at), len as u32);
            }
            let at = self.next_seq.max(start);
            let len = len.min(start + wp - at);
            self.next_seq = at + len;
            return Next::Io(Op::Read, Sector(at), len as u32);
        }
        // Nothing written to read: fio ends such a job.
        Next::Stop
    }
}
