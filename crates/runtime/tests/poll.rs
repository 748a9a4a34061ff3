//! The io_uring completion thread's polling (`RuntimeConfig::poll`): while
//! completions follow each other closer than the window, the thread finds them
//! without being woken; when I/O stops, it sleeps again once the window is over.

use std::io::Write as _;
use std::time::Duration;
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::units::Sector;
use zblk_dev::file::{CreateOptions, FileImage, ImageOptions};
use zblk_runtime::{AlignedBuf, Backend, Io, Runtime, RuntimeConfig};

const ZONE: u64 = 2048; // sectors (1 MiB)

/// A runtime over a fresh image on the disk the build is on (an image in memory
/// has its transfers done on the spot, not on the ring), polling for `poll`.
fn start(dir: &std::path::Path, name: &str, poll: Duration) -> Runtime {
    let p = dir.join(name);
    let geometry = zblk_core::geometry::GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        max_append_sectors: 0,
        ..Default::default()
    };
    FileImage::create(&p, &CreateOptions { geometry, rotational: false, force: false, preallocate: false }).unwrap();
    let img = FileImage::open(&p, &ImageOptions::default()).unwrap();
    let engine = EngineConfig { policy: IssuePolicy::Zwp, ..EngineConfig::default() };
    let rt = Runtime::start(img, RuntimeConfig { engine, backend: Backend::IoUring, poll, ..RuntimeConfig::default() })
        .unwrap();
    assert!(rt.uses_io_uring(), "{}", rt.backend());
    rt
}

/// Writes `n` blocks of 4 KiB one after the other (QD 1) into zone 1, from
/// page-aligned buffers (which `O_DIRECT` takes through the ring).
fn write_one_at_a_time(rt: &Runtime, n: u64) {
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..n {
        let tx = tx.clone();
        rt.submit(Io::write(Sector(ZONE + 8 * i), AlignedBuf::from_slice(&[i as u8; 4096])), move |d| {
            tx.send(d.result).unwrap()
        });
        assert_eq!(rx.recv().unwrap(), Ok(Sector(ZONE + 8 * i)));
    }
}

/// CPU time (user and system, in clock ticks) of this process's threads named `name`.
fn cpu_ticks(name: &str) -> u64 {
    let mut ticks = 0;
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // The fields after the command's closing parenthesis: utime and stime are
        // the 12th and 13th of them.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        ticks += f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    }
    ticks
}

// One test (not several run in parallel): it measures the CPU time of the
// completion thread, which must be the only one of its name meanwhile.
#[test]
fn the_completion_thread_polls_while_completions_come_and_sleeps_when_they_stop() {
    if let Err(e) = zblk_runtime::io_uring_available() {
        let _ = writeln!(std::io::stderr(), "SKIPPED completion polling: io_uring is not available: {e}");
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // Without polling, every batch comes after a wait.
    let rt = start(dir.path(), "plain", Duration::ZERO);
    write_one_at_a_time(&rt, 50);
    let (found, waited) = rt.completion_batches();
    assert_eq!(found, 0, "no polling, yet {found} batches found while polling ({waited} after a wait)");
    assert!(waited >= 50, "{waited} batches after a wait for 50 writes");
    rt.close().unwrap();

    // A window of 50 ms: each write of a QD 1 stream completes while the thread
    // still looks (a write to a file takes far less), but for the first.
    let poll = Duration::from_millis(50);
    let rt = start(dir.path(), "polled", poll);
    write_one_at_a_time(&rt, 200);
    let (found, waited) = rt.completion_batches();
    assert!(
        found >= 150 && found > 4 * waited,
        "polling for {poll:?}: {found} batches found while polling, {waited} after a wait, for 200 writes"
    );
    // Once the window after the last completion is over the thread sleeps: over
    // 600 ms without I/O it spends a small part of one window's CPU time.
    std::thread::sleep(poll * 2);
    let before = cpu_ticks("zblk-completion");
    std::thread::sleep(Duration::from_millis(600));
    let spent = cpu_ticks("zblk-completion") - before;
    // SAFETY: sysconf takes no pointer.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    assert!(spent * 1000 / hz < 60, "the completion thread spent {spent} ticks of 1/{hz} s polling 600 ms without I/O");
    rt.close().unwrap();
}
