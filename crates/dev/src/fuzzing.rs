//! Entry points of the fuzz targets under `fuzz/` for the image format, as plain
//! functions: the targets call them on libFuzzer's inputs, and a stable test replays
//! the committed corpora through them, so that CI runs every input found worth
//! keeping without a nightly toolchain.
//!
//! [`image_format`] damages the metadata of a small image that holds flushed data, a
//! reset, a full zone and open zones, and drives the whole open path over it: both
//! superblocks, both durable tables and the live table, recovery, repair, then
//! reports, reads, a write, a flush, a close and a second open. Random bytes would
//! almost never get past the checksums, so an input is a list of edits on the valid
//! metadata, and may ask for every checksum to be recomputed after them
//! ([`format::reseal`]): then the damage is read as data, and the checks that come
//! after the checksums (geometry, layout, entries, commit numbers) are what refuse it.

use crate::IoBuf;
use crate::device::Device;
use crate::file::format::{self, Layout};
use crate::file::zeroing::ZeroingSetup;
use crate::file::{CreateOptions, FileImage, ImageErrorKind, ImageOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Mutex;
use zblk_core::bio::{Op, Request};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::{SECTOR_SHIFT, Sector};
use zblk_core::zone::{ZoneCond, ZoneInfo, ZoneType};

/// The boot the template image was written in, and another one (a restart).
const BOOT: [u8; 36] = *b"00000000-0000-0000-0000-00000000fuzz";
const OTHER_BOOT: [u8; 36] = *b"11111111-1111-1111-1111-11111111fuzz";

/// The input's first byte: what to start from and how to open.
const LIVE_TEMPLATE: u8 = 1;
const RESEAL: u8 = 2;
const RESTARTED: u8 = 4;
const ACCEPT_ROLLBACK: u8 = 8;
const TRUNCATE: u8 = 16;

/// The template image and the file the inputs are tried on.
struct Bench {
    dir: PathBuf,
    path: PathBuf,
    layout: Layout,
    nr_zones: u32,
    /// The metadata after a clean close.
    clean: Vec<u8>,
    /// The metadata of the same image while it was open (unflushed writes in the live
    /// table only): what a killed process leaves.
    live: Vec<u8>,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn geometry() -> GeometryParams {
    GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        zone_capacity_bytes: 768 << 10,
        nr_conv: 1,
        max_open: 3,
        max_append_sectors: 0,
        ..GeometryParams::default()
    }
}

fn options(boot: [u8; 36], read_only: bool, accept_rollback: bool) -> ImageOptions {
    ImageOptions {
        read_only,
        direct: false,
        boot_id: Some(boot),
        zeroing: ZeroingSetup::NoWriteZeroes,
        accept_rollback,
        lock_wait: None,
    }
}

fn exec(img: &FileImage, op: Op, sector: u64, data: &[u8]) {
    let nr = (data.len() >> SECTOR_SHIFT) as u32;
    img.execute(
        &Request::direct(op, Sector(sector), nr),
        if data.is_empty() { IoBuf::None } else { IoBuf::Write(data) },
    )
    .unwrap_or_else(|s| panic!("template image: {op:?} at {sector}: {s:?}"));
}

impl Bench {
    /// Makes the template: zone 1 written and flushed, zone 2 written, flushed and
    /// written again (the last write in the live table only), zone 3 full, zone 4
    /// written then reset, zone 5 explicitly open.
    fn new() -> Bench {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("zblk-fuzz-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let path = dir.join("img");
        let geo = Geometry::new(&geometry()).expect("template geometry");
        let layout = Layout::of(&geo);
        // A fixed identity: the template, and so what an input does to it, is the same
        // on every run.
        FileImage::create_with_identity(
            &path,
            &CreateOptions { geometry: geometry(), rotational: false, force: true, preallocate: false },
            crate::file::format::ImageId(*b"zblk fuzz image!"),
        )
        .unwrap_or_else(|e| panic!("template image: {e}"));
        let img = FileImage::open(&path, &options(BOOT, false, false)).unwrap_or_else(|e| panic!("{e}"));
        let zs = geo.zone_sectors();
        exec(&img, Op::Write, zs, &[1; 8192]);
        exec(&img, Op::Write, 2 * zs, &[2; 4096]);
        exec(&img, Op::Write, 3 * zs, &vec![3; (geo.zone_cap_sectors() << SECTOR_SHIFT) as usize]);
        exec(&img, Op::Write, 4 * zs, &[4; 4096]);
        exec(&img, Op::Flush, 0, &[]);
        exec(&img, Op::ZoneReset, 4 * zs, &[]);
        exec(&img, Op::ZoneOpen, 5 * zs, &[]);
        exec(&img, Op::Flush, 0, &[]);
        exec(&img, Op::Write, 2 * zs + 8, &[5; 4096]);
        let meta_len = (layout.live_offset + layout.table_bytes) as usize;
        let read_meta = || {
            let mut m = vec![0u8; meta_len];
            std::fs::File::open(&path).and_then(|f| f.read_exact_at(&mut m, 0)).expect("read template metadata");
            m
        };
        let live = read_meta();
        img.close().unwrap_or_else(|e| panic!("{e}"));
        let clean = read_meta();
        Bench { dir, path, layout, nr_zones: geo.nr_zones(), clean, live }
    }

    fn run(&self, data: &[u8]) {
        let flags = data.first().copied().unwrap_or(0);
        let mut rest = data.get(1..).unwrap_or(&[]);
        let mut meta = if flags & LIVE_TEMPLATE != 0 { self.live.clone() } else { self.clean.clone() };
        let mut len = self.layout.file_bytes;
        if flags & TRUNCATE != 0 && rest.len() >= 2 {
            len = len.min(u64::from(u16::from_le_bytes([rest[0], rest[1]])) * 512);
            rest = &rest[2..];
        }
        for e in rest.chunks_exact(4) {
            let at = usize::from(u16::from_le_bytes([e[0], e[1]])) % meta.len();
            let (val, op) = (e[2], e[3]);
            match op & 3 {
                0 => meta[at] ^= val,
                1 => meta[at] = val,
                // A u64 field set to a power of two or to all ones, where sizes and
                // offsets overflow.
                2 => put_u64(&mut meta, at, if val == 0xff { u64::MAX } else { 1u64 << (val & 63) }),
                _ => put_u64(&mut meta, at, u64::from(val) << (8 * (op >> 5))),
            }
        }
        if flags & RESEAL != 0 {
            format::reseal(&mut meta, &self.layout, self.nr_zones);
        }
        let f = std::fs::OpenOptions::new().write(true).open(&self.path).expect("open the fuzzed image");
        f.set_len(len).expect("set the fuzzed image's length");
        f.write_all_at(&meta[..meta.len().min(len as usize)], 0).expect("write the fuzzed metadata");
        drop(f);
        let boot = if flags & RESTARTED != 0 { OTHER_BOOT } else { BOOT };
        self.drive(boot, flags & ACCEPT_ROLLBACK != 0);
    }

    /// What `zblk check`, `report` and `read` do (read-only), then `check --repair`
    /// or a write (read-write), then `check` again.
    fn drive(&self, boot: [u8; 36], accept: bool) {
        let seen = match FileImage::open(&self.path, &options(boot, true, false)) {
            Ok(img) => Some(look(&img)),
            Err(e) => {
                assert!(!e.to_string().is_empty());
                None
            }
        };
        let img = match FileImage::open(&self.path, &options(boot, false, accept)) {
            Ok(img) => img,
            Err(e) => {
                // Read-only opens refuse nothing that read-write opens take (they
                // describe instead of repairing), except a state they cannot prove.
                // Nor commit numbers run out (tables claiming commits near the
                // limit): read-write needs one more.
                if let Some(zones) = &seen {
                    assert!(
                        matches!(e.kind, ImageErrorKind::MayLoseData(_)) && !accept
                            || e.to_string().contains("commit numbers exhausted"),
                        "read-only open gave {} zones, read-write refused: {e}",
                        zones.len()
                    );
                }
                return;
            }
        };
        let zones = look(&img);
        if img.durable_seq() + 2 > format::MAX_COMMIT {
            // The write's commit and the close's may be refused (an error, as they
            // should be): the promises below need commits.
            return;
        }
        if let Some(ro) = &seen {
            assert_eq!(ro, &zones, "read-only and read-write opens recovered different zones");
        }
        // One write at the first write pointer that takes one, and a flush.
        let lbs = img.geo().lbs_bytes() as usize;
        if let Some(z) = zones
            .iter()
            .find(|z| z.ztype != ZoneType::Conventional && z.wp < z.start + z.capacity && z.cond != ZoneCond::Full)
        {
            let data = vec![0xa5u8; lbs];
            let req = Request::direct(Op::Write, z.wp, (lbs >> SECTOR_SHIFT) as u32);
            let _ = img.execute(&req, IoBuf::Write(&data));
        }
        let _ = img.execute(&Request::direct(Op::Flush, Sector(0), 0), IoBuf::None);
        let after = img.zones();
        img.close().unwrap_or_else(|e| panic!("close after a repairing open: {e}"));
        // What was closed cleanly opens cleanly, with the same zones.
        let img = FileImage::open(&self.path, &options(boot, false, false))
            .unwrap_or_else(|e| panic!("reopen after a clean close: {e}"));
        assert!(img.repairs().is_empty(), "reopen after a clean close repaired: {:?}", img.repairs());
        assert_eq!(img.zones(), after, "reopen after a clean close changed the zones");
        img.close().unwrap_or_else(|e| panic!("close: {e}"));
    }
}

fn put_u64(meta: &mut [u8], at: usize, v: u64) {
    let at = at.min(meta.len() - 8);
    meta[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Reports every zone and reads at each zone's start and write pointer, as `zblk
/// report` and `zblk read` do; checks what a report must hold.
fn look(img: &FileImage) -> Vec<ZoneInfo> {
    let geo = img.geo().clone();
    let zones = img.zones();
    let mut out = Vec::new();
    let report = img.report_zones(Sector(0), usize::MAX, &mut out);
    if geo.is_zoned() {
        assert_eq!(report, Ok(out.len()), "report of a zoned image");
        assert_eq!(out, zones, "report_zones and zones() differ");
        assert_eq!(zones.len(), geo.nr_zones() as usize);
    } else {
        assert_eq!(report, Err(zblk_core::bio::Status::NotSupported), "report of a regular image");
        assert!(zones.is_empty());
    }
    let lbs = geo.lbs_bytes() as usize;
    let mut buf = vec![0u8; lbs];
    for z in &zones {
        assert!(z.wp >= z.start && z.wp.0 <= z.start.0 + z.len, "zone at {}: write pointer {} outside", z.start, z.wp);
        assert_eq!(img.zone_info(z.start).as_ref(), Ok(z));
        let _ = img.read_direct(z.start, &mut buf);
        if z.wp.0 < geo.nr_sectors() {
            let _ = img.read_direct(z.wp, &mut buf);
        }
    }
    if !geo.is_zoned() {
        let _ = img.read_direct(Sector(0), &mut buf);
    }
    zones
}

/// The image format fuzz target's body: `data` edits the metadata of a small valid
/// image (see the module documentation), which is then opened read-only and
/// read-write, reported, read, written, closed and opened again. Panics only on a
/// bug: a panic inside zblk, or a broken promise (a clean close that does not reopen
/// cleanly, a read-only open that recovers other zones than a read-write one).
pub fn image_format(data: &[u8]) {
    // A poisoned lock is recovered: an input that panicked (a bug found) leaves at
    // most a working image half edited, and every input writes the image's
    // metadata again from the templates (`Bench::run`), so the next input is
    // judged on its own.
    let mut b = BENCH.lock().unwrap_or_else(|p| p.into_inner());
    b.get_or_insert_with(Bench::new).run(data);
}

/// Removes the files [`image_format`] works on (made again by its next call).
pub fn image_format_cleanup() {
    // (Recovered as above: the files are only removed.)
    BENCH.lock().unwrap_or_else(|p| p.into_inner()).take();
}

/// The template image and its working copy, made by the first input.
static BENCH: Mutex<Option<Bench>> = Mutex::new(None);
