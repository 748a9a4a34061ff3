//! What the runtime tests share.

#![allow(dead_code)]

use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// A minimal executor: polls a future on this thread, parking between wake-ups.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

/// A test of the io_uring driver where the kernel does not allow io_uring: it fails
/// when `ZBLK_REQUIRE_URING=1` (`scripts/test` and CI set it, as they require the
/// VM: a test that did not run must not pass), and says SKIPPED otherwise.
pub fn io_uring_missing(test: &str, why: impl std::fmt::Display) {
    let required = std::env::var("ZBLK_REQUIRE_URING").is_ok_and(|v| v == "1");
    assert!(!required, "{test}: io_uring is required (ZBLK_REQUIRE_URING=1) but not available: {why}");
    use std::io::Write;
    // Past the test harness's capture, so that scripts/test lists it.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: io_uring is not available: {why}");
}

/// Opens the image at `path` after a killed process: its I/O may still hold the
/// image's lock for a moment, so an image in use is tried again for up to 10 s.
pub fn open_retry(path: &std::path::Path, opts: &zblk_dev::file::ImageOptions) -> zblk_dev::file::FileImage {
    use std::time::{Duration, Instant};
    use zblk_dev::DeviceErrorKind;
    use zblk_dev::file::{FileImage, ImageErrorKind};
    let t = Instant::now();
    loop {
        match FileImage::open(path, opts) {
            Ok(i) => return i,
            Err(e)
                if matches!(e.kind, ImageErrorKind::Device(DeviceErrorKind::InUse(_)))
                    && t.elapsed() < Duration::from_secs(10) =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("reopen: {e}"),
        }
    }
}
