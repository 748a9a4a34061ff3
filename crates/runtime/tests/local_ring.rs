//! A thread that owns an io_uring carries the runtime's data transfers on it
//! (`Submitter::on_local_ring`): the transfers of what it submits (and of what its
//! completions unplug) come out as `LocalIo`s, go on the thread's ring, and their
//! completions, given back, complete the BIOs on that thread. Outside, transfers go to
//! the runtime's own ring as before.

mod common;

use io_uring::IoUring;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::mpsc::{Sender, channel};
use std::thread::ThreadId;
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::units::Sector;
use zblk_dev::file::{CreateOptions, FileImage, ImageOptions};
use zblk_runtime::{AlignedBuf, Backend, Buffer, Io, IoDone, LocalIo, Runtime, RuntimeConfig, Submitter};

const ZONE: u64 = 2048; // sectors (1 MiB)

/// A directory on the disk the build is on (not a file system in memory, whose
/// transfers the runtime does on the spot instead of on the ring).
fn disk_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn image(dir: &std::path::Path) -> FileImage {
    let p = dir.join("img");
    let geometry = zblk_core::geometry::GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        nr_conv: 1,
        max_append_sectors: 0,
        ..Default::default()
    };
    FileImage::create(&p, &CreateOptions { geometry, rotational: false, force: false, preallocate: false }).unwrap();
    // Another test of this process forks a child (a mount, this binary again), which
    // holds the created image's locked descriptor until it execs: tried again while
    // the image is in use.
    common::retry_in_use(|| FileImage::open(&p, &ImageOptions::default())).unwrap()
}

fn start(dir: &std::path::Path, backend: Backend) -> Option<Runtime> {
    start_with(image(dir), backend)
}

fn start_with(dev: FileImage, backend: Backend) -> Option<Runtime> {
    if let Err(e) = zblk_runtime::io_uring_available() {
        // The local ring is io_uring itself: without it there is nothing to test.
        // Written past the test harness's capture, so that the suite's summary lists it.
        let _ = writeln!(std::io::stderr(), "SKIPPED local ring: io_uring is not available: {e}");
        return None;
    }
    let engine = EngineConfig { policy: IssuePolicy::Zwp, ..EngineConfig::default() };
    Some(Runtime::start(dev, RuntimeConfig { engine, backend, ..RuntimeConfig::default() }).unwrap())
}

/// Four 4 KiB writes of zone 1 submitted at once (block `i` filled with `i + 1`),
/// each sending its index, completing thread and outcome to `tx`: zone write
/// plugging issues one at a time, each completion unplugging the next.
fn submit_four_writes(sub: &Submitter, tx: &Sender<(u64, ThreadId, IoDone)>) {
    for i in 0..4u64 {
        let tx = tx.clone();
        let data = AlignedBuf::from_slice(&vec![i as u8 + 1; 4096]);
        sub.submit(Io::write(Sector(ZONE + 8 * i), data), move |d| {
            tx.send((i, std::thread::current().id(), d)).unwrap();
        });
    }
}

/// Queues `ios` on `ring` (user data: their index), waits for all of them and gives
/// each result back inside `on_local_ring`, repeating for what that unplugs. Returns
/// how many transfers went through the ring.
fn run_ring(ring: &mut IoUring, sub: &Submitter, mut ios: Vec<LocalIo>) -> usize {
    let mut moved = 0;
    while !ios.is_empty() {
        for (i, io) in ios.iter().enumerate() {
            // SAFETY: the entry's buffer is its BIO's, alive until the transfer is
            // given back below.
            unsafe { ring.submission().push(&io.entry().user_data(i as u64)).unwrap() };
        }
        ring.submit_and_wait(ios.len()).unwrap();
        let done: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
        assert_eq!(done.len(), ios.len());
        moved += ios.len();
        let mut slots: Vec<Option<LocalIo>> = ios.drain(..).map(Some).collect();
        let mut next = Vec::new();
        sub.on_local_ring(&mut next, || {
            for (i, res) in done {
                slots[i as usize].take().unwrap().complete(res);
            }
        });
        ios = next;
    }
    moved
}

#[test]
fn transfers_go_on_the_callers_ring_and_complete_on_its_thread() {
    let dir = disk_dir();
    let Some(rt) = start(dir.path(), Backend::Auto) else { return };
    let sub = rt.submitter();
    let mut ring = IoUring::new(64).unwrap();
    let me = std::thread::current().id();
    let (tx, rx) = channel::<(u64, ThreadId, IoDone)>();
    // Four writes of one zone submitted at once: zone write plugging issues one at a
    // time, each completion on this ring unplugs the next.
    let mut ios = Vec::new();
    sub.on_local_ring(&mut ios, || {
        submit_four_writes(&sub, &tx);
    });
    assert_eq!(ios.len(), 1, "one write of the zone issued, the others plugged");
    assert_eq!(run_ring(&mut ring, &sub, ios), 4, "every write went through this ring");
    drop(tx);
    let mut done: Vec<(u64, ThreadId, IoDone)> = rx.iter().collect();
    done.sort_by_key(|d| d.0);
    assert_eq!(done.len(), 4);
    for (i, thread, d) in &done {
        assert_eq!(d.result, Ok(Sector(ZONE + 8 * i)), "write {i}");
        assert_eq!(*thread, me, "write {i} completed on the ring's thread");
    }
    // A read on the ring gets the data back; a read outside it goes to the runtime's
    // own ring and completes on its completion thread.
    let (tx, rx) = channel::<(ThreadId, IoDone)>();
    let mut ios = Vec::new();
    let t = tx.clone();
    sub.on_local_ring(&mut ios, || {
        sub.submit(Io::read(Sector(ZONE), AlignedBuf::zeroed(16384)), move |d| {
            t.send((std::thread::current().id(), d)).unwrap();
        })
    });
    assert_eq!(run_ring(&mut ring, &sub, ios), 1);
    let (thread, d) = rx.recv().unwrap();
    assert_eq!(thread, me);
    let Some(Buffer::Aligned(b)) = d.buf else { panic!("the read's buffer back") };
    for i in 0..4 {
        assert!(b[i * 4096..(i + 1) * 4096].iter().all(|&x| x == i as u8 + 1), "block {i}");
    }
    sub.submit(Io::read(Sector(ZONE), AlignedBuf::zeroed(4096)), move |d| {
        tx.send((std::thread::current().id(), d)).unwrap();
    });
    let (thread, d) = rx.recv().unwrap();
    assert_ne!(thread, me, "outside on_local_ring the runtime's ring carries it");
    assert_eq!(d.result, Ok(Sector(ZONE)));
    rt.close().unwrap();
}

#[test]
fn a_transfer_dropped_unsubmitted_fails_its_bio_and_the_runtime_closes() {
    let dir = disk_dir();
    let Some(rt) = start(dir.path(), Backend::Auto) else { return };
    let sub = rt.submitter();
    let (tx, rx) = channel();
    let mut ios = Vec::new();
    sub.on_local_ring(&mut ios, || {
        sub.submit(Io::write(Sector(ZONE), AlignedBuf::zeroed(4096)), move |d| tx.send(d.result).unwrap());
    });
    assert_eq!(ios.len(), 1);
    drop(ios);
    let r = rx.recv().unwrap();
    assert!(r.is_err(), "a transfer that never ran is no write: {r:?}");
    // Nothing is left in flight: closing does not wait forever.
    rt.close().unwrap();
}

#[test]
fn a_device_in_memory_completes_inside_the_submission() {
    let geo = zblk_core::geometry::Geometry::new(&zblk_core::geometry::GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        nr_conv: 1,
        ..Default::default()
    })
    .unwrap();
    let dev = Arc::new(zblk_dev::Locked::new(zblk_dev::MemDevice::new(&geo, true), "memory", false));
    let rt = Runtime::start(dev, RuntimeConfig::default()).unwrap();
    let sub = rt.submitter();
    let me = std::thread::current().id();
    let (tx, rx) = channel();
    let mut ios = Vec::new();
    sub.on_local_ring(&mut ios, || {
        sub.submit(Io::write(Sector(ZONE), AlignedBuf::zeroed(4096)), move |d| {
            tx.send((std::thread::current().id(), d.result)).unwrap()
        });
    });
    assert!(ios.is_empty(), "no descriptor, no transfer");
    assert_eq!(rx.try_recv().unwrap(), (me, Ok(Sector(ZONE))), "done before submit returned");
    rt.close().unwrap();
}

/// An image on a file system in memory (tmpfs): inside `on_local_ring` its transfers
/// are done on the spot (io_uring would hand each to a worker thread), so no
/// `LocalIo` comes out, every write completes on the calling thread before
/// `on_local_ring` returns, each completion unplugging the next, and the data reads
/// back, from the file's mapping and, in a runtime started again, with `pread`.
#[test]
fn transfers_of_an_image_in_memory_are_done_on_the_spot() {
    let shm = std::path::Path::new("/dev/shm");
    let on_tmpfs = rustix::fs::statfs(shm).is_ok_and(|st| st.f_type as u64 == 0x0102_1994);
    if !on_tmpfs {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED transfers_of_an_image_in_memory_are_done_on_the_spot: /dev/shm is not a tmpfs"
        );
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let Some(rt) = start(dir.path(), Backend::Auto) else { return };
    let sub = rt.submitter();
    let me = std::thread::current().id();
    let (tx, rx) = channel::<(u64, ThreadId, IoDone)>();
    let mut ios = Vec::new();
    sub.on_local_ring(&mut ios, || {
        submit_four_writes(&sub, &tx);
        sub.submit(Io::read(Sector(ZONE), AlignedBuf::zeroed(16384)), {
            let tx = tx.clone();
            move |d| tx.send((9, std::thread::current().id(), d)).unwrap()
        });
    });
    assert!(ios.is_empty(), "nothing for the ring: {ios:?}");
    drop(tx);
    let done: Vec<(u64, ThreadId, IoDone)> = rx.try_iter().collect();
    assert_eq!(done.len(), 5, "every request completed inside on_local_ring");
    for (i, thread, d) in &done {
        assert_eq!(*thread, me, "request {i} completed on the calling thread");
        if *i < 4 {
            assert_eq!(d.result, Ok(Sector(ZONE + 8 * i)), "write {i}");
        } else {
            let Some(Buffer::Aligned(b)) = &d.buf else { panic!("the read's buffer back") };
            for k in 0..4 {
                assert!(b[k * 4096..(k + 1) * 4096].iter().all(|&x| x == k as u8 + 1), "block {k}");
            }
        }
    }
    rt.close().unwrap();
    // Read back again by another runtime, outside `on_local_ring` (a `pread` of the
    // file, not its mapping), the data is in the file where the image keeps zone 1.
    let img = FileImage::open(&dir.path().join("img"), &ImageOptions::default()).unwrap();
    let rt = Runtime::start(img, RuntimeConfig::default()).unwrap();
    let (tx, rx) = channel();
    rt.submitter().submit(Io::read(Sector(ZONE), AlignedBuf::zeroed(16384)), move |d| tx.send(d).unwrap());
    let d = rx.recv().unwrap();
    assert_eq!(d.result, Ok(Sector(ZONE)));
    let Some(Buffer::Aligned(b)) = &d.buf else { panic!("the read's buffer back") };
    for k in 0..4 {
        assert!(b[k * 4096..(k + 1) * 4096].iter().all(|&x| x == k as u8 + 1), "block {k} read with pread");
    }
    rt.close().unwrap();
}

/// The child of `an_image_in_memory_shortened_under_..._stops_with_a_clear_word`:
/// writes four blocks of an image in /dev/shm and reads one on the spot (through the
/// file's mapping), shortens the image's file as another process could, and reads
/// the block again, or (`ZBLK_SHORTENED_OP=write`) writes the next one. Does nothing
/// unless its parent runs it.
#[test]
fn child_moves_data_of_an_image_shortened_under_it() {
    let Some(dir) = std::env::var_os("ZBLK_SHORTENED_CHILD") else { return };
    let write = std::env::var("ZBLK_SHORTENED_OP").is_ok_and(|op| op == "write");
    let dir = std::path::Path::new(&dir);
    let Some(rt) = start(dir, Backend::Auto) else { return };
    let sub = rt.submitter();
    let (tx, rx) = channel::<(u64, ThreadId, IoDone)>();
    let mut ios = Vec::new();
    sub.on_local_ring(&mut ios, || submit_four_writes(&sub, &tx));
    let io = |tx: &Sender<(u64, ThreadId, IoDone)>, write: bool| {
        let tx = tx.clone();
        let io = if write {
            Io::write(Sector(ZONE + 32), AlignedBuf::from_slice(&[5; 4096]))
        } else {
            Io::read(Sector(ZONE), AlignedBuf::zeroed(4096))
        };
        sub.on_local_ring(&mut Vec::new(), || {
            sub.submit(io, move |d| tx.send((9, std::thread::current().id(), d)).unwrap())
        });
    };
    io(&tx, false);
    let first = rx.try_iter().last().expect("the first read completed on the spot");
    assert!(first.2.result.is_ok(), "the first read: {:?}", first.2.result);
    // Shortened to the first zone: zone 1's data is gone.
    std::fs::OpenOptions::new().write(true).open(dir.join("img")).unwrap().set_len(ZONE * 512).unwrap();
    io(&tx, write);
    let second = rx.try_iter().last().map(|d| d.2.result);
    // Only reached if the transfer did not touch the mapping.
    println!("CHILD-SURVIVED second transfer: {second:?}");
}

/// A read or a write of an image in memory copies from or into the file's mapping;
/// if another process shortens the file (ignoring the image's lock), the page is gone
/// and the process gets SIGBUS: the runtime says what happened and exits with status
/// 1, rather than dying of a bare "Bus error". A write finds the file's end moved
/// before it copies (its check for holes) and stops with the same word. (A write done
/// with `pwrite` would instead lengthen the file again and succeed: the write's half
/// of the test fails if writes do not go through the mapping.)
#[test]
fn an_image_in_memory_shortened_under_a_transfer_stops_with_a_clear_word() {
    let shm = std::path::Path::new("/dev/shm");
    if !rustix::fs::statfs(shm).is_ok_and(|st| st.f_type as u64 == 0x0102_1994) {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED an_image_in_memory_shortened_under_a_transfer_stops_with_a_clear_word: /dev/shm is not a tmpfs"
        );
        return;
    }
    if zblk_runtime::io_uring_available().is_err() {
        let _ = writeln!(std::io::stderr(), "SKIPPED an_image_in_memory_shortened_...: io_uring is not available");
        return;
    }
    for op in ["read", "write"] {
        let dir = tempfile::tempdir_in(shm).unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_moves_data_of_an_image_shortened_under_it", "--nocapture", "--test-threads=1"])
            .env("ZBLK_SHORTENED_CHILD", dir.path())
            .env("ZBLK_SHORTENED_OP", op)
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        let what = format!("{op}: exit status {:?}\nstdout: {stdout}\nstderr: {stderr}", out.status);
        assert_eq!(out.status.code(), Some(1), "{what}");
        assert!(stderr.contains("the image's file was shortened while zblk had it mapped"), "{what}");
        assert!(!stdout.contains("CHILD-SURVIVED"), "{what}");
    }
}

/// The child of `a_write_of_an_image_on_a_full_tmpfs_fails_with_an_error`: its
/// directory is a small tmpfs holding a sparse image; fills the file system, then
/// writes four blocks of the image on the spot, and prints what each got.
#[test]
fn child_writes_an_image_on_a_full_file_system() {
    let Some(dir) = std::env::var_os("ZBLK_FULL_CHILD") else { return };
    let dir = std::path::Path::new(&dir);
    let Some(rt) = start(dir, Backend::Auto) else { return };
    let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
    while filler.write_all(&[7; 65536]).is_ok() {}
    let sub = rt.submitter();
    let (tx, rx) = channel::<(u64, ThreadId, IoDone)>();
    sub.on_local_ring(&mut Vec::new(), || submit_four_writes(&sub, &tx));
    let results: Vec<_> = rx.try_iter().map(|(i, _, d)| (i, d.result)).collect();
    println!("CHILD-DONE {results:?}");
}

/// Runs the child test `child` with `env` naming a tmpfs of `size` mounted for it
/// (SKIPPED, `None`, where io_uring is missing or no tmpfs can be mounted): its exit
/// status and output, and the line it printed with `CHILD-DONE`, checked for a
/// successful exit first.
fn child_on_small_tmpfs(test: &str, child: &str, env: &str, size: &str) -> Option<String> {
    if zblk_runtime::io_uring_available().is_err() {
        // The child would skip and print nothing to check.
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: io_uring is not available");
        return None;
    }
    let dir = disk_dir();
    let m = dir.path().join("m");
    std::fs::create_dir(&m).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(&m)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: cannot mount a tmpfs (needs root)");
        return None;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child, "--nocapture", "--test-threads=1"])
        .env(env, &m)
        .output();
    let _ = std::process::Command::new("umount").arg(&m).status();
    let out = out.unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let what = format!("exit status {:?}\nstdout: {stdout}\nstderr: {stderr}", out.status);
    assert!(out.status.success(), "{what}");
    let done = stdout.lines().find(|l| l.contains("CHILD-DONE")).unwrap_or_else(|| panic!("{what}"));
    Some(format!("{done}\n{what}"))
}

/// A write of an image in memory into a hole of its file (a sparse image, never
/// written there) on a file system that is full fails with an error, as `pwrite`
/// says ENOSPC, instead of killing the server with SIGBUS in the mapping's page
/// fault: writes with a hole in their way do not go through the mapping.
#[test]
fn a_write_of_an_image_on_a_full_tmpfs_fails_with_an_error() {
    let test = "a_write_of_an_image_on_a_full_tmpfs_fails_with_an_error";
    let child = "child_writes_an_image_on_a_full_file_system";
    let Some(done) = child_on_small_tmpfs(test, child, "ZBLK_FULL_CHILD", "1M") else { return };
    let line = done.lines().next().unwrap();
    // The first write finds no page and fails; the others fail behind it.
    assert!(line.contains("(0, Err("), "the first write failed: {done}");
    assert!(!line.contains("Ok("), "no write succeeded: {done}");
}

/// The child of `a_write_into_a_range_the_image_punched_on_a_full_tmpfs_fails_with_an_error`:
/// an image of conventional zones (but one) in a small tmpfs, written whole (so that
/// the mapping knows its pages allocated); writes a block 4 MiB in through the mapping,
/// discards it (the image punches it out), fills the file system, writes the block
/// again, and prints what each step got.
#[test]
fn child_writes_a_punched_range_on_a_full_file_system() {
    let Some(dir) = std::env::var_os("ZBLK_PUNCHED_CHILD") else { return };
    let p = std::path::Path::new(&dir).join("img");
    let geometry = zblk_core::geometry::GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        nr_conv: 7,
        ..Default::default()
    };
    FileImage::create(&p, &CreateOptions { geometry, rotational: false, force: false, preallocate: false }).unwrap();
    let dev = FileImage::open(&p, &ImageOptions::default()).unwrap();
    let Some(rt) = start_with(dev, Backend::Auto) else { return };
    let sub = rt.submitter();
    let wait = |rx: std::sync::mpsc::Receiver<_>| rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap();
    let write = |sector: u64, len: usize, tag: u8| {
        let (tx, rx) = channel();
        let data = AlignedBuf::from_slice(&vec![tag; len]);
        let io = Io::write(Sector(sector), data);
        sub.on_local_ring(&mut Vec::new(), || sub.submit(io, move |d| tx.send(d.result).unwrap()));
        wait(rx)
    };
    // Every page of the data written: the mapping allocates (and knows) its chunks.
    let whole: Vec<_> = (0..7).map(|z| write(z * ZONE, 1 << 20, 9)).collect();
    println!("whole {whole:?}");
    let block = 4 * ZONE;
    println!("first write {:?}", write(block, 4096, 1));
    let (tx, rx) = channel();
    sub.submit(Io::discard(Sector(block), 8), move |d| tx.send(d.result).unwrap());
    println!("discard {:?}", wait(rx));
    let mut filler = std::fs::File::create(std::path::Path::new(&dir).join("filler")).unwrap();
    while filler.write_all(&[7; 65536]).is_ok() {}
    println!("CHILD-DONE {:?}", write(block, 4096, 2));
}

/// The same for a hole the image itself punched (a discard) under a part of the file
/// the mapping had found allocated: the write after it, on a full file system, fails
/// with an error. A mapping that remembered the pages past the punch would write
/// through them and die of SIGBUS.
#[test]
fn a_write_into_a_range_the_image_punched_on_a_full_tmpfs_fails_with_an_error() {
    let test = "a_write_into_a_range_the_image_punched_on_a_full_tmpfs_fails_with_an_error";
    let child = "child_writes_a_punched_range_on_a_full_file_system";
    let Some(done) = child_on_small_tmpfs(test, child, "ZBLK_PUNCHED_CHILD", "12M") else { return };
    let step = |name: &str| done.lines().find(|l| l.contains(name)).unwrap_or_else(|| panic!("{name}: {done}"));
    assert!(!step("whole").contains("Err"), "the image written whole: {done}");
    assert!(step("first write").contains("Ok(") && step("discard").contains("Ok("), "{done}");
    assert!(done.lines().next().unwrap().contains("CHILD-DONE Err("), "the write into the hole failed: {done}");
}
