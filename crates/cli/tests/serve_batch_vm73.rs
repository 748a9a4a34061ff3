//! `zblk serve --transport batch` in the Linux 7.3 VM (`scripts/kernel-vm.sh --kernel
//! 7.3 --ublk --modules btrfs`), whatever `ZBLK_VM_KERNEL` says: Linux 6.12's driver
//! has no batched commands (`UBLK_F_BATCH_IO`). One boot:
//!
//! - the memory device (`--dev nullb:...,completion_nsec=0`) on batched commands: its
//!   ready line says so; fio's zoned write-and-verify jobs (four random writers and a
//!   sequential one, QD 32 through io_uring) pass;
//! - an image on a command per request (`--transport command`; the default, `auto`,
//!   takes batched commands on 7.3, so every other served-device test in the 7.3
//!   guest runs on them): the same jobs pass;
//! - btrfs (whose data writes are zone appends: the sector each landed at goes back
//!   in the batched commit) writes a file that reads back intact after a remount;
//! - user recovery on batched commands: a recoverable image under fio's
//!   write-and-verify job, its server killed with SIGKILL twice and each time taken
//!   over by `zblk serve --recover N` (which keeps the device's batched commands):
//!   fio completes with no error and its verify passes;
//! - with the planted bug `commit-drops-one` (a commit leaves one request out), fio
//!   does not complete: the kernel never hears of that request.
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;
use common::vm::SERVE_JSON_FN as SERVE_FN;
use serde_json::Value;

/// fio's zoned write-and-verify jobs on `$D`, named `$1`: four random writers in
/// 64 MiB regions of their own (each writing 8 MiB of it: a job that filled its
/// zones would reset one under what it is still to verify) and a sequential one, QD
/// 32 through io_uring; their JSON output and status in the share. `$T`: a command
/// put before fio (a timeout).
const FIO_FN: &str = r#"
jobs() { n=$1
  $T fio --filename=$D --direct=1 --zonemode=zbd --verify=crc32c --output-format=json --ioengine=io_uring \
    --iodepth=32 --max_open_zones=12 \
    --name=rand --rw=randwrite --bs=16k --numjobs=4 --offset=64M --offset_increment=64M --size=64M --io_size=8M \
      --job_max_open_zones=2 \
    --name=seq --rw=write --bs=64k --numjobs=1 --offset=384M --size=32M \
    > $S/fio-$n.json 2> $S/fio-$n.err; rc fio-$n; }
"#;

/// The whole-run bound of the planted run's fio: a write that never completes keeps
/// it waiting until then.
const PLANTED_TIMEOUT_S: u32 = 60;

#[test]
fn batched_commands_serve_fio_btrfs_and_a_recovery_and_a_dropped_commit_hangs() {
    let test = "batched_commands_serve_fio_btrfs_and_a_recovery_and_a_dropped_commit_hangs";
    let Some(script) = vm::ready_for_serve(test) else {
        return;
    };
    let found = std::process::Command::new("sh").args(["-c", "command -v mkfs.btrfs"]).output();
    if !found.is_ok_and(|o| o.status.success()) {
        return vm::skipped(test, "mkfs.btrfs is not installed on the host (scripts/vm-deps installs it)");
    }
    let (_keep, share) = vm::share("zblk-serve-batch");
    let share = share.as_path();
    let zblk = vm::stage(share, env!("CARGO_BIN_EXE_zblk"));
    let planted = cfg!(feature = "mutations");
    let planted_run = if planted {
        format!(
            r#"export ZBLK_MUTATION=commit-drops-one
serve planted --json --transport batch --dev nullb:zone_size=8,size=512,completion_nsec=0
unset ZBLK_MUTATION
T="timeout -s KILL {PLANTED_TIMEOUT_S}"; jobs planted; T=
kill -KILL $P; wait $P; true
"#
        )
    } else {
        String::new()
    };
    let guest = format!(
        r#"S={share}; mount -t tmpfs tmpfs /run; cp {zblk} /tmp/zblk; X=/tmp/zblk; M=/tmp/mnt; mkdir -p $M; T=
{SERVE_FN}
{FIO_FN}
serve mem --json --transport batch --dev nullb:zone_size=8,size=512,completion_nsec=0
jobs mem
kill -TERM $P; wait $P; rc mem-stop
$X create /tmp/b.img --size 512M -p zone_size=4,zone_nr_conv=2,zone_max_open=16 > /dev/null
serve img --json --transport command /tmp/b.img
jobs img
kill -TERM $P; wait $P; rc img-stop
$X create /tmp/fs.img --size 512 --zone_size 4 > /dev/null
serve fs --json --transport batch /tmp/fs.img
mkfs.btrfs -f -O zoned $D > $S/mkfs.out 2>&1; rc mkfs
mount -t btrfs $D $M 2> $S/mount.err; rc mount
dd if=/dev/urandom of=/tmp/f bs=1M count=6 status=none; sha256sum < /tmp/f > $S/src.sha
cp /tmp/f $M/f; sync; umount $M
mount -t btrfs $D $M 2>> $S/mount.err; sha256sum < $M/f > $S/back.sha; umount $M
kill -TERM $P; wait $P; rc fs-stop
$X create /tmp/r.img --size 256M -p zone_size=4,zone_nr_conv=2,zone_max_open=8 > /dev/null
serve rec0 --json --recoverable --transport batch /tmp/r.img
N=${{D#/dev/ublkb}}
fio --name=rec --filename=$D --direct=1 --zonemode=zbd --rw=randwrite --bs=16k --ioengine=io_uring --iodepth=8 \
  --numjobs=2 --offset=16M --offset_increment=64M --size=64M --io_size=24M --job_max_open_zones=3 --verify=crc32c \
  --output-format=json > $S/fio-rec.json 2> $S/fio-rec.err &
F=$!
for k in 1 2; do
  sleep 2; kill -KILL $P; wait $P
  serve rec$k --json --recover $N /tmp/r.img
done
wait $F; rc fio-rec
kill -TERM $P; wait $P; rc rec-stop
{planted_run}"#,
        share = share.display(),
    );
    let log = vm::run_guest_on("7.3", &script, share, "zoned=1 gb=1", &["--ublk", "--modules", "btrfs"], &guest);
    let file = |f: &str| std::fs::read_to_string(share.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    let rc = |f: &str| file(&format!("{f}.rc")).trim().parse::<i32>().unwrap();

    for n in ["mem", "img", "fs"] {
        let ready: Value = serde_json::from_str(file(&format!("{n}.out")).lines().next().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{n}: {e}: {}", file(&format!("{n}.err"))));
        let (path, mut offers_want) = if n == "img" {
            ("a command per request, data by user copy", vec!["batched commands"])
        } else {
            ("batched commands, data by user copy", vec![])
        };
        offers_want.extend(["automatic buffer registration", "zero copy", "a thread per request tag"]);
        assert_eq!(ready["path"], path, "{n}: {ready}");
        let offers: Vec<&str> =
            ready["driver_offers"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(offers, offers_want, "{ready}");
        let err = file(&format!("{n}.err"));
        assert!(err.contains(&format!(": {path};")), "{n}: the path on standard error: {err}");
        assert_eq!(rc(&format!("{n}-stop")), 0, "{n}: {err}");
    }
    for n in ["mem", "img"] {
        let fio = file(&format!("fio-{n}.json"));
        let v = vm::fio_report(&fio, &file(&format!("fio-{n}.err")), n);
        let jobs = v["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 5, "{n}: {fio}");
        for job in jobs {
            assert_eq!(job["error"], 0, "{n}: {job}\n{}", file(&format!("fio-{n}.err")));
            let written = job["write"]["io_bytes"].as_u64().unwrap();
            assert!(written >= 8 << 20, "{n}: {job}");
            assert_eq!(job["read"]["io_bytes"].as_u64(), Some(written), "{n}: verify read back what was written");
        }
        assert_eq!(rc(&format!("fio-{n}")), 0, "{n}: {}", file(&format!("fio-{n}.err")));
    }
    // btrfs: its data went as zone appends, each answered with the sector it landed
    // at in a batched commit; the file reads back after a remount.
    assert_eq!(rc("mkfs"), 0, "{}", file("mkfs.out"));
    assert_eq!(rc("mount"), 0, "{}", file("mount.err"));
    assert_eq!(file("back.sha"), file("src.sha"), "btrfs's file after a remount\n{}", file("mount.err"));
    let served = file("fs.err");
    let served = served.lines().find(|l| l.contains("requests served")).unwrap_or_else(|| panic!("{served}"));
    assert!(!served.contains("zone_append 0,"), "btrfs sent zone appends: {served}");
    eprintln!("btrfs on batched commands: {served}");

    // User recovery: the recovered servers take the batched commands the device was
    // added with, and fio's verify passes across both deaths.
    for k in 1..=2 {
        let ready: Value = serde_json::from_str(file(&format!("rec{k}.out")).lines().next().unwrap_or(""))
            .unwrap_or_else(|e| panic!("recovery {k}: {e}: {}", file(&format!("rec{k}.err"))));
        assert_eq!(ready["path"], "batched commands, data by user copy", "recovery {k}: {ready}");
        assert_eq!(ready["recoverable"], true, "{ready}");
    }
    vm::assert_verified(&file("fio-rec.json"), &file("fio-rec.err"), "across server deaths", 24 << 20);
    assert_eq!(rc("fio-rec"), 0, "{}", file("fio-rec.err"));
    assert_eq!(rc("rec-stop"), 0, "{}", file("rec2.err"));

    if planted {
        // One request left out of a commit: fio never completes (killed at its bound,
        // status 137) or fails; it never passes.
        let status = rc("fio-planted");
        assert_ne!(status, 0, "fio passed with a request dropped from a commit: {}", file("fio-planted.err"));
        eprintln!("commit-drops-one: fio ended with status {status} (137: killed at its {PLANTED_TIMEOUT_S} s bound)");
    }
}
