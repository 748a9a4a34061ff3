//! WRITE_ZEROES on file images: ranges read back as zeroes (edges not on page
//! boundaries, conventional and sequential zones, over stale data a reset left, after
//! reopening) by both paths (fallocate and written zeroes); the probe's order and
//! fallbacks (with media that refuse fallocate); the probe never touches data; the
//! `write_zeroes_unmap_max_bytes` attribute; the zero-buffer fallback of a device
//! without WRITE_ZEROES; the timing functions.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use zblk_core::bio::Status;
use zblk_core::engine::{AttrError, ZeroingMethod};
use zblk_core::geometry::GeometryParams;
use zblk_core::units::Sector;
use zblk_core::zone::ZoneCond;
use zblk_dev::DeviceZeroing;
use zblk_dev::file::format::Layout;
use zblk_dev::file::media::{FileMedia, Media};
use zblk_dev::file::zeroing::{FileZeroing, IMAGE_WRITE_ZEROES_MAX_BYTES, ZeroingSetup};
use zblk_dev::file::{CreateOptions, FileImage, ImageOptions};
use zblk_runtime::zeroing::{
    ZeroBenchError, ZeroMethodChoice, ZeroingBenchOptions, time_writer_with_background_zeroing, time_zeroing,
};
use zblk_runtime::{Backend, Runtime, RuntimeConfig, ZeroingFlags};

const ZONE: u64 = 2048; // sectors (1 MiB)

/// The image's method, of what the runtime says the device did or would do.
fn file(m: Option<DeviceZeroing>) -> Option<FileZeroing> {
    m.and_then(DeviceZeroing::file)
}

fn params(lbs: u32) -> GeometryParams {
    GeometryParams {
        lbs_bytes: lbs,
        capacity_bytes: 16 << 20,
        zone_size_bytes: 1 << 20,
        nr_conv: 1,
        max_append_sectors: 0,
        ..GeometryParams::default()
    }
}

fn create(dir: &Path, lbs: u32) -> PathBuf {
    let p = dir.join("img");
    FileImage::create(&p, &CreateOptions { geometry: params(lbs), rotational: false, force: true, preallocate: false })
        .unwrap();
    p
}

/// Media that refuse the fallocate methods listed in `refuse` (EOPNOTSUPP), as a
/// file system without them, and record every zeroing call.
#[derive(Debug)]
struct Refusing {
    inner: FileMedia,
    refuse: Arc<Mutex<Vec<FileZeroing>>>,
    calls: Arc<Mutex<Vec<FileZeroing>>>,
}

impl Media for Refusing {
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
        self.inner.punch_hole(offset, len)
    }
    fn zero_range(&self, how: FileZeroing, offset: u64, len: u64) -> io::Result<()> {
        self.calls.lock().unwrap().push(how);
        if self.refuse.lock().unwrap().contains(&how) {
            return Err(io::Error::from_raw_os_error(95)); // EOPNOTSUPP
        }
        self.inner.zero_range(how, offset, len)
    }
}

/// Handles on a [`Refusing`] media after the image took it.
#[derive(Clone, Default)]
struct Control {
    refuse: Arc<Mutex<Vec<FileZeroing>>>,
    calls: Arc<Mutex<Vec<FileZeroing>>>,
}

impl Control {
    fn refuse(&self, methods: &[FileZeroing]) {
        *self.refuse.lock().unwrap() = methods.to_vec();
    }
    fn take_calls(&self) -> Vec<FileZeroing> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

fn open_refusing(p: &Path, refuse: &[FileZeroing], zeroing: ZeroingSetup) -> (FileImage, Control) {
    let c = Control::default();
    c.refuse(refuse);
    let (r, calls) = (c.refuse.clone(), c.calls.clone());
    let opts = ImageOptions { zeroing, ..ImageOptions::default() };
    let img = FileImage::open_with(p, &opts, move |inner| Box::new(Refusing { inner, refuse: r, calls })).unwrap();
    (img, c)
}

fn start(img: FileImage) -> Runtime {
    Runtime::start(img, RuntimeConfig { backend: Backend::Auto, ..RuntimeConfig::default() }).unwrap()
}

fn read(rt: &Runtime, sector: u64, nr: u64) -> Vec<u8> {
    let mut buf = vec![0xeeu8; (nr * 512) as usize];
    rt.read_at(Sector(sector), &mut buf).unwrap();
    buf
}

/// Asserts `buf` (starting at sector `first`) holds `want(sector)` in every sector.
fn expect(buf: &[u8], first: u64, want: impl Fn(u64) -> u8, what: &str) {
    for (i, s) in buf.chunks(512).enumerate() {
        let sector = first + i as u64;
        let w = want(sector);
        if let Some(b) = s.iter().position(|&b| b != w) {
            panic!("{what}: sector {sector} byte {b} holds {:#04x}, expected {w:#04x}", s[b]);
        }
    }
}

/// The content the zeroing test leaves, sector by sector.
fn conv_content(s: u64) -> u8 {
    if (3..1003).contains(&s) { 0 } else { 0x5a }
}

fn seq_content(s: u64) -> u8 {
    match s - ZONE {
        0..5 => 0x11,
        5..616 => 0,
        616..619 => 0x22,
        _ => 0, // past the write pointer
    }
}

fn check_zeroed_ranges(rt: &Runtime, what: &str) {
    expect(&read(rt, 0, ZONE), 0, conv_content, &format!("{what}, conventional zone"));
    expect(&read(rt, ZONE, 619), ZONE, seq_content, &format!("{what}, sequential zone below the write pointer"));
    // Past the write pointer the device answers zeroes whatever the file holds.
    expect(&read(rt, ZONE + 619, ZONE - 619), ZONE + 619, |_| 0, &format!("{what}, past the write pointer"));
}

#[test]
fn zeroed_ranges_read_back_as_zeroes_by_both_paths() {
    for nounmap in [false, true] {
        for backend in [Backend::Auto, Backend::Threads] {
            let dir = tempfile::tempdir().unwrap();
            let p = create(dir.path(), 512);
            let img = Arc::new(FileImage::open(&p, &ImageOptions::default()).unwrap());
            let rt = Runtime::start(img.clone(), RuntimeConfig { backend, ..RuntimeConfig::default() }).unwrap();
            let what = format!("nounmap {nounmap}, {}", rt.backend());
            let flags = ZeroingFlags { nounmap, no_fallback: true };
            // Conventional zone: data, then zeroes over [3, 1003): neither edge on a
            // page (or 4 KiB file system block) boundary.
            rt.write_at(Sector(0), &vec![0x5a; (ZONE * 512) as usize]).unwrap();
            let r = rt.write_zeroes(Sector(3), 1000, flags).unwrap();
            assert_eq!(r.method, rt.zeroing_method(nounmap), "{what}");
            assert_eq!(r.method, if nounmap { ZeroingMethod::WriteZeroes } else { rt.zeroing_method(false) });
            assert_eq!(file(r.device_method), Some(img.zeroing_for(nounmap)), "{what}");
            assert_eq!(r.bytes, 1000 * 512);
            // Sequential zone: data written and reset (its blocks stay in the file,
            // stale), then 5 sectors, zeroes at the write pointer, 3 more sectors.
            rt.write_at(Sector(ZONE), &vec![0x77; 700 * 512]).unwrap();
            rt.zone_op(zblk_core::Op::ZoneReset, Sector(ZONE)).unwrap();
            rt.write_at(Sector(ZONE), &[0x11; 5 * 512]).unwrap();
            let e = rt.write_zeroes(Sector(ZONE + 8), 8, flags).unwrap_err();
            assert_eq!(e, Status::Unaligned, "{what}: zeroes not at the write pointer are refused");
            rt.write_zeroes(Sector(ZONE + 5), 611, flags).unwrap();
            let z = rt.report_zone(Sector(ZONE)).unwrap();
            assert_eq!((z.cond, z.wp), (ZoneCond::ImpOpen, Sector(ZONE + 616)), "{what}: moves the write pointer");
            rt.write_at(Sector(ZONE + 616), &[0x22; 3 * 512]).unwrap();
            check_zeroed_ranges(&rt, &what);
            rt.close().unwrap();
            drop(img);
            let rt = start(FileImage::open(&p, &ImageOptions::default()).unwrap());
            check_zeroed_ranges(&rt, &format!("{what}, after reopening"));
            rt.close().unwrap();
        }
    }
}

#[test]
fn ranges_off_the_logical_block_size_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path(), 4096);
    let rt = start(FileImage::open(&p, &ImageOptions::default()).unwrap());
    let flags = ZeroingFlags::default();
    assert_eq!(rt.write_zeroes(Sector(1), 8, flags).unwrap_err(), Status::Invalid, "start off a 4 KiB block");
    assert_eq!(rt.write_zeroes(Sector(8), 7, flags).unwrap_err(), Status::Invalid, "length off a 4 KiB block");
    assert_eq!(rt.write_zeroes(Sector(8), 0, flags).unwrap_err(), Status::Invalid, "empty");
    assert_eq!(rt.write_zeroes(Sector(16 * ZONE - 8), 16, flags).unwrap_err(), Status::Invalid, "past the end");
    rt.write_zeroes(Sector(8), 8, flags).unwrap();
    rt.close().unwrap();
}

#[test]
fn limits_follow_the_probe() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path(), 512);
    let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    let geo = img.geo().clone();
    assert_eq!(u64::from(geo.max_write_zeroes_sectors()) * 512, IMAGE_WRITE_ZEROES_MAX_BYTES);
    let unmap = u64::from(geo.max_hw_wzeroes_unmap_sectors()) * 512;
    assert_eq!(unmap, if img.zeroing().is_fallocate() { IMAGE_WRITE_ZEROES_MAX_BYTES } else { 0 });
    assert!(img.zeroing_probe().detail.contains("metadata padding"), "{:?}", img.zeroing_probe());
    drop(img);
    // Read-only: probed on a temporary file beside the image, nothing written.
    let img = FileImage::open(&p, &ImageOptions { read_only: true, ..ImageOptions::default() }).unwrap();
    assert!(img.zeroing_probe().detail.contains("temporary file"), "{:?}", img.zeroing_probe());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "nothing left beside the image");
}

#[test]
fn probe_tries_each_method_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path(), 512);
    let (img, c) = open_refusing(&p, &[FileZeroing::FallocWriteZeroes], ZeroingSetup::Probe);
    let calls = c.take_calls();
    assert_eq!(calls[0], FileZeroing::FallocWriteZeroes, "{calls:?}");
    assert_ne!(img.zeroing(), FileZeroing::FallocWriteZeroes);
    let detail = &img.zeroing_probe().detail;
    assert!(detail.contains("fallocate-write-zeroes: not supported (EOPNOTSUPP)"), "{detail}");
    drop(img);

    let both = [FileZeroing::FallocWriteZeroes, FileZeroing::FallocZeroRange];
    let (img, c) = open_refusing(&p, &both, ZeroingSetup::Probe);
    assert_eq!(c.take_calls(), both, "each fallocate method once, best first; pwrite is never probed");
    assert_eq!(img.zeroing(), FileZeroing::PwriteZeroes);
    assert_eq!(img.geo().max_hw_wzeroes_unmap_sectors(), 0, "no fallocate zeroing: the image cannot unmap");
    assert_eq!(u64::from(img.geo().max_write_zeroes_sectors()) * 512, IMAGE_WRITE_ZEROES_MAX_BYTES);
    let rt = start(img);
    assert_eq!(rt.zeroing_method(false), ZeroingMethod::WriteZeroes);
    let e = rt.set_write_zeroes_unmap_max_bytes(IMAGE_WRITE_ZEROES_MAX_BYTES).unwrap_err();
    assert_eq!(
        e.to_string(),
        "write_zeroes_unmap_max_bytes: 1073741824 is above the hardware limit write_zeroes_unmap_max_hw_bytes (0)"
    );
    rt.write_at(Sector(0), &[0x33; 4096]).unwrap();
    let r = rt.write_zeroes(Sector(1), 6, ZeroingFlags::default()).unwrap();
    assert_eq!((r.method, file(r.device_method)), (ZeroingMethod::WriteZeroes, Some(FileZeroing::PwriteZeroes)));
    expect(&read(&rt, 0, 8), 0, |s| if (1..7).contains(&s) { 0 } else { 0x33 }, "written zeroes");
    rt.close().unwrap();
}

#[test]
fn a_method_refused_at_run_time_falls_back_and_is_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path(), 512);
    // Start from the best method whatever this file system does, then refuse both
    // fallocate methods: the first WRITE_ZEROES walks down to written zeroes.
    let (img, c) = open_refusing(&p, &[], ZeroingSetup::Use(FileZeroing::FallocWriteZeroes));
    assert!(c.take_calls().is_empty(), "a chosen method is not probed");
    assert_eq!(img.geo().max_hw_wzeroes_unmap_sectors() as u64 * 512, IMAGE_WRITE_ZEROES_MAX_BYTES);
    let rt = start(img);
    rt.write_at(Sector(0), &[0x44; 8192]).unwrap();
    c.refuse(&[FileZeroing::FallocWriteZeroes, FileZeroing::FallocZeroRange]);
    let r = rt.write_zeroes(Sector(2), 9, ZeroingFlags::default()).unwrap();
    assert_eq!(
        c.take_calls(),
        [FileZeroing::FallocWriteZeroes, FileZeroing::FallocZeroRange, FileZeroing::PwriteZeroes]
    );
    assert_eq!((r.method, file(r.device_method)), (ZeroingMethod::Unmap, Some(FileZeroing::PwriteZeroes)));
    assert_eq!(file(rt.device().zeroing(false)), Some(FileZeroing::PwriteZeroes));
    expect(&read(&rt, 0, 16), 0, |s| if (2..11).contains(&s) { 0 } else { 0x44 }, "after the fallback");
    rt.write_zeroes(Sector(12), 1, ZeroingFlags::default()).unwrap();
    assert_eq!(c.take_calls(), [FileZeroing::PwriteZeroes], "the refusal is remembered");
    rt.close().unwrap();
}

#[test]
fn the_attribute_switches_the_method_and_refuses_values_above_the_hardware() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path(), 512);
    let (img, c) = open_refusing(&p, &[], ZeroingSetup::Use(FileZeroing::FallocZeroRange));
    let rt = start(img);
    let hw = IMAGE_WRITE_ZEROES_MAX_BYTES;
    assert_eq!(rt.write_zeroes_unmap_max_bytes(), hw);
    assert_eq!(rt.zeroing_method(false), ZeroingMethod::Unmap);
    assert_eq!(file(rt.device_zeroing(false)), Some(FileZeroing::FallocZeroRange));
    assert_eq!(file(rt.device_zeroing(true)), Some(FileZeroing::PwriteZeroes));
    let e = rt.set_write_zeroes_unmap_max_bytes(2 * hw).unwrap_err();
    assert_eq!(e, AttrError::AboveHardware { value: 2 * hw, hw });
    assert!(e.to_string().contains("above the hardware limit write_zeroes_unmap_max_hw_bytes (1073741824)"), "{e}");
    assert!(matches!(rt.set_write_zeroes_unmap_max_bytes(4096), Err(AttrError::BadUnmapLimit { .. })));
    assert_eq!(rt.write_zeroes_unmap_max_bytes(), hw, "refused values change nothing");
    // Disabled: the engine marks every WRITE_ZEROES NOUNMAP and the image writes zeroes.
    rt.set_write_zeroes_unmap_max_bytes(0).unwrap();
    assert_eq!(rt.zeroing_method(false), ZeroingMethod::WriteZeroes);
    let r = rt.write_zeroes(Sector(0), 16, ZeroingFlags::default()).unwrap();
    assert_eq!((r.method, file(r.device_method)), (ZeroingMethod::WriteZeroes, Some(FileZeroing::PwriteZeroes)));
    assert_eq!(c.take_calls(), [FileZeroing::PwriteZeroes]);
    rt.set_write_zeroes_unmap_max_bytes(hw).unwrap();
    let r = rt.write_zeroes(Sector(0), 16, ZeroingFlags::default()).unwrap();
    assert_eq!(r.method, ZeroingMethod::Unmap);
    assert_eq!(c.take_calls()[0], FileZeroing::FallocZeroRange);
    rt.close().unwrap();
}

#[test]
fn without_write_zeroes_zero_buffers_are_written_unless_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path(), 512);
    let opts = ImageOptions { zeroing: ZeroingSetup::NoWriteZeroes, ..ImageOptions::default() };
    let img = FileImage::open(&p, &opts).unwrap();
    assert_eq!(img.geo().max_write_zeroes_sectors(), 0);
    let rt = start(img);
    assert_eq!(rt.zeroing_method(false), ZeroingMethod::ZeroBuffers);
    assert_eq!(rt.device_zeroing(false), None);
    rt.write_at(Sector(ZONE), &[0x66; 16 * 512]).unwrap();
    let no_fallback = ZeroingFlags { nounmap: false, no_fallback: true };
    assert_eq!(rt.write_zeroes(Sector(ZONE + 16), 8, no_fallback).unwrap_err(), Status::NotSupported);
    // On a sequential zone, at the write pointer: ordinary writes of zeroes.
    let r = rt.write_zeroes(Sector(ZONE + 16), 2 * ZONE / 3, ZeroingFlags::default()).unwrap();
    assert_eq!((r.method, file(r.device_method)), (ZeroingMethod::ZeroBuffers, None));
    let wp = rt.report_zone(Sector(ZONE)).unwrap().wp;
    assert_eq!(wp, Sector(ZONE + 16 + 2 * ZONE / 3));
    expect(&read(&rt, ZONE, 32), ZONE, |s| if s < ZONE + 16 { 0x66 } else { 0 }, "zero buffers");
    rt.close().unwrap();
}

/// Everything of the file except the live table (which every open rewrites).
fn lasting_bytes(p: &Path) -> Vec<u8> {
    let img = FileImage::open(p, &ImageOptions { read_only: true, ..ImageOptions::default() }).unwrap();
    let layout: Layout = img.superblock().layout;
    drop(img);
    let mut bytes = std::fs::read(p).unwrap();
    bytes[layout.live_offset as usize..(layout.live_offset + layout.table_bytes) as usize].fill(0);
    bytes
}

#[test]
fn probing_never_touches_data() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path(), 512);
    let rt = start(FileImage::open(&p, &ImageOptions::default()).unwrap());
    rt.write_at(Sector(0), &vec![0xc3; (ZONE * 512) as usize]).unwrap();
    for z in 1..16 {
        rt.write_at(Sector(z * ZONE), &vec![z as u8; 64 * 512]).unwrap();
    }
    rt.close().unwrap();
    // The padding between the metadata and the data: where the probe zeroes.
    let img = FileImage::open(&p, &ImageOptions { read_only: true, ..ImageOptions::default() }).unwrap();
    let layout = img.superblock().layout;
    drop(img);
    let pad = layout.live_offset + layout.table_bytes;
    assert!(layout.data_offset > pad, "this geometry leaves padding: {layout:?}");
    // Something there that is not zero, to see the probe at work.
    std::fs::OpenOptions::new().write(true).open(&p).unwrap().write_all_at(&[1; 4096], pad).unwrap();
    let before = lasting_bytes(&p);
    let whole = std::fs::read(&p).unwrap();
    // Read-only: not one byte changes.
    let img = FileImage::open(&p, &ImageOptions { read_only: true, ..ImageOptions::default() }).unwrap();
    drop(img);
    assert!(std::fs::read(&p).unwrap() == whole, "a read-only open changed the file");
    // Read-write: only the padding (and the live table) change.
    let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    let probed_fallocate = img.zeroing().is_fallocate();
    img.close().unwrap();
    let mut after = lasting_bytes(&p);
    let probe = pad as usize..(pad + 4096) as usize;
    if probed_fallocate {
        assert!(after[probe.clone()].iter().all(|&b| b == 0), "the probe zeroed its page");
    }
    after[probe.clone()].copy_from_slice(&before[probe]);
    assert!(after == before, "opening changed bytes outside the padding");
    let rt = start(FileImage::open(&p, &ImageOptions::default()).unwrap());
    expect(&read(&rt, 0, ZONE), 0, |_| 0xc3, "conventional zone");
    for z in 1..16 {
        expect(&read(&rt, z * ZONE, 64), z * ZONE, |_| z as u8, "sequential zone");
    }
    rt.close().unwrap();
}

#[test]
fn timing_functions_zero_and_clean_up() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("timing.img");
    let opts = ZeroingBenchOptions { prefill: true, verify: true, ..ZeroingBenchOptions::default() };
    for choice in [ZeroMethodChoice::Unmap, ZeroMethodChoice::WriteZeroes] {
        match time_zeroing(&p, 8 << 20, choice, &opts) {
            Ok(t) => {
                assert_eq!(t.method.name(), choice.name());
                assert_eq!(t.file_method.is_fallocate(), choice == ZeroMethodChoice::Unmap, "{t:?}");
                assert!(t.seconds > 0.0 && t.seconds >= t.zeroing_seconds, "{t:?}");
                assert!(t.verified && t.prefilled);
                assert_eq!(t.bytes, 8 << 20);
            }
            // Only a file system without fallocate zeroing may refuse unmap.
            Err(ZeroBenchError::Unavailable(why)) if choice == ZeroMethodChoice::Unmap => {
                eprintln!("unmap not available here: {why}");
            }
            Err(e) => panic!("{}: {e}", choice.name()),
        }
        assert!(!p.exists(), "the image is removed");
    }
    for bg in [None, Some(ZeroMethodChoice::WriteZeroes), Some(ZeroMethodChoice::Unmap)] {
        match time_writer_with_background_zeroing(&p, 8 << 20, 8 << 20, bg, &opts) {
            Ok(t) => {
                assert_eq!(t.writer_bytes, 8 << 20);
                assert!(t.writer_mb_s > 0.0, "{t:?}");
                assert_eq!(t.zero_seconds.is_some(), bg.is_some());
                assert_eq!(
                    t.zero_file_method.is_some_and(FileZeroing::is_fallocate),
                    bg == Some(ZeroMethodChoice::Unmap)
                );
            }
            Err(ZeroBenchError::Unavailable(why)) if bg == Some(ZeroMethodChoice::Unmap) => {
                eprintln!("unmap not available here: {why}");
            }
            Err(e) => panic!("{bg:?}: {e}"),
        }
        assert!(!p.exists(), "the image is removed");
    }
    // An existing file is never replaced (nor removed).
    std::fs::write(&p, b"keep me").unwrap();
    let e = time_zeroing(&p, 8 << 20, ZeroMethodChoice::WriteZeroes, &opts).unwrap_err();
    assert!(e.to_string().contains("file exists"), "{e}");
    assert_eq!(std::fs::read(&p).unwrap(), b"keep me");
    let e = time_zeroing(&dir.path().join("x"), 1000, ZeroMethodChoice::Unmap, &opts).unwrap_err();
    assert!(matches!(e, ZeroBenchError::Invalid(_)), "{e}");
}
