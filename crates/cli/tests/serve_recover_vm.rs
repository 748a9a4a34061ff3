//! `zblk serve --recover N` onto the wrong image, in the Linux 6.12 VM with the ublk
//! driver (`scripts/kernel-vm.sh --ublk`): an image served recoverable takes a write
//! the kernel acknowledges and fsyncs, its server is killed with SIGKILL, and another
//! image of the same geometry (with more commits) is given to `--recover`: refused,
//! naming both images, and the device left as it was; the image it was served from
//! then recovers it, the fsynced data reads back, and the next write at the kernel's
//! write pointer lands. And a server whose queue's thread panicked (a planted
//! assertion) stops, and is recovered the same way.
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;
use common::vm::SERVE_JSON_FN as SERVE_FN;
use serde_json::Value;

/// Runs `body` in the VM after the tests' prelude: $S the share (a directory under
/// /var/tmp, returned with the guest's log), $X zblk, `serve` ([`SERVE_FN`]), $G the
/// geometry (zones of 4 MiB, the first two conventional: zone 2 starts at 8 MiB) and
/// /tmp/a.img made with it. `None` where the VM cannot run (the test then says why).
fn run(test: &str, body: &str) -> Option<(tempfile::TempDir, String)> {
    let script = vm::ready_for_serve(test)?;
    let dir = tempfile::Builder::new().prefix("zblk-serve-recover").tempdir_in("/var/tmp").unwrap();
    let zblk = vm::stage(dir.path(), env!("CARGO_BIN_EXE_zblk"));
    let guest = format!(
        r#"S={share}; mount -t tmpfs tmpfs /run; cp {zblk} /tmp/zblk; X=/tmp/zblk
{SERVE_FN}
G="--size 64M -p zone_size=4,zone_nr_conv=2,zone_max_open=8"
$X create /tmp/a.img $G > /dev/null
{body}"#,
        share = dir.path().display(),
    );
    let log = vm::run_guest(&script, dir.path(), "zoned=1 gb=1", &["--ublk"], &guest);
    Some((dir, log))
}

#[test]
fn a_recovery_refuses_another_image_of_the_same_geometry() {
    let body = r#"
$X create /tmp/b.img $G > /dev/null
for k in 0 1 2 3; do $X write /tmp/b.img -o $((16 + 4 * k))M -l 64k -p 9 > /dev/null; done
serve a --json --recoverable /tmp/a.img
N=${D#/dev/ublkb}; echo $D > $S/dev
head -c 1M /dev/urandom > $S/data
dd if=$S/data of=$D bs=1M seek=8 oflag=direct conv=fsync status=none; rc write
kill -KILL $P; wait $P; rc kill
# Another image of the same geometry: refused (a server that took it would read back
# its data); if it serves all the same, what it reads back is kept and it is killed.
serve wrong --json --recover $N /tmp/b.img
if kill -0 $P 2>/dev/null; then
  dd if=$D bs=1M skip=8 count=1 iflag=direct status=none > $S/wrong.bin
  dd if=$S/data of=$D bs=1M seek=9 oflag=direct conv=fsync status=none 2> $S/wrong-write.err; rc wrong-write
  kill -KILL $P; wait $P; echo served > $S/wrong.rc
else
  wait $P; rc wrong
fi
# The image it was served from.
serve right --json --recover $N /tmp/a.img
dd if=$D bs=1M skip=8 count=1 iflag=direct status=none > $S/right.bin
dd if=$S/data of=$D bs=1M seek=9 oflag=direct conv=fsync status=none 2> $S/right-write.err; rc right-write
kill -TERM $P; wait $P; rc right-stop
$X read /tmp/a.img -o 9M -l 1M -O $S/image.bin 2> $S/image-read.err
"#;
    let Some((dir, log)) = run("a_recovery_refuses_another_image_of_the_same_geometry", body) else {
        return;
    };
    let share = dir.path();
    let file = |f: &str| std::fs::read_to_string(share.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    let bytes = |f: &str| std::fs::read(share.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    let rc = |f: &str| file(&format!("{f}.rc")).trim().to_string();

    assert_eq!(rc("write"), "0", "the fsynced write");
    assert_eq!(rc("kill"), "137");
    let data = bytes("data");
    assert_eq!(
        rc("wrong"),
        "1",
        "another image of the same geometry taken over the device (fsynced data read back equal: {}; the next \
         write: {})\n{}",
        std::fs::read(share.join("wrong.bin")).is_ok_and(|b| b == data),
        std::fs::read_to_string(share.join("wrong-write.err")).unwrap_or_default(),
        file("wrong.err")
    );
    let err = file("wrong.err");
    assert!(err.contains("was served from image /tmp/a.img (identity "), "{err}");
    assert!(err.contains("not from image /tmp/b.img (identity "), "{err}");
    let ready: Value = serde_json::from_str(file("right.out").lines().next().unwrap_or(""))
        .unwrap_or_else(|e| panic!("the right image's recovery: {e}: {}", file("right.err")));
    assert_eq!(ready["device"].as_str(), Some(file("dev").trim()), "{ready}");
    assert!(bytes("right.bin") == data, "the fsynced data reads back after the recovery");
    assert_eq!(rc("right-write"), "0", "the next write at the write pointer: {}", file("right-write.err"));
    assert_eq!(rc("right-stop"), "0", "{}", file("right.err"));
    assert!(bytes("image.bin") == data, "and the image holds it: {}", file("image-read.err"));
}

/// Fail-stop of a server (docs/serve.md, "Recovery"): an assertion planted on a
/// queue's thread (`ZBLK_MUTATION=panic-on-serve-queue`, on the first write the
/// kernel brings) ends the server within a bound, with a non-zero status and the
/// assertion's message, instead of leaving the queue without a thread and every
/// request on it waiting. The device, recoverable, is then taken over by
/// `zblk serve --recover` as after a SIGKILL: what the image held reads back, a
/// write lands, and the image, closed by that server, is clean.
///
/// Before, the queue's thread unwound alone: the server went on (its main thread
/// waiting for a signal) with the write held for ever.
#[cfg(feature = "mutations")]
#[test]
fn a_panic_on_a_queue_s_thread_stops_the_server_for_a_recovery() {
    // The server is given 30 s to die; a hang is reported, and the server killed.
    let body = r#"
$X write /tmp/a.img -o 4M -l 1M -p 0x5a > /dev/null
export ZBLK_MUTATION=panic-on-serve-queue
serve planted --json --recoverable /tmp/a.img
unset ZBLK_MUTATION
N=${D#/dev/ublkb}; echo $D > $S/dev
dd if=/dev/zero of=$D bs=64k count=1 seek=128 oflag=direct status=none 2> $S/held.err & W=$!
i=0; while kill -0 $P 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
if kill -0 $P 2>/dev/null; then echo hung > $S/hung; kill -KILL $P; fi
wait $P; rc planted
serve right --json --recover $N /tmp/a.img
wait $W; rc held
dd if=$D bs=1M skip=4 count=1 iflag=direct status=none > $S/back.bin
dd if=/dev/zero of=$D bs=64k count=1 seek=192 oflag=direct conv=fsync status=none 2> $S/next.err; rc next
kill -TERM $P; wait $P; rc right-stop
$X check /tmp/a.img > $S/check.out 2>&1; rc check
"#;
    let Some((dir, log)) = run("a_panic_on_a_queue_s_thread_stops_the_server_for_a_recovery", body) else {
        return;
    };
    let share = dir.path();
    let file = |f: &str| std::fs::read_to_string(share.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    let rc = |f: &str| file(&format!("{f}.rc")).trim().to_string();
    let err = file("planted.err");
    assert!(!share.join("hung").exists(), "the server still ran 30 s after its queue's thread panicked: {err}");
    assert_ne!(rc("planted"), "0", "{err}");
    assert!(err.contains("planted bug panic-on-serve-queue: assertion failed"), "{}: {err}", rc("planted"));
    let ready: Value = serde_json::from_str(file("right.out").lines().next().unwrap_or(""))
        .unwrap_or_else(|e| panic!("the recovery: {e}: {}", file("right.err")));
    assert_eq!(ready["device"].as_str(), Some(file("dev").trim()), "{ready}");
    println!("the write held while the server died: exit {} {}", rc("held"), file("held.err"));
    let back = std::fs::read(share.join("back.bin")).unwrap();
    assert!(back.len() == 1 << 20 && back.iter().all(|&b| b == 0x5a), "the image's data reads back after the recovery");
    assert_eq!(rc("next"), "0", "a write after the recovery: {}", file("next.err"));
    assert_eq!(rc("right-stop"), "0", "{}", file("right.err"));
    assert_eq!((rc("check"), file("check.out").trim()), ("0".into(), "/tmp/a.img: clean"), "zblk check");
}
