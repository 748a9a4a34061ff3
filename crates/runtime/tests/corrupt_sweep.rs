//! The corruption sweep: an image with flushed data, a committed reset and an open
//! zone; every byte of every metadata structure flipped in turn (and the file cut at
//! every 4 KiB boundary), then opened. Every case must either give back the same
//! acknowledged zone state, or be refused (an error, or a read-only open that warns
//! what may be lost): never a panic, never a silent rollback.
//!
//! CI runs a sample (every 5th byte, every 16th boundary); the full sweep:
//! `ZBLK_SWEEP_FULL=1 cargo test --release -p zblk-runtime --test corrupt_sweep -- --nocapture`.

use std::os::unix::fs::FileExt;
use std::path::Path;
use zblk_core::bio::Op;
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::Sector;
use zblk_core::zone::ZoneInfo;
use zblk_dev::file::format::Layout;
use zblk_dev::file::zeroing::ZeroingSetup;
use zblk_dev::file::{CreateOptions, FileImage, ImageOptions};

fn params() -> GeometryParams {
    GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        nr_conv: 1,
        max_open: 4,
        max_active: 6,
        max_append_sectors: 0,
        ..GeometryParams::default()
    }
}

fn ro() -> ImageOptions {
    ImageOptions { read_only: true, direct: false, zeroing: ZeroingSetup::NoWriteZeroes, ..ImageOptions::default() }
}

fn build(p: &Path) -> Vec<ZoneInfo> {
    FileImage::create(p, &CreateOptions { geometry: params(), rotational: false, force: false, preallocate: false })
        .unwrap();
    let img = FileImage::open(p, &ImageOptions::default()).unwrap();
    let rt = zblk_runtime::Runtime::start(img, zblk_runtime::RuntimeConfig::default()).unwrap();
    rt.write_at(Sector(2048), &[1u8; 8192]).unwrap();
    rt.write_at(Sector(4096), &[2u8; 4096]).unwrap();
    rt.flush().unwrap();
    rt.zone_op(Op::ZoneReset, Sector(4096)).unwrap();
    rt.write_at(Sector(6144), &[3u8; 4096]).unwrap();
    rt.flush().unwrap();
    rt.close().unwrap();
    FileImage::open(p, &ro()).unwrap().zones()
}

#[derive(Default, Debug)]
struct Counts {
    same: usize,
    repaired_same: usize,
    refused_error: usize,
    refused_warning: usize,
}

fn judge(p: &Path, expect: &[ZoneInfo], what: &str, c: &mut Counts) {
    match FileImage::open(p, &ro()) {
        Err(_) => c.refused_error += 1,
        Ok(img) if img.repairs().first().is_some_and(|r| r.starts_with("WARNING")) => c.refused_warning += 1,
        Ok(img) => {
            assert_eq!(img.zones(), expect, "{what}: silent change of the zone state; repairs: {:?}", img.repairs());
            if img.repairs().is_empty() {
                c.same += 1;
            } else {
                c.repaired_same += 1;
            }
        }
    }
}

#[test]
fn every_metadata_byte_flipped_and_every_cut() {
    let full = std::env::var_os("ZBLK_SWEEP_FULL").is_some();
    let (byte_step, cut_step) = if full { (1, 1) } else { (5, 16) };
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("img");
    let expect = build(&p);
    let layout = Layout::of(&Geometry::new(&params()).unwrap());
    let meta_end = layout.live_offset + layout.table_bytes;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let mut c = Counts::default();
    let mut cases = 0;
    for at in (0..meta_end).step_by(byte_step) {
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0xff], at).unwrap();
        judge(&p, &expect, &format!("byte {at} flipped"), &mut c);
        f.write_all_at(&b, at).unwrap();
        cases += 1;
    }
    let flips = format!("{c:?}");
    let mut t = Counts::default();
    let len = layout.file_bytes;
    let mut cuts = 0;
    for cut in (0..len).step_by(4096 * cut_step) {
        f.set_len(cut).unwrap();
        judge(&p, &expect, &format!("cut at {cut}"), &mut t);
        assert!(t.same + t.repaired_same == 0, "cut at {cut}: a truncated image opened");
        cuts += 1;
    }
    f.set_len(len).unwrap();
    judge(&p, &expect, "whole", &mut Counts::default());
    eprintln!(
        "corruption sweep ({}): {cases} byte flips: {flips}; {cuts} cuts: {t:?}",
        if full { "full" } else { "sample" }
    );
}
