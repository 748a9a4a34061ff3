//! `zblk serve` in a Linux VM (6.12 or 7.3) with the ublk driver (`scripts/kernel-vm.sh
//! --ublk`), one boot: an image served as /dev/ublkbN takes fio's zoned write-and-verify
//! jobs (sequential, random with several jobs, QD > 1 through libaio and io_uring, with
//! and without `--max_open_zones`); `blkzone report` of the device and a direct read
//! of what fio wrote are taken before SIGTERM, and after the server stops the image
//! must report the same zones and read back the same bytes. Then the image is served
//! again, a write fsynced by fio, the server killed with SIGKILL: the image opens and
//! holds it. A memory device is served too, and a geometry the kernel cannot take is
//! refused. A memory device served with its standard output on `/dev/full` serves all
//! the same: its device is said on standard error, and it exits 3 once stopped.
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const MIB: u64 = 1 << 20;

/// fio's zoned write-and-verify jobs on the served device `$D`, each with its JSON
/// output in the share. Zones are 4 MiB, the first two conventional. Each job of a
/// random pair has its own 16 MiB and writes 2 MiB of it: a job that filled its zones
/// would reset one, overwriting what it is still to verify (fio's verify then fails on
/// any device). Each job gets its share of the open zone limit (`job_max_open_zones`):
/// a job that finds the limit taken by the others ends having written nothing.
const FIO: &str = r#"
F="fio --filename=$D --direct=1 --zonemode=zbd --verify=crc32c --output-format=json"
$F --name=seq --rw=write --bs=64k --ioengine=libaio --iodepth=8 --offset=8M --size=16M > $S/fio-seq.json 2> $S/fio-seq.err; echo $? > $S/fio-seq.rc
$F --name=rand --rw=randwrite --bs=16k --ioengine=io_uring --iodepth=8 --numjobs=2 --offset=32M --offset_increment=16M --size=16M --io_size=2M --max_open_zones=4 --job_max_open_zones=2 > $S/fio-rand.json 2> $S/fio-rand.err; echo $? > $S/fio-rand.rc
$F --name=randall --rw=randwrite --bs=8k --ioengine=libaio --iodepth=4 --numjobs=2 --offset=64M --offset_increment=16M --size=16M --io_size=2M --job_max_open_zones=4 > $S/fio-randall.json 2> $S/fio-randall.err; echo $? > $S/fio-randall.rc
"#;

/// The region fio wrote, compared byte for byte: 8 MiB .. 96 MiB (zones 2..24).
const REGION: (u64, u64) = (8 * MIB, 88 * MIB);

/// Starts `zblk serve ARGS` in the background as $P and waits for its first line (the
/// device) in $S/NAME.out; $D is that line.
const SERVE_FN: &str = r#"
serve() { echo "serve $(date +%s.%N)" >> $S/times; n=$1; shift; $X serve "$@" > $S/$n.out 2> $S/$n.err & P=$!; i=0
  while ! [ -s $S/$n.out ] && kill -0 $P 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  D=$(head -1 $S/$n.out); }
stop() { kill -$1 $P; wait $P; echo $? > $S/$2.rc; }
"#;

#[test]
fn serve_image_to_the_kernel() {
    let Some(script) = vm::ready_for_serve("serve_image_to_the_kernel") else {
        return;
    };
    let zblk = env!("CARGO_BIN_EXE_zblk");
    let dir = tempfile::Builder::new().prefix("zblk-serve-vm").tempdir_in("/var/tmp").unwrap();
    // ZBLK_KEEP_VM_DIR=1 keeps the share (the guest's outputs) for a look after a failure.
    let mut dir = Some(dir);
    let share: std::path::PathBuf = if std::env::var("ZBLK_KEEP_VM_DIR").is_ok_and(|v| v == "1") {
        let kept = dir.take().map(tempfile::TempDir::keep).unwrap();
        eprintln!("keeping {}", kept.display());
        kept
    } else {
        dir.as_ref().map(|d| d.path().to_path_buf()).unwrap()
    };
    let share = share.as_path();
    let zblk = vm::stage(share, zblk);
    let img = share.join("a.img");
    let created = Command::new(&zblk)
        .args(["create", &img.display().to_string(), "--size", "256", "--zone_size", "4", "--zone_nr_conv", "2"])
        .args(["-p", "zone_max_open=8"])
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let (off, len) = REGION;
    // libublk records each device in /run/ublksrvd, read-only in the guest: a tmpfs.
    let guest = format!(
        r#"S={share}; mount -t tmpfs tmpfs /run; cp {zblk} /tmp/zblk; X=/tmp/zblk; I=$S/a.img
{SERVE_FN}
serve serve1 $I
echo "$D" > $S/dev1
for a in zoned chunk_sectors nr_zones max_open_zones max_active_zones zone_append_max_bytes write_cache fua logical_block_size; do
  echo "$a $(cat /sys/block/${{D#/dev/}}/queue/$a)" >> $S/sysfs.txt; done
echo "fio $(date +%s.%N)" >> $S/times
{FIO}
echo "fio-done $(date +%s.%N)" >> $S/times
blkzone report $D > $S/blkzone.txt
dd if=$D bs=1M skip={skip} count={count} iflag=direct status=none | sha256sum | cut -d' ' -f1 > $S/device.sha
stop TERM serve1
$X report $I > $S/report-term.txt 2> $S/report-term.err; echo $? > $S/report-term.rc
serve serve2 $I
dd if=/dev/urandom of=/tmp/data bs=1M count=4 status=none
fio --name=sync --filename=$D --direct=1 --zonemode=zbd --rw=write --bs=128k --ioengine=libaio --iodepth=4 \
  --offset=200M --size=8M --end_fsync=1 --buffer_pattern=0x5a > $S/fio-sync.out 2>&1; echo $? > $S/fio-sync.rc
dd if=$D bs=1M skip=200 count=8 iflag=direct status=none | sha256sum | cut -d' ' -f1 > $S/sync.sha
blkzone report $D > $S/blkzone-kill.txt
stop KILL serve2
$X report $I > $S/report-kill.txt 2> $S/report-kill.err; echo $? > $S/report-kill.rc
serve mem --json --dev nullb:zone_size=8,size=512,zone_max_open=6
D=$(sed 's/.*"device":"\([^"]*\)".*/\1/' $S/mem.out)
cat /sys/block/${{D#/dev/}}/queue/nr_zones > $S/mem-zones 2>&1
fio --name=mem --filename=$D --direct=1 --zonemode=zbd --rw=randwrite --bs=4k --ioengine=io_uring --iodepth=16 \
  --numjobs=2 --offset_increment=64M --size=64M --io_size=2M --job_max_open_zones=3 --verify=crc32c \
  --output-format=json > $S/fio-mem.json 2> $S/fio-mem.err; echo $? > $S/fio-mem.rc
stop INT mem
serve pol --queues 1 --poll 100000 --dev nullb:zone_size=8,size=512,completion_nsec=0
cpu() {{ awk '{{print $14 + $15}}' /proc/$P/stat; }}
c0=$(cpu); t0=$(date +%s%N)
fio --name=pol --filename=$D --direct=1 --zonemode=zbd --rw=randwrite --bs=4k --ioengine=psync --iodepth=1 \
  --offset=64M --size=64M --io_size=4M --verify=crc32c --output-format=json > $S/fio-pol.json 2> $S/fio-pol.err
c1=$(cpu); t1=$(date +%s%N); sleep 3; c2=$(cpu); t2=$(date +%s%N)
echo "$c0 $c1 $c2 $t0 $t1 $t2 $(getconf CLK_TCK)" > $S/pol-cpu.txt
python3 -c "
import mmap, os, sys
fd, page, data = os.open(sys.argv[1], os.O_WRONLY | os.O_DIRECT), mmap.mmap(-1, 4096), os.urandom(64 * 4096)
open('/tmp/pages', 'wb').write(data)
for i in range(64):
    for z in (81920, 83968):
        page[:] = data[i * 4096:(i + 1) * 4096]
        os.pwrite(fd, page, (z + i) * 4096)
" $D
dd if=$D bs=256k skip=1280 count=1 iflag=direct status=none > /tmp/pages.back; echo $? > $S/pol-pages.rc
cmp -s /tmp/pages /tmp/pages.back && echo same > $S/pol-pages.txt || echo differ > $S/pol-pages.txt
stop TERM pol
$X serve --dev nullb:zone_size=3,size=96 > $S/bad.out 2> $S/bad.err; echo $? > $S/bad.rc
$X serve --dev nullb:zone_size=8,size=64,completion_nsec=0 > /dev/full 2> $S/full.err & P=$!; i=0
while ! grep -q 'serving /dev/ublkb' $S/full.err && kill -0 $P 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
D=$(sed -n 's|.*serving \(/dev/ublkb[0-9]*\)$|\1|p' $S/full.err | head -1)
blkzone report -c 1 $D > $S/full-zone.txt 2>&1
stop TERM full
serve stk --json --stack 'striped:chunk=64k[2*nullb:zone_size=4,size=128]'
D=$(sed 's/.*"device":"\([^"]*\)".*/\1/' $S/stk.out)
fio --name=stk --filename=$D --direct=1 --zonemode=zbd --rw=write --bs=256k --ioengine=libaio --iodepth=8 \
  --numjobs=2 --offset_increment=64M --size=16M --verify=crc32c --output-format=json > $S/fio-stk.json 2> $S/fio-stk.err
stop TERM stk
serve smr --json --no-data --queues 1 --depth 128 --dev smr-30tb:size=3T
D=$(sed 's/.*"device":"\([^"]*\)".*/\1/' $S/smr.out)
for qd in 1 32; do fio --name=smr$qd --filename=$D --direct=1 --zonemode=zbd --rw=write --bs=1M --ioengine=libaio \
  --iodepth=$qd --offset=$((qd*1024))M --size=1G --time_based --runtime=2 --output-format=json > $S/fio-smr$qd.json \
  2> $S/fio-smr$qd.err; done
stop TERM smr
"#,
        share = share.display(),
        skip = off / MIB,
        count = len / MIB,
    );
    let log = vm::run_guest(&script, share, "zoned=1 gb=1", &["--ublk"], &guest);
    let file = |f: &str| std::fs::read_to_string(share.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    let rc = |f: &str| file(&format!("{f}.rc")).trim().parse::<i32>().unwrap();

    // The device came up and the kernel sees the image's geometry.
    let dev = file("dev1");
    assert!(dev.trim().starts_with("/dev/ublkb"), "first line: {dev:?}; stderr: {}", file("serve1.err"));
    let sysfs = file("sysfs.txt");
    for want in [
        "zoned host-managed",
        "chunk_sectors 8192",
        "nr_zones 64",
        "max_open_zones 8",
        "write_cache write back",
        "fua 1",
    ] {
        assert!(sysfs.lines().any(|l| l == want), "sysfs: expected '{want}' in:\n{sysfs}");
    }

    // fio's jobs: zero errors, and data written and verified.
    for job in ["seq", "rand", "randall"] {
        check_fio(&file(&format!("fio-{job}.json")), job, &file(&format!("fio-{job}.err")));
        assert_eq!(rc(&format!("fio-{job}")), 0, "fio {job}: {}", file(&format!("fio-{job}.err")));
    }

    // SIGTERM: status 0, and the image holds what the kernel saw.
    assert_eq!(rc("serve1"), 0, "serve after SIGTERM: {}", file("serve1.err"));
    // The image's zones once the server has stopped are the device's, conditions too.
    // (Taken in the guest before the image is served again: the next server's writes
    // move other zones, and the device closes implicitly open ones at its open limit.)
    assert_eq!(rc("report-term"), 0, "{}", file("report-term.err"));
    let blkzone = file("blkzone.txt");
    assert_eq!(blkzone.lines().count(), 64, "blkzone report:\n{blkzone}");
    assert_eq!(file("report-term.txt"), blkzone, "zblk report of the image against blkzone report of the device");
    let written = blkzone.lines().take(24).filter(|l| !l.contains("wptr 0x000000 ")).count();
    assert!(written >= 6, "fio wrote into too few zones ({written}):\n{blkzone}");
    let read = share.join("read.bin");
    zblk_read(&zblk, &img, off, len, &read);
    assert_eq!(sha256(&read), file("device.sha").trim(), "the image's bytes against the device's before SIGTERM");

    // SIGKILL after fio's fsync: the image opens, reports what the device reported and
    // holds the fsynced data.
    assert_eq!(rc("fio-sync"), 0, "{}", file("fio-sync.out"));
    assert_eq!(rc("report-kill"), 0, "the image after SIGKILL: {}", file("report-kill.err"));
    let blkzone_kill = file("blkzone-kill.txt");
    assert_eq!(file("report-kill.txt"), blkzone_kill, "zones after SIGKILL against the device's before it");
    let report = Command::new(&zblk).args(["report", &img.display().to_string()]).output().unwrap();
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    assert_eq!(String::from_utf8_lossy(&report.stdout), blkzone_kill, "the host's report of the image after SIGKILL");
    zblk_read(&zblk, &img, 200 * MIB, 8 * MIB, &read);
    let data = std::fs::read(&read).unwrap();
    assert!(data.iter().all(|&b| b == 0x5a), "the fsynced write is not all in the image after SIGKILL");
    assert_eq!(sha256(&read), file("sync.sha").trim());

    // The memory device: the JSON ready line, fio's verify, SIGINT.
    let mem: Value = serde_json::from_str(file("mem.out").lines().next().unwrap_or(""))
        .unwrap_or_else(|e| panic!("--json ready line: {e}: {}", file("mem.err")));
    assert!(mem["device"].as_str().is_some_and(|d| d.starts_with("/dev/ublkb")), "{mem}");
    assert_eq!(file("mem-zones").trim(), "64");
    check_fio(&file("fio-mem.json"), "mem", &file("fio-mem.err"));
    assert_eq!(rc("mem"), 0, "serve --dev after SIGINT: {}", file("mem.err"));

    // Polling (--poll 100000: 100 ms, longer than any gap between fio's requests in
    // the emulated guest, even on a loaded host): fio's verify passes; while fio's QD 1
    // requests come, the queue's thread finds nearly every one while it looks again,
    // without sleeping (its summary counts both); once they stop it sleeps again: 3 s
    // without I/O cost it next to no CPU time (the first 100 ms of them polling).
    check_fio(&file("fio-pol.json"), "pol", &file("fio-pol.err"));
    // A read of 64 pages the memory device holds apart (two zones written a page each
    // in turn): one vectored write of 64 slices of its pages into the kernel's request.
    assert_eq!(rc("pol-pages"), 0, "reading 256 KiB back from the memory device");
    assert_eq!(file("pol-pages.txt").trim(), "same", "the memory device's pages read back in another order");
    assert_eq!(rc("pol"), 0, "serve --poll after SIGTERM: {}", file("pol.err"));
    let pol = file("pol.err");
    let count = |what: &str| -> u64 {
        let line = pol.lines().find(|l| l.contains("batches of requests and completions: ")).unwrap_or("");
        let at = line.find(what).unwrap_or_else(|| panic!("no '{what}' in the polling summary: {pol}"));
        line[..at].rsplit(|c: char| !c.is_ascii_digit()).next().and_then(|n| n.parse().ok()).unwrap_or(0)
    };
    let (found, slept) = (count(" found while polling"), count(" after a wait"));
    let cpu: Vec<f64> = file("pol-cpu.txt").split_whitespace().map(|x| x.parse().unwrap()).collect();
    let idle = (cpu[2] - cpu[1]) / cpu[6] / ((cpu[5] - cpu[4]) / 1e9);
    eprintln!(
        "serve --poll: {found} batches found while polling, {slept} after a wait; CPU {:.0} % of 3 s idle",
        idle * 100.0
    );
    assert!(found >= 1500 && found > 4 * slept, "serve --poll did not poll: {pol}");
    assert!(idle < 0.1, "the polling server's CPU time was {:.0} % of 3 s without I/O: it kept polling", idle * 100.0);

    // A zone size the kernel refuses is refused before the kernel sees it.
    assert_eq!(rc("bad"), 1);
    let bad = file("bad.err");
    assert!(bad.contains("power of two") && !bad.contains("panicked"), "{bad}");
    assert!(file("bad.out").is_empty());

    // Standard output on /dev/full: the device serves all the same (the kernel reports
    // its zones), its path said on standard error; once stopped, exit 3 (done, output
    // lost) and what was done said again.
    let full = file("full.err");
    assert!(full.contains("zblk: standard output could not be written: serving /dev/ublkb"), "{full}");
    assert!(file("full-zone.txt").contains("start: 0x000000000"), "{}\n{full}", file("full-zone.txt"));
    assert_eq!(rc("full"), 3, "serve with its output on /dev/full, after SIGTERM: {full}");
    assert!(full.contains("No space left on device (os error 28); done all the same: served /dev/ublkb"), "{full}");
    assert!(!full.contains("panicked"), "{full}");

    // A striped stack of two zoned memory disks, paced: fio writes and verifies.
    let stk: Value = serde_json::from_str(file("stk.out").lines().next().unwrap_or(""))
        .unwrap_or_else(|e| panic!("--stack ready line: {e}: {}", file("stk.err")));
    assert_eq!(stk["data"], "memory", "{stk}");
    check_fio(&file("fio-stk.json"), "stk", &file("fio-stk.err"));
    assert_eq!(rc("stk"), 0, "serve --stack after SIGTERM: {}", file("stk.err"));

    // The SMR model paced to wall time: never faster than the same fio job simulated
    // on the host in virtual time (`zblk bench`, a fresh model) by more than 10 %. Not
    // the media rate: over 2 s the model's write cache takes a burst well above it.
    // A server that completed requests without waiting for the model would be far
    // faster than the simulation; the VM's own costs only make it slower.
    let smr: Value = serde_json::from_str(file("smr.out").lines().next().unwrap_or(""))
        .unwrap_or_else(|e| panic!("--dev smr-30tb ready line: {e}: {}", file("smr.err")));
    assert_eq!(smr["data"], "none: reads return zeroes", "{smr}");
    for qd in [1, 32] {
        let text = file(&format!("fio-smr{qd}.json"));
        let v: Value = serde_json::from_str(&text[text.find('{').unwrap_or(0)..])
            .unwrap_or_else(|e| panic!("fio smr qd {qd}: {e}: {text}"));
        let job = &v["jobs"][0];
        assert_eq!(job["error"], 0, "fio smr qd {qd}: {job}");
        let mb_s = job["write"]["bw_bytes"].as_f64().unwrap_or(0.0) / 1e6;
        let sim = simulated_smr_write(&zblk, qd);
        eprintln!(
            "served smr-30tb, 1 MiB sequential writes, QD {qd}: {mb_s:.1} MB/s (SIMULATED on the host: {sim:.1})"
        );
        assert!(mb_s > 0.0 && mb_s <= sim * 1.1, "QD {qd}: served {mb_s:.1} MB/s, the model simulated gives {sim:.1}");
    }
    assert_eq!(rc("smr"), 0, "serve --dev smr-30tb after SIGTERM: {}", file("smr.err"));
}

/// MB/s of the guest's fio SMR job at `qd` (1 MiB sequential writes from
/// `qd` GiB on, 1 GiB, 2 s) simulated on the host by `zblk bench` in virtual time.
fn simulated_smr_write(zblk: &str, qd: u32) -> f64 {
    let out = Command::new(zblk)
        .args(["bench", "--dev", "smr-30tb:size=3T", "--rw", "write", "--bs", "1M", "--zonemode", "zbd", "--json"])
        .args(["--iodepth", &qd.to_string(), "--offset", &format!("{}M", qd * 1024), "--size", "1G", "--runtime", "2s"])
        .output()
        .unwrap();
    assert!(out.status.success(), "zblk bench: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("zblk bench --json: {e}"));
    let bw = v["jobs"][0]["write"]["bw_bytes"].as_f64().unwrap_or_else(|| panic!("no write bw_bytes: {v}"));
    bw / 1e6
}

/// Every job of a fio JSON output finished with error 0, wrote, and read back (the
/// verify phase).
fn check_fio(json: &str, job: &str, err: &str) {
    // fio may print warnings before the JSON document on its standard output.
    let json = json.find('{').map_or(json, |i| &json[i..]);
    let v: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("fio {job}: not JSON ({e}): {json}\n{err}"));
    let jobs = v["jobs"].as_array().unwrap_or_else(|| panic!("fio {job}: no jobs: {json}"));
    assert!(!jobs.is_empty());
    for j in jobs {
        assert_eq!(j["error"], 0, "fio {job}: {j}\n{err}");
        assert!(j["write"]["io_bytes"].as_u64().unwrap_or(0) > 0, "fio {job} wrote nothing: {j}");
        assert!(j["read"]["io_bytes"].as_u64().unwrap_or(0) > 0, "fio {job} verified nothing: {j}");
    }
}

fn zblk_read(zblk: &str, img: &Path, off: u64, len: u64, out: &Path) {
    let r = Command::new(zblk)
        .args(["read", &img.display().to_string(), "-o", &off.to_string(), "-l", &len.to_string()])
        .args(["-O", &out.display().to_string()])
        .output()
        .unwrap();
    assert!(r.status.success(), "zblk read: {}", String::from_utf8_lossy(&r.stderr));
}

fn sha256(path: &Path) -> String {
    let o = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap_or("").to_string()
}
