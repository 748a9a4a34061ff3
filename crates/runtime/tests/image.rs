//! Opening images: every bad file gets an error naming the file and the problem;
//! damaged metadata that can be repaired is, and opening says so.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::Sector;
use zblk_core::zone::ZoneCond;
use zblk_dev::DeviceErrorKind;
use zblk_dev::file::format::Layout;
use zblk_dev::file::{CreateOptions, FileImage, ImageErrorKind, ImageOptions};

mod common;

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
    FileImage::create(&p, &CreateOptions { geometry: params(), rotational: false, force: false, preallocate: false })
        .unwrap();
    p
}

/// Opens `p`, waiting while another test's forked child still holds its lock
/// (`permission_denied` forks; a child holds every descriptor until it execs).
fn open(p: &Path) -> Result<FileImage, zblk_dev::file::ImageError> {
    common::retry_in_use(|| open_once(p))
}

/// Opens `p` once: for the tests of an image in use.
fn open_once(p: &Path) -> Result<FileImage, zblk_dev::file::ImageError> {
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
    assert!(matches!(e.kind, ImageErrorKind::Device(DeviceErrorKind::Missing)), "{e}");
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
    poke(&p, 4096 + 8, &7u32.to_le_bytes());
    let e = open(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::WrongVersion { found: 7, .. }), "{e}");
    assert!(e.to_string().contains("made by a newer zblk"), "{e}");
}

#[test]
fn corrupt_superblock() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    // One copy damaged: the other is used and the damaged one rewritten.
    flip(&p, 20);
    let img = open(&p).unwrap();
    assert!(img.repairs().iter().any(|r| r.contains("first superblock copy")), "{:?}", img.repairs());
    img.close().unwrap();
    let img = open(&p).unwrap();
    assert!(img.repairs().is_empty(), "{:?}", img.repairs());
    img.close().unwrap();
    // Both damaged: refused.
    flip(&p, 20);
    flip(&p, 4096 + 20);
    let e = open(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::Corrupt(_)), "{e}");
    assert!(e.to_string().contains("both superblock copies"), "{e}");
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
    // The clean close left the live table equal to the last commit: it is used.
    let img = open(&p).unwrap();
    assert_eq!(img.zones()[1].wp, Sector(2048 + 8));
    assert!(img.repairs().iter().any(|r| r.contains("live table")), "{:?}", img.repairs());
    drop(img);
    // Both tables and the live header damaged: nothing proves a state.
    let img = open(&p).unwrap();
    img.close().unwrap();
    flip(&p, l.table_offset[0] + 70);
    flip(&p, l.table_offset[1] + 70);
    flip(&p, l.live_offset + 9);
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
    let img = FileImage::open(&p, &ImageOptions { read_only: true, ..ImageOptions::default() }).unwrap();
    let mut entries: Vec<Entry> = img.zones().iter().map(Entry::of).collect();
    let id = img.identity();
    drop(img);
    entries[3] = Entry { cond: ZoneCond::Empty, wp_offset: 8 };
    for slot in 0..2 {
        let t = Table { seq: 10 + slot as u64, entries: entries.clone() };
        poke(&p, layout().table_offset[slot], &t.encode(layout().table_bytes, id));
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
    let e = open_once(&p).unwrap_err();
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
    let e = open_once(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::Device(DeviceErrorKind::InUse(_))), "{e}");
}

/// File permissions do not bind root, which the suite runs as: as root, the test runs
/// again as uid 65534 (a copy of this binary in a directory that user can read), and
/// passes only if that run ran the check and passed.
#[test]
fn permission_denied() {
    if rustix::process::geteuid().is_root() {
        use std::os::unix::fs::PermissionsExt;
        use std::os::unix::process::CommandExt;
        const NOBODY: u32 = 65534;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let exe = dir.path().join("image-test");
        std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
        let out = std::process::Command::new(&exe)
            .args(["permission_denied", "--exact", "--nocapture", "--test-threads=1"])
            .env("TMPDIR", "/tmp")
            .uid(NOBODY)
            .gid(NOBODY)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("1 passed"), "as uid {NOBODY}:\n{text}");
        assert!(text.contains("permission denied checked"), "the run as uid {NOBODY} did not check:\n{text}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o400)).unwrap();
    let e = open(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::Device(DeviceErrorKind::PermissionDenied)), "{e}");
    let _ = writeln!(std::io::stderr(), "permission denied checked");
}

#[test]
fn create_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    let e = FileImage::create(
        &p,
        &CreateOptions { geometry: params(), rotational: false, force: false, preallocate: false },
    )
    .unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::Exists), "{e}");
    let bad = GeometryParams { zone_size_bytes: 3 << 20, ..params() };
    let e = FileImage::create(
        &dir.path().join("bad"),
        &CreateOptions { geometry: bad, rotational: false, force: false, preallocate: false },
    )
    .unwrap_err();
    assert!(e.to_string().contains("zone_size"), "{e}");
}

fn ro() -> ImageOptions {
    ImageOptions { read_only: true, ..ImageOptions::default() }
}

/// The newest durable table damaged after a flush: the clean live table still holds
/// the state; with the live table untrusted too, open refuses to write and names the
/// zone at risk, instead of rolling back to the older table.
#[test]
fn damaged_newest_table_never_rolls_back_silently() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    with_state(&p);
    let l = layout();
    let seq = open(&p).map(|i| i.durable_seq()).unwrap();
    // After that open and close, the newest table is in slot (seq parity).
    let newest = {
        let img = open(&p).unwrap();
        let s = img.durable_seq();
        img.close().unwrap();
        assert_eq!(s, seq);
        if s % 2 == 1 { 0 } else { 1 }
    };
    for sect in [0u64, 1] {
        flip(&p, l.table_offset[newest] + sect * 512 + 16);
        let img = open(&p).unwrap();
        assert_eq!(img.zones()[1].wp, Sector(2048 + 8), "sector {sect}: {:?}", img.repairs());
        img.close().unwrap();
    }
    // Now the live header too (not clean, not trusted): refused.
    let img = open(&p).unwrap();
    let newest = if img.durable_seq() % 2 == 1 { 0 } else { 1 };
    img.close().unwrap();
    flip(&p, l.table_offset[newest] + 512 + 8);
    flip(&p, l.live_offset + 53);
    let e = open(&p).unwrap_err();
    assert!(matches!(e.kind, ImageErrorKind::MayLoseData(_)) || matches!(e.kind, ImageErrorKind::Corrupt(_)), "{e}");
    let img = open(&p);
    assert!(img.is_err());
}

/// A reset committed, then its table damaged, with the live table not trusted (its
/// header damaged too): refused, naming the commit, rather than undoing the reset.
#[test]
fn damaged_table_after_reset_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    with_state(&p);
    let img = open(&p).unwrap();
    let rt = zblk_runtime::Runtime::start(img, zblk_runtime::RuntimeConfig::default()).unwrap();
    rt.zone_op(zblk_core::bio::Op::ZoneReset, Sector(2048)).unwrap();
    rt.close().unwrap();
    let img = open_with(&ro(), &p);
    let seq = img.durable_seq();
    drop(img);
    let l = layout();
    let slot = if seq % 2 == 1 { 0 } else { 1 };
    flip(&p, l.table_offset[slot] + 512 + 8);
    flip(&p, l.live_offset + 9); // the live header no longer checks out
    let other_boot =
        ImageOptions { boot_id: Some(*b"00000000-0000-4000-8000-00000000beef"), ..ImageOptions::default() };
    let e = FileImage::open(&p, &other_boot).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e.kind, ImageErrorKind::MayLoseData(_)), "{msg}");
    assert!(msg.contains(&format!("commit {seq} happened")), "{msg}");
    // Read-only still opens, saying the same.
    let img = FileImage::open(&p, &ImageOptions { read_only: true, ..other_boot.clone() }).unwrap();
    assert!(img.repairs()[0].starts_with("WARNING"), "{:?}", img.repairs());
    drop(img);
    // Accepting the loss opens it.
    let img = FileImage::open(&p, &ImageOptions { accept_rollback: true, ..other_boot }).unwrap();
    assert!(img.repairs()[0].contains("accepted"), "{:?}", img.repairs());
}

fn open_with(opts: &ImageOptions, p: &Path) -> FileImage {
    FileImage::open(p, opts).unwrap()
}

/// A forged live entry (a write pointer on a zone never written, no valid check
/// bits) is not trusted.
#[test]
fn forged_live_entry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = create(dir.path());
    let img = open(&p).unwrap();
    drop(img);
    let l = layout();
    // Zone 2: condition CLOSED, write pointer 0x100, no check bits.
    let word: u64 = (u64::from(ZoneCond::Closed.code()) << 56) | 0x100;
    poke(&p, l.live_offset + 64 + 2 * 8, &word.to_le_bytes());
    let img = open(&p).unwrap();
    assert_eq!(img.zones()[2].wp, Sector(2 * 2048), "{:?}", img.repairs());
}

/// Impossible states in a checksum-valid table are named: FULL below capacity, a
/// write pointer off a logical block, more open zones than the limit.
#[test]
fn impossible_states_are_named() {
    use zblk_dev::file::format::{Entry, Table};
    for (case, lbs, max_open, expect) in [
        ("full below capacity", 512u32, 0u32, "FULL with write pointer"),
        ("wp off a block", 4096, 0, "not on a 4096-byte logical block"),
        ("too many open", 512, 1, "more than the limit max_open=1"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        let params = GeometryParams { lbs_bytes: lbs, max_open, ..params() };
        FileImage::create(
            &p,
            &CreateOptions { geometry: params.clone(), rotational: false, force: false, preallocate: false },
        )
        .unwrap();
        let g = Geometry::new(&params).unwrap();
        let l = Layout::of(&g);
        let img = open_with(&ro(), &p);
        let mut entries: Vec<Entry> = img.zones().iter().map(Entry::of).collect();
        let id = img.identity();
        drop(img);
        match case {
            "full below capacity" => entries[3] = Entry { cond: ZoneCond::Full, wp_offset: 8 },
            "wp off a block" => entries[3] = Entry { cond: ZoneCond::ImpOpen, wp_offset: 1 },
            _ => {
                entries[3] = Entry { cond: ZoneCond::ImpOpen, wp_offset: 8 };
                entries[4] = Entry { cond: ZoneCond::ImpOpen, wp_offset: 8 };
            }
        }
        for slot in 0..2 {
            let t = Table { seq: 10 + slot as u64, entries: entries.clone() };
            poke(&p, l.table_offset[slot], &t.encode(l.table_bytes, id));
        }
        let e = open(&p).unwrap_err().to_string();
        assert!(e.contains(expect), "{case}: {e}");
    }
}
