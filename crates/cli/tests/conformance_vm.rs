//! Kernel conformance of `zblk serve`, one boot of `scripts/kernel-vm.sh --ublk`: the
//! same operation sequence runs on the kernel's zoned null_blk (made through configfs)
//! and on a zblk image of the same geometry served through ublk, 16 zones of 1 MiB, 2 conventional, 2 open and 3 active at most,
//! requests of at most 255 sectors. Each step is a write or read with `dd
//! oflag=direct`/`iflag=direct` (at and off the write pointer, crossing zones, past the
//! write pointer, conventional zones), a zone command of `blkzone` (open, close, finish,
//! reset, of one zone, of a range, of the whole device: RESET_ALL), or an fsync of the
//! device (FLUSH). After each step the exit status, the messages and `blkzone report`
//! must be the same on every device, and the bytes each read returned the same, except
//! where [`DIFFERENCES`] says (docs/serve.md, "Conformance"). The queue limits in sysfs
//! are compared too.
//!
//! Zone append is not in the sequence: the kernel offers no zone append to userspace
//! on a block device (no system call issues REQ_OP_ZONE_APPEND; io_uring's passthrough
//! exists for NVMe character devices only). btrfs issues it for its data:
//! `zonedfs_vm.rs` shows it reaching zblk.
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;
use std::collections::BTreeMap;

const ZONE_BYTES: u64 = 1 << 20;
const NR_ZONES: u64 = 16;

/// The differences between null_blk and a served zblk device that are deliberate, as
/// docs/serve.md's conformance table lists them: (what differs, why). The test fails
/// on any other difference, and on any of these that disappears.
const DIFFERENCES: &[(&str, &str)] = &[
    (
        "sysfs write_cache",
        "zblk offers a volatile write cache (write back), null_blk without cache_size none (write through)",
    ),
    ("sysfs fua", "with the write cache, FUA: zblk 1, null_blk 0"),
    (
        "sysfs discard_max_bytes",
        "zblk takes DISCARD (of conventional zones) up to a zone; zoned null_blk ignores its discard option",
    ),
    ("sysfs write_zeroes_max_bytes", "zblk takes WRITE_ZEROES up to a zone; null_blk has none"),
    (
        "data past the write pointer",
        "reads past a sequential zone's write pointer return 0xff bytes from null_blk, zeroes from zblk",
    ),
];

/// The operation sequence, a shell function `ops DEV TAG` writing `$S/TAG.txt`: per step
/// `== NAME rc=STATUS`, the command's messages (`> ` lines) and `blkzone report`; each
/// read's bytes go to `$S/TAG-NAME.bin`. Offsets and lengths are 4 KiB blocks ($Z to a
/// zone); zone commands take zone numbers. Only builtins around the commands: every
/// process costs time in the emulated guest.
const OPS: &str = r#"
ops() {
D=$1; T=$2; R=$S/$2.txt; Z=256; : > $R
step() { N=$1; shift; "$@" > /tmp/step.out 2>&1; rc=$?; echo "== $N rc=$rc" >> $R
  while IFS= read -r l; do echo "> $l"; done < /tmp/step.out >> $R; blkzone report $D >> $R; }
wr() { dd if=$S/pattern of=$D bs=1M iflag=skip_bytes,count_bytes oflag=seek_bytes,direct conv=notrunc status=none skip=$(($1*4096)) seek=$(($1*4096)) count=$(($2*4096)); }
rd() { echo "read $1 $2"; dd if=$D of=$S/$T-$N.bin bs=1M iflag=skip_bytes,count_bytes,direct status=none skip=$(($1*4096)) count=$(($2*4096)); }
zc() { blkzone $1 -o $(($2*2048)) -c ${3:-1} $D; }
echo "== start rc=0" >> $R; blkzone report $D >> $R
step conv_write wr 100 2
step conv_read rd 100 2
step conv_cross_into_seq wr $((2*Z-2)) 4
step seq_write_at_wp wr $((3*Z)) 2
step seq_write_off_wp wr $((3*Z+8)) 1
step seq_write_behind_wp wr $((3*Z)) 1
step read_past_wp rd $((3*Z+8)) 4
step read_across_wp rd $((3*Z)) 16
step implicit_close wr $((4*Z)) 1
step write_over_active_limit wr $((5*Z)) 1
step close3 zc close 3
step write_over_active_limit_closed wr $((5*Z)) 1
step finish3 zc finish 3
step write_full_zone wr $((3*Z+2)) 1
step open6 zc open 6
step open7_over_active_limit zc open 7
step reset3 zc reset 3
step finish4_open zc finish 4
step finish12_empty zc finish 12
step reset13_empty zc reset 13
step open7 zc open 7
step open9_over_open_limit zc open 9
step close_range_2_to_15 zc close 2 14
step reset_range_2_to_7 zc reset 2 6
step fill_zone8 wr $((8*Z)) $((Z-2))
step write_across_zones_8_9 wr $((9*Z-2)) 4
step reset_conv zc reset 0
step open_conv zc open 1
step close_conv zc close 1
step finish_conv zc finish 0
step finish_range_10_11 zc finish 10 2
step write_512_conv dd if=$S/pattern of=$D bs=512 seek=1 count=1 oflag=direct conv=notrunc status=none
step flush dd if=/dev/null of=$D conv=fsync,notrunc status=none
step read_all rd 0 $((16*Z))
step reset_all blkzone reset $D
step read_after_reset_all rd 0 $((4*Z))
step write_after_reset_all wr $((2*Z)) 1
step read_after_write rd $((2*Z)) 2
}
"#;

/// Starts `zblk serve ARGS` in the background as $P, waits for its first line (the
/// device) in $S/NAME.out; $U is that line.
const SERVE_FN: &str = r#"
serve() { n=$1; shift; $X serve "$@" > $S/$n.out 2> $S/$n.err & P=$!; i=0
  while ! [ -s $S/$n.out ] && kill -0 $P 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  U=$(head -1 $S/$n.out); }
sysfs() { for a in zoned chunk_sectors nr_zones max_open_zones max_active_zones zone_append_max_bytes write_cache fua \
  logical_block_size physical_block_size max_sectors_kb max_hw_sectors_kb discard_max_bytes write_zeroes_max_bytes rotational; do
  echo "$a $(cat /sys/block/${1#/dev/}/queue/$a)"; done > $S/$2.sysfs; }
"#;

/// The devices, in the order they run: null_blk first, the reference. (The memory
/// device, `--dev nullb:...`, answers as the image does; one more device is one more
/// minute of emulated guest.)
const DEVICES: [&str; 2] = ["nullb", "image"];

#[test]
fn served_devices_answer_as_null_blk() {
    let Some(script) = vm::ready_for_serve("served_devices_answer_as_null_blk") else {
        return;
    };
    let dir = tempfile::Builder::new().prefix("zblk-conformance-vm").tempdir_in("/var/tmp").unwrap();
    let share = dir.path();
    let zblk = vm::stage(share, env!("CARGO_BIN_EXE_zblk"));
    // Data for the writes, made on the host (random bytes are slow to make in the
    // emulated guest): every block distinct, so a misplaced write shows.
    let pattern: Vec<u8> = (0..NR_ZONES * ZONE_BYTES / 8)
        .flat_map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5bd1_e995).to_le_bytes())
        .collect();
    std::fs::write(share.join("pattern"), &pattern).unwrap();
    let geometry = "size=16,zone_size=1,zone_nr_conv=2,zone_max_open=2,zone_max_active=3,max_sectors=255";
    let guest = format!(
        r#"S={share}; mount -t tmpfs tmpfs /run; cp {zblk} /tmp/zblk; X=/tmp/zblk
{SERVE_FN}
{OPS}
C=/sys/kernel/config/nullb/nullb1; mkdir $C
for kv in size=16 blocksize=512 memory_backed=1 zoned=1 zone_size=1 zone_nr_conv=2 zone_max_open=2 zone_max_active=3 max_sectors=255; do
  echo ${{kv#*=}} > $C/${{kv%=*}}; done
echo 1 > $C/power
sysfs /dev/nullb1 nullb; ops /dev/nullb1 nullb
$X create /tmp/a.img -p {geometry} > $S/create.out 2>&1
serve image /tmp/a.img
sysfs $U image; ops $U image
kill -TERM $P; wait $P; echo $? > $S/image.rc
"#,
        share = share.display(),
    );
    let log = vm::run_guest(&script, share, "zoned=1 gb=1", &["--ublk"], &guest);
    let file = |f: &str| std::fs::read_to_string(share.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));

    for dev in &DEVICES[1..] {
        assert_eq!(file(&format!("{dev}.rc")).trim(), "0", "serve {dev}: {}", file(&format!("{dev}.err")));
    }
    let mut found: Vec<(String, String)> = Vec::new();
    let reference = parse(&file("nullb.txt"), "/dev/nullb1");
    assert!(reference.len() > 30, "null_blk's sequence did not run:\n{}", file("nullb.txt"));
    let ref_sysfs = sysfs(&file("nullb.sysfs"));
    for dev in &DEVICES[1..] {
        let served = file(&format!("{dev}.out"));
        let path = served.lines().next().unwrap_or_else(|| panic!("serve {dev}: {}", file(&format!("{dev}.err"))));
        // sysfs: the same queue limits but for the documented ones.
        for (attr, want) in &ref_sysfs {
            let got = sysfs(&file(&format!("{dev}.sysfs"))).remove(attr).unwrap_or_default();
            if &got != want {
                found.push((format!("sysfs {attr}"), format!("{dev}: null_blk '{want}', zblk '{got}'")));
            }
        }
        let steps = parse(&file(&format!("{dev}.txt")), path);
        assert_eq!(
            steps.iter().map(|s| &s.name).collect::<Vec<_>>(),
            reference.iter().map(|s| &s.name).collect::<Vec<_>>(),
            "{dev}: not the same steps"
        );
        for (want, got) in reference.iter().zip(&steps) {
            let n = &want.name;
            assert_eq!(
                (got.rc, &got.out),
                (want.rc, &want.out),
                "{dev}, step {n}: status and messages differ from null_blk's (left: zblk, right: null_blk)"
            );
            assert_eq!(got.report, want.report, "{dev}, step {n}: zone report differs from null_blk's");
            if want.out.first().is_some_and(|l| l.starts_with("read ")) && want.rc == 0 {
                let bin = |d: &str| std::fs::read(share.join(format!("{d}-{n}.bin"))).unwrap();
                let (a, b) = (bin("nullb"), bin(dev));
                let read =
                    compare_read(&want.out[0], &want.report, &a, &b).unwrap_or_else(|e| panic!("{dev}, {n}: {e}"));
                if let Some(what) = read {
                    found.push(("data past the write pointer".to_string(), format!("{dev}, {n}: {what}")));
                }
            }
        }
        // What the kernel sent reached zblk: RESET_ALL for the whole-device reset, FLUSH
        // for the fsync (null_blk, without a cache, never sees one).
        let err = file(&format!("{dev}.err"));
        let served = err.lines().find(|l| l.contains("requests served")).unwrap_or_else(|| panic!("{err}"));
        assert!(served.contains("zone_reset_all 1,"), "{dev}: {served}");
        assert!(!served.contains(" flush 0,"), "{dev}: {served}");
        eprintln!("{dev}: {served}");
    }

    // Every difference found is documented, and every documented one was found.
    let mut kinds: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
    kinds.dedup();
    for (k, detail) in &found {
        eprintln!("difference: {k}: {detail}");
        assert!(DIFFERENCES.iter().any(|(d, _)| d == k), "an undocumented difference from null_blk: {k}: {detail}");
    }
    for (d, why) in DIFFERENCES {
        assert!(
            found.iter().any(|(k, _)| k == d),
            "the documented difference '{d}' ({why}) is gone: update docs/serve.md"
        );
    }
}

/// One step of a device's run.
struct Step {
    name: String,
    rc: i32,
    /// The command's messages, the device's path replaced by DEV.
    out: Vec<String>,
    /// `blkzone report` after the step.
    report: Vec<String>,
}

fn parse(text: &str, dev: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in text.lines() {
        if let Some(head) = line.strip_prefix("== ") {
            let (name, rc) = head.split_once(" rc=").unwrap_or_else(|| panic!("{line}"));
            steps.push(Step { name: name.to_string(), rc: rc.parse().unwrap(), out: vec![], report: vec![] });
        } else if let Some(msg) = line.strip_prefix("> ") {
            steps.last_mut().expect("a step").out.push(msg.replace(dev, "DEV"));
        } else {
            steps.last_mut().expect("a step").report.push(line.to_string());
        }
    }
    steps
}

fn sysfs(text: &str) -> BTreeMap<String, String> {
    text.lines().filter_map(|l| l.split_once(' ')).map(|(a, v)| (a.to_string(), v.to_string())).collect()
}

/// Compares the bytes a read (`read BLOCK COUNT`, 4 KiB blocks) returned from null_blk
/// (`a`) and from zblk (`b`), knowing the zones from the report after the read. Below
/// each write pointer and in conventional zones they must be equal; past a sequential
/// zone's write pointer null_blk returns 0xff and zblk zeroes, the documented
/// difference, returned as its description (None if the read did not go past a write
/// pointer). Any other difference is the error.
fn compare_read(cmd: &str, report: &[String], a: &[u8], b: &[u8]) -> Result<Option<String>, String> {
    let mut it = cmd.split_whitespace().skip(1).map(|v| v.parse::<u64>().unwrap() * 4096);
    let (off, len) = (it.next().unwrap(), it.next().unwrap());
    if (a.len() as u64, b.len() as u64) != (len, len) {
        return Err(format!("{cmd}: short read ({} and {} bytes)", a.len(), b.len()));
    }
    let mut past = 0u64;
    // Zone by zone: the part below the write pointer (all of a conventional zone),
    // then the part past it.
    let mut at = off;
    while at < off + len {
        let zone = &report[(at / ZONE_BYTES) as usize];
        let zone_end = (at / ZONE_BYTES + 1) * ZONE_BYTES;
        let wp = if zone.contains("SEQ_WRITE_REQUIRED") { zone_field(zone, "wptr") * 512 } else { ZONE_BYTES };
        let split = (at - at % ZONE_BYTES + wp).clamp(at, zone_end.min(off + len));
        let end = zone_end.min(off + len);
        let (below, beyond) =
            ((at - off) as usize..(split - off) as usize, (split - off) as usize..(end - off) as usize);
        if a[below.clone()] != b[below] {
            return Err(format!("{cmd}: bytes {at}..{split} below the write pointer differ"));
        }
        if !(a[beyond.clone()].iter().all(|&x| x == 0xff) && b[beyond].iter().all(|&y| y == 0)) {
            return Err(format!(
                "{cmd}: bytes {split}..{end} past the write pointer: not 0xff from null_blk and zeroes from zblk"
            ));
        }
        past += end - split;
        at = end;
    }
    Ok((past > 0).then(|| format!("{past} bytes past write pointers: null_blk 0xff, zblk 0")))
}

/// A hexadecimal field of a `blkzone report` line (`wptr 0x000010`).
fn zone_field(line: &str, field: &str) -> u64 {
    let v = line.split(&format!("{field} 0x")).nth(1).unwrap_or_else(|| panic!("{field} in {line}"));
    let hex: String = v.chars().take_while(char::is_ascii_hexdigit).collect();
    u64::from_str_radix(&hex, 16).unwrap()
}

#[test]
fn reads_are_compared_below_and_past_the_write_pointer() {
    let conv = "start: 0x000000000, len 0x000800, cap 0x000800, wptr 0x000000 reset:0 non-seq:0, zcond: 0(nw) [type: 1(CONVENTIONAL)]";
    let seq = "start: 0x000000800, len 0x000800, cap 0x000800, wptr 0x000008 reset:0 non-seq:0, zcond: 2(oi) [type: 2(SEQ_WRITE_REQUIRED)]";
    let report = [conv.to_string(), seq.to_string()];
    // The last block of zone 0 and the first two of zone 1, whose write pointer is
    // one block in.
    let cmd = "read 255 3";
    let mut a = vec![7u8; 3 * 4096];
    let mut b = a.clone();
    a[2 * 4096..].fill(0xff);
    b[2 * 4096..].fill(0);
    let past = Some("4096 bytes past write pointers: null_blk 0xff, zblk 0".to_string());
    assert_eq!(compare_read(cmd, &report, &a, &b), Ok(past));
    b[4096] = 1;
    let e = compare_read(cmd, &report, &a, &b).unwrap_err();
    assert!(e.contains("1048576..1052672 below the write pointer"), "{e}");
    b[4096] = 7;
    b[3 * 4096 - 1] = 0xff;
    let e = compare_read(cmd, &report, &a, &b).unwrap_err();
    assert!(e.contains("past the write pointer"), "{e}");
    assert_eq!(compare_read("read 0 2", &report[..1], &a[..8192], &a[..8192]), Ok(None));
}
