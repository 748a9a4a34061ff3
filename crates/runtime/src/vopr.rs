//! `zblk vopr --runtime`: seeded runs of the real runtime (its threads, io_uring or
//! the thread pool) over a temporary image whose device injects media errors drawn
//! from the seed, checked by what does not depend on the order the device executed
//! the requests in (docs/vopr.md).
//!
//! A seed draws the image (block size, zones, capacity, open/active limits, native
//! append or none), the engine (policy, queue depth), the driver, the number of
//! submitting threads and the fault probabilities. The run goes in rounds: in each,
//! every submitting thread submits random operations (writes at the zone's next
//! claimed offset, FUA writes, zone appends, reads, flushes) and waits for their
//! completions; then, with nothing in flight, one thread checks:
//!
//! - every submitted I/O completed (none missing after a generous wait);
//! - every error is one the zoned block layer may give for it: EIO, ETOOMANYREFS,
//!   EOVERFLOW for a write (EOPNOTSUPP for an append without emulation), EIO for a
//!   read only where a read error was injected, never EINVAL for these valid BIOs;
//! - each zone's write pointer: where no fault hit the zone in the round, it moved
//!   by exactly the sum of the writes and appends acknowledged in it; where one did,
//!   it is at least past every acknowledged write;
//! - acknowledged writes and appends of a zone do not overlap, lie below its write
//!   pointer, and read back with their data (faults off for the reads);
//! - then it resets, finishes or leaves each zone (RESET_ALL now and then) and
//!   checks the zones' conditions after them.
//!
//! What it cannot check: the order the device executed writes in (real threads
//! race), so no prediction of which write at a contended offset wins; partial
//! writes (the image rolls a failed write back whole), zones turning READONLY or
//! OFFLINE, lost completions and power loss (the image's own power-loss tests cover
//! that, docs/real-io.md).
//!
//! A checker, not part of the driver: it is built with the crate's `vopr` feature,
//! which the CLI (for `zblk vopr --runtime`) and the runtime's own tests enable.

use crate::{Backend, Io, Runtime, RuntimeConfig};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::collections::BTreeSet;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;
use zblk_core::bio::{BioFlags, Op, Request, Status};
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::{ZoneCond, ZoneInfo};
use zblk_dev::IoBuf;
use zblk_dev::device::{DataFds, Device, DeviceZeroing, Plan, Transfer};
use zblk_dev::error::DeviceError;
use zblk_workload::pattern::{self, Decoded};

/// How long a round waits for a completion before it counts as missing.
const COMPLETION_WAIT: Duration = Duration::from_secs(60);

/// A device that fails reads and writes with an I/O error at seeded random points,
/// as a medium would: the transfer is ended with EIO whether or not the data moved,
/// and the device handles it as any failed transfer (a failed write's zone rolls its
/// write pointer back to where the write started).
pub struct FaultyDevice<D: Device> {
    inner: D,
    rng: Mutex<ChaCha8Rng>,
    write_ppm: u32,
    read_ppm: u32,
    enabled: AtomicBool,
    injected: AtomicU64,
    /// Zones a write error hit, and zones a read error hit, since the last look.
    hit: Mutex<(BTreeSet<u32>, BTreeSet<u32>)>,
}

impl<D: Device> std::fmt::Debug for FaultyDevice<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyDevice").field("name", &self.inner.name()).finish_non_exhaustive()
    }
}

impl<D: Device> FaultyDevice<D> {
    /// `inner` failing `write_ppm` of its writes and `read_ppm` of its reads (parts
    /// per million), drawn from `seed`.
    pub fn new(inner: D, write_ppm: u32, read_ppm: u32, seed: u64) -> FaultyDevice<D> {
        FaultyDevice {
            inner,
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed ^ 0x3ed1_a000)),
            write_ppm,
            read_ppm,
            enabled: AtomicBool::new(true),
            injected: AtomicU64::new(0),
            hit: Mutex::new((BTreeSet::new(), BTreeSet::new())),
        }
    }

    /// Turns fault injection on or off (off while the checker reads back).
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::SeqCst);
    }

    /// Faults injected so far.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    /// The zones write errors and read errors hit since the last call.
    pub fn take_hit(&self) -> (BTreeSet<u32>, BTreeSet<u32>) {
        std::mem::take(&mut *self.hit.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether to fail transfer `t` of `req`.
    fn inject(&self, req: &Request, t: &Transfer) -> bool {
        if !self.enabled.load(Ordering::SeqCst) {
            return false;
        }
        let ppm = if t.write { self.write_ppm } else { self.read_ppm };
        if ppm == 0 || self.rng.lock().unwrap_or_else(|p| p.into_inner()).random_range(0..1_000_000) >= ppm {
            return false;
        }
        self.injected.fetch_add(1, Ordering::SeqCst);
        let geo = self.inner.geometry();
        if geo.is_zoned() {
            let z = geo.zone_no(req.sector).0;
            let mut hit = self.hit.lock().unwrap_or_else(|p| p.into_inner());
            if t.write {
                hit.0.insert(z)
            } else {
                hit.1.insert(z)
            };
        }
        true
    }
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(5)
}

impl<D: Device> Device for FaultyDevice<D> {
    fn geometry(&self) -> &Geometry {
        self.inner.geometry()
    }
    fn rotational(&self) -> bool {
        self.inner.rotational()
    }
    fn keeps_zone_order(&self) -> bool {
        // A failed transfer is ended as the device ends any: the order is the image's.
        self.inner.keeps_zone_order()
    }
    fn name(&self) -> String {
        format!("{} (faulty)", self.inner.name())
    }
    fn data_fds(&self) -> DataFds<'_> {
        self.inner.data_fds()
    }
    fn prepare(&self, req: &Request) -> Result<Plan, Status> {
        self.inner.prepare(req)
    }
    fn perform(&self, req: &Request, plan: Plan, buf: IoBuf<'_>) -> Result<Sector, Status> {
        if let Plan::Transfer(t) = plan {
            if self.inject(req, &t) {
                if t.write {
                    // A medium error takes its time (retries): the writes issued
                    // after it to the same zone, on other workers, complete first,
                    // as a pipelined zone's writes may.
                    std::thread::sleep(Duration::from_millis(2));
                }
                return self.inner.finish(req, t, Err(eio()));
            }
        }
        self.inner.perform(req, plan, buf)
    }
    fn finish(&self, req: &Request, t: Transfer, io: io::Result<()>) -> Result<Sector, Status> {
        let io = if self.inject(req, &t) { Err(eio()) } else { io };
        self.inner.finish(req, t, io)
    }
    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status> {
        self.inner.report_zones(from, max, out)
    }
    fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        self.inner.zeroing(nounmap)
    }
    fn close(&self) -> Result<(), DeviceError> {
        self.inner.close()
    }
}

/// What one runtime seed did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct RuntimeSeedRun {
    /// The seed.
    pub seed: u64,
    /// The I/O driver the runtime used.
    pub backend: String,
    /// The engine's policy.
    pub policy: &'static str,
    /// I/Os submitted.
    pub ops: u64,
    /// Faults injected.
    pub faults: u64,
    /// Checks made.
    pub checks: u64,
    /// The violation, if one was found.
    pub violation: Option<String>,
}

/// One I/O of a round and how it ended.
#[derive(Clone, Copy, Debug)]
struct Done {
    op: Op,
    fua: bool,
    sector: Sector,
    nr_sectors: u32,
    stamp: u64,
    result: Result<Sector, Status>,
}

/// What a seed draws.
#[derive(Debug)]
struct Setup {
    geometry: GeometryParams,
    engine: EngineConfig,
    backend: Backend,
    threads: u64,
    write_ppm: u32,
    read_ppm: u32,
}

fn setup(seed: u64) -> Setup {
    if zblk_core::mutation::on(zblk_core::mutation::Mutation::SeedSetupPanics) && seed % 3 == 0 {
        panic!("a panic planted in the set-up (mutation seed-setup-panics)");
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_0f0e);
    let lbs: u64 = if rng.random_bool(0.5) { 512 } else { 4096 };
    let zone_bytes: u64 = [256u64 << 10, 512 << 10, 1 << 20][rng.random_range(0..3)];
    let zones: u64 = rng.random_range(4..=10);
    let cap = if rng.random_bool(0.5) { zone_bytes } else { zone_bytes / 4 * 3 };
    let limit = |rng: &mut ChaCha8Rng| if rng.random_bool(0.5) { 0 } else { rng.random_range(2..=4) };
    let (max_open, max_active) = (limit(&mut rng), limit(&mut rng));
    let geometry = GeometryParams {
        lbs_bytes: lbs as u32,
        capacity_bytes: zone_bytes * zones,
        zone_size_bytes: zone_bytes,
        zone_capacity_bytes: cap,
        nr_conv: rng.random_range(0..=1),
        max_open,
        max_active: if max_active > 0 { max_active.max(max_open) } else { 0 },
        max_append_sectors: if rng.random_bool(0.5) { 0 } else { 64 },
        ..GeometryParams::default()
    };
    // Every policy that keeps zone writes in order (the devices here are zoned images,
    // which keep a zone's writes in the order they are handed them, so pipelining
    // too): a new policy is covered as soon as it is in `POLICIES`.
    let policies = IssuePolicy::compared_on_device(true, true);
    let policy = policies[rng.random_range(0..policies.len())];
    let engine = EngineConfig { policy, queue_depth: rng.random_range(1..=32), ..EngineConfig::default() };
    // One seed in eight without faults.
    let faulty = rng.random_range(0..8) != 0;
    Setup {
        geometry,
        engine,
        backend: if rng.random_bool(0.5) { Backend::Auto } else { Backend::Threads },
        threads: rng.random_range(1..=4),
        write_ppm: if faulty { rng.random_range(0..=50_000) } else { 0 },
        read_ppm: if faulty { rng.random_range(0..=20_000) } else { 0 },
    }
}

/// Runs runtime seed `seed` with about `ops` I/Os, its image in directory `dir`
/// (removed afterwards). A violation comes back in the result.
pub fn run_runtime_seed(seed: u64, ops: u64, dir: &Path) -> RuntimeSeedRun {
    run_runtime_seed_as(seed, ops, dir, None)
}

/// The policy seed `seed` draws.
pub fn drawn_policy(seed: u64) -> IssuePolicy {
    setup(seed).engine.policy
}

/// [`run_runtime_seed`] under `policy` instead of the one the seed draws (the rest
/// of the setup as drawn): to look at one policy, as the planted bugs of
/// pipelining are looked for.
pub fn run_runtime_seed_as(seed: u64, ops: u64, dir: &Path, policy: Option<IssuePolicy>) -> RuntimeSeedRun {
    // A panic while drawing the seed is that seed's failure, not the end of the run
    // (the panics of its rounds are caught in `run_setup`). Caught here, around the
    // seed alone: the checker's catching, not the runtime's, whose threads are not
    // meant to unwind.
    let s = std::panic::catch_unwind(|| setup(seed));
    let mut s = match s {
        Ok(s) => s,
        Err(payload) => {
            let v = format!("runtime violation (seed {seed}): the seed's set-up panicked: {}", panic_text(&*payload));
            return RuntimeSeedRun { seed, violation: Some(v), ..RuntimeSeedRun::default() };
        }
    };
    if let Some(p) = policy {
        s.engine.policy = p;
    }
    let path = dir.join(format!("vopr-runtime-{seed}.img"));
    let mut run = RuntimeSeedRun { seed, policy: s.engine.policy.name(), ..RuntimeSeedRun::default() };
    let outcome = run_setup(seed, ops, &s, &path, &mut run);
    let _ = std::fs::remove_file(&path);
    if let Err(v) = outcome {
        run.violation =
            Some(format!("runtime violation (seed {seed}, {:?}, {} threads): {v}", s.engine.policy, s.threads));
    }
    run
}

fn run_setup(seed: u64, ops: u64, s: &Setup, path: &Path, run: &mut RuntimeSeedRun) -> Result<(), String> {
    use zblk_dev::file::{CreateOptions, FileImage, ImageOptions};
    let create = CreateOptions { geometry: s.geometry.clone(), rotational: false, force: true, preallocate: false };
    FileImage::create(path, &create).map_err(|e| format!("create the image {:?}: {e}", s.geometry))?;
    let img = FileImage::open(path, &ImageOptions::default()).map_err(|e| format!("open: {e}"))?;
    let dev = Arc::new(FaultyDevice::new(img, s.write_ppm, s.read_ppm, seed));
    let cfg = RuntimeConfig { engine: s.engine, backend: s.backend, ..RuntimeConfig::default() };
    let rt = Runtime::start(ArcDevice(dev.clone()), cfg).map_err(|e| format!("start: {e}"))?;
    run.backend = rt.backend().to_string();
    let geo = rt.geometry().clone();
    let seq: Vec<u32> = (geo.nr_conv()..geo.nr_zones()).collect();
    let stamps = Arc::new(AtomicU64::new(1));
    let rounds = ops.div_ceil(100).max(1);
    let per_thread = (ops / rounds / s.threads).max(1);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0123_4567);
    // A panic anywhere under the rounds (an invariant assert of the device or the
    // engine, on a submitting thread or this one) is a violation of the seed, not the
    // end of the whole run.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rounds_of(seed, &rt, &dev, &geo, &seq, &stamps, rounds, per_thread, s, &mut rng, run)
    }))
    .unwrap_or_else(|payload| Err(format!("panic: {}", panic_text(&*payload))));
    run.faults = dev.injected();
    if outcome.is_err() {
        // A completion may never have come: dropping the runtime would wait for it
        // forever. The failed run leaves its threads behind.
        std::mem::forget(rt);
        return outcome;
    }
    rt.close().map_err(|e| format!("close: {e}"))?;
    Ok(())
}

/// The message of a panic's payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic with a non-text payload".to_string())
}

/// The rounds of a seed (see the module documentation).
#[allow(clippy::too_many_arguments)]
fn rounds_of<D: Device>(
    seed: u64,
    rt: &Runtime,
    dev: &FaultyDevice<D>,
    geo: &Geometry,
    seq: &[u32],
    stamps: &Arc<AtomicU64>,
    rounds: u64,
    per_thread: u64,
    s: &Setup,
    rng: &mut ChaCha8Rng,
    run: &mut RuntimeSeedRun,
) -> Result<(), String> {
    let lbs = u64::from(geo.lbs_sectors());
    for round in 0..rounds {
        let zones_before: Vec<ZoneInfo> = rt.report_zones().map_err(|e| format!("report: {e:?}"))?;
        // Where the next write of each zone goes, claimed by the threads in turn.
        let next: Arc<Vec<AtomicU64>> = Arc::new(
            zones_before.iter().map(|z| AtomicU64::new(z.wp_offset().unwrap_or(z.capacity).min(z.capacity))).collect(),
        );
        let done: Vec<Done> = std::thread::scope(|sc| {
            let handles: Vec<_> = (0..s.threads)
                .map(|t| {
                    let (next, stamps) = (next.clone(), stamps.clone());
                    let tseed = seed ^ (round << 20) ^ (t << 8);
                    sc.spawn(move || thread_round(rt, geo, seq, &next, &stamps, per_thread, tseed))
                })
                .collect();
            // Every thread joined before any result counts: a panic's message wins over
            // the missing completions it causes in the others.
            let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
            let mut all = Vec::new();
            let mut missing = None;
            for j in joined {
                match j {
                    Err(p) => return Err(format!("a submitting thread panicked: {}", panic_text(&*p))),
                    Ok(Err(e)) => missing = missing.or(Some(e)),
                    Ok(Ok(part)) => all.extend(part),
                }
            }
            missing.map_or(Ok(all), Err)
        })?;
        run.ops += done.len() as u64;
        dev.set_enabled(false);
        let hit = dev.take_hit();
        check_round(rt, geo, &zones_before, &done, &hit, s.engine.policy, run)?;
        manage_zones(rt, geo, seq, lbs, rng, run)?;
        dev.set_enabled(true);
    }
    Ok(())
}

/// A shared device handed to the runtime while the run keeps a handle on it.
struct ArcDevice<D: Device>(Arc<FaultyDevice<D>>);

impl<D: Device> Device for ArcDevice<D> {
    fn geometry(&self) -> &Geometry {
        self.0.geometry()
    }
    fn rotational(&self) -> bool {
        self.0.rotational()
    }
    fn keeps_zone_order(&self) -> bool {
        self.0.keeps_zone_order()
    }
    fn name(&self) -> String {
        self.0.name()
    }
    fn data_fds(&self) -> DataFds<'_> {
        self.0.data_fds()
    }
    fn prepare(&self, req: &Request) -> Result<Plan, Status> {
        self.0.prepare(req)
    }
    fn perform(&self, req: &Request, plan: Plan, buf: IoBuf<'_>) -> Result<Sector, Status> {
        self.0.perform(req, plan, buf)
    }
    fn finish(&self, req: &Request, t: Transfer, io: io::Result<()>) -> Result<Sector, Status> {
        self.0.finish(req, t, io)
    }
    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status> {
        self.0.report_zones(from, max, out)
    }
    fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        self.0.zeroing(nounmap)
    }
    fn close(&self) -> Result<(), DeviceError> {
        self.0.close()
    }
}

/// One submitting thread's part of a round: `n` random I/Os, up to 8 in flight,
/// then every completion.
fn thread_round(
    rt: &Runtime,
    geo: &Geometry,
    seq: &[u32],
    next: &[AtomicU64],
    stamps: &AtomicU64,
    n: u64,
    seed: u64,
) -> Result<Vec<Done>, String> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let lbs = u64::from(geo.lbs_sectors());
    let (tx, rx) = mpsc::channel::<Done>();
    let mut out = Vec::with_capacity(n as usize);
    let mut inflight = 0u64;
    for _ in 0..n {
        while inflight >= 8 {
            out.push(rx.recv_timeout(COMPLETION_WAIT).map_err(|_| "a completion never came".to_string())?);
            inflight -= 1;
        }
        let z = ZoneNo(seq[rng.random_range(0..seq.len())]);
        let start = geo.zone_start(z);
        let cap = geo.zone_capacity(z);
        let blocks = rng.random_range(1..=8u64);
        let len = blocks * lbs;
        let stamp = stamps.fetch_add(1, Ordering::SeqCst);
        let data = || {
            let mut buf = vec![0u8; (len * SECTOR_SIZE) as usize];
            pattern::fill(stamp, 0, &mut buf);
            buf
        };
        let roll = rng.random_range(0..100);
        let fua = roll < 8;
        let (io, op, sector) = match roll {
            0..=54 => {
                let off = next[z.idx()].fetch_add(len, Ordering::SeqCst).min(cap.saturating_sub(len));
                let io = Io::write(start + off, data());
                (if fua { io.with_flags(BioFlags::FUA) } else { io }, Op::Write, start + off)
            }
            55..=74 => (Io::append(start, data()), Op::ZoneAppend, start),
            75..=94 => {
                let off = rng.random_range(0..=(cap - len) / lbs) * lbs;
                (Io::read(start + off, vec![0u8; (len * SECTOR_SIZE) as usize]), Op::Read, start + off)
            }
            _ => (Io::flush(), Op::Flush, Sector::ZERO),
        };
        let nr = if op == Op::Flush { 0 } else { len as u32 };
        let tx = tx.clone();
        rt.submit(io, move |d| {
            let _ = tx.send(Done { op, fua, sector, nr_sectors: nr, stamp, result: d.result });
        });
        inflight += 1;
    }
    while inflight > 0 {
        out.push(rx.recv_timeout(COMPLETION_WAIT).map_err(|_| "a completion never came".to_string())?);
        inflight -= 1;
    }
    Ok(out)
}

/// What the round did in zone `zi`, in the order the completions came: a per-zone
/// violation shows it, so that a race that will not replay can still be read.
fn zone_history(geo: &Geometry, done: &[Done], zi: usize) -> String {
    let mut out = String::new();
    for d in done.iter().filter(|d| d.op != Op::Flush && geo.zone_no(d.sector).idx() == zi) {
        let flags = if d.fua { " FUA" } else { "" };
        out += &format!(
            "\n  {}{flags} at {} of {} sectors (stamp {}): {:?}",
            d.op, d.sector, d.nr_sectors, d.stamp, d.result
        );
    }
    out
}

/// The checks of a round, with nothing in flight (see the module documentation).
fn check_round(
    rt: &Runtime,
    geo: &Geometry,
    before: &[ZoneInfo],
    done: &[Done],
    (write_hit, read_hit): &(BTreeSet<u32>, BTreeSet<u32>),
    policy: IssuePolicy,
    run: &mut RuntimeSeedRun,
) -> Result<(), String> {
    let after = rt.report_zones().map_err(|e| format!("report: {e:?}"))?;
    let emulated = geo.emulates_zone_append();
    let zwl = policy == IssuePolicy::Zwl;
    // Acknowledged extents per zone: (start, end, stamp).
    let mut acked: Vec<Vec<(u64, u64, u64)>> = vec![Vec::new(); geo.nr_zones() as usize];
    for d in done {
        run.checks += 1;
        match (d.op, d.result) {
            (Op::Write | Op::ZoneAppend, Ok(at)) => {
                let z = geo.zone_no(at);
                if d.op == Op::ZoneAppend && z != geo.zone_no(d.sector) {
                    return Err(format!("append to zone {} landed at {at}, in zone {z}", geo.zone_no(d.sector)));
                }
                if d.op == Op::Write && at != d.sector {
                    return Err(format!("write at {} completed at {at}", d.sector));
                }
                acked[z.idx()].push((at.0, at.0 + u64::from(d.nr_sectors), d.stamp));
            }
            (Op::Write | Op::ZoneAppend, Err(e)) => {
                let ok = matches!(e.errno(), 5 | 109 | 75 | 11)
                    || (e == Status::NotSupported && d.op == Op::ZoneAppend && emulated && zwl);
                if !ok {
                    return Err(format!(
                        "{} of {} sectors at {} failed with {e:?} ({})",
                        d.op,
                        d.nr_sectors,
                        d.sector,
                        e.errno_name()
                    ));
                }
            }
            (Op::Read, Err(e)) => {
                let z = geo.zone_no(d.sector).0;
                if !(e.errno() == 5 && read_hit.contains(&z)) && e != Status::Again {
                    return Err(format!(
                        "read of {} sectors at {} failed with {e:?} and no read error was injected there",
                        d.nr_sectors, d.sector
                    ));
                }
            }
            (Op::Flush, Err(e)) => return Err(format!("FLUSH failed with {e:?}")),
            _ => {}
        }
    }
    for (zi, list) in acked.iter_mut().enumerate() {
        check_zone(rt, geo, &before[zi], &after[zi], zi, list, write_hit, run)
            .map_err(|v| format!("{v}; the round in zone {zi}:{}", zone_history(geo, done, zi)))?;
    }
    check_plugs(rt, &after, run)
        .map_err(|(zi, v)| format!("{v}; the round in zone {zi}:{}", zone_history(geo, done, zi)))
}

/// With nothing in flight, each plug that trusts its write pointer (no update
/// needed) has it where the device says: the host never writes past a failed write
/// on a belief the device does not share.
fn check_plugs(rt: &Runtime, after: &[ZoneInfo], run: &mut RuntimeSeedRun) -> Result<(), (usize, String)> {
    for p in rt.plugs() {
        let zi = p.zone.idx();
        let Some(wp) = after[zi].wp_offset() else { continue };
        run.checks += 1;
        if !p.need_wp_update && !p.busy && p.queued == 0 && p.wp_offset != wp {
            return Err((
                zi,
                format!("zone {zi}: the host's write pointer offset is {}, the device's {wp}", p.wp_offset),
            ));
        }
    }
    Ok(())
}

/// The checks of zone `zi` after a round: its acknowledged extents `list`, its
/// write pointer's move from `b` to `a`.
#[allow(clippy::too_many_arguments)]
fn check_zone(
    rt: &Runtime,
    geo: &Geometry,
    b: &ZoneInfo,
    a: &ZoneInfo,
    zi: usize,
    list: &mut [(u64, u64, u64)],
    write_hit: &BTreeSet<u32>,
    run: &mut RuntimeSeedRun,
) -> Result<(), String> {
    if geo.zone_is_conv(ZoneNo(zi as u32)) {
        return Ok(());
    }
    run.checks += 1;
    let wp_of = |z: &ZoneInfo| match z.cond {
        ZoneCond::Full => z.start.0 + z.capacity,
        _ => z.wp.0,
    };
    let (wp0, wp1) = (wp_of(b), wp_of(a));
    let sum: u64 = list.iter().map(|e| e.1 - e.0).sum();
    list.sort_unstable();
    for w in list.windows(2) {
        if w[0].1 > w[1].0 {
            return Err(format!("acknowledged writes overlap in zone {zi}: {:?} and {:?}", w[0], w[1]));
        }
    }
    if let (Some(first), Some(last)) = (list.first(), list.last()) {
        if first.0 < wp0 || last.1 > wp1 {
            return Err(format!(
                "zone {zi}: acknowledged writes span {}..{}, outside the write pointer's move {wp0}..{wp1}",
                first.0, last.1
            ));
        }
    }
    if !write_hit.contains(&(zi as u32)) && wp1 - wp0 != sum {
        return Err(format!(
            "zone {zi} (no fault): its write pointer moved from {wp0} to {wp1}, the writes acknowledged in it sum to {sum} sectors"
        ));
    }
    for &(s, e, stamp) in list.iter() {
        let mut buf = vec![0u8; ((e - s) * SECTOR_SIZE) as usize];
        rt.read_at(Sector(s), &mut buf).map_err(|st| format!("reading back {s}..{e}: {st:?}"))?;
        for (k, sector) in buf.chunks_exact(SECTOR_SIZE as usize).enumerate() {
            run.checks += 1;
            let got = pattern::decode(sector);
            if got != Decoded::Data((stamp, k as u32)) {
                return Err(format!(
                    "sector {} of the write acknowledged at {s} reads {got:?}, not ({stamp}, {k})",
                    s + k as u64
                ));
            }
        }
    }
    Ok(())
}

/// Between rounds: resets, finishes or leaves each zone (RESET_ALL now and then),
/// one operation at a time, and checks their outcome.
fn manage_zones(
    rt: &Runtime,
    geo: &Geometry,
    seq: &[u32],
    lbs: u64,
    rng: &mut ChaCha8Rng,
    run: &mut RuntimeSeedRun,
) -> Result<(), String> {
    let _ = lbs;
    if rng.random_range(0..10) == 0 {
        rt.zone_op(Op::ZoneResetAll, Sector::ZERO).map_err(|e| format!("RESET_ALL: {e:?}"))?;
        for &z in seq {
            let info = rt.report_zone(geo.zone_start(ZoneNo(z))).map_err(|e| format!("report: {e:?}"))?;
            run.checks += 1;
            if info.cond != ZoneCond::Empty {
                return Err(format!("zone {z} is {:?} after RESET_ALL", info.cond));
            }
        }
        return Ok(());
    }
    for &z in seq {
        let start = geo.zone_start(ZoneNo(z));
        let (op, cond) = match rng.random_range(0..8) {
            0 | 1 => (Op::ZoneReset, ZoneCond::Empty),
            2 => (Op::ZoneFinish, ZoneCond::Full),
            _ => continue,
        };
        match rt.zone_op(op, start) {
            Ok(()) => {}
            // FINISH of an EMPTY or CLOSED zone takes resources (null_blk's
            // null_check_zone_resources()).
            Err(e) if op == Op::ZoneFinish && [Status::ZoneActiveResource, Status::ZoneOpenResource].contains(&e) => {
                continue;
            }
            Err(e) => return Err(format!("{op} of zone {z}: {e:?}")),
        }
        let info = rt.report_zone(start).map_err(|e| format!("report: {e:?}"))?;
        run.checks += 1;
        if info.cond != cond {
            return Err(format!("zone {z} is {:?} after {op}", info.cond));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setups_are_valid_geometries() {
        for seed in 0..200 {
            let s = setup(seed);
            Geometry::new(&s.geometry).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        }
    }
}
