//! fio-like jobs on a real image, in wall-clock time: the generator the simulator's
//! benchmarks run ([`FioGen`], with fio's `zonemode=zbd` rules: zone locks shared
//! by the jobs, the open zone limit, resets of full zones, the write pointer read
//! again after a failed write), driven over the [`Runtime`]'s asynchronous API.
//! The job descriptions ([`JobSpec`]) and the results ([`JobResult`]) are the
//! simulator's; the times are measured.
//!
//! The generator sits behind one lock. Completion callbacks feed it and submit what
//! it decides next, from the completing thread, batched, as fio's job threads reap
//! and resubmit: no thread hand-off per I/O. One thread at a time submits (the
//! others leave their work to it), so a completion that runs inside a submission
//! does not recurse. Zone reports the generator asks for are answered at once from
//! the device. The calling thread only starts the run and waits for its end.
//!
//! Writes carry fio's buffers: random bytes, filled once (the generator's data
//! stamps are for the simulator's checker).

use super::{AlignedBuf, Buffer, Completion, Io, IoDone, Runtime, Submitter};
use crate::RingStats;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use slab::Slab;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use zblk_core::bio::Op;
use zblk_core::engine::EngineStats;
use zblk_core::geometry::Geometry;
use zblk_core::units::SECTOR_SHIFT;
use zblk_workload::fio::{FioAction, FioDone, FioGen, FioIo};
use zblk_workload::job::{JobError, JobResult, JobSpec};

/// What a benchmark run on an image produced.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RealReport {
    /// The image, as the caller names it.
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
    /// How the io_uring ring handed the run's entries to the kernel (`None` without
    /// a ring).
    pub ring: Option<RingStats>,
    /// The CPU the whole process used over the run (every thread's).
    pub cpu: CpuUse,
}

/// CPU time and context switches of the whole process (`getrusage(RUSAGE_SELF)`):
/// every thread's, the submitting, completion and worker threads alike, where fio
/// reports each job thread's. What an I/O costs the machine, beside what it gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CpuUse {
    /// Time in user space, nanoseconds.
    pub user_ns: u64,
    /// Time in the kernel, nanoseconds.
    pub sys_ns: u64,
    /// Context switches, voluntary and not.
    pub context_switches: u64,
}

impl CpuUse {
    /// What the process has used so far.
    pub fn now() -> CpuUse {
        // SAFETY: getrusage fills the struct it is given, which is plain data.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above; RUSAGE_SELF cannot fail with a valid pointer.
        let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
        assert_eq!(r, 0, "getrusage(RUSAGE_SELF) failed: {}", std::io::Error::last_os_error());
        let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
        CpuUse { user_ns: ns(u.ru_utime), sys_ns: ns(u.ru_stime), context_switches: (u.ru_nvcsw + u.ru_nivcsw) as u64 }
    }

    /// What was used from `before` to `self`.
    pub fn since(self, before: CpuUse) -> CpuUse {
        CpuUse {
            user_ns: self.user_ns.saturating_sub(before.user_ns),
            sys_ns: self.sys_ns.saturating_sub(before.sys_ns),
            context_switches: self.context_switches.saturating_sub(before.context_switches),
        }
    }
}

/// The deepest job a real run takes ([`JobSpec::iodepth`]): a buffer per I/O in
/// flight.
pub const MAX_IODEPTH: u32 = 4096;
/// The most buffer memory a real run allocates: `bs` x `iodepth` x `numjobs` over
/// all jobs.
pub const MAX_BUFFER_BYTES: u64 = 4 << 30;

/// The limits that protect a real run's memory: [`MAX_IODEPTH`] and
/// [`MAX_BUFFER_BYTES`] (and the workload's own, [`zblk_workload::job::MAX_NUMJOBS`],
/// which `JobSpec::validate` checks).
pub fn check_limits(specs: &[JobSpec]) -> Result<(), JobError> {
    if let Some(s) = specs.iter().find(|s| s.iodepth > MAX_IODEPTH) {
        return Err(JobError { option: "iodepth", message: format!("is at most {MAX_IODEPTH}, got {}", s.iodepth) });
    }
    let buffers = specs.iter().fold(0u64, |sum, s| {
        sum.saturating_add(s.bs_bytes.saturating_mul(u64::from(s.iodepth)).saturating_mul(u64::from(s.numjobs)))
    });
    if buffers > MAX_BUFFER_BYTES {
        return Err(JobError {
            option: "bs",
            message: format!("bs x iodepth x numjobs is {buffers} bytes of buffers, more than {MAX_BUFFER_BYTES}"),
        });
    }
    Ok(())
}

/// Runs `specs` on the runtime's device, named `image` in the report, and measures
/// them. The zone write pointers fio starts from are the device's, as reported now.
pub fn run_jobs(rt: &Runtime, image: &str, specs: &[JobSpec], seed: u64, group: bool) -> Result<RealReport, JobError> {
    run_jobs_watched(rt, image, specs, seed, group, false, &mut |_, _| {})
}

/// How often [`run_jobs_watched`] reports progress.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(250);

/// [`run_jobs`], with `append`: every write the generator decides goes as a zone
/// append to the start of its zone (native where the device has zone append, emulated
/// by the engine otherwise), as fio's `zone_append` write mode: the generator still
/// keeps each zone's write pointer, which the appends together move as its writes
/// would. And `watch(elapsed, bytes)` is called about every [`WATCH_INTERVAL`] while
/// the jobs run, with the bytes read and written by the I/Os completed so far (from
/// the thread that waits for the run: never an I/O thread).
pub fn run_jobs_watched(
    rt: &Runtime,
    image: &str,
    specs: &[JobSpec],
    seed: u64,
    group: bool,
    append: bool,
    watch: &mut dyn FnMut(Duration, u64),
) -> Result<RealReport, JobError> {
    check_limits(specs)?;
    let geo = rt.geometry().clone();
    let zones = if geo.is_zoned() {
        rt.report_zones().map_err(|e| JobError { option: "zonemode", message: format!("zone report failed: {e}") })?
    } else {
        Vec::new()
    };
    let fio = FioGen::new(specs, &geo, &zones, seed)?;
    let pool = buffers(rt, specs, seed);
    let before = rt.engine_stats();
    let ring_before = rt.ring_stats();
    let cpu_before = CpuUse::now();
    let t0 = Instant::now();
    let run = Arc::new_cyclic(|me| BenchRun {
        me: me.clone(),
        sub: rt.submitter(),
        geo,
        t0,
        append,
        st: Mutex::new(RunState {
            fio,
            pool_max: 2 * pool.len(),
            pool,
            pending: Slab::new(),
            inflight: 0,
            submitting: false,
            idled: false,
            finished: false,
            last_ns: 0,
        }),
        finished: Condvar::new(),
    });
    run.lock().fio.start();
    BenchRun::pump(&run, None);
    let mut st = run.lock();
    while !st.finished {
        // (Recovered, as `BenchRun::lock` says why.)
        st = run.finished.wait_timeout(st, WATCH_INTERVAL).unwrap_or_else(|p| p.into_inner()).0;
        if !st.finished {
            let done = st.fio.done_bytes();
            // The watcher runs without the run's lock, which completions take.
            drop(st);
            watch(t0.elapsed(), done);
            st = run.lock();
        }
    }
    let elapsed_ns = t0.elapsed().as_nanos() as u64;
    let cpu = CpuUse::now().since(cpu_before);
    let jobs = st.fio.results(group);
    drop(st);
    let after = rt.engine_stats();
    Ok(RealReport {
        image: image.to_string(),
        backend: rt.backend().to_string(),
        policy: rt.sh().lock_core().engine.config().policy.name().to_string(),
        seed,
        elapsed_ns,
        jobs,
        engine: diff_stats(&before, &after),
        ring: rt.ring_stats().zip(ring_before).map(|(a, b)| a.since(b)),
        cpu,
    })
}

/// One buffer per I/O the jobs keep in flight, of their block size, filled with
/// random bytes once, as fio does; the runtime's (registered with its ring: fio's
/// `fixedbufs`, which zblk always takes where the kernel lets it).
fn buffers(rt: &Runtime, specs: &[JobSpec], seed: u64) -> Vec<AlignedBuf> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xb0f_fe25);
    let sizes: Vec<usize> =
        specs.iter().flat_map(|s| std::iter::repeat_n(s.bs_bytes as usize, (s.iodepth * s.numjobs) as usize)).collect();
    let mut pool = rt.buffers(&sizes);
    for b in &mut pool {
        rng.fill(&mut b[..]);
    }
    pool
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

/// A run: the generator and its buffers behind a lock, shared by the thread that
/// starts it and the completion callbacks that keep it going.
struct BenchRun {
    /// Itself, for the completions of its I/Os, which name them by token
    /// ([`Completion`]).
    me: Weak<BenchRun>,
    sub: Submitter,
    geo: Geometry,
    t0: Instant,
    /// Writes go as zone appends ([`run_jobs_watched`]).
    append: bool,
    st: Mutex<RunState>,
    /// Signalled when the run ends.
    finished: Condvar,
}

struct RunState {
    fio: FioGen,
    /// Buffers not in use.
    pool: Vec<AlignedBuf>,
    /// At most this many are kept (writes cut short at a zone's capacity need
    /// buffers of other sizes).
    pool_max: usize,
    /// What the completion of each I/O in flight hands back to the generator, by
    /// the slab key its token carries ([`token`]).
    pending: Slab<FioDone>,
    /// I/Os taken from the generator and not completed.
    inflight: u32,
    /// A thread is submitting (outside the lock): others leave new work to it.
    submitting: bool,
    /// The generator was told the device is idle and has not submitted since.
    idled: bool,
    /// Every job ended, or none can go on.
    finished: bool,
    /// The latest time handed to the generator (a completion reads the clock before
    /// it takes the lock, so another may have come in first).
    last_ns: u64,
}

impl RunState {
    /// The generator's time at `ns` (read before the lock was taken), never going
    /// back: another thread may have handed it a later time meanwhile.
    fn advance(&mut self, ns: u64) -> u64 {
        self.last_ns = self.last_ns.max(ns);
        self.last_ns
    }
}

/// An I/O ready to go, with the key of what its completion hands back to the
/// generator ([`RunState::pending`]).
struct Ready {
    io: Io,
    key: usize,
}

/// Bits of a token that hold the key of the I/O's [`FioDone`]: at most
/// [`MAX_IODEPTH`] x 256 jobs (2^20) are in flight.
const KEY_BITS: u32 = 20;

/// The token of I/O `key` submitted `ns` into the run: the key, and the submission
/// time modulo 2^44 ns (4.9 hours, the longest latency it measures).
fn token(key: usize, ns: u64) -> u64 {
    assert!(key < 1 << KEY_BITS, "more I/Os in flight than a token names");
    (ns << KEY_BITS) | key as u64
}

/// The key and the latency at `now_ns` of the I/O of `token`.
fn untoken(token: u64, now_ns: u64) -> (usize, u64) {
    let key = (token & ((1 << KEY_BITS) - 1)) as usize;
    let latency = (now_ns << KEY_BITS).wrapping_sub(token & !((1 << KEY_BITS) - 1)) >> KEY_BITS;
    (key, latency)
}

impl BenchRun {
    /// The run's workload and statistics. Poisoning is recovered: they are the
    /// benchmark's report, never committed to the device (an image commits under
    /// its own locks, which propagate a panic), and the runtime fails for the panic
    /// itself, so the run ends with its error whatever the report says.
    fn lock(&self) -> MutexGuard<'_, RunState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// Submits what the generator decided until it decides nothing more, unless
    /// another thread is submitting (which then picks up this thread's work). `now`:
    /// the run's time if the caller just read the clock (a completion), so that the
    /// first decisions do not read it again (four reads per 4 KiB write were 6 % of
    /// the completion thread's time on an image in memory).
    fn pump(run: &Arc<BenchRun>, mut now: Option<u64>) {
        let mut st = run.lock();
        if st.submitting {
            return;
        }
        loop {
            let now = st.advance(now.take().unwrap_or_else(|| run.now_ns()));
            let ready = run.collect(&mut st, now);
            if ready.is_empty() {
                return;
            }
            st.submitting = true;
            drop(st);
            // Submitted without the lock: a completion may run inline.
            run.sub.batch(|| {
                for r in ready {
                    run.sub.submit_to(r.io, run.clone(), token(r.key, run.now_ns()));
                }
            });
            st = run.lock();
            st.submitting = false;
        }
    }

    /// Takes the generator's decisions: I/Os to submit (counted in flight now),
    /// zone reports (answered from the device at once). Marks the run finished when
    /// every job has ended, or when nothing is in flight and the generator, told so,
    /// has nothing more to submit.
    fn collect(&self, st: &mut RunState, now: u64) -> Vec<Ready> {
        let mut ready = Vec::new();
        loop {
            while let Some(a) = st.fio.next(now) {
                match a {
                    FioAction::Submit(io) => {
                        st.inflight += 1;
                        let zone = self.append.then(|| self.geo.zone_start(self.geo.zone_no(io.bio.sector)));
                        let io_ = make_io(&io, &mut st.pool, zone);
                        ready.push(Ready { io: io_, key: st.pending.insert(done_of(&io)) });
                    }
                    FioAction::ReportZone(z) => {
                        let info = self.sub.zone_info(self.geo.zone_start(z));
                        st.fio.zone_report(z, info);
                    }
                }
            }
            if !ready.is_empty() {
                st.idled = false;
                return ready;
            }
            if st.fio.is_done() || (st.inflight == 0 && st.idled) {
                st.finished = true;
                self.finished.notify_all();
                return ready;
            }
            if st.inflight > 0 {
                return ready;
            }
            // Nothing in flight: every job tries again (a job that waited for a
            // zone, or for its own I/O to drain).
            st.idled = true;
            st.fio.idle();
        }
    }

    /// An I/O completed: its buffer back to the pool, its result to the generator,
    /// and what the generator decides next submitted.
    fn done(run: &Arc<BenchRun>, token: u64, d: IoDone) {
        // One clock read for the latency and the run's time.
        let now = run.now_ns();
        let (key, latency_ns) = untoken(token, now);
        let now = {
            let mut st = run.lock();
            let mut c = st.pending.remove(key);
            c.latency_ns = latency_ns;
            c.result = d.result;
            st.inflight -= 1;
            if let Some(Buffer::Aligned(b)) = d.buf {
                if st.pool.len() < st.pool_max {
                    st.pool.push(b);
                }
            }
            let now = st.advance(now);
            st.fio.on_complete(now, c);
            now
        };
        BenchRun::pump(run, Some(now));
    }
}

impl Completion for BenchRun {
    fn complete(&self, token: u64, done: IoDone) {
        // The run outlives its I/Os: the thread that started it waits for them all.
        let run = self.me.upgrade().expect("a bench run ends after its I/Os");
        BenchRun::done(&run, token, done);
    }
}

/// The runtime's I/O for the generator's BIO, with a buffer from `pool` (or a new
/// one when none fits); a write as a zone append to `append_to`, when given.
fn make_io(io: &FioIo, pool: &mut Vec<AlignedBuf>, append_to: Option<zblk_core::units::Sector>) -> Io {
    let bio = &io.bio;
    let mut buf = || {
        let len = (u64::from(bio.nr_sectors) << SECTOR_SHIFT) as usize;
        match pool.iter().rposition(|b| b.len() == len) {
            Some(i) => pool.swap_remove(i),
            None => AlignedBuf::zeroed(len),
        }
    };
    match bio.op {
        Op::Read => Io::read(bio.sector, buf()),
        Op::Write => match append_to {
            Some(zone) => Io::append(zone, buf()).with_flags(bio.flags),
            None => Io::write(bio.sector, buf()).with_flags(bio.flags),
        },
        Op::Flush => Io::flush().with_flags(bio.flags),
        op if op.is_zone_mgmt() => Io::zone(op, bio.sector),
        op => unreachable!("fio jobs do not submit {op}"),
    }
}

/// The completion of `io` as the generator wants it; result and latency filled in
/// when it completes.
fn done_of(io: &FioIo) -> FioDone {
    let b = &io.bio;
    FioDone {
        token: io.token,
        op: b.op,
        sector: b.sector,
        nr_sectors: b.nr_sectors,
        result: Ok(b.sector),
        latency_ns: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_run_refuses_what_would_exhaust_its_memory() {
        let job = |bs_bytes, iodepth, numjobs| JobSpec { bs_bytes, iodepth, numjobs, ..JobSpec::default() };
        assert!(check_limits(&[job(4096, MAX_IODEPTH, 1)]).is_ok());
        assert_eq!(check_limits(&[job(4096, MAX_IODEPTH + 1, 1)]).unwrap_err().option, "iodepth");
        // 1 MiB x 4096 = 4 GiB: at the limit; one more job over it.
        assert!(check_limits(&[job(1 << 20, 4096, 1)]).is_ok());
        assert_eq!(check_limits(&[job(1 << 20, 4096, 1), job(4096, 1, 1)]).unwrap_err().option, "bs");
        assert_eq!(check_limits(&[job(u64::MAX, 2, 2)]).unwrap_err().option, "bs");
    }

    /// A token carries its I/O's key and submission time; the latency comes back
    /// across the wrap of the time's 44 bits.
    #[test]
    fn a_token_gives_back_its_key_and_latency() {
        let max_key = (1 << KEY_BITS) - 1;
        assert_eq!(untoken(token(max_key, 1_000), 1_750), (max_key, 750));
        assert_eq!(untoken(token(3, 0), 0), (3, 0));
        let wrap = 1u64 << (64 - KEY_BITS);
        assert_eq!(untoken(token(7, wrap - 10), wrap + 15), (7, 25));
    }
}
