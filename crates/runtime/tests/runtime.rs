//! The threaded runtime on a file-backed image: the blocking and asynchronous APIs,
//! with io_uring (where the kernel does not allow it: a failure under
//! `ZBLK_REQUIRE_URING=1`, as `scripts/test` runs it, SKIPPED otherwise) and with
//! the thread pool.

mod common;

use common::{block_on, io_uring_missing, skipped};
use std::path::Path;
use zblk_core::bio::{BioFlags, Op, Status};
use zblk_core::geometry::GeometryParams;
use zblk_core::units::Sector;
use zblk_core::zone::ZoneCond;
use zblk_dev::file::{CreateOptions, FileImage, ImageOptions};
use zblk_runtime::{AlignedBuf, Backend, Buffer, Io, Runtime, RuntimeConfig};

const ZONE: u64 = 2048; // sectors (1 MiB)

fn params(append: u32) -> GeometryParams {
    GeometryParams {
        capacity_bytes: 16 << 20,
        zone_size_bytes: 1 << 20,
        zone_capacity_bytes: 768 << 10,
        nr_conv: 1,
        max_append_sectors: append,
        ..GeometryParams::default()
    }
}

fn create(dir: &Path, append: u32) -> std::path::PathBuf {
    let p = dir.join("img");
    FileImage::create(
        &p,
        &CreateOptions { geometry: params(append), rotational: false, force: false, preallocate: false },
    )
    .unwrap();
    p
}

fn start(path: &Path, backend: Backend) -> Option<Runtime> {
    let img = FileImage::open(path, &ImageOptions::default()).unwrap();
    match Runtime::start(img, RuntimeConfig { backend, ..RuntimeConfig::default() }) {
        Ok(rt) => Some(rt),
        Err(e) if backend == Backend::IoUring => {
            io_uring_missing("runtime (io_uring)", e);
            None
        }
        Err(e) => panic!("the {backend:?} driver does not start: {e}"),
    }
}

fn exercise(backend: Backend, append: u32) {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path(), append);
    let Some(rt) = start(&p, backend) else { return };
    eprintln!("backend: {}", rt.backend());
    let z1 = Sector(ZONE);
    // blocking: write, append, unaligned write refused, read back
    rt.write_at(z1, &[1u8; 4096]).unwrap();
    assert_eq!(rt.append(z1, &[2u8; 4096]), Ok(Sector(ZONE + 8)));
    assert_eq!(rt.write_at(z1, &[3u8; 512]), Err(Status::Unaligned));
    assert_eq!(rt.write_at(Sector(ZONE + 16), &[3u8; 100]), Err(Status::Invalid));
    let mut out = vec![0u8; 24 * 512];
    rt.read_at(z1, &mut out).unwrap();
    assert!(out[..4096].iter().all(|&b| b == 1));
    assert!(out[4096..8192].iter().all(|&b| b == 2));
    assert!(out[8192..].iter().all(|&b| b == 0), "past the write pointer reads zeroes");
    // FUA, flush, zone operations
    rt.write_at_flags(Sector(ZONE + 16), &[4u8; 512], BioFlags::FUA).unwrap();
    rt.flush().unwrap();
    rt.zone_op(Op::ZoneFinish, Sector(2 * ZONE)).unwrap();
    rt.zone_op(Op::ZoneOpen, Sector(3 * ZONE)).unwrap();
    let zones = rt.report_zones().unwrap();
    assert_eq!(zones[2].cond, ZoneCond::Full);
    assert_eq!(zones[3].cond, ZoneCond::ExpOpen);
    // conventional zone: random writes
    rt.write_at(Sector(64), &[5u8; 1024]).unwrap();
    // asynchronous: a future and a callback, aligned and unaligned buffers
    let d = block_on(rt.submit_async(Io::append(Sector(4 * ZONE), AlignedBuf::from_slice(&[6u8; 8192]))));
    assert_eq!(d.result, Ok(Sector(4 * ZONE)));
    let (tx, rx) = std::sync::mpsc::channel();
    rt.submit(Io::read(Sector(4 * ZONE), vec![0u8; 8192]), move |d| tx.send(d).unwrap());
    let d = rx.recv().unwrap();
    assert_eq!(d.result, Ok(Sector(4 * ZONE)));
    assert!(d.buf.unwrap().as_slice().iter().all(|&b| b == 6));
    rt.zone_op(Op::ZoneReset, z1).unwrap();
    rt.close().unwrap();
    // reopen: state persisted
    let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    assert!(img.repairs().is_empty(), "{:?}", img.repairs());
    let zones = img.zones();
    assert_eq!(zones[1].cond, ZoneCond::Empty);
    assert_eq!(zones[2].cond, ZoneCond::Full);
    assert_eq!(zones[3].cond, ZoneCond::ExpOpen);
    assert_eq!((zones[4].cond, zones[4].wp), (ZoneCond::ImpOpen, Sector(4 * ZONE + 16)));
}

#[test]
fn io_uring_emulated_append() {
    exercise(Backend::IoUring, 0);
}

#[test]
fn io_uring_native_append() {
    exercise(Backend::IoUring, 256);
}

#[test]
fn threads_emulated_append() {
    exercise(Backend::Threads, 0);
}

#[test]
fn threads_native_append() {
    exercise(Backend::Threads, 256);
}

/// Writes `buf` at `at` and reads `into.len()` bytes back from there into `into`,
/// through the asynchronous API: the write's and the read's buffers as they came back.
fn write_then_read(rt: &Runtime, at: Sector, buf: AlignedBuf, into: AlignedBuf) -> (Buffer, Buffer) {
    let w = block_on(rt.submit_async(Io::write(at, buf)));
    assert_eq!(w.result, Ok(at));
    let r = block_on(rt.submit_async(Io::read(at, into)));
    assert_eq!(r.result, Ok(at));
    (w.buf.expect("the write's buffer back"), r.buf.expect("the read's buffer back"))
}

/// The runtime's buffers ([`Runtime::buffers`]) are one region registered with its
/// ring: a write from one and a read into another go as `WRITE_FIXED` and
/// `READ_FIXED` (counted) and move each buffer's own bytes, where the region's other
/// buffers lie beside it; a buffer of its own goes as a plain transfer; a second
/// region is not registered (its buffers move as plain ones do).
#[test]
fn the_runtimes_buffers_move_through_its_registered_region() {
    // In the build's directory rather than /tmp, which may be a tmpfs (no O_DIRECT:
    // nothing registered, the test below).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = create(dir.path(), 0);
    let Some(rt) = start(&p, Backend::IoUring) else { return };
    if !rt.direct_io() {
        let test = "the_runtimes_buffers_move_through_its_registered_region";
        return skipped(test, format_args!("{} takes no O_DIRECT ({})", dir.path().display(), rt.backend()));
    }
    let mut bufs = rt.buffers(&[4096, 8192, 8192]);
    for (i, b) in bufs.iter_mut().enumerate() {
        for (j, x) in b.iter_mut().enumerate() {
            *x = (i * 31 + j / 512) as u8;
        }
    }
    let [small, mid, last] = <[AlignedBuf; 3]>::try_from(bufs).unwrap();
    let expected = mid.to_vec();
    let before = rt.ring_stats().expect("a ring");
    // The middle buffer written at zone 1's start, read back into the last.
    let (wrote, read) = write_then_read(&rt, Sector(ZONE), mid, last);
    assert_eq!(wrote.as_slice(), &expected[..]);
    assert!(read.as_slice() == &expected[..], "the read into the registered region got other bytes");
    assert_eq!(rt.ring_stats().unwrap().since(before).fixed, 2);
    // The first one, then a read of it into a buffer of its own: one more.
    let (_, read) = write_then_read(&rt, Sector(ZONE + 16), small, AlignedBuf::zeroed(4096));
    assert!(read.as_slice().iter().enumerate().all(|(j, &x)| x == (j / 512) as u8));
    assert_eq!(rt.ring_stats().unwrap().since(before).fixed, 3);
    // A second region: plain transfers, the same bytes.
    let [other] = <[AlignedBuf; 1]>::try_from(rt.buffers(&[4096])).unwrap();
    let (_, read) = write_then_read(&rt, Sector(ZONE + 24), other, AlignedBuf::zeroed(4096));
    assert!(read.as_slice().iter().all(|&x| x == 0));
    let s = rt.ring_stats().unwrap().since(before);
    assert_eq!((s.fixed, s.entries), (3, 6), "{s:?}");
    rt.close().unwrap();
}

/// A runtime on a buffered file (an image in tmpfs, which zblk opens buffered: no
/// direct I/O alignment there) registers no buffers: its transfers copy through the
/// page cache, where a registered buffer's copy is the slower one (docs/real-io.md,
/// run 16). Its buffers move their bytes as plain ones.
#[test]
fn a_buffered_runtime_registers_no_buffers() {
    let test = "a_buffered_runtime_registers_no_buffers";
    let shm = Path::new("/dev/shm");
    let Ok(dir) = tempfile::tempdir_in(shm) else { return skipped(test, "no /dev/shm to make an image in") };
    let p = create(dir.path(), 0);
    let Some(rt) = start(&p, Backend::IoUring) else { return };
    if rt.direct_io() {
        return skipped(test, format_args!("{} takes O_DIRECT here ({})", shm.display(), rt.backend()));
    }
    let mut bufs = rt.buffers(&[4096, 4096]);
    bufs[0].fill(0x5a);
    let [w, r] = <[AlignedBuf; 2]>::try_from(bufs).unwrap();
    let before = rt.ring_stats().expect("a ring");
    let (_, read) = write_then_read(&rt, Sector(ZONE), w, r);
    assert!(read.as_slice().iter().all(|&x| x == 0x5a));
    let s = rt.ring_stats().unwrap().since(before);
    assert_eq!((s.fixed, s.entries), (0, 2), "{s:?}");
    rt.close().unwrap();
}
