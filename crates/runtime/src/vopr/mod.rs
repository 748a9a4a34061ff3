//! `zblk vopr --runtime`: seeded runs of the real runtime (its threads, io_uring or
//! the thread pool) over a temporary image whose device injects media errors drawn
//! from the seed and, in one seed in three, loses its power in the middle of a
//! round; each request's outcome predicted as the simulator's reference model
//! predicts it (docs/vopr.md).
//!
//! A seed draws the image (block size, zones, capacity, open/active limits, native
//! append or none), the engine (policy, queue depth), the driver, the number of
//! submitting threads, the fault probabilities and the power cut. The run goes in
//! rounds: in each, every submitting thread submits random operations (writes at
//! the zone's next claimed offset, FUA writes, zone appends, reads, flushes) and
//! waits for their completions. Every BIO's submission and completion and every
//! decision of the device take a place on one clock (submissions under one lock,
//! so that the clock's order is the order the engine receives them; the device's
//! decisions under its own lock, so that it is the order the image takes them in).
//! Then, with nothing in flight, the checks:
//!
//! - **the device, request by request** ([`device`], [`model`]): each request the
//!   image prepared, finished or carried out has the outcome (the sector, or the
//!   errno) a model of an image predicts from the decisions before it, and the
//!   image's zones are the model's;
//! - **the host, BIO by BIO** ([`replay`]): the round replayed in clock order
//!   through the simulator's host model: a write at its zone's predicted write
//!   pointer is not refused by the host, an emulated append lands where the writes
//!   before it leave the write pointer, each errno is the kernel's for its status,
//!   a FLUSH reaches the device, zone order of acknowledgements under pipelining;
//! - **users against the device**, zone by zone: every write the device completed
//!   acknowledged once at its sector, every failure of the device told to a user
//!   with its errno, no other failure but the host's own EIO;
//! - the order-independent checks of each zone ([`checks`]): write pointers moved by
//!   the writes acknowledged, acknowledged data reads back, plugs agree with the
//!   device; then zones are reset, finished or left (RESET_ALL now and then);
//! - after a **power cut** ([`power`]): the file the power-loss model may have kept,
//!   opened again as after a restart, holds every durable write, nothing but
//!   acknowledged writes below the write pointers and zeroes past them. A seed
//!   ends with its power cut.
//!
//! What it cannot check: which of several writes racing for a zone's write pointer
//! wins (real threads race: the same seed replays its setup and workload, not its
//! interleaving), partial writes (the image rolls a failed write back whole), zones
//! turning READONLY or OFFLINE and lost completions.
//!
//! A checker, not part of the driver: it is built with the crate's `vopr` feature,
//! which the CLI (for `zblk vopr --runtime`) and the runtime's own tests enable.

mod checks;
mod device;
mod model;
mod power;
mod replay;

use crate::failstop::panic_text;
use device::ArcDevice;
pub use device::FaultyDevice;

use crate::{Backend, Io, Runtime, RuntimeConfig};
use power::History;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;
use zblk_core::bio::{BioFlags, Op, Status};
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::ZoneInfo;
use zblk_dev::file::FileImage;
use zblk_dev::file::powercut::PowerCut;
use zblk_sim::oracle::HostOracle;
use zblk_workload::pattern;

/// How long a round waits for a completion before it counts as missing.
const COMPLETION_WAIT: Duration = Duration::from_secs(60);

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
    /// The power was cut (after this many I/Os).
    pub power_cut: Option<u64>,
    /// Acknowledged writes whose place the power cut's check looked at, and the
    /// durable ones among them.
    pub power_checked: (u64, u64),
    /// The violation, if one was found.
    pub violation: Option<String>,
}

/// One I/O of a round and how it ended, with its submission's and its completion's
/// places on the run's clock.
#[derive(Clone, Copy, Debug)]
struct Done {
    op: Op,
    fua: bool,
    sector: Sector,
    nr_sectors: u32,
    stamp: u64,
    result: Result<Sector, Status>,
    submitted: u64,
    completed: u64,
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
    /// Where the power goes, in thousandths of the seed's I/Os (`None`: it stays).
    power_permille: Option<u64>,
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
    let backend = if rng.random_bool(0.5) { Backend::Auto } else { Backend::Threads };
    let threads = rng.random_range(1..=4);
    let write_ppm = if faulty { rng.random_range(0..=50_000) } else { 0 };
    let read_ppm = if faulty { rng.random_range(0..=20_000) } else { 0 };
    let power_permille = (rng.random_range(0..3) == 0).then(|| rng.random_range(0..1000));
    Setup { geometry, engine, backend, threads, write_ppm, read_ppm, power_permille }
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

/// Whether seed `seed` cuts the power.
pub fn cuts_power(seed: u64) -> bool {
    setup(seed).power_permille.is_some()
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

/// Opens the image at `path` (of geometry `geo`) through a power-loss model of its
/// file, which tracks the image's mapped live table.
fn open_with_power_cut(path: &Path, geo: &Geometry) -> Result<(FileImage, PowerCut), String> {
    use zblk_dev::file::ImageOptions;
    let layout = zblk_dev::file::format::Layout::of(geo);
    let handle: Arc<Mutex<Option<PowerCut>>> = Arc::default();
    let h = handle.clone();
    let open = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        FileImage::open_with(path, &ImageOptions::default(), move |m| {
            let pc = PowerCut::new(Arc::new(m), layout.file_bytes).expect("the power-loss model reads the file");
            pc.track_mapped(layout.live_offset, layout.table_bytes);
            // (Recovered, here and below: a slot assigned whole, read once.)
            *h.lock().unwrap_or_else(|p| p.into_inner()) = Some(pc.clone());
            Box::new(pc)
        })
    }));
    let image = open.map_err(|p| panic_text(&*p))?.map_err(|e| format!("open: {e}"))?;
    let pc = handle.lock().unwrap_or_else(|p| p.into_inner()).take();
    Ok((image, pc.ok_or("the image opened without its media")?))
}

fn run_setup(seed: u64, ops: u64, s: &Setup, path: &Path, run: &mut RuntimeSeedRun) -> Result<(), String> {
    use zblk_dev::file::{CreateOptions, ImageOptions};
    let create = CreateOptions { geometry: s.geometry.clone(), rotational: false, force: true, preallocate: false };
    FileImage::create(path, &create).map_err(|e| format!("create the image {:?}: {e}", s.geometry))?;
    let geo = Geometry::new(&s.geometry).map_err(|e| format!("geometry: {e}"))?;
    let (img, pc) = match s.power_permille {
        Some(_) => open_with_power_cut(path, &geo).map(|(i, p)| (i, Some(p)))?,
        None => (FileImage::open(path, &ImageOptions::default()).map_err(|e| format!("open: {e}"))?, None),
    };
    let clock = Arc::new(AtomicU64::new(1));
    let dev = Arc::new(FaultyDevice::new(img, (s.write_ppm, s.read_ppm), seed, pc.clone(), clock.clone()));
    let cfg = RuntimeConfig { engine: s.engine, backend: s.backend, ..RuntimeConfig::default() };
    let rt = Runtime::start(ArcDevice(dev.clone()), cfg).map_err(|e| format!("start: {e}"))?;
    run.backend = rt.backend().to_string();
    // Before an I/O the seed does submit: its rounds submit fewer than `ops` when
    // they do not divide it.
    let (rounds, per_thread) = plan(ops, s.threads);
    let cut_at = s.power_permille.map(|p| rounds * per_thread * s.threads * p / 1000);
    run.power_cut = cut_at;
    let mut seed_run = SeedRun {
        seed,
        rt: &rt,
        dev: &dev,
        geo: rt.geometry().clone(),
        clock,
        host: HostOracle::new(rt.geometry(), replay::host_rules(rt.geometry(), &s.engine)),
        history: History::new(rt.geometry()),
        power: pc.map(|pc| (pc, cut_at.unwrap_or(0), path.with_extension("after-cut.img"))),
    };
    // A panic anywhere under the rounds (an invariant assert of the device or the
    // engine, on a submitting thread or this one) is a violation of the seed, not the
    // end of the whole run.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| seed_run.rounds(ops, s, run)))
        .unwrap_or_else(|payload| Err(format!("panic: {}", panic_text(&*payload))));
    run.faults = dev.injected();
    run.power_checked = seed_run.history.counts();
    if outcome.is_err() {
        return abandon(rt, outcome);
    }
    if let Some((pc, cut, _)) = &seed_run.power {
        // The power is off: closing would fail to write anything.
        drop(rt);
        // A seed that drew a power cut and checked none would pass for nothing.
        return if pc.is_off() { Ok(()) } else { Err(format!("the power cut drawn before I/O {cut} never came")) };
    }
    rt.close().map_err(|e| format!("close: {e}"))?;
    Ok(())
}

/// Ends the runtime of a seed that failed (`outcome`). A runtime whose thread
/// panicked has failed: its BIOs ended with EIO, and the panic is the seed's
/// violation, raised again when it drops (caught here). A BIO whose completion never
/// came without any panic (a lost completion) would make the drop wait for ever:
/// that runtime alone is forgotten, its threads left behind.
fn abandon(rt: Runtime, outcome: Result<(), String>) -> Result<(), String> {
    let outcome = match rt.failure() {
        Some(why) => Err(format!("panic: {why}")),
        None => outcome,
    };
    let lost = !rt.sh().failed() && rt.sh().core.lock().is_ok_and(|c| !c.bios.is_empty());
    if lost {
        std::mem::forget(rt);
    } else {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(rt)));
    }
    outcome
}

/// The rounds of a seed of about `ops` I/Os from `threads` submitting threads, and
/// the I/Os each thread submits in a round.
fn plan(ops: u64, threads: u64) -> (u64, u64) {
    let rounds = ops.div_ceil(100).max(1);
    (rounds, (ops / rounds / threads).max(1))
}

/// A seed's run, between its set-up and its end.
struct SeedRun<'a> {
    seed: u64,
    rt: &'a Runtime,
    dev: &'a FaultyDevice<FileImage>,
    geo: Geometry,
    clock: Arc<AtomicU64>,
    host: HostOracle,
    history: History,
    /// The power-loss model, the I/O (counted over the seed) before which the power
    /// goes, and where the file the cut leaves is opened again.
    power: Option<(PowerCut, u64, std::path::PathBuf)>,
}

/// What the submitting threads of a round share.
struct Round<'a> {
    rt: &'a Runtime,
    dev: &'a FaultyDevice<FileImage>,
    geo: &'a Geometry,
    seq: &'a [u32],
    /// Where the next write of each zone goes, claimed by the threads in turn.
    next: Vec<AtomicU64>,
    stamps: &'a AtomicU64,
    clock: &'a Arc<AtomicU64>,
    /// Held around a submission, so that the clock's order is the engine's.
    submit: Mutex<()>,
    /// I/Os submitted in the seed so far, and the one before which the power goes.
    submitted: &'a AtomicU64,
    cut_at: Option<u64>,
}

impl SeedRun<'_> {
    /// The rounds of a seed (see the module documentation).
    fn rounds(&mut self, ops: u64, s: &Setup, run: &mut RuntimeSeedRun) -> Result<(), String> {
        let seq: Vec<u32> = (self.geo.nr_conv()..self.geo.nr_zones()).collect();
        let stamps = AtomicU64::new(1);
        let submitted = AtomicU64::new(0);
        let (rounds, per_thread) = plan(ops, s.threads);
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ 0x0123_4567);
        let emulated_zwl = !s.engine.policy.plugs() && self.geo.emulates_zone_append();
        for round in 0..rounds {
            let zones_before: Vec<ZoneInfo> = self.rt.report_zones().map_err(|e| format!("report: {e:?}"))?;
            // The checker's own reads and zone operations since the last round.
            let (_, v) = self.dev.take_events();
            v.map_or(Ok(()), Err)?;
            let r = Round {
                rt: self.rt,
                dev: self.dev,
                geo: &self.geo,
                seq: &seq,
                next: zones_before
                    .iter()
                    .map(|z| AtomicU64::new(z.wp_offset().unwrap_or(z.capacity).min(z.capacity)))
                    .collect(),
                stamps: &stamps,
                clock: &self.clock,
                submit: Mutex::new(()),
                submitted: &submitted,
                cut_at: self.power.as_ref().map(|p| p.1),
            };
            let done = r.run(self.seed ^ (round << 20), s.threads, per_thread)?;
            run.ops += done.len() as u64;
            self.dev.set_enabled(false);
            let hit = self.dev.take_hit();
            let (events, v) = self.dev.take_events();
            v.map_or(Ok(()), Err)?;
            run.checks += (done.len() + events.len()) as u64;
            replay::replay(&mut self.host, &zones_before, &done, &events)?;
            replay::conservation(&self.geo, &done, &events, emulated_zwl).map_err(|(z, v)| {
                format!("{v}; the round in zone {z}:{}", checks::zone_history(&self.geo, &done, z))
            })?;
            self.history.round(&self.geo, &done, &events);
            if let Some((pc, _, after)) = self.power.as_ref().filter(|p| submitted.load(Ordering::SeqCst) > p.1) {
                return self.history.check_after_cut(pc, self.seed, after);
            }
            checks::check_round(self.rt, &self.geo, &zones_before, &done, &hit, run)?;
            self.dev.compare_zones()?;
            for (op, z) in checks::manage_zones(self.rt, &self.geo, &seq, &mut rng, run)? {
                self.history.managed(op, z);
            }
            self.dev.set_enabled(true);
        }
        Ok(())
    }
}

impl Round<'_> {
    /// The round's submitting threads, each with its share of I/Os; every
    /// completion, or the first thread's failure.
    fn run(&self, seed: u64, threads: u64, per_thread: u64) -> Result<Vec<Done>, String> {
        std::thread::scope(|sc| {
            let handles: Vec<_> =
                (0..threads).map(|t| sc.spawn(move || self.thread(per_thread, seed ^ (t << 8)))).collect();
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
        })
    }

    /// One submitting thread's part of a round: `n` random I/Os, up to 8 in flight,
    /// then every completion.
    fn thread(&self, n: u64, seed: u64) -> Result<Vec<Done>, String> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let geo = self.geo;
        let lbs = u64::from(geo.lbs_sectors());
        let (tx, rx) = mpsc::channel::<Done>();
        let mut out = Vec::with_capacity(n as usize);
        let mut inflight = 0u64;
        for _ in 0..n {
            while inflight >= 8 {
                out.push(rx.recv_timeout(COMPLETION_WAIT).map_err(|_| "a completion never came".to_string())?);
                inflight -= 1;
            }
            if self.cut_at == Some(self.submitted.fetch_add(1, Ordering::SeqCst)) {
                self.dev.power_off();
            }
            let z = ZoneNo(self.seq[rng.random_range(0..self.seq.len())]);
            let start = geo.zone_start(z);
            let cap = geo.zone_capacity(z);
            let blocks = rng.random_range(1..=8u64);
            let len = blocks * lbs;
            let stamp = self.stamps.fetch_add(1, Ordering::SeqCst);
            let data = || {
                let mut buf = vec![0u8; (len * SECTOR_SIZE) as usize];
                pattern::fill(stamp, 0, &mut buf);
                buf
            };
            let roll = rng.random_range(0..100);
            let fua = roll < 8;
            let (io, op, sector) = match roll {
                0..=54 => {
                    let off = self.next[z.idx()].fetch_add(len, Ordering::SeqCst).min(cap.saturating_sub(len));
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
            let nr_sectors = if op == Op::Flush { 0 } else { len as u32 };
            let (tx, clock) = (tx.clone(), self.clock.clone());
            let fua = fua && op == Op::Write;
            // Recovered: the lock guards nothing but the order of submissions.
            let _order = self.submit.lock().unwrap_or_else(|p| p.into_inner());
            let submitted = self.clock.fetch_add(1, Ordering::SeqCst);
            self.rt.submit(io, move |d| {
                let completed = clock.fetch_add(1, Ordering::SeqCst);
                let done = Done { op, fua, sector, nr_sectors, stamp, result: d.result, submitted, completed };
                let _ = tx.send(done);
            });
            drop(_order);
            inflight += 1;
        }
        while inflight > 0 {
            out.push(rx.recv_timeout(COMPLETION_WAIT).map_err(|_| "a completion never came".to_string())?);
            inflight -= 1;
        }
        Ok(out)
    }
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
