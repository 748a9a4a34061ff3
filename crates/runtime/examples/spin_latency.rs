//! When a thread that submits an I/O and then computes in user space, without a
//! system call, sees its completion: the price of the ring's cooperative task work
//! (`IORING_SETUP_COOP_TASKRUN`: the kernel posts a completion when its submitting
//! task next enters the kernel, or is interrupted, instead of interrupting it for it).
//! 50 writes of 4 KiB, each submitted with `Runtime::submit` and then waited for by
//! spinning (at most 50 ms), 2 ms apart; prints the spread of the times to the
//! completion's callback.
//!
//! `cargo run --release -p zblk-runtime --example spin_latency -- [IMAGE_DIR]`

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zblk_core::geometry::GeometryParams;
use zblk_core::units::Sector;
use zblk_dev::buf::AlignedBuf;
use zblk_dev::file::{CreateOptions, FileImage, ImageOptions};
use zblk_runtime::{Io, Runtime, RuntimeConfig};

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "/var/tmp".to_string());
    let path = std::path::Path::new(&dir).join("zblk-spin.img");
    let path = path.as_path();
    let geometry = GeometryParams { capacity_bytes: 8 << 26, zone_size_bytes: 1 << 26, ..GeometryParams::default() };
    FileImage::create(path, &CreateOptions { geometry, rotational: false, force: true, preallocate: false }).unwrap();
    let img = FileImage::open(path, &ImageOptions::default()).unwrap();
    let rt = Runtime::start(img, RuntimeConfig::default()).unwrap();
    println!("{}", rt.backend());
    let mut lat = Vec::new();
    for i in 0..50u64 {
        let done = Arc::new(AtomicU64::new(0));
        let d = Arc::clone(&done);
        let t0 = Instant::now();
        rt.submit(Io::write(Sector((1 << 17) + i * 8), AlignedBuf::zeroed(4096)), move |r| {
            assert!(r.result.is_ok());
            d.store(t0.elapsed().as_nanos() as u64, Ordering::Release);
        });
        // Spin in user space, no system call, up to 50 ms.
        while done.load(Ordering::Acquire) == 0 && t0.elapsed() < Duration::from_millis(50) {
            std::hint::spin_loop();
        }
        lat.push(done.load(Ordering::Acquire) as f64 / 1e3);
        std::thread::sleep(Duration::from_millis(2));
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "completion seen by a spinning submitter, us: min {:.0} median {:.0} p90 {:.0} max {:.0}",
        lat[0], lat[25], lat[45], lat[49]
    );
    drop(rt);
    let _ = std::fs::remove_file(path);
}
