//! The image device's own tests: requests through a freshly created image, the
//! closed image, the lock, resets and finishes, and the races of appends whose
//! writes fail (roll backs, doomed writes, the active limit).

use super::*;
use crate::IoBuf;
use crate::device::{Device, Plan, Transfer};
use crate::error::DeviceErrorKind;
use media::FileMedia;
use std::io;
use zblk_core::bio::{Op, Request, Status};
use zblk_core::geometry::GeometryParams;
use zblk_core::zone::ZoneCond;

pub(super) fn params() -> GeometryParams {
    GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        zone_capacity_bytes: 768 << 10,
        nr_conv: 1,
        max_open: 2,
        max_append_sectors: 0,
        ..GeometryParams::default()
    }
}

fn req(op: Op, sector: u64, nr_sectors: u32) -> Request {
    Request::direct(op, Sector(sector), nr_sectors)
}

fn image(dir: &Path) -> PathBuf {
    image_with(dir, params())
}

fn image_with(dir: &Path, geometry: GeometryParams) -> PathBuf {
    let p = dir.join("img");
    FileImage::create(&p, &CreateOptions { geometry, rotational: false, force: false, preallocate: false }).unwrap();
    p
}

/// A new image with `geometry` in `dir`, open.
fn open_new(dir: &Path, geometry: GeometryParams) -> FileImage {
    FileImage::open(&image_with(dir, geometry), &ImageOptions::default()).unwrap()
}

#[test]
fn create_open_write_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    assert!(img.repairs().is_empty(), "{:?}", img.repairs());
    let data = vec![0x5a; 4096];
    assert_eq!(img.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&data)), Ok(Sector(2048)));
    assert_eq!(img.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&data)), Err(Status::Unaligned));
    img.close().unwrap();
    let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    assert!(img.repairs().is_empty(), "{:?}", img.repairs());
    let z = img.zone_info(Sector(2048)).unwrap();
    assert_eq!((z.cond, z.wp), (ZoneCond::ImpOpen, Sector(2056)));
    let mut out = vec![0u8; 8192];
    img.execute(&req(Op::Read, 2048, 16), IoBuf::Read(&mut out)).unwrap();
    assert!(out[..4096].iter().all(|&b| b == 0x5a));
    assert!(out[4096..].iter().all(|&b| b == 0));
}

#[test]
fn a_closed_image_refuses_requests() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    img.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&[1; 4096])).unwrap();
    Device::close(&img).unwrap();
    // A write now would land after the live table was marked clean.
    assert_eq!(img.execute(&req(Op::Write, 2056, 8), IoBuf::Write(&[1; 4096])), Err(Status::IoErr));
    assert_eq!(img.zone_info(Sector(2048)).unwrap().wp, Sector(2056), "reports still answer");
    drop(img);
    let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    assert!(img.repairs().is_empty(), "{:?}", img.repairs());
    assert_eq!(img.zone_info(Sector(2048)).unwrap().wp, Sector(2056));
}

#[test]
fn second_open_is_refused_while_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let _img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    let e = FileImage::open(&p, &ImageOptions::default()).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::Device(DeviceErrorKind::InUse(_))), "{e}");
    let e = FileImage::open(&p, &ImageOptions { read_only: true, ..ImageOptions::default() }).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::Device(DeviceErrorKind::InUse(_))), "{e}");
}

#[test]
fn reset_hides_data_and_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    let data = vec![1u8; 4096];
    img.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&data)).unwrap();
    img.execute(&req(Op::Flush, 0, 0), IoBuf::None).unwrap();
    let seq = img.durable_seq();
    img.execute(&req(Op::ZoneReset, 2048, 0), IoBuf::None).unwrap();
    assert_eq!(img.durable_seq(), seq + 1);
    let mut out = vec![9u8; 4096];
    img.read_direct(Sector(2048), &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0), "past the write pointer reads zeroes");
    // A finish exposes the zone to reads: what was there before is gone.
    img.execute(&req(Op::ZoneFinish, 2048, 0), IoBuf::None).unwrap();
    img.read_direct(Sector(2048), &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0), "finish punched the stale data");
}

fn transfer(img: &FileImage, r: &Request) -> Result<Transfer, Status> {
    match Device::prepare(img, r)? {
        Plan::Transfer(t) => Ok(t),
        Plan::Blocking => panic!("{r:?} planned as blocking"),
    }
}

/// Appends race: after a failed one takes the write pointer back, a later one
/// accepted above it (doomed) is still moving data, and it punches its range when
/// it completes. A new write into that range fails until then, instead of being
/// acknowledged and zeroed behind its back.
#[test]
fn a_doomed_write_in_flight_fences_its_range() {
    let dir = tempfile::tempdir().unwrap();
    let img = open_new(dir.path(), GeometryParams { max_append_sectors: 64, ..params() });
    let append = req(Op::ZoneAppend, 2048, 8);
    let a = transfer(&img, &append).unwrap();
    let b = transfer(&img, &append).unwrap();
    assert_eq!((a.at, b.at), (Sector(2048), Sector(2056)));
    assert_eq!(Device::finish(&img, &append, a, Err(io::Error::from_raw_os_error(5))), Err(Status::IoErr));
    assert_eq!(img.zone_info(Sector(2048)).unwrap().wp, Sector(2048), "the failed append took the wp back");
    // Below the doomed append: accepted, and its data stays.
    let c_data = vec![0xc3; 4096];
    let c = transfer(&img, &append).unwrap();
    assert_eq!(c.at, Sector(2048));
    assert_eq!(Device::perform(&img, &append, Plan::Transfer(c), IoBuf::Write(&c_data)), Ok(Sector(2048)));
    // Into the doomed append's range, while it is in flight: refused, append or write.
    assert_eq!(transfer(&img, &append).map(|t| t.at), Err(Status::IoErr));
    assert_eq!(transfer(&img, &req(Op::Write, 2056, 8)).map(|t| t.at), Err(Status::IoErr));
    // A write elsewhere than the write pointer is still unaligned, not fenced.
    assert_eq!(transfer(&img, &req(Op::Write, 2060, 8)).map(|t| t.at), Err(Status::Unaligned));
    assert_eq!(img.zone_info(Sector(2048)).unwrap().wp, Sector(2056));
    // The doomed append moved its data, then completes: it fails and punches.
    let late = vec![0xbb; 4096];
    assert_eq!(Device::perform(&img, &append, Plan::Transfer(b), IoBuf::Write(&late)), Err(Status::IoErr));
    let d_data = vec![0xd4; 4096];
    let d = transfer(&img, &append).unwrap();
    assert_eq!(d.at, Sector(2056));
    assert_eq!(Device::perform(&img, &append, Plan::Transfer(d), IoBuf::Write(&d_data)), Ok(Sector(2056)));
    let mut out = vec![0u8; 8192];
    img.read_direct(Sector(2048), &mut out).unwrap();
    assert!(out[..4096] == c_data[..] && out[4096..] == d_data[..], "acknowledged appends read back");
}

/// Media that, once armed, says when a punch begins and holds it a while: the
/// window in which a new write could slip under a rolled-back write pointer.
#[derive(Debug)]
struct SlowPunch {
    inner: FileMedia,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    started: Mutex<Option<std::sync::mpsc::Sender<()>>>,
}

impl Media for SlowPunch {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        if self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            if let Some(tx) = self.started.lock().unwrap().take() {
                tx.send(()).unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        self.inner.punch_hole(offset, len)
    }
    fn zero_range(&self, how: FileZeroing, offset: u64, len: u64) -> io::Result<()> {
        self.inner.zero_range(how, offset, len)
    }
}

/// A failed append's range is punched before its roll back can be seen: an
/// append accepted meanwhile at the rolled-back write pointer would be zeroed
/// after its acknowledgement.
#[test]
fn an_append_after_a_roll_back_is_not_punched_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = image_with(dir.path(), GeometryParams { max_append_sectors: 64, ..params() });
    let (tx, rx) = std::sync::mpsc::channel();
    let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let img = FileImage::open_with(&p, &ImageOptions::default(), |m| {
        Box::new(SlowPunch { inner: m, armed: armed.clone(), started: Mutex::new(Some(tx)) })
    })
    .unwrap();
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    let append = req(Op::ZoneAppend, 2048, 8);
    let a = transfer(&img, &append).unwrap();
    std::thread::scope(|sc| {
        let failing = sc.spawn(|| Device::finish(&img, &append, a, Err(io::Error::from_raw_os_error(5))));
        rx.recv().unwrap();
        // The failed append is being punched: this one waits for the roll back.
        let b = transfer(&img, &append).unwrap();
        assert_eq!(b.at, Sector(2048));
        let data = vec![0xb7; 4096];
        assert_eq!(Device::perform(&img, &append, Plan::Transfer(b), IoBuf::Write(&data)), Ok(Sector(2048)));
        assert_eq!(failing.join().unwrap(), Err(Status::IoErr));
        let mut out = vec![0u8; 4096];
        img.read_direct(Sector(2048), &mut out).unwrap();
        assert!(out == data, "the acknowledged append reads back");
    });
}

/// Data never goes both through the page cache and directly: a direct
/// descriptor, if any, is the only one a driver gets.
#[test]
fn data_moves_through_one_descriptor_kind() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    let fds = img.data_fds();
    match fds.direct {
        Some((_, align)) => {
            assert!(fds.buffered.is_none(), "a page cache descriptor beside the direct one");
            assert!(align <= u64::from(img.geo().lbs_bytes()), "direct alignment {align} above a block");
        }
        None => assert!(fds.buffered.is_some(), "no descriptor at all"),
    }
    // An unaligned buffer, written and read through `perform`: bounced, intact.
    let data: Vec<u8> = (0..4097u32).map(|i| i as u8).collect();
    let w = req(Op::Write, 2048, 8);
    let t = transfer(&img, &w).unwrap();
    assert_eq!(Device::perform(&img, &w, Plan::Transfer(t), IoBuf::Write(&data[1..])), Ok(Sector(2048)));
    let mut back = vec![0u8; 4097];
    let r = req(Op::Read, 2048, 8);
    let t = transfer(&img, &r).unwrap();
    assert_eq!(Device::perform(&img, &r, Plan::Transfer(t), IoBuf::Read(&mut back[1..])), Ok(Sector(2048)));
    assert!(back[1..] == data[1..]);
}

/// Appends race: A below, B acknowledged above it, C in flight above B. A fails:
/// the write pointer goes back to B's end, where C starts, so C fails too; it was
/// left to complete once, and an append after it landed on its acknowledged range.
#[test]
fn a_write_starting_where_a_roll_back_ends_is_doomed() {
    let dir = tempfile::tempdir().unwrap();
    let img = open_new(dir.path(), GeometryParams { max_append_sectors: 64, ..params() });
    let append = req(Op::ZoneAppend, 2048, 8);
    let [a, b, c] = [(); 3].map(|()| transfer(&img, &append).unwrap());
    assert_eq!([a.at, b.at, c.at], [Sector(2048), Sector(2056), Sector(2064)]);
    let b_data = vec![0xb2; 4096];
    assert_eq!(Device::perform(&img, &append, Plan::Transfer(b), IoBuf::Write(&b_data)), Ok(Sector(2056)));
    assert_eq!(Device::finish(&img, &append, a, Err(io::Error::from_raw_os_error(5))), Err(Status::IoErr));
    assert_eq!(img.zone_info(Sector(2048)).unwrap().wp, Sector(2064), "back to B's end, not under it");
    assert_eq!(Device::perform(&img, &append, Plan::Transfer(c), IoBuf::Write(&[0xcc; 4096])), Err(Status::IoErr));
    let d_data = vec![0xd4; 4096];
    let d = transfer(&img, &append).unwrap();
    assert_eq!(Device::perform(&img, &append, Plan::Transfer(d), IoBuf::Write(&d_data)), Ok(Sector(2064)));
    let mut out = vec![0xffu8; 3 * 4096];
    img.read_direct(Sector(2048), &mut out).unwrap();
    assert!(out[..4096].iter().all(|&x| x == 0), "the failed append reads as zeroes");
    assert!(out[4096..8192] == b_data[..] && out[8192..] == d_data[..], "acknowledged appends read back");
}

/// A write that filled its zone fails after another zone took the freed active
/// slot: the zone cannot go back to CLOSED without exceeding the active limit, so
/// it stays FULL (finished by the device), its unwritten rest zeroes; the limits
/// hold for the next writes.
#[test]
fn a_failed_write_that_filled_its_zone_never_exceeds_the_active_limit() {
    let dir = tempfile::tempdir().unwrap();
    let img = open_new(dir.path(), GeometryParams { max_active: 2, ..params() });
    let one = vec![0x11u8; 4096];
    assert_eq!(img.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&one)), Ok(Sector(2048)));
    // The rest of zone 1 in one write: accepted, the zone is FULL, no longer active.
    let fill = req(Op::Write, 2056, 1528);
    let t = transfer(&img, &fill).unwrap();
    assert_eq!(img.zone_info(Sector(2048)).unwrap().cond, ZoneCond::Full);
    for z in [2u64, 3] {
        assert_eq!(img.execute(&req(Op::Write, z * 2048, 8), IoBuf::Write(&one)), Ok(Sector(z * 2048)));
    }
    assert_eq!(img.open_active(), (2, 2));
    assert_eq!(Device::finish(&img, &fill, t, Err(io::Error::from_raw_os_error(5))), Err(Status::IoErr));
    let z1 = img.zone_info(Sector(2048)).unwrap();
    assert_eq!(z1.cond, ZoneCond::Full, "kept FULL: CLOSED would make 3 zones active");
    assert_eq!(img.open_active(), (2, 2));
    assert_eq!(img.execute(&req(Op::Write, 4 * 2048, 8), IoBuf::Write(&one)), Err(Status::ZoneActiveResource));
    let mut out = vec![0xffu8; 8192];
    img.read_direct(Sector(2048), &mut out).unwrap();
    assert!(out[..4096] == one[..] && out[4096..].iter().all(|&b| b == 0), "acknowledged data, then zeroes");
}

/// A read across a zone boundary reads as zeroes past each zone's write pointer: the
/// first zone reset after a write (its old data still in the file), the next one
/// written, one read over both. Read as one transfer, the next zone's readable
/// sectors counted as a prefix of the whole gave back the first zone's old data.
#[test]
fn a_read_across_zones_reads_zeroes_past_each_write_pointer() {
    let dir = tempfile::tempdir().unwrap();
    let img = open_new(dir.path(), params());
    let old = vec![0x11u8; 16 * 512];
    img.execute(&req(Op::Write, 2048, 16), IoBuf::Write(&old)).unwrap();
    img.execute(&req(Op::ZoneReset, 2048, 0), IoBuf::None).unwrap();
    let new = vec![0x22u8; 16 * 512];
    img.execute(&req(Op::Write, 4096, 16), IoBuf::Write(&new)).unwrap();
    // The last 16 sectors of zone 1's length lie past its capacity; read from the
    // zone's start over its whole length and 16 sectors of zone 2.
    let mut out = vec![9u8; (2048 + 16) * 512];
    img.read_direct(Sector(2048), &mut out).unwrap();
    let (first, second) = out.split_at(2048 * 512);
    assert!(
        first.iter().all(|&b| b == 0),
        "zone 1, reset, reads zeroes (first non-zero byte at {:?})",
        first.iter().position(|&b| b != 0)
    );
    assert!(second.iter().all(|&b| b == 0x22), "zone 2 reads its data");
}

#[test]
fn a_panic_under_the_state_lock_is_never_committed() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    let data = vec![0x5a; 4096];
    assert_eq!(img.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&data)), Ok(Sector(2048)));
    // A thread panics half way through an update: zone 2's completed write pointer
    // moved, nothing written there.
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            let mut st = img.lock_state();
            st.done[2].wp_offset = 64;
            panic!("planted: a panic under the image's state lock");
        });
        assert!(t.join().is_err());
    });
    // Every later use of the state propagates the panic ...
    let later = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| img.zones()));
    let why = later.expect_err("a poisoned state lock must propagate");
    let why = why.downcast_ref::<String>().map_or("", |s| s.as_str());
    assert!(why.contains("zone state lock is poisoned"), "{why}");
    // ... and the drop commits nothing: the image reopens as after a kill, zone 1's
    // write (completed, synced by no commit) recovered, zone 2 as it was committed.
    drop(img);
    let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    assert!(!img.repairs().is_empty(), "reopened as after a clean close");
    assert_eq!(img.zone_info(Sector(4096)).unwrap().wp, Sector(4096), "the half-done change was committed");
    img.close().unwrap();
}
