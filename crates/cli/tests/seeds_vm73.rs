//! What only Linux 7.3 has, checked against zblk in the 7.3 VM (`scripts/kernel-vm.sh
//! --kernel 7.3 --ublk`), whatever `ZBLK_VM_KERNEL` says (Linux 6.12 has neither
//! `zoned_qd1_writes` nor write zeroes with unmap, so these tests run once, on 7.3):
//!
//! - The kernel's single issuer against zblk's (`qd1`): the order in which a device
//!   receives writes, zone by zone. The kernel's: a served device (`zblk serve
//!   --trace`, zblk's engine passing the kernel's order on) under `zoned_qd1_writes` =
//!   1; zblk's: the same device and job simulated (`zblk trace --policy qd1`), for one
//!   job writing across zones at QD 128 and for four jobs each in a zone of its own.
//!   Both drain a zone's writes before the next zone (one visit a zone); per-zone
//!   plugging, the kernel's (`zoned_qd1_writes` = 0) and zblk's (`zwp`), interleaves
//!   them. zblk's issuer broken on purpose (`issuer-one-per-visit`, planted) is told
//!   apart. And zblk's `qd1` behind the kernel's per-zone plugging is shown to
//!   degenerate to one write a visit: the kernel releases a zone's next write only when
//!   the previous one completes, so zblk's plug never holds two.
//! - Write zeroes with unmap: what a served device declares (ublk has no parameter
//!   for unmapped write zeroes, so the kernel sees `write_zeroes_unmap_max_hw_bytes`
//!   0 whatever zblk's device can do), what `fallocate(2)` on it gets (EOPNOTSUPP for
//!   `FALLOC_FL_WRITE_ZEROES`, NOUNMAP for `FALLOC_FL_ZERO_RANGE`, unmap allowed for
//!   `FALLOC_FL_PUNCH_HOLE`), what `write_zeroes_unmap_max_bytes` takes, and the
//!   NOUNMAP each WRITE_ZEROES carries when it reaches zblk's device (`--trace`),
//!   forced by zblk where its device cannot unmap; with `nounmap-dropped` and
//!   `nounmap-not-forced` planted, the device sees the wrong flag and the check says so.
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;

/// The device of the order runs: 256 MiB of 16 MiB zones, rotational (so the kernel's
/// `zoned_qd1_writes` starts at 1), each request 1 ms in the null model, so that fio
/// keeps every job's queue full while the device works.
const ORDER_DEV: &str = "nullb:size=256,zone_size=16,rotational=1,completion_nsec=1000000,max_sectors=512";

/// Sectors of a zone of [`ORDER_DEV`].
const ZONE_SECTORS: u64 = 16 << 11;

/// `run NAME QD1 POLICY -- FIO-ARGS`: serves [`ORDER_DEV`] with zblk's `POLICY` and its
/// trace in $S/NAME.trace, sets the kernel's `zoned_qd1_writes` to QD1 (its value
/// before, and after, in $S/NAME.qd1), runs fio, stops the server.
const RUN_FN: &str = r#"
run() { n=$1 qd1=$2 pol=$3; shift 4
  $X serve --dev $DEVSPEC --no-data --queues 1 --depth 256 --policy $pol --trace $S/$n.trace --json \
    > $S/$n.out 2> $S/$n.err & P=$!; i=0
  while ! grep -q ublkb $S/$n.out 2>/dev/null && kill -0 $P 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  D=$(sed 's/.*"device":"\([^"]*\)".*/\1/' $S/$n.out); Q=/sys/block/${D#/dev/}/queue
  [ -b "$D" ] || { echo "$n: no device"; cat $S/$n.err; return 1; }
  before=$(cat $Q/zoned_qd1_writes); echo $qd1 > $Q/zoned_qd1_writes; echo "$before $(cat $Q/zoned_qd1_writes)" > $S/$n.qd1
  fio --name=$n --filename=$D --direct=1 --zonemode=zbd --ioengine=libaio --rw=write "$@" > $S/$n.fio 2>&1
  echo $? > $S/$n.rc
  kill -TERM $P; wait $P; }
"#;

/// One job across four zones (zones 0..4) at QD 128.
const SEQ: &str = "--bs=256k --iodepth=128 --size=64M";
/// Four jobs, each writing a zone of its own (zones 4..8) at QD 32.
const JOBS: &str = "--bs=128k --iodepth=32 --numjobs=4 --offset=64M --offset_increment=16M --size=16M";

/// The runs under the kernel: (name, `zoned_qd1_writes`, zblk's policy, fio's job).
const RUNS: [(&str, u8, &str, &str); 5] = [
    ("seq-kernel", 1, "zwp", SEQ),
    ("seq-plugging", 0, "zwp", SEQ),
    ("seq-behind", 0, "qd1", SEQ),
    ("jobs-kernel", 1, "zwp", JOBS),
    ("jobs-plugging", 0, "zwp", JOBS),
];

/// The same jobs simulated by zblk (`zblk trace`): (name, policy, planted bug, job).
const SIMULATED: [(&str, &str, &str, &[&str]); 5] = [
    ("seq-zblk", "qd1", "", &["--bs", "256k", "--iodepth", "128", "--size", "64M"]),
    ("seq-zblk-plugging", "zwp", "", &["--bs", "256k", "--iodepth", "128", "--size", "64M"]),
    ("jobs-zblk", "qd1", "", ZBLK_JOBS),
    ("jobs-zblk-plugging", "zwp", "", ZBLK_JOBS),
    ("jobs-zblk-planted", "qd1", "issuer-one-per-visit", ZBLK_JOBS),
];
/// [`JOBS`] as `zblk trace` takes it (its jobs' regions follow one another).
const ZBLK_JOBS: &[&str] = &["--bs", "128k", "--iodepth", "32", "--numjobs", "4", "--offset", "64M", "--size", "16M"];

/// `zblk trace` of [`ORDER_DEV`] with `policy` (and `planted`), writing `job`.
fn simulated_trace(policy: &str, planted: &str, job: &[&str]) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_zblk"));
    cmd.args(["trace", "--stack", ORDER_DEV, "--rw", "write", "--policy", policy, "--actions", "D"]).args(job);
    if !planted.is_empty() {
        cmd.env("ZBLK_MUTATION", planted);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "zblk trace: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The writes the device received (`D` lines of a trace), in order: (zone, sectors).
fn writes_received(trace: &str) -> Vec<(u64, u64)> {
    trace
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // dev cpu seq time pid action rwbs sector + n [comm]
            if f.len() < 10 || f[5] != "D" || !f[6].contains('W') {
                return None;
            }
            Some((f[7].parse::<u64>().ok()? / ZONE_SECTORS, f[9].parse().ok()?))
        })
        .collect()
}

/// The zones of the writes the device received, in order.
fn zones_received(trace: &str) -> Vec<u64> {
    writes_received(trace).into_iter().map(|w| w.0).collect()
}

/// The visits of a zone sequence: each run of writes to one zone, as (zone, writes).
fn visits(zones: &[u64]) -> Vec<(u64, usize)> {
    let mut v: Vec<(u64, usize)> = Vec::new();
    for &z in zones {
        match v.last_mut() {
            Some((last, n)) if *last == z => *n += 1,
            _ => v.push((z, 1)),
        }
    }
    v
}

/// Whether every zone was visited once: its writes in one run, never interleaved.
fn one_visit_a_zone(v: &[(u64, usize)]) -> bool {
    let mut zones: Vec<u64> = v.iter().map(|x| x.0).collect();
    zones.sort_unstable();
    zones.dedup();
    zones.len() == v.len()
}

#[test]
fn the_kernels_single_issuer_and_zblks_drain_each_zone_before_the_next() {
    let Some(script) = vm::ready_for_serve("the_kernels_single_issuer_and_zblks_drain_each_zone_before_the_next")
    else {
        return;
    };
    let (_keep, share) = vm::share("zblk-qd1-order");
    let share = share.as_path();
    let zblk = vm::stage(share, env!("CARGO_BIN_EXE_zblk"));
    let mut guest = format!(
        "S={share}; mount -t tmpfs tmpfs /run; cp {zblk} /tmp/zblk; X=/tmp/zblk; DEVSPEC='{ORDER_DEV}'\n{RUN_FN}",
        share = share.display()
    );
    for (name, qd1, policy, fio) in RUNS {
        guest.push_str(&format!("run {name} {qd1} {policy} -- {fio}\n"));
    }
    let log = vm::run_guest_on("7.3", &script, share, "zoned=1 gb=1", &["--ublk"], &guest);
    let file = |f: &str| std::fs::read_to_string(share.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    let mut seen: Vec<(&str, Vec<(u64, u64)>)> = Vec::new();
    for (name, qd1, ..) in RUNS {
        assert_eq!(file(&format!("{name}.rc")).trim(), "0", "{name}: fio failed:\n{}", file(&format!("{name}.fio")));
        // A rotational zoned device comes up with the single issuer on; the run's
        // setting took.
        assert_eq!(file(&format!("{name}.qd1")).trim(), format!("1 {qd1}"), "{name}: zoned_qd1_writes");
        seen.push((name, writes_received(&file(&format!("{name}.trace")))));
    }
    for (name, policy, planted, job) in SIMULATED {
        seen.push((name, writes_received(&simulated_trace(policy, planted, job))));
    }
    let get = |n: &str| {
        let w = &seen.iter().find(|s| s.0 == n).unwrap().1;
        let zones: Vec<u64> = w.iter().map(|x| x.0).collect();
        (w.iter().map(|x| x.1).sum::<u64>(), visits(&zones))
    };
    for (n, _) in &seen {
        let (sectors, v) = get(n);
        eprintln!("{n}: {sectors} sectors, {} visits, first {:?}", v.len(), &v[..v.len().min(10)]);
        assert_eq!(sectors, 64 << 11, "{n}: 64 MiB written");
    }
    // One job across four zones: the kernel's issuer and zblk's visit zones 0, 1, 2, 3
    // in turn, each once.
    for n in ["seq-kernel", "seq-zblk"] {
        let v = get(n).1;
        assert_eq!(v.iter().map(|x| x.0).collect::<Vec<_>>(), [0, 1, 2, 3], "{n}: zones in turn, once each: {v:?}");
    }
    // Four jobs, a zone each: one visit a zone under either issuer (a zone's plug is
    // drained while its job keeps it fed). Which zone first is the order the jobs
    // start in: fio's threads under the kernel, job 0 first in zblk's simulation.
    for n in ["jobs-kernel", "jobs-zblk"] {
        let v = get(n).1;
        assert!(one_visit_a_zone(&v) && v.len() == 4, "{n}: {v:?}");
    }
    // Per-zone plugging interleaves the zones, the kernel's and zblk's alike; so does
    // zblk's issuer broken on purpose, which the check above would refuse.
    for n in ["seq-plugging", "jobs-plugging", "seq-zblk-plugging", "jobs-zblk-plugging", "jobs-zblk-planted"] {
        let v = get(n).1;
        assert!(v.len() > 16, "{n}: expected zones interleaved, got {} visits: {v:?}", v.len());
    }
    // zblk's qd1 behind the kernel's per-zone plugging: the kernel sends a zone's next
    // write only when the previous one has completed, so zblk's plug never holds two
    // and each visit is one write.
    let v = get("seq-behind").1;
    assert!(v.len() > 64, "seq-behind: {} visits: {v:?}", v.len());
}

/// `fa.py DEV MODE OFFSET LENGTH`: fallocate(2) on a block device, printing `MODE ok`
/// or `MODE errno N` (util-linux here has no `--write-zeroes`).
const FALLOCATE_PY: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
# FALLOC_FL_WRITE_ZEROES 0x80, FALLOC_FL_ZERO_RANGE 0x10 | KEEP_SIZE, PUNCH_HOLE 0x02 | KEEP_SIZE.
modes = {"write_zeroes": 0x80, "zero_range": 0x11, "punch": 0x03}
fd = os.open(sys.argv[1], os.O_RDWR | os.O_DIRECT)
r = libc.fallocate(fd, modes[sys.argv[2]], int(sys.argv[3]), int(sys.argv[4]))
print(sys.argv[2], "ok" if r == 0 else "errno %d" % ctypes.get_errno())
"#;

/// `set.py FILE VALUE`: writes VALUE to a sysfs attribute, printing `ok` or `errno N`.
const SET_PY: &str = r#"
import sys
try:
    # The kernel answers at the write(2), which a close flushes: closed here, not later.
    with open(sys.argv[1], "w") as f:
        f.write(sys.argv[2])
    print("ok")
except OSError as e:
    print("errno", e.errno)
"#;

/// A device that unmaps on WRITE_ZEROES, 8 MiB zones, the first four conventional.
const UNMAP_DEV: &str = "nullb:zone_size=8,size=512,zone_nr_conv=4,completion_nsec=10000,\
                         write_zeroes_max_bytes=1M,write_zeroes_unmap_max_hw_bytes=1M";
/// The same device, unable to unmap.
const NOUNMAP_DEV: &str = "nullb:zone_size=8,size=512,zone_nr_conv=4,completion_nsec=10000,\
                           write_zeroes_max_bytes=1M,write_zeroes_unmap_max_hw_bytes=0";

/// The NOUNMAP of each WRITE_ZEROES a device received (`D` lines of a trace), in order.
fn write_zeroes_received(trace: &str) -> Vec<bool> {
    trace
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(" D ") && l.contains("WRITE_ZEROES"))
        .map(|l| l.contains("WRITE_ZEROES nounmap"))
        .collect()
}

#[test]
fn write_zeroes_reach_zblk_as_the_kernels_rules_say() {
    let Some(script) = vm::ready_for_serve("write_zeroes_reach_zblk_as_the_kernels_rules_say") else {
        return;
    };
    let (_keep, share) = vm::share("zblk-wz73");
    let share = share.as_path();
    let zblk = vm::stage(share, env!("CARGO_BIN_EXE_zblk"));
    std::fs::write(share.join("fa.py"), FALLOCATE_PY).unwrap();
    std::fs::write(share.join("set.py"), SET_PY).unwrap();
    let guest = format!(
        r#"S={share}; mount -t tmpfs tmpfs /run; cp {zblk} /tmp/zblk; X=/tmp/zblk; FA="python3 $S/fa.py"
serve() {{ n=$1 spec=$2; shift 2; env "$@" $X serve --dev $spec --trace $S/$n.trace --json > $S/$n.out 2> $S/$n.err & P=$!; i=0
  while ! grep -q ublkb $S/$n.out 2>/dev/null && kill -0 $P 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  D=$(sed 's/.*"device":"\([^"]*\)".*/\1/' $S/$n.out); Q=/sys/block/${{D#/dev/}}/queue; }}
stop() {{ kill -TERM $P; wait $P; echo $? > $S/$1.rc; }}
serve unmap '{UNMAP_DEV}'
for a in write_zeroes_max_bytes write_zeroes_unmap_max_hw_bytes write_zeroes_unmap_max_bytes; do echo "$a $(cat $Q/$a)"; done > $S/unmap.sysfs
$FA $D write_zeroes 0 1048576 > $S/unmap.fa; $FA $D zero_range 1048576 1048576 >> $S/unmap.fa; $FA $D punch 2097152 1048576 >> $S/unmap.fa
echo "set0 $(python3 $S/set.py $Q/write_zeroes_unmap_max_bytes 0)" > $S/unmap.set
echo "set1M $(python3 $S/set.py $Q/write_zeroes_unmap_max_bytes 1048576)" >> $S/unmap.set
$FA $D write_zeroes 3145728 1048576 >> $S/unmap.fa
stop unmap
serve nounmap '{NOUNMAP_DEV}'
$FA $D punch 0 1048576 > $S/nounmap.fa; $FA $D zero_range 1048576 1048576 >> $S/nounmap.fa
stop nounmap
serve dropped '{UNMAP_DEV}' ZBLK_MUTATION=nounmap-dropped
$FA $D zero_range 1048576 1048576 > $S/dropped.fa; $FA $D punch 2097152 1048576 >> $S/dropped.fa
stop dropped
serve notforced '{NOUNMAP_DEV}' ZBLK_MUTATION=nounmap-not-forced
$FA $D punch 0 1048576 > $S/notforced.fa; $FA $D zero_range 1048576 1048576 >> $S/notforced.fa
stop notforced
for a in write_zeroes_max_bytes write_zeroes_unmap_max_hw_bytes write_zeroes_unmap_max_bytes; do echo "$a $(cat /sys/block/nullb0/queue/$a)"; done > $S/nullb.sysfs
"#,
        share = share.display()
    );
    let log = vm::run_guest_on("7.3", &script, share, "zoned=1 gb=1", &["--ublk"], &guest);
    let file = |f: &str| std::fs::read_to_string(share.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    eprintln!("null_blk on 7.3: {}", file("nullb.sysfs").replace('\n', ", "));
    // ublk declares write zeroes but has no parameter for unmapping them: the kernel
    // sees a device that cannot unmap, whatever zblk's device can.
    assert_eq!(
        file("unmap.sysfs"),
        "write_zeroes_max_bytes 1048576\nwrite_zeroes_unmap_max_hw_bytes 0\nwrite_zeroes_unmap_max_bytes 0\n"
    );
    // blkdev_fallocate(): FALLOC_FL_WRITE_ZEROES needs unmap (EOPNOTSUPP), the others go.
    assert_eq!(file("unmap.fa"), "write_zeroes errno 95\nzero_range ok\npunch ok\nwrite_zeroes errno 95\n");
    // The attribute takes 0; anything above the hardware's 0 is refused.
    let set = file("unmap.set");
    assert!(set.starts_with("set0 ok\nset1M errno "), "{set}");
    for n in ["unmap", "nounmap", "dropped", "notforced"] {
        assert_eq!(file(&format!("{n}.rc")).trim(), "0", "{n}: {}", file(&format!("{n}.err")));
    }
    assert_eq!(file("nounmap.fa"), "punch ok\nzero_range ok\n");
    // What reached zblk's device: FALLOC_FL_ZERO_RANGE's NOUNMAP kept, PUNCH_HOLE's
    // unmap allowed where the device unmaps, NOUNMAP forced where it cannot.
    let rules = |n: &str| write_zeroes_received(&file(&format!("{n}.trace")));
    assert_eq!(rules("unmap"), [true, false], "zero range, punch hole");
    assert_eq!(rules("nounmap"), [true, true], "punch hole, zero range");
    // Each rule broken on purpose is seen.
    assert_eq!(rules("dropped"), [false, false], "nounmap-dropped: the zero range's NOUNMAP lost");
    assert_eq!(rules("notforced"), [false, true], "nounmap-not-forced: the punch hole unmaps");
}

#[test]
fn write_zeroes_flags_are_read_from_a_trace() {
    let trace = "# zblk serve\n  8,0  0  1  0.0  0  Q   N 0 + 2048 [job0 WRITE_ZEROES nounmap]\n\
                 8,0  0  2  0.0  0  D   N 0 + 2048 [job0 WRITE_ZEROES nounmap]\n\
                 8,0  0  3  0.0  0  D   N 2048 + 2048 [job0 WRITE_ZEROES]\n\
                 8,0  0  4  0.0  0  D   W 4096 + 8 [job0]\n";
    assert_eq!(write_zeroes_received(trace), [true, false]);
}

#[test]
fn zone_sequences_are_read_from_a_trace() {
    let trace = "# zblk serve\n  8,0    0        1     0.000000000     0  Q   W 0 + 256 [job0]\n\
                 8,0    0        2     0.000000000     0  D   W 0 + 256 [job0]\n\
                 8,0    0        3     0.000000000     0  D   R 32768 + 256 [job0]\n\
                 8,0    0        4     0.000000000     0  D   WF 32768 + 256 [job0]\n\
                 8,0    0        5     0.000000000     0  D   W 256 + 256 [job0]\n";
    let z = zones_received(trace);
    assert_eq!(z, [0, 1, 0]);
    assert_eq!(writes_received(trace), [(0, 256), (1, 256), (0, 256)]);
    let v = visits(&z);
    assert_eq!(v, [(0, 1), (1, 1), (0, 1)]);
    assert!(!one_visit_a_zone(&v));
    assert!(one_visit_a_zone(&visits(&[3, 3, 1, 2, 2])));
}
