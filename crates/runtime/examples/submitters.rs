//! How the runtime scales with submitting threads: N threads each doing blocking 4 KiB
//! writes (`Runtime::write_at`, one at a time per thread) to zones of their own, for a
//! few seconds, N = 1, 2, 4, ... 32. The engine is locked only around its state
//! changes, never across I/O, so more submitters keep more writes in flight.
//!
//! `cargo run --release --example submitters -- [IMAGE_DIR] [SECONDS]`

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zblk_core::geometry::GeometryParams;
use zblk_core::units::Sector;
use zblk_dev::file::{CreateOptions, FileImage, ImageOptions};
use zblk_runtime::{Runtime, RuntimeConfig};

const ZONE_SECTORS: u64 = 1 << 17; // 64 MiB

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| "/var/tmp".to_string());
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let path = std::path::Path::new(&dir).join("zblk-submitters.img");
    let geometry = GeometryParams {
        capacity_bytes: 64 * ZONE_SECTORS * 512,
        zone_size_bytes: ZONE_SECTORS * 512,
        ..GeometryParams::default()
    };
    if let Err(e) =
        FileImage::create(&path, &CreateOptions { geometry, rotational: false, force: true, preallocate: false })
    {
        eprintln!("{e}");
        std::process::exit(1);
    }
    let img = FileImage::open(&path, &ImageOptions::default()).expect("open the new image");
    let rt = Runtime::start(img, RuntimeConfig::default()).expect("start the runtime");
    println!("{}; blocking 4 KiB writes, one zone per thread, {secs} s per point", rt.backend());
    let data = vec![0x5au8; 4096];
    for threads in [1u64, 2, 4, 8, 16, 32] {
        rt.zone_op(zblk_core::bio::Op::ZoneResetAll, Sector::ZERO).expect("reset all");
        let ops = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for t in 0..threads {
                let (rt, ops, stop, data) = (&rt, &ops, &stop, &data);
                s.spawn(move || {
                    let zone = Sector((t + 1) * ZONE_SECTORS);
                    let mut wp = 0;
                    while !stop.load(Ordering::Relaxed) && wp + 8 <= ZONE_SECTORS {
                        rt.write_at(zone + wp, data).expect("write at the write pointer");
                        wp += 8;
                        ops.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            std::thread::sleep(Duration::from_secs_f64(secs));
            stop.store(true, Ordering::Relaxed);
        });
        let iops = ops.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();
        println!("{threads:>3} submitting threads: {:>8.1}k IOPS", iops / 1e3);
    }
    rt.close().expect("close");
    let _ = std::fs::remove_file(&path);
}
