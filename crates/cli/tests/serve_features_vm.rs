//! What a served device offers beyond reads, writes and zone commands, in one boot of
//! the Linux VM (6.12 or 7.3) (`scripts/kernel-vm.sh --ublk`):
//!
//! - **discard**: `blkdiscard` of a conventional zone's range reaches the image (the
//!   range reads back as zeroes, from the device and from the image once the server has
//!   stopped); of a sequential zone, EINVAL (zblk frees a sequential zone's space by a
//!   reset);
//! - **write zeroes**: `fallocate --punch-hole` (WRITE_ZEROES, unmapped) and
//!   `fallocate --zero-range` (WRITE_ZEROES with NOUNMAP) at a zone's write pointer move
//!   it like a write, across a zone boundary too; ahead of it, EIO; `blkdiscard -z`
//!   likewise; the NOUNMAP flag reaches zblk (the server counts it);
//! - **user recovery**: a recoverable image served under fio's write-and-verify job,
//!   its server killed with SIGKILL three times and each time taken over by `zblk
//!   serve --recover N`: the device stays, fio completes with no error and its verify
//!   passes; a live device, and one that does not exist, are refused;
//! - **the 30 TB zone report**: the full `smr-30tb` model served: the kernel takes its
//!   111,758 zones (the last request of a multi-request report used to fail the
//!   revalidation) and `blkzone report` lists them as the model has them.
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;
use common::vm::SERVE_JSON_FN as SERVE_FN;
use serde_json::Value;
use std::process::Command;

#[test]
fn discard_write_zeroes_user_recovery_and_the_30tb_report() {
    let Some(script) = vm::ready_for_serve("discard_write_zeroes_user_recovery_and_the_30tb_report") else {
        return;
    };
    let dir = tempfile::Builder::new().prefix("zblk-serve-features").tempdir_in("/var/tmp").unwrap();
    let share = dir.path();
    let zblk = vm::stage(share, env!("CARGO_BIN_EXE_zblk"));
    let guest = format!(
        r#"S={share}; mount -t tmpfs tmpfs /run; cp {zblk} /tmp/zblk; X=/tmp/zblk
{SERVE_FN}
# Discard and write zeroes: 64 MiB, 4 MiB zones, the first two conventional.
$X create /tmp/z.img --size 64M -p zone_size=4,zone_nr_conv=2 > /dev/null
serve zero /tmp/z.img
B=${{D#/dev/}}
for a in discard_max_bytes write_zeroes_max_bytes; do echo "$a $(cat /sys/block/$B/queue/$a)" >> $S/limits; done
dd if=/dev/urandom of=$D bs=1M count=2 oflag=direct status=none
blkdiscard -o 0 -l 1M $D 2> $S/discard-conv.err; rc discard-conv
dd if=$D bs=1M count=1 iflag=direct status=none > $S/discarded.bin
blkdiscard -o 8M -l 4M $D 2> $S/discard-seq.err; rc discard-seq
dd if=/dev/urandom of=$D bs=1M seek=8 count=1 oflag=direct status=none
fallocate --punch-hole --keep-size -o 9M -l 1M $D 2> $S/punch.err; rc punch
fallocate --zero-range -o 10M -l 1M $D 2> $S/zero-range.err; rc zero-range
fallocate --zero-range -o 13M -l 1M $D 2> $S/ahead.err; rc ahead
# After a failed write the kernel's zone write plug waits for a zone report to learn
# the write pointer again (BLK_ZONE_WPLUG_NEED_WP_UPDATE): writes to the zone fail
# until then, on any zoned device.
blkzone report -o 24576 -c 1 $D > /dev/null
dd if=/dev/urandom of=$D bs=1M seek=12 count=3 oflag=direct status=none
fallocate --zero-range -o 15M -l 2M $D 2> $S/across.err; rc across
blkdiscard -z -o 20M -l 2M $D 2> $S/zeroout.err; rc zeroout
dd if=$D bs=1M skip=8 count=16 iflag=direct status=none | sha256sum | cut -d' ' -f1 > $S/zero-device.sha
blkzone report $D > $S/zero-blkzone.txt
kill -TERM $P; wait $P; rc zero-stop
$X report /tmp/z.img > $S/zero-report.txt
$X read /tmp/z.img -o 8M -l 16M -O $S/zero-image.bin 2> $S/zero-read.err
$X read /tmp/z.img -o 0 -l 1M -O $S/discarded-image.bin 2>> $S/zero-read.err
# User recovery: fio writes and verifies while its server is killed three times.
$X create /tmp/r.img --size 256M -p zone_size=4,zone_nr_conv=2,zone_max_open=8 > /dev/null
serve rec0 --json --recoverable /tmp/r.img
N=${{D#/dev/ublkb}}; echo $D > $S/rec-dev
fio --name=rec --filename=$D --direct=1 --zonemode=zbd --rw=randwrite --bs=16k --ioengine=io_uring --iodepth=8 \
  --numjobs=2 --offset=16M --offset_increment=64M --size=64M --io_size=24M --job_max_open_zones=3 --verify=crc32c \
  --output-format=json > $S/fio-rec.json 2> $S/fio-rec.err &
F=$!
for k in 1 2 3; do
  sleep 2
  kill -KILL $P; wait $P; echo $? > $S/kill$k.rc
  [ -b $D ] && echo present >> $S/kept
  serve rec$k --json --recover $N /tmp/r.img
done
$X serve --recover $N /tmp/r.img > $S/inuse.out 2> $S/inuse.err; rc inuse
$X create /tmp/r2.img --size 256M -p zone_size=4,zone_nr_conv=2,zone_max_open=8 > /dev/null
$X serve --recover $N /tmp/r2.img > $S/live.out 2> $S/live.err; rc live
$X serve --recover 77 /tmp/r.img > $S/none.out 2> $S/none.err; rc none
wait $F; rc fio-rec
# A dead server's device, recovered from an image of another geometry: refused, and
# the device is left as it was (the right image then recovers it).
kill -KILL $P; wait $P
$X create /tmp/r3.img --size 128M -p zone_size=4,zone_nr_conv=2,zone_max_open=8 > /dev/null
$X serve --recover $N /tmp/r3.img > $S/geo.out 2> $S/geo.err; rc geo
serve rec4 --json --recover $N /tmp/r.img
kill -TERM $P; wait $P; rc rec-stop
# The full 30 TB SMR model: its zone report.
serve smr --no-data --dev smr-30tb
# A device added without --recoverable cannot be recovered.
$X serve --recover ${{D#/dev/ublkb}} /tmp/r.img > $S/norec.out 2> $S/norec.err; rc norec
cat /sys/block/${{D#/dev/}}/queue/nr_zones > $S/smr-zones
blkzone report $D > $S/smr-blkzone.txt
kill -TERM $P; wait $P; rc smr-stop
# Batched commands asked for: 7.3's driver takes them, 6.12's is refused before any
# device is added.
ls /sys/block | grep -c ublkb > $S/batch-before
timeout 60 $X serve --json --transport batch --dev nullb > $S/batch.out 2> $S/batch.err & P=$!
i=0; while ! [ -s $S/batch.out ] && kill -0 $P 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
ls /sys/block | grep -c ublkb > $S/batch-during
kill -TERM $P 2>/dev/null; wait $P; rc batch
"#,
        share = share.display(),
    );
    let log = vm::run_guest(&script, share, "zoned=1 gb=1", &["--ublk"], &guest);
    let file = |f: &str| std::fs::read_to_string(share.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    let bytes = |f: &str| std::fs::read(share.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    let rc = |f: &str| file(&format!("{f}.rc")).trim().parse::<i32>().unwrap();

    // Discard: offered, done on a conventional zone, refused on a sequential one.
    let limits = file("limits");
    assert!(limits.contains("discard_max_bytes 4194304"), "{limits}");
    assert!(limits.contains("write_zeroes_max_bytes 4194304"), "{limits}");
    assert_eq!(rc("discard-conv"), 0, "{}", file("discard-conv.err"));
    assert!(bytes("discarded.bin").iter().all(|&b| b == 0), "a discarded range reads zeroes");
    assert!(bytes("discarded-image.bin").iter().all(|&b| b == 0), "and so does the image once stopped");
    assert_ne!(rc("discard-seq"), 0);
    assert!(file("discard-seq.err").contains("Invalid argument"), "{}", file("discard-seq.err"));

    // Write zeroes at the write pointer, unmapped and not, across a zone boundary;
    // ahead of the write pointer, an I/O error.
    for step in ["punch", "zero-range", "across", "zeroout"] {
        assert_eq!(rc(step), 0, "{step}: {}", file(&format!("{step}.err")));
    }
    assert_ne!(rc("ahead"), 0);
    assert!(file("ahead.err").contains("Input/output error"), "{}", file("ahead.err"));
    let zones = file("zero-blkzone.txt");
    let wp = |n: usize| zones.lines().nth(n).and_then(|l| l.split("wptr ").nth(1)).map(|w| w[..8].to_string());
    assert_eq!(wp(2).as_deref(), Some("0x001800"), "zone 2: 1 MiB written, 2 MiB zeroed:\n{zones}");
    assert_eq!(wp(3).as_deref(), Some("0x002000"), "zone 3: 3 MiB written, zeroed to its end:\n{zones}");
    assert_eq!(wp(4).as_deref(), Some("0x000800"), "zone 4: zeroed across the boundary:\n{zones}");
    assert_eq!(wp(5).as_deref(), Some("0x001000"), "zone 5: blkdiscard -z:\n{zones}");
    assert_eq!(rc("zero-stop"), 0, "{}", file("zero.err"));
    assert_eq!(file("zero-report.txt"), zones, "the image's zones against the device's");
    let image = bytes("zero-image.bin");
    assert_eq!(sha256(&share.join("zero-image.bin")), file("zero-device.sha").trim(), "the image's bytes");
    let mib = |m: usize| &image[m << 20..(m + 1) << 20];
    for m in [1, 2, 7, 8, 12, 13] {
        // 9M-11M (zone 2's zeroes), 15M-17M (across zones 3-4), 20M-22M (zone 5).
        assert!(mib(m).iter().all(|&b| b == 0), "MiB {} of the image is zeroes", m + 8);
    }
    assert!(mib(0).iter().any(|&b| b != 0), "zone 2's written MiB is data");
    let served = file("zero.err");
    let served = served.lines().find(|l| l.contains("requests served")).unwrap_or_else(|| panic!("{served}"));
    assert!(served.contains("discard 2,"), "{served}");
    assert!(!served.contains("write_zeroes 0 "), "{served}");
    assert!(!served.contains("(nounmap 0)"), "NOUNMAP reaches zblk: {served}");
    eprintln!("discard and write zeroes: {served}");

    // User recovery: fio's verify passes across three SIGKILLs of its server.
    for k in 1..=3 {
        assert_eq!(rc(&format!("kill{k}")), 137, "kill {k}");
        let ready: Value = serde_json::from_str(file(&format!("rec{k}.out")).lines().next().unwrap_or(""))
            .unwrap_or_else(|e| panic!("recovery {k}: {e}: {}", file(&format!("rec{k}.err"))));
        assert_eq!(ready["device"].as_str(), Some(file("rec-dev").trim()), "recovery {k} serves the same device");
        assert_eq!(ready["recoverable"], true, "{ready}");
        // The path requests and data take, and what the driver offers beside it:
        // Linux 7.3's driver takes a zoned device with batched commands, which the
        // default (`--transport auto`) takes, automatic buffer registration and zero
        // copy (docs/serve.md, "The driver's paths"); 6.12's has none of them, and
        // the device takes a command per request. A recovered device keeps the
        // path it was added with.
        let offers: Vec<&str> =
            ready["driver_offers"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        let path = if common::vm::kernel() == "7.3" {
            assert_eq!(offers, ["automatic buffer registration", "zero copy", "a thread per request tag"], "{ready}");
            "batched commands, data by user copy"
        } else {
            assert!(offers.is_empty(), "{ready}");
            "a command per request, data by user copy"
        };
        assert_eq!(ready["path"], path, "{ready}");
        let err = file(&format!("rec{k}.err"));
        let said = format!("zblk: {}: {path}", file("rec-dev").trim());
        assert!(err.contains(&said), "the path on standard error: {err}");
    }
    assert_eq!(file("kept").lines().count(), 3, "the device stays while its server is dead");
    let replayed =
        (1..=3).filter(|k| file(&format!("rec{k}.err")).contains("in flight when the last server died")).count();
    eprintln!("user recovery: {replayed} of 3 recoveries met a write given again that the image already held");
    vm::assert_verified(&file("fio-rec.json"), &file("fio-rec.err"), "across server deaths", 24 << 20);
    assert_eq!(rc("fio-rec"), 0, "{}", file("fio-rec.err"));
    assert_eq!(rc("geo"), 1);
    assert!(file("geo.err").contains("has another geometry (524288 sectors"), "{}", file("geo.err"));
    let ready: Value = serde_json::from_str(file("rec4.out").lines().next().unwrap_or(""))
        .unwrap_or_else(|e| panic!("recovery after a refused one: {e}: {}", file("rec4.err")));
    assert_eq!(ready["device"].as_str(), Some(file("rec-dev").trim()), "{ready}");
    assert_eq!(rc("rec-stop"), 0, "{}", file("rec4.err"));
    assert_eq!(rc("norec"), 1);
    assert!(file("norec.err").contains("was not added recoverable"), "{}", file("norec.err"));
    assert_eq!(rc("inuse"), 1);
    assert!(file("inuse.err").contains("in use by another process"), "{}", file("inuse.err"));
    assert_eq!(rc("live"), 1);
    assert!(file("live.err").contains("live: its server is running"), "{}", file("live.err"));
    assert_eq!(rc("none"), 1);
    assert!(!file("none.err").contains("panicked") && !file("none.err").is_empty(), "{}", file("none.err"));

    // The 30 TB model's zones, all of them, as the model has them.
    let spec = zblk_sim::presets::DeviceSpec::parse("smr-30tb").unwrap();
    let geo = spec.params.validate().unwrap();
    assert_eq!(file("smr-zones").trim(), geo.nr_zones().to_string());
    let report = file("smr-blkzone.txt");
    assert_eq!(report.lines().count(), geo.nr_zones() as usize, "blkzone report of the 30 TB model");
    let last = geo.zone_start(zblk_core::units::ZoneNo(geo.nr_zones() - 1));
    let want = format!(
        "  start: 0x{:09x}, len 0x{:06x}, cap 0x{:06x}, wptr 0x000000",
        last.0,
        geo.zone_sectors(),
        geo.zone_sectors()
    );
    assert!(report.lines().last().is_some_and(|l| l.starts_with(&want)), "last zone: want {want}");
    let conv = report.lines().filter(|l| l.contains("CONVENTIONAL")).count();
    assert_eq!(conv, geo.nr_conv() as usize, "conventional zones");
    assert_eq!(rc("smr-stop"), 0, "{}", file("smr.err"));

    // `--transport batch`: served on 7.3's driver, refused on 6.12's before a device is added.
    let (batch_out, batch_err) = (file("batch.out"), file("batch.err"));
    if common::vm::kernel() == "7.3" {
        assert_eq!(rc("batch"), 0, "{batch_err}");
        assert!(batch_out.contains(r#""path":"batched commands, data by user copy""#), "{batch_out}");
        assert_eq!(file("batch-during").trim(), "1", "one device while served: {batch_out}");
    } else {
        assert_eq!(rc("batch"), 1, "{batch_out}{batch_err}");
        assert!(batch_err.contains("this ublk driver does not offer them (UBLK_F_BATCH_IO"), "{batch_err}");
        assert_eq!(file("batch-during").trim(), file("batch-before").trim(), "no device added: {batch_err}");
    }
}

fn sha256(path: &std::path::Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap_or("").to_string()
}
