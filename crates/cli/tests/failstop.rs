//! Fail-stop of the `zblk` process (docs/ARCHITECTURE.md, "Fail-stop"): an assertion
//! planted on the runtime's io_uring completion thread, then on a worker
//! (`ZBLK_MUTATION=panic-on-completion`, `panic-on-worker`), fires during a
//! `zblk write`. The process ends within a bound with a non-zero status and the
//! assertion's message on its standard error; the image, left as a crash leaves it,
//! reopens (recovered as after a SIGKILL), `zblk check` then finds it clean, and what
//! was flushed before reads back.
//!
//! Panics unwind: the runtime fails the write with EIO and `zblk` raises the panic
//! at the runtime's close (status 101).
//!
//! Before, the write waited for ever for a completion that was on the thread that
//! died: the process hung.
//!
//! Built with the planted bugs only (`scripts/test` builds the workspace with
//! `zblk-cli/mutations`).
#![cfg(feature = "mutations")]
// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::ok;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Far longer than a write takes, far shorter than a hang.
const BOUND: Duration = Duration::from_secs(60);

/// Runs `zblk` with `args` and the planted bug `mutation`: its status and standard
/// error, or a failure if it has not ended within [`BOUND`] (it is killed).
fn planted(mutation: &str, args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_zblk"))
        .args(args)
        .env("ZBLK_MUTATION", mutation)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run zblk");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for zblk") {
            break status;
        }
        if start.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("zblk {args:?} with {mutation}: still running after {BOUND:?} (a hang)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err).expect("read stderr");
    (status, err)
}

/// One planted panic during a write of a fresh image in `dir`.
fn one(dir: &std::path::Path, mutation: &str, extra: &[&str]) {
    let p = dir.join(format!("{mutation}.img")).display().to_string();
    ok(&["create", &p, "-p", "zone_size=64,zone_nr_conv=2,zone_max_open=4"]);
    // Zone 2 starts at 128 MiB: a flushed write there must survive.
    ok(&["write", &p, "-o", "128M", "-l", "64k", "-p", "0x5a", "--flush"]);
    let mut args = vec!["write", &p, "-o", "0", "-l", "64k", "-p", "0xa5"];
    args.extend_from_slice(extra);
    let (status, err) = planted(mutation, &args);
    assert!(!status.success(), "{mutation}: zblk succeeded: {err}");
    assert!(err.contains(&format!("planted bug {mutation}: assertion failed")), "{mutation}: {status:?}: {err}");
    // As after a SIGKILL: the next open for writing (here `check -y`'s) recovers the
    // image from its live zone table, and corrects nothing else.
    let o = common::zblk(&["check", "-y", &p]);
    let said = common::stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{mutation}: check -y: {said}{}", common::stderr(&o));
    let lines: Vec<&str> = said.lines().collect();
    assert!(lines.len() == 2 && lines[0].contains("corrected: not closed cleanly"), "{mutation}: {said}");
    assert!(lines[1].contains("corrected: data past every write pointer discarded"), "{mutation}: {said}");
    assert_eq!(ok(&["check", &p]), format!("{p}: clean\n"), "{mutation}");
    let back = dir.join(format!("{mutation}.bin"));
    ok(&["read", &p, "-o", "128M", "-l", "64k", "-O", &back.display().to_string()]);
    let data = std::fs::read(&back).expect("read back");
    assert!(data.len() == 64 << 10 && data.iter().all(|&b| b == 0x5a), "{mutation}: the flushed write is lost");
}

#[test]
fn a_planted_panic_on_a_worker_stops_the_process() {
    let dir = tempfile::tempdir().expect("temporary directory");
    // The write goes on the ring, its flush to a worker.
    one(dir.path(), "panic-on-worker", &["--flush"]);
}

#[test]
fn a_planted_panic_on_the_completion_thread_stops_the_process() {
    if let Err(e) = zblk_runtime::io_uring_available() {
        let required = std::env::var("ZBLK_REQUIRE_URING").is_ok_and(|v| v == "1");
        assert!(!required, "io_uring is required (ZBLK_REQUIRE_URING=1) but not available: {e}");
        eprintln!("SKIPPED a_planted_panic_on_the_completion_thread_stops_the_process: io_uring is not available: {e}");
        return;
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    one(dir.path(), "panic-on-completion", &[]);
}
