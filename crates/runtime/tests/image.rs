//! Opening images: every bad file gets an error naming the file and the problem;
//! damaged metadata that can be repaired is, and opening says so.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::Sector;
use zblk_core::zone::ZoneCond;
use zblk_dev::file::format::Layout;
use zblk_dev::file::{CreateOptions, FileImage, ImageErrorKind, ImageOptions};

fn params() -> GeometryParams {
    GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        nr_conv: 1,
        max_append_sectors: 0,
        ..GeometryParams::default()
    }
}

fn layout() -> Layout {
    Layout::of(&Geometry::new(&params()).unwrap())
}

fn create(dir: &Path) -> PathBuf {
    let p = dir.join("img");
    FileImage::create(&p, &CreateOptions { geometry: params(), rotational: false, force: false }).unwrap();
    p
}

fn open(p: &Path) -> Result<FileImage, zblk_dev::file::ImageError> {
    FileImage::open(p, &ImageOptions::default())
}

fn poke(p: &Path, offset: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

fn flip(p: &Path, offset: u64) {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(p).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, offset).unwrap();
    f.write_all_at(&[b[0] ^ 0x20], offset).unwrap();
}

/// An image with some state: zone 1 written and flushed.
fn with_state(p: &Path) {
    let img = open(p).unwrap();
    img.read_direct(Sector(0), &mut [0u8; 512]).unwrap();
    let rt = zblk_runtime::Runtime::start(img, zblk_runtime::RuntimeConfig::default()).unwrap();
    rt.write_at(Sector(2048), &[7u8; 4096]).unwrap();
    rt.flush().unwrap();
    rt.close().unwrap();
}

#[test]
fn missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(&dir.path().join("nope")).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::Missing), "{e}");
    assert!(e.to_string().contains("nope: no such file"), "{e}");
}

#[test]
fn not_an_image() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("text");
    std::fs::write(&p, "hello, world\n".repeat(1000)).unwrap();
    let e = open(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::NotAnImage(_)), "{e}");
    std::fs::write(&p, "").unwrap();
    let e = open(&p).unwrap_err();
    assert!(e.to_string().contains("empty file"), "{e}");
    let e = open(dir.path()).unwrap_err();
    assert!(e.to_string().contains("directory"), "{e}");
}

#[test]
fn truncated_image() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(layout().file_bytes - 4096).unwrap();
    let e = open(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::Truncated { .. }), "{e}");
    f.set_len(100).unwrap();
    let e = open(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::Truncated { .. }), "{e}");
}

#[test]
fn wrong_version() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    poke(&p, 8, &7u32.to_le_bytes());
    let e = open(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::WrongVersion { found: 7, .. }), "{e}");
}

#[test]
fn corrupt_superblock() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    flip(&p, 20);
    let e = open(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::Corrupt(_)), "{e}");
    assert!(e.to_string().contains("checksum"), "{e}");
}

#[test]
fn one_corrupt_zone_table_is_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    with_state(&p);
    let l = layout();
    for slot in 0..2 {
        flip(&p, l.table_offset[slot] + 64 + 8); // zone 1's entry
        let img = open(&p).unwrap();
        let r = img.repairs().join("; ");
        assert!(r.contains("durable zone table") && r.contains("rewritten"), "slot {slot}: {r}");
        assert_eq!(img.zones()[1].wp, Sector(2048 + 8), "slot {slot}");
        img.close().unwrap();
        let img = open(&p).unwrap();
        assert!(img.repairs().is_empty(), "both copies good again: {:?}", img.repairs());
    }
}

#[test]
fn both_zone_tables_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    with_state(&p);
    let l = layout();
    flip(&p, l.table_offset[0] + 70);
    flip(&p, l.table_offset[1] + 70);
    let e = open(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::Corrupt(_)), "{e}");
    assert!(e.to_string().contains("both durable zone tables"), "{e}");
}

#[test]
fn impossible_zone_state_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    // A checksum-valid table saying EMPTY with a write pointer: rewrite both tables.
    use zblk_dev::file::format::{Entry, Table};
    let g = Geometry::new(&params()).unwrap();
    let mut entries: Vec<Entry> = FileImage::open(&p, &ImageOptions { read_only: true, ..ImageOptions::default() })
        .unwrap()
        .zones()
        .iter()
        .map(Entry::of)
        .collect();
    entries[3] = Entry { cond: ZoneCond::Empty, wp_offset: 8 };
    for slot in 0..2 {
        let t = Table { seq: 10 + slot as u64, entries: entries.clone() };
        poke(&p, layout().table_offset[slot], &t.encode(layout().table_bytes));
    }
    let _ = g;
    let e = open(&p).unwrap_err();
    assert!(e.to_string().contains("impossible zone state"), "{e}");
}

#[test]
fn in_use_by_another_open() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    let _held = open(&p).unwrap();
    let e = open(&p).unwrap_err();
    assert!(e.to_string().ends_with("image in use by another process"), "{e}");
}

#[test]
fn readers_share_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    let ro = ImageOptions { read_only: true, ..ImageOptions::default() };
    let a = FileImage::open(&p, &ro).unwrap();
    let b = FileImage::open(&p, &ro).unwrap();
    assert_eq!(a.zones(), b.zones());
    let e = open(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::InUse), "{e}");
}

#[test]
fn permission_denied() {
    if rustix::process::geteuid().is_root() {
        eprintln!("skipped: running as root, file permissions do not apply");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o400)).unwrap();
    let e = open(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::PermissionDenied), "{e}");
}

#[test]
fn create_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    let e = FileImage::create(&p, &CreateOptions { geometry: params(), rotational: false, force: false }).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::Exists), "{e}");
    let bad = GeometryParams { zone_size_bytes: 3 << 20, ..params() };
    let e =
        FileImage::create(&dir.path().join("bad"), &CreateOptions { geometry: bad, rotational: false, force: false })
            .unwrap_err();
    assert!(e.to_string().contains("zone_size"), "{e}");
}
