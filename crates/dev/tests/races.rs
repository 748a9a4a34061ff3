//! Races on an image's path: two creates of one path, a `create -f` replacing an
//! image another open waits for, an image moved away (or a symbolic link pointed
//! elsewhere) while an open waits for its lock. Each test drives the interleaving
//! it is about and checks that it happened: a create is seen half-way by its
//! temporary file, an open seen waiting for a lock in `/proc/locks`. A round in
//! which the machine ran the steps in another order is run again.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use zblk_core::bio::{Op, Request};
use zblk_core::geometry::GeometryParams;
use zblk_core::units::Sector;
use zblk_dev::file::{CreateOptions, FileImage, ImageError, ImageErrorKind, ImageOptions};
use zblk_dev::{Device, IoBuf};

/// Rounds tried before a test gives up on seeing its interleaving.
const ROUNDS: u32 = 8;

fn small() -> GeometryParams {
    GeometryParams { capacity_bytes: 8 << 20, zone_size_bytes: 1 << 20, nr_conv: 1, ..GeometryParams::default() }
}

/// A geometry whose image takes a while to make (a million zones: three 8 MiB
/// tables written and synced), the window the races need.
fn slow() -> GeometryParams {
    GeometryParams { capacity_bytes: 4 << 30, zone_size_bytes: 4 << 10, ..GeometryParams::default() }
}

fn create(p: &Path, geometry: GeometryParams, force: bool) -> Result<(), ImageError> {
    FileImage::create_waiting(
        p,
        &CreateOptions { geometry, rotational: false, force, preallocate: false },
        Some(Duration::MAX),
    )
}

fn opts() -> ImageOptions {
    ImageOptions { lock_wait: Some(Duration::MAX), ..ImageOptions::default() }
}

/// Waits until `cond` holds (true) or 10 s pass (false).
fn until(mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

/// The temporary file of a create of `name` in `dir`, if one is being made.
fn temp_of(dir: &Path, name: &str) -> Option<PathBuf> {
    let prefix = format!(".{name}.zblk-new-");
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix)))
}

/// Whether this process has a file open in `dir` that has no name yet: a new image
/// made with `O_TMPFILE` (its descriptor's link reads `DIR/#INODE (deleted)`).
fn unnamed_file_in(dir: &Path) -> bool {
    let prefix = format!("{}/#", dir.display());
    std::fs::read_dir("/proc/self/fd").into_iter().flatten().flatten().any(|e| {
        std::fs::read_link(e.path())
            .is_ok_and(|l| l.to_str().is_some_and(|l| l.starts_with(&prefix) && l.ends_with(" (deleted)")))
    })
}

/// Starts a create of a [`slow`] image at `p` and waits until it is making its image
/// (its new file is open, unnamed or under its temporary name): it has looked at
/// the path, and with `force` holds the lock of the image it replaces.
fn slow_create_halfway(p: &Path, force: bool) -> std::thread::JoinHandle<Result<(), ImageError>> {
    let handle = std::thread::spawn({
        let p = p.to_path_buf();
        move || create(&p, slow(), force)
    });
    let (dir, name) = (p.parent().unwrap(), p.file_name().unwrap().to_str().unwrap());
    assert!(
        until(|| unnamed_file_in(dir) || temp_of(dir, name).is_some()),
        "the create never started making its image"
    );
    handle
}

/// Whether some process waits for a `flock` on inode `ino` (a `->` line of
/// `/proc/locks`, whose file field is `MAJOR:MINOR:INODE`).
fn lock_waited_for(ino: u64) -> bool {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    locks.lines().any(|l| l.contains("->") && l.split_whitespace().any(|f| f.ends_with(&format!(":{ino}"))))
}

fn write_flush(img: &FileImage, sector: u64, byte: u8) {
    let data = vec![byte; 4096];
    img.execute(&Request::direct(Op::Write, Sector(sector), 8), IoBuf::Write(&data)).unwrap();
    img.execute(&Request::direct(Op::Flush, Sector(0), 0), IoBuf::None).unwrap();
}

/// An image created at a path while another create of it was making its image is
/// kept: the second create fails with "file exists" instead of replacing it.
#[test]
fn create_versus_create() {
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        let slow_create = slow_create_halfway(&p, false);
        // The slow create has looked at the path (nothing there) and is making its
        // image: another create takes the path, and a write is flushed to it.
        let mine = create(&p, small(), false);
        // Made, so the slow create had not put its image at the path yet.
        let raced = mine.is_ok();
        if raced {
            let img = FileImage::open(&p, &opts()).unwrap();
            write_flush(&img, 2048, 0x5a);
            img.close().unwrap();
        }
        let theirs = slow_create.join().unwrap();
        if !raced {
            eprintln!("round {round}: the slow create finished first; again");
            continue;
        }
        let e = theirs.expect_err("the slow create replaced an image made meanwhile");
        assert!(matches!(e.kind, ImageErrorKind::Exists), "{e}");
        let img = FileImage::open(&p, &opts()).unwrap();
        assert_eq!(img.geo().nr_zones(), 8, "the image at the path is not the one made first");
        let mut out = vec![0u8; 4096];
        img.read_direct(Sector(2048), &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0x5a), "the flushed write is gone");
        assert!(temp_of(dir.path(), "img").is_none(), "a temporary file was left");
        return;
    }
    panic!("in {ROUNDS} rounds the second create never came while the first was making its image");
}

/// An open waiting for an image's lock while `create -f` replaces the image opens
/// the new image, not the old file the path no longer names.
#[test]
fn create_versus_open() {
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        create(&p, small(), false).unwrap();
        let old_ino = std::fs::metadata(&p).unwrap().ino();
        // The create holds the old image's lock once its temporary file appears.
        let replace = slow_create_halfway(&p, true);
        let opener = std::thread::spawn({
            let p = p.clone();
            move || FileImage::open(&p, &opts())
        });
        // Seen waiting for the old file's lock: it had opened the old file.
        let mut waited = false;
        until(|| {
            waited = lock_waited_for(old_ino);
            waited || opener.is_finished()
        });
        replace.join().unwrap().unwrap();
        let img = opener.join().unwrap().unwrap();
        if !waited {
            eprintln!("round {round}: the open did not wait for the create -f; again");
            continue;
        }
        assert_eq!(img.geo().nr_zones(), 1 << 20, "the open took the replaced image");
        write_flush(&img, 0, 0xc3);
        img.close().unwrap();
        let img = FileImage::open(&p, &opts()).unwrap();
        let mut out = vec![0u8; 4096];
        img.read_direct(Sector(0), &mut out).unwrap();
        assert!(out.iter().all(|&b| b == 0xc3), "the write did not reach the image at the path");
        return;
    }
    panic!("in {ROUNDS} rounds the open never waited for the create -f");
}

/// Holds the image at `held` open while another open of `path` waits for its lock,
/// runs `swap` meanwhile, lets go, and returns what the waiting open opened.
fn open_while_swapped(held: &Path, path: &Path, swap: impl FnOnce()) -> FileImage {
    let holder = FileImage::open(held, &opts()).unwrap();
    let held_ino = std::fs::metadata(held).unwrap().ino();
    let opener = std::thread::spawn({
        let path = path.to_path_buf();
        move || FileImage::open(&path, &opts())
    });
    assert!(until(|| lock_waited_for(held_ino)), "the open never waited for the lock");
    swap();
    drop(holder);
    opener.join().unwrap().unwrap()
}

/// An image moved away (`mv`, the path given to another file) while an open waits
/// for its lock: the open takes the file the path names once it has the lock, and
/// every descriptor it uses is that file's.
#[test]
fn open_versus_rename() {
    let dir = tempfile::tempdir().unwrap();
    let (p, other) = (dir.path().join("img"), dir.path().join("other"));
    create(&p, small(), false).unwrap();
    create(&other, GeometryParams { capacity_bytes: 16 << 20, ..small() }, false).unwrap();
    let img = open_while_swapped(&p, &p, || std::fs::rename(&other, &p).unwrap());
    assert_eq!(img.geo().nr_zones(), 16, "the open took the file moved away");
    write_flush(&img, 2048, 0x77);
    img.close().unwrap();
    let img = FileImage::open(&p, &opts()).unwrap();
    let mut out = vec![0u8; 4096];
    img.read_direct(Sector(2048), &mut out).unwrap();
    assert!(out.iter().all(|&b| b == 0x77), "the write did not reach the image at the path");
}

/// The same with a symbolic link pointed at another image while the open waits.
#[test]
fn open_versus_symlink_swap() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, link) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("link"));
    create(&a, small(), false).unwrap();
    create(&b, GeometryParams { capacity_bytes: 16 << 20, ..small() }, false).unwrap();
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let img = open_while_swapped(&a, &link, || {
        let new_link = dir.path().join("link.new");
        std::os::unix::fs::symlink(&b, &new_link).unwrap();
        std::fs::rename(&new_link, &link).unwrap();
    });
    assert_eq!(img.geo().nr_zones(), 16, "the open took the file the link no longer points to");
}

/// `create -f` replaces only the file it examined and locked: another image put at
/// the path while it made its image (and held open by another process) is not
/// swapped out behind that holder's back; the create waits for its lock instead.
#[test]
fn create_force_versus_rename() {
    for round in 0..ROUNDS {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        create(&p, small(), false).unwrap();
        let other = dir.path().join("other");
        create(&other, GeometryParams { capacity_bytes: 16 << 20, ..small() }, false).unwrap();
        let holder = FileImage::open(&other, &opts()).unwrap();
        let other_ino = std::fs::metadata(&other).unwrap().ino();
        let replace = slow_create_halfway(&p, true);
        // The create -f holds the first image's lock and makes its own; the path
        // is given to another image, in use.
        std::fs::rename(&other, &p).unwrap();
        if replace.is_finished() {
            eprintln!("round {round}: the create -f finished first; again");
            drop(holder);
            let _ = replace.join();
            continue;
        }
        assert!(until(|| lock_waited_for(other_ino)), "the create -f did not wait for the image in use");
        assert_eq!(std::fs::metadata(&p).unwrap().ino(), other_ino, "an image in use was replaced");
        drop(holder);
        replace.join().unwrap().unwrap();
        let img = FileImage::open(&p, &opts()).unwrap();
        assert_eq!(img.geo().nr_zones(), 1 << 20, "the create -f did not replace the image once free");
        assert!(temp_of(dir.path(), "img").is_none(), "a temporary file was left");
        return;
    }
    panic!("in {ROUNDS} rounds the path never changed while the create -f made its image");
}
