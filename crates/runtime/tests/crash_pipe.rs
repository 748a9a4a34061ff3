//! Crash safety of images under zone write pipelining: several writes of each zone
//! in flight when the process is killed (`kill -9`) or the power goes. Each of two
//! threads keeps up to `DEPTH` writes in flight to each of its zones (some FUA), a
//! third flushes now and then; every submission and every acknowledgement is logged.
//! After the crash, for every zone:
//!
//! - the write pointer is at the end of one of the writes submitted to it (never in
//!   one), at or past every write acknowledged (kill) or made durable (power: FUA, or
//!   acknowledged before a completed FLUSH began), and never past the last submitted;
//! - every sector below it holds what the write covering it put there: the durable
//!   state never covers a hole, and no acknowledged write sits beyond one;
//! - past it, up to the zone's capacity, the zone reads as zeroes and the file holds
//!   zeroes (the writes past it discarded by the recovery).
//!
//! With the planted bug `flush-covers-hole` (the image records the accepted write
//! pointer, over writes still in flight) the kill -9 check fails within
//! `MUTANT_RUNS` runs (built with the `mutations` feature, as `scripts/test` builds
//! the workspace; the crate's tests always are). `ZBLK_CRASH_RUNS` (default 30) runs each way.

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;
use zblk_core::bio::BioFlags;
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::mutation::{self, Mutation};
use zblk_core::units::{Sector, ZoneNo};
use zblk_dev::file::{FileImage, ImageOptions};
use zblk_runtime::{Backend, Io, Runtime, RuntimeConfig};
use zblk_workload::pattern::{Decoded, decode, fill};

mod common;

const SEQ_ZONES: u32 = 4;
const ZONE_SECTORS: u64 = 8192; // 4 MiB
const THREADS: u32 = 2;
const DEPTH: usize = 8;
/// Runs of kill -9 within which the planted bug is caught.
const MUTANT_RUNS: u64 = 40;

fn geometry() -> GeometryParams {
    common::crash_geometry(SEQ_ZONES, ZONE_SECTORS, 0)
}

fn runs() -> u64 {
    common::crash_runs(30)
}

fn config(backend: Backend) -> RuntimeConfig {
    let engine = EngineConfig { policy: IssuePolicy::Pipeline, queue_depth: 64, ..EngineConfig::default() };
    RuntimeConfig { engine, backend, ..RuntimeConfig::default() }
}

/// Log lines: `S z off len stamp fua`, `A z off`, `E z off`, `FS n`, `FD n`.
fn rec(log: &Mutex<Box<dyn Write + Send>>, line: String) {
    let mut l = log.lock().unwrap();
    l.write_all(format!("{line}\n").as_bytes()).expect("log write");
}

/// The workload: per thread, its zones filled by writes of 1..=64 sectors, up to
/// `DEPTH` in flight per zone; a flusher. Until `stop`, or a zone is full or fails.
fn workload(rt: &Runtime, log: Log, seed: u64, stop: &AtomicBool) {
    let flushes = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let n = flushes.fetch_add(1, Ordering::Relaxed);
                rec(log, format!("FS {n}"));
                if rt.flush().is_ok() {
                    rec(log, format!("FD {n}"));
                }
                std::thread::sleep(Duration::from_micros(300));
            }
        });
        for t in 0..THREADS {
            s.spawn(move || zone_writer(rt, log, seed ^ (u64::from(t) << 40), t, stop));
        }
    });
}

fn zone_writer(rt: &Runtime, log: Log, seed: u64, t: u32, stop: &AtomicBool) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let zones = [1 + t, 1 + t + THREADS];
    let mut wp = [0u64; 2];
    let (tx, rx) = mpsc::channel::<(usize, bool)>();
    let mut inflight = [0usize; 2];
    let mut failed = [false; 2];
    let mut n = 0u64;
    while !(stop.load(Ordering::Relaxed) || failed.iter().all(|&f| f)) {
        while let Ok((i, ok)) = rx.try_recv() {
            inflight[i] -= 1;
            failed[i] |= !ok;
        }
        let i = rng.random_range(0..2usize);
        let len = rng.random_range(1..=64u64);
        if failed[i] || inflight[i] >= DEPTH || wp[i] + len > ZONE_SECTORS {
            if let Ok((j, ok)) = rx.recv_timeout(Duration::from_millis(5)) {
                inflight[j] -= 1;
                failed[j] |= !ok;
            }
            continue;
        }
        let z = zones[i];
        n += 1;
        let stamp = (u64::from(t + 1) << 40) | n;
        let mut buf = vec![0u8; (len * 512) as usize];
        fill(stamp, 0, &mut buf);
        let fua = rng.random_range(0..10) == 0;
        let at = Sector(u64::from(z) * ZONE_SECTORS + wp[i]);
        let io = if fua { Io::write(at, buf).with_flags(BioFlags::FUA) } else { Io::write(at, buf) };
        // Logged before it is submitted, under the log's lock: zone order in the log.
        rec(log, format!("S {z} {} {len} {stamp} {}", wp[i], u8::from(fua)));
        let (tx, off) = (tx.clone(), wp[i]);
        rt.submit(io, move |d| {
            rec(log, format!("{} {z} {off}", if d.result.is_ok() { "A" } else { "E" }));
            let _ = tx.send((i, d.result.is_ok()));
        });
        inflight[i] += 1;
        wp[i] += len;
    }
}

/// The log: leaked, so that callbacks still running when the runtime goes (or the
/// process is killed) have it.
type Log = &'static Mutex<Box<dyn Write + Send>>;

fn leaked_log(w: Box<dyn Write + Send>) -> Log {
    Box::leak(Box::new(Mutex::new(w)))
}

#[derive(Clone, Copy, Debug)]
struct W {
    off: u64,
    len: u64,
    stamp: u64,
    acked: bool,
    durable: bool,
}

/// Per zone, its writes in zone order, from the log.
fn model(text: &str) -> Vec<Vec<W>> {
    let lines: Vec<&str> = text.lines().collect();
    let complete = if text.ends_with('\n') { lines.len() } else { lines.len().saturating_sub(1) };
    let lines = &lines[..complete];
    let mut flush_start = std::collections::HashMap::new();
    let mut cutoff = 0;
    for (i, l) in lines.iter().enumerate() {
        let f: Vec<&str> = l.split(' ').collect();
        match f[0] {
            "FS" => {
                flush_start.insert(f[1].to_string(), i);
            }
            "FD" => cutoff = cutoff.max(flush_start[f[1]]),
            _ => {}
        }
    }
    let mut zones: Vec<Vec<W>> = vec![Vec::new(); SEQ_ZONES as usize + 1];
    let mut fua = std::collections::HashMap::new();
    for (i, l) in lines.iter().enumerate() {
        let f: Vec<&str> = l.split(' ').collect();
        let num = |k: usize| f[k].parse::<u64>().unwrap();
        match f[0] {
            "S" => {
                zones[num(1) as usize].push(W {
                    off: num(2),
                    len: num(3),
                    stamp: num(4),
                    acked: false,
                    durable: false,
                });
                fua.insert((num(1), num(2)), f[5] == "1");
            }
            "A" => {
                let w = zones[num(1) as usize].iter_mut().find(|w| w.off == num(2)).expect("acknowledged write logged");
                w.acked = true;
                w.durable = fua[&(num(1), num(2))] || i < cutoff;
            }
            _ => {}
        }
    }
    zones
}

/// Checks the reopened image (the file at `path`) against the model (see the module
/// documentation).
fn check(img: &FileImage, path: &Path, zones: &[Vec<W>], power: bool) -> Result<(), String> {
    let geo: Geometry = img.geo().clone();
    let report = img.zones();
    for z in 1..=SEQ_ZONES {
        let ws = &zones[z as usize];
        let info = &report[z as usize];
        let wp = info.wp.since(info.start);
        let floor = ws.iter().filter(|w| if power { w.durable } else { w.acked }).map(|w| w.off + w.len).max();
        let at_boundary = wp == 0 || ws.iter().any(|w| w.off + w.len == wp);
        if !at_boundary || wp < floor.unwrap_or(0) {
            let what = if power { "durable" } else { "acknowledged" };
            return Err(format!("zone {z}: write pointer offset {wp}; {what} up to {floor:?}; writes {ws:?}"));
        }
        if wp == 0 {
            continue;
        }
        let mut buf = vec![0u8; (wp * 512) as usize];
        img.read_direct(geo.zone_start(ZoneNo(z)), &mut buf).map_err(|e| format!("zone {z}: read: {e}"))?;
        for w in ws.iter().take_while(|w| w.off < wp) {
            for s in w.off..w.off + w.len {
                let got = decode(&buf[(s * 512) as usize..((s + 1) * 512) as usize]);
                if got != Decoded::Data((w.stamp, (s - w.off) as u32)) {
                    return Err(format!(
                        "zone {z} sector offset {s} below the write pointer offset {wp} holds {got:?}, \
                         not write {} ({} acknowledged {})",
                        w.stamp, w.off, w.acked
                    ));
                }
            }
        }
    }
    common::zeroes_past_write_pointers(img, path)
}

fn create(path: &Path) {
    common::create_fresh(path, geometry());
}

const CHILD_ENV: &str = "ZBLK_PIPE_CRASH_CHILD";

#[test]
#[ignore = "the child process of the kill -9 tests"]
fn pipe_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let parts: Vec<&str> = spec.split('|').collect();
    if let Some(m) = Mutation::parse(parts[3]) {
        mutation::set_global(Some(m));
    }
    let image = FileImage::open(Path::new(parts[0]), &ImageOptions::default()).unwrap();
    let rt = Runtime::start(image, config(Backend::Auto)).unwrap();
    let file = OpenOptions::new().create(true).append(true).open(parts[1]).unwrap();
    let log = leaked_log(Box::new(file));
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| workload(&rt, log, parts[2].parse().unwrap(), &stop));
        std::thread::sleep(Duration::from_secs(20));
        stop.store(true, Ordering::Relaxed);
    });
}

/// `runs` kill -9 runs (with `mutant` planted in the child): the first failure.
fn kill_runs(runs: u64, mutant: Option<Mutation>) -> Option<(u64, String)> {
    let dir = tempfile::tempdir().unwrap();
    let m = mutant.map_or("none", |m| m.name());
    for seed in 1..=runs {
        let (img, log) = (dir.path().join("kill.img"), dir.path().join("kill.log"));
        create(&img);
        let _ = std::fs::remove_file(&log);
        let spec = format!("{}|{}|{seed}|{m}", img.display(), log.display());
        common::kill_nine("pipe_child", (CHILD_ENV, spec), &log, seed, 5..60);
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // Nothing fails before the kill: no media errors here, and a write of a
        // pipelined zone refused by the image (reaching it out of order) would be one.
        if let Some(e) = text.lines().find(|l| l.starts_with("E ")) {
            return Some((seed, format!("a write failed before the kill: {e}")));
        }
        let image = common::open_retry(&img, &ImageOptions::default());
        if let Err(e) = check(&image, &img, &model(&text), false) {
            return Some((seed, e));
        }
    }
    None
}

#[test]
fn kill_nine_with_pipelined_writes_in_flight() {
    if let Some((seed, e)) = kill_runs(runs(), None) {
        panic!("kill -9 seed {seed}: {e}");
    }
}

#[test]
fn the_planted_flush_over_a_hole_is_caught_by_kill_nine() {
    // The crate's tests build zblk-core with its planted bugs (a dev-dependency
    // feature): a build without them does not compile, rather than skip.
    const { assert!(mutation::AVAILABLE, "zblk-core built without its `mutations` feature") };
    let caught = kill_runs(MUTANT_RUNS, Some(Mutation::FlushCoversHole));
    let (seed, e) = caught.unwrap_or_else(|| panic!("flush-covers-hole not caught within {MUTANT_RUNS} kill -9 runs"));
    println!("flush-covers-hole caught at run {seed} (bound {MUTANT_RUNS}): {e}");
}

#[test]
fn power_loss_with_pipelined_writes_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    for seed in 1..=runs() {
        let img = dir.path().join("power.img");
        create(&img);
        let (image, pc) = common::open_with_power_cut(&img, &Geometry::new(&geometry()).unwrap());
        let rt = Runtime::start(image, config(Backend::Threads)).unwrap();
        let shared: Arc<Mutex<Vec<u8>>> = Arc::default();
        let log = leaked_log(Box::new(SharedBuf(shared.clone())));
        let stop = AtomicBool::new(false);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        std::thread::scope(|s| {
            s.spawn(|| workload(&rt, log, seed, &stop));
            std::thread::sleep(Duration::from_millis(rng.random_range(5..40)));
            pc.power_off();
            stop.store(true, Ordering::Relaxed);
        });
        drop(rt);
        let after = dir.path().join("power-after.img");
        std::fs::write(&after, pc.cut(seed)).unwrap();
        let text = String::from_utf8(shared.lock().unwrap().clone()).unwrap();
        let image = common::retry_in_use(|| {
            FileImage::open(&after, &ImageOptions { boot_id: Some(common::OTHER_BOOT), ..ImageOptions::default() })
        })
        .unwrap_or_else(|e| panic!("power loss seed {seed}: reopen: {e}"));
        if let Err(e) = check(&image, &after, &model(&text), true) {
            panic!("power loss seed {seed}: {e}\nrepairs: {:?}", image.repairs());
        }
    }
}

/// A log in memory, shared with the test.
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
