//! What the runtime tests share.

#![allow(dead_code)]

use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// A minimal executor: polls a future on this thread, parking between wake-ups.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// A test that cannot run here says so past the test harness's capture, so that
/// `scripts/test` lists it.
pub fn skipped(test: &str, why: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// A test of the io_uring driver where the kernel does not allow io_uring: it fails
/// when `ZBLK_REQUIRE_URING=1` (`scripts/test` and CI set it, as they require the
/// VM: a test that did not run must not pass), and says SKIPPED otherwise.
pub fn io_uring_missing(test: &str, why: impl std::fmt::Display) {
    let required = std::env::var("ZBLK_REQUIRE_URING").is_ok_and(|v| v == "1");
    assert!(!required, "{test}: io_uring is required (ZBLK_REQUIRE_URING=1) but not available: {why}");
    skipped(test, format_args!("io_uring is not available: {why}"));
}

/// Opens the image at `path` after a killed process: its I/O may still hold the
/// image's lock for a moment, so an image in use is tried again for up to 10 s.
pub fn open_retry(path: &std::path::Path, opts: &zblk_dev::file::ImageOptions) -> zblk_dev::file::FileImage {
    retry_in_use(|| zblk_dev::file::FileImage::open(path, opts)).unwrap_or_else(|e| panic!("reopen: {e}"))
}

/// `open` tried again for up to 10 s while the image is in use. Besides a killed
/// process's lingering I/O, a child another test of the same process forks holds
/// every descriptor of the process, the image's locked one too, until it execs: the
/// lock of an image just closed may still be held for that moment.
pub fn retry_in_use<T>(
    mut open: impl FnMut() -> Result<T, zblk_dev::file::ImageError>,
) -> Result<T, zblk_dev::file::ImageError> {
    use std::time::{Duration, Instant};
    use zblk_dev::DeviceErrorKind;
    use zblk_dev::file::ImageErrorKind;
    let t = Instant::now();
    loop {
        match open() {
            Err(e)
                if matches!(e.kind, ImageErrorKind::Device(DeviceErrorKind::InUse(_)))
                    && t.elapsed() < Duration::from_secs(10) =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            r => return r,
        }
    }
}

/// Opens the image at `img` (of geometry `geo`) through a power-cut model of its
/// file, which tracks the image's mapped live state: the image, and the model that
/// cuts its power (tried again while the image is in use, as [`retry_in_use`]).
pub fn open_with_power_cut(
    img: &std::path::Path,
    geo: &zblk_core::geometry::Geometry,
) -> (zblk_dev::file::FileImage, zblk_dev::file::powercut::PowerCut) {
    use std::sync::{Arc, Mutex};
    use zblk_dev::file::powercut::PowerCut;
    let layout = zblk_dev::file::format::Layout::of(geo);
    let handle: Arc<Mutex<Option<PowerCut>>> = Arc::default();
    let image = retry_in_use(|| {
        let h = handle.clone();
        zblk_dev::file::FileImage::open_with(img, &zblk_dev::file::ImageOptions::default(), move |m| {
            let pc = PowerCut::new(Arc::new(m), layout.file_bytes).unwrap();
            pc.track_mapped(layout.live_offset, layout.table_bytes);
            *h.lock().unwrap() = Some(pc.clone());
            Box::new(pc)
        })
    })
    .unwrap_or_else(|e| panic!("open {}: {e}", img.display()));
    let pc = handle.lock().unwrap().take().expect("the image opened through the model");
    (image, pc)
}

/// A fresh image at `path` for each run of a crash test: the previous run's file is
/// removed first (its runtime may still be winding down with it open, its lock held,
/// and `create -f` refuses an image in use).
pub fn create_fresh(path: &std::path::Path, geometry: zblk_core::geometry::GeometryParams) {
    use zblk_dev::file::{CreateOptions, FileImage};
    let _ = std::fs::remove_file(path);
    FileImage::create(path, &CreateOptions { geometry, rotational: false, force: true, preallocate: false }).unwrap();
}

/// The crash tests' image: one conventional zone, then `seq_zones` sequential zones of
/// `zone_sectors` sectors each (`cap_sectors` of them writable; 0: all), no native zone
/// append (appends emulated, as on an SMR disk).
pub fn crash_geometry(seq_zones: u32, zone_sectors: u64, cap_sectors: u64) -> zblk_core::geometry::GeometryParams {
    zblk_core::geometry::GeometryParams {
        capacity_bytes: u64::from(seq_zones + 1) * zone_sectors * 512,
        zone_size_bytes: zone_sectors * 512,
        zone_capacity_bytes: cap_sectors * 512,
        nr_conv: 1,
        max_append_sectors: 0,
        ..zblk_core::geometry::GeometryParams::default()
    }
}

/// Runs of a crash test: `ZBLK_CRASH_RUNS`, or `default`.
pub fn crash_runs(default: u64) -> u64 {
    std::env::var("ZBLK_CRASH_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// A boot id other than this machine's: an image reopened "after a power cut" is
/// opened as on the next boot.
pub const OTHER_BOOT: [u8; 36] = *b"00000000-0000-4000-8000-00000000cafe";

/// After a crash and the reopen that recovered from it: every sequential zone reads
/// as zeroes from its write pointer up to its capacity, through the device (what a
/// user reads) and in the file itself (the recovery of an unclean stop says it
/// discarded the data past every write pointer: writes never flushed, a write in
/// flight). Names the first zone and sector that does not.
pub fn zeroes_past_write_pointers(img: &zblk_dev::file::FileImage, path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    use zblk_core::zone::ZoneType;
    let file = std::fs::File::open(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    for (z, info) in img.zones().iter().enumerate() {
        let (wp, cap) = (info.wp.since(info.start), info.capacity);
        if info.ztype == ZoneType::Conventional || wp >= cap {
            continue;
        }
        let mut buf = vec![0u8; ((cap - wp) * 512) as usize];
        img.read_direct(info.wp, &mut buf).map_err(|e| format!("zone {z}: read past the write pointer: {e}"))?;
        if let Some(i) = buf.iter().position(|&b| b != 0) {
            return Err(format!(
                "zone {z}: sector offset {} past the write pointer offset {wp} (capacity {cap}) reads as data, \
                 not zeroes",
                wp + i as u64 / 512
            ));
        }
        file.read_exact_at(&mut buf, img.file_offset(info.wp)).map_err(|e| format!("zone {z}: read the file: {e}"))?;
        if let Some(i) = buf.iter().position(|&b| b != 0) {
            return Err(format!(
                "zone {z}: the file holds data at sector offset {} past the write pointer offset {wp} (capacity \
                 {cap}), which the recovery ({}) did not discard",
                wp + i as u64 / 512,
                img.repairs().join("; ")
            ));
        }
    }
    Ok(())
}

/// The kill -9 harness of the crash tests: runs `child`, an ignored test of this test
/// binary, in a process of its own with `env` set (it reads what to do from it and
/// logs to `log`), waits for its first complete log line (at most 10 s), lets it run
/// a random while more (`delay_ms`, drawn from `seed`), and kills it with SIGKILL. The
/// caller then reopens the image and checks it against the log.
pub fn kill_nine(child: &str, env: (&str, String), log: &std::path::Path, seed: u64, delay_ms: std::ops::Range<u64>) {
    use rand::{RngExt, SeedableRng};
    use std::time::{Duration, Instant};
    let mut proc = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", child, "--ignored", "--nocapture", "--test-threads=1"])
        .env(env.0, env.1)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the child");
    let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(seed);
    let started = || std::fs::read_to_string(log).is_ok_and(|t| t.contains('\n'));
    let t = Instant::now();
    while !started() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(rng.random_range(delay_ms)));
    proc.kill().expect("SIGKILL the child");
    proc.wait().expect("reap the child");
}
