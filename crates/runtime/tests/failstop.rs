//! Fail-stop in a build that unwinds (docs/ARCHITECTURE.md, "Fail-stop"): an
//! assertion planted on the io_uring completion thread, then on a worker, fires
//! under the engine lock as an engine assertion would. The BIO in flight ends with
//! EIO within a bound instead of waiting for ever, a later submission too, closing
//! the runtime raises the assertion's message again, and the image is left
//! unclosed, as a crash leaves it.
//!
//! Before, the BIO in flight waited for ever: its completion was on the thread that
//! died, and closing the runtime waited for it too.
//!
//! The planted bugs are active on every thread of the process, so this binary holds
//! one test.

mod common;

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;
use zblk_core::mutation::{self, Mutation};
use zblk_core::units::Sector;
use zblk_dev::file::{FileImage, ImageOptions};
use zblk_runtime::{AlignedBuf, Backend, Runtime, RuntimeConfig, io_uring_available};

/// Far longer than a write takes, far shorter than a hang.
const BOUND: Duration = Duration::from_secs(20);

/// Runs `f` on a thread of its own and waits at most [`BOUND`] for it.
fn within_bound<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(BOUND).unwrap_or_else(|_| panic!("{what}: no answer within {BOUND:?} (a hang)"))
}

/// The message of a panic's payload.
fn text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

/// One planted panic on `backend`'s threads: what the user of the runtime sees.
fn one(dir: &Path, m: Mutation, backend: Backend) {
    let path = dir.join(format!("{}.img", m.name()));
    common::create_fresh(&path, common::crash_geometry(4, 2048, 0));
    let img = FileImage::open(&path, &ImageOptions::default()).expect("open");
    let rt = Runtime::start(img, RuntimeConfig { backend, ..RuntimeConfig::default() }).expect("start");
    let zone = Sector(2048);
    // Aligned: a write with io_uring goes on the ring (O_DIRECT), an unaligned one to
    // a worker.
    rt.write_at(zone, &AlignedBuf::from_slice(&[7u8; 4096])).expect("a write before the planted bug");
    rt.flush().expect("a flush before the planted bug");
    mutation::set_global(Some(m));
    let (r, rt) = within_bound(m.name(), move || {
        let r = rt.write_at(zone + 8, &AlignedBuf::from_slice(&[8u8; 4096])).and_then(|()| rt.flush());
        (r, rt)
    });
    mutation::set_global(None);
    assert_eq!(r, Err(zblk_core::bio::Status::IoErr), "{}: the BIO in flight ends with EIO", m.name());
    let why = rt.failure().expect("the runtime has failed").to_string();
    assert!(why.contains(&format!("planted bug {}", m.name())), "{}: {why}", m.name());
    assert_eq!(
        rt.write_at(zone + 16, &AlignedBuf::from_slice(&[9u8; 4096])),
        Err(zblk_core::bio::Status::IoErr),
        "later submission"
    );
    let closed = within_bound("close", move || std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.close())));
    let p = closed.expect_err("closing a failed runtime raises its panic");
    assert!(text(&*p).contains(&format!("planted bug {}", m.name())), "{}: {}", m.name(), text(&*p));
    // The image is left open and unclosed, as a crash leaves it, until the process
    // ends: crates/cli/tests/failstop.rs reopens it in the next process.
}

#[test]
fn a_panic_on_a_runtime_thread_fails_its_bios_and_is_reported() {
    const { assert!(mutation::AVAILABLE, "zblk-core built without its `mutations` feature") };
    let dir = tempfile::tempdir().expect("temporary directory");
    one(dir.path(), Mutation::PanicOnWorker, Backend::Threads);
    match io_uring_available() {
        Ok(()) => one(dir.path(), Mutation::PanicOnCompletion, Backend::IoUring),
        Err(e) => common::io_uring_missing("a_panic_on_a_runtime_thread_fails_its_bios_and_is_reported", e),
    }
}
