//! 32 threads writing and appending to 8 zones of a file image at once, through the
//! threaded runtime, for a few seconds (`ZBLK_STRESS_SECS`, default 3).
//!
//! Each zone has a lock that its writers hold while they *submit* (as a file system
//! holds a zone's allocation lock), not while the I/O runs: submission order is the
//! zone's order, and the zone write plugs must keep it all the way to the device.
//! Writes go to the offset reserved under the lock; appends (emulated: the image has
//! no native zone append) must land exactly there too. Zero errors are allowed, every
//! acknowledged extent must tile its zone, read back with its own pattern, and
//! survive a close and reopen. Seeded: `ZBLK_SEED` replays a run's choices.

mod common;

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zblk_core::bio::Status;
use zblk_core::geometry::GeometryParams;
use zblk_core::units::Sector;
use zblk_dev::file::{CreateOptions, FileImage, ImageOptions};
use zblk_runtime::{AlignedBuf, Backend, Io, Runtime, RuntimeConfig};
use zblk_workload::pattern::{Decoded, decode, fill};

const ZONES: u64 = 8;
const THREADS: u64 = 32;
const ZONE_SECTORS: u64 = 1 << 18; // 128 MiB
/// Writes and appends each thread submits whatever the clock says: the run's size
/// is counted in operations, so a loaded machine makes it slower, never smaller.
const MIN_PER_THREAD: u64 = 40;

/// One acknowledged write or append.
#[derive(Clone, Copy, Debug)]
struct Acked {
    zone: u64,
    off: u64,
    len: u64,
    stamp: u64,
}

struct ZoneState {
    next_off: u64,
    full: bool,
}

fn seed() -> u64 {
    std::env::var("ZBLK_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed_2026)
}

fn stress(backend: Backend, secs: f64) {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stress.img");
    let geometry = GeometryParams {
        capacity_bytes: (ZONES + 1) * ZONE_SECTORS * 512,
        zone_size_bytes: ZONE_SECTORS * 512,
        nr_conv: 1,
        max_append_sectors: 0,
        ..GeometryParams::default()
    };
    FileImage::create(&path, &CreateOptions { geometry, rotational: false, force: false, preallocate: false }).unwrap();
    let img = FileImage::open(&path, &ImageOptions::default()).unwrap();
    let cfg = RuntimeConfig { backend, ..RuntimeConfig::default() };
    let rt = match Runtime::start(img, cfg) {
        Ok(rt) => rt,
        Err(e) if backend == Backend::IoUring => return common::io_uring_missing("stress (io_uring)", e),
        Err(e) => panic!("the {backend:?} driver does not start: {e}"),
    };
    eprintln!("stress: {} threads, {} zones, {secs}s, seed {seed}, {}", THREADS, ZONES, rt.backend());
    let zones: Vec<Mutex<ZoneState>> = (0..ZONES).map(|_| Mutex::new(ZoneState { next_off: 0, full: false })).collect();
    let acked = Mutex::new(Vec::<Acked>::new());
    let errors = Mutex::new(Vec::<(Acked, bool, Result<Sector, Status>)>::new());
    let stop = AtomicBool::new(false);
    let ops = AtomicU64::new(0);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (rt, zones, acked, errors, stop, ops) = (&rt, &zones, &acked, &errors, &stop, &ops);
            s.spawn(move || {
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (t << 40));
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) && (n < MIN_PER_THREAD || Instant::now() < deadline) {
                    let zone = rng.random_range(0..ZONES);
                    let len = rng.random_range(1..=64u64);
                    let append = rng.random_bool(0.5);
                    n += 1;
                    let stamp = (t << 32) | n;
                    let mut buf = AlignedBuf::zeroed((len * 512) as usize);
                    fill(stamp, 0, &mut buf);
                    let zstart = (zone + 1) * ZONE_SECTORS;
                    let (tx, rx) = std::sync::mpsc::channel();
                    let off;
                    {
                        let mut z = zones[zone as usize].lock().unwrap();
                        if z.full || z.next_off + len > ZONE_SECTORS {
                            z.full = true;
                            continue;
                        }
                        off = z.next_off;
                        z.next_off += len;
                        let io =
                            if append { Io::append(Sector(zstart), buf) } else { Io::write(Sector(zstart + off), buf) };
                        // Submitted under the zone lock: this is the zone's order.
                        rt.submit(io, move |d| tx.send(d.result).unwrap());
                    }
                    let r = rx.recv().unwrap();
                    let a = Acked { zone, off, len, stamp };
                    match r {
                        Ok(at) if at == Sector(zstart + off) => acked.lock().unwrap().push(a),
                        other => {
                            errors.lock().unwrap().push((a, append, other));
                            stop.store(true, Ordering::Relaxed);
                        }
                    }
                    ops.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let errors = errors.into_inner().unwrap();
    assert!(errors.is_empty(), "seed {seed}: ordering violations or errors: {:?}", &errors[..errors.len().min(10)]);
    let acked = acked.into_inner().unwrap();
    let n = ops.load(Ordering::Relaxed);
    eprintln!("stress: {n} writes and appends acknowledged, engine: {:?}", rt.engine_stats());
    assert!(n >= THREADS * MIN_PER_THREAD, "seed {seed}: only {n} I/Os acknowledged, fewer than the threads submitted");
    verify(&rt, &acked, &zones, seed);
    rt.close().unwrap();
    let img = FileImage::open(&path, &ImageOptions::default()).unwrap();
    assert!(img.repairs().is_empty(), "clean close: {:?}", img.repairs());
    let rt = Runtime::start(img, RuntimeConfig { backend: Backend::Threads, ..RuntimeConfig::default() }).unwrap();
    verify(&rt, &acked, &zones, seed);
    rt.close().unwrap();
}

/// The acknowledged extents tile each zone up to its write pointer, and each reads
/// back with its own pattern.
fn verify(rt: &Runtime, acked: &[Acked], zones: &[Mutex<ZoneState>], seed: u64) {
    let report = rt.report_zones().unwrap();
    for (z, state) in zones.iter().enumerate() {
        let mut mine: Vec<Acked> = acked.iter().filter(|a| a.zone == z as u64).copied().collect();
        mine.sort_by_key(|a| a.off);
        let mut end = 0;
        for a in &mine {
            assert_eq!(a.off, end, "seed {seed}: zone {z}: gap or overlap at {}", a.off);
            end += a.len;
        }
        assert_eq!(end, state.lock().unwrap().next_off, "seed {seed}: zone {z}");
        let info = &report[z + 1];
        assert_eq!(info.wp.since(info.start), end, "seed {seed}: zone {z}: write pointer");
        let mut buf = vec![0u8; (end * 512) as usize];
        if end > 0 {
            rt.read_at(info.start, &mut buf).unwrap();
        }
        for a in &mine {
            for k in 0..a.len {
                let at = ((a.off + k) * 512) as usize;
                let got = decode(&buf[at..at + 512]);
                assert_eq!(got, Decoded::Data((a.stamp, k as u32)), "seed {seed}: zone {z} sector {}", a.off + k);
            }
        }
    }
}

fn secs() -> f64 {
    std::env::var("ZBLK_STRESS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0)
}

#[test]
fn thirty_two_threads_eight_zones_io_uring() {
    stress(Backend::IoUring, secs());
}

#[test]
fn thirty_two_threads_eight_zones_thread_pool() {
    stress(Backend::Threads, secs() / 3.0);
}
