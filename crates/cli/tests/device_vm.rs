//! `zblk write|append|read|bench|info` and the zone commands on Linux zoned block
//! devices, in a Linux VM (6.12 or 7.3) (`scripts/kernel-vm.sh --zns`): a zoned null_blk
//! (`/dev/nullb0`, 512-byte blocks, conventional zones, 4 open zones) and QEMU's NVMe
//! ZNS namespace (`/dev/nvme0n1`, 4 KiB blocks, 4 open and 8 active zones). One boot
//! runs every command (a guest script records each one's output and status); the
//! host checks them against what the kernel says (sysfs, `blkzone report`, `dd`).
//! Then the refusals: a device another program holds, a block device that is not
//! zoned, a file that is not an image.
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// 1 GiB of 4 MiB zones, 3 MiB writable, the first two conventional; at most 4 open.
const NULLB: &str = "zoned=1 gb=1 zone_size=4 zone_capacity=3 zone_nr_conv=2 memory_backed=1 zone_max_open=4";

/// The sysfs queue attributes `zblk info` shows by their names.
const ATTRS: [&str; 9] = [
    "chunk_sectors",
    "nr_zones",
    "max_open_zones",
    "max_active_zones",
    "zone_append_max_bytes",
    "logical_block_size",
    "max_sectors_kb",
    "rotational",
    "write_zeroes_max_bytes",
];

/// The guest's commands for one device `$D` (sysfs name `$N`), its first sequential
/// zone at byte `$Z` and the next at `$Z2`, zone size `$ZS` in sectors. Each `r NAME
/// CMD...` leaves NAME.out, NAME.err and NAME.rc in the device's directory.
const PER_DEVICE: &str = r#"
O=$S/$N; mkdir -p $O
r() { n=$1; shift; t=$(date +%s%N); "$@" > $O/$n.out 2> $O/$n.err; echo $? > $O/$n.rc; echo "$n $(( ($(date +%s%N) - t) / 1000000 )) ms" >> $S/times.txt; }
for a in ATTRS; do echo "$a $(cat /sys/block/$N/queue/$a)" >> $O/sysfs.txt; done
r info $X info --json $D
r info_text $X info $D
r reset_all $X reset $D
r write $X write $D -o $Z -l 8k -p 0x11
r append1 $X append $D -o $Z -l 4k -p 0x22
r append2 $X append $D -o $Z -l 8k -p 0x33 --json
r read $X read $D -o $Z -l 24k -O $O/read.bin
dd if=$D of=$O/dd.bin bs=4k skip=$((Z / 4096)) count=6 iflag=direct status=none
r off_wp $X write $D -o $((Z + 1048576)) -l 4k -p 0x44
r misaligned $X write $D -o $((Z + 20480 + 512)) -l 512 -p 0x44
r odd_offset $X read $D -o 100 -l 4k
r beyond $X read $D -o $((SIZE - 4096)) -l 8k
r finish $X finish -o $((Z2 / 512)) -c 1 $D
r append_full $X append $D -o $Z2 -l 4k -p 0x55
r report $X report -c 8 $D
blkzone report -c 8 $D > $O/blkzone.txt
r bench_write $X bench --image $D --rw write --bs 64k --iodepth 8 --numjobs 2 --offset $((Z2 + ZB)) --size $((2 * ZB)) --io_size 2M --json
r bench_read $X bench --image $D --rw randread --bs 4k --iodepth 16 --offset $((Z2 + ZB)) --size $((2 * ZB)) --io_size 1M --json
r info_after $X info --json $D
blkzone report $D > $O/blkzone-after.txt
r report_after $X report $D
"#;

#[test]
fn cli_on_null_blk_and_zns() {
    let script = match vm::ready() {
        Ok(s) => s,
        Err(why) => return vm::skipped("cli_on_null_blk_and_zns", &why),
    };
    let zblk = env!("CARGO_BIN_EXE_zblk");
    let dir = tempfile::Builder::new().prefix("zblk-vm").tempdir_in("/var/tmp").unwrap();
    let share = dir.path();
    let zblk = vm::stage(share, zblk);
    // zblk runs from the guest's tmpfs: the host's file system reaches the guest over
    // 9p without a page cache, and every exec would read the 25 MB binary again.
    // A block device that is not zoned, made through null_blk's configfs, is refused;
    // so is a file that is not an image.
    let guest = format!(
        r#"S={share}; cp {zblk} /tmp/zblk; X=/tmp/zblk
D=/dev/nullb0; N=nullb0; Z=$((2 * 4194304)); Z2=$((3 * 4194304)); ZB=4194304; SIZE=$((1 << 30))
{nullb}
D=/dev/nvme0n1; N=nvme0n1; Z=0; Z2=16777216; ZB=16777216; SIZE=$((256 << 20))
{nvme}
python3 -c 'import os,sys,time; fd=os.open("/dev/nullb0", os.O_RDWR|os.O_EXCL); open(sys.argv[1],"w").close(); time.sleep(120)' $S/held &
H=$!; i=0; while [ ! -e $S/held ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
O=$S/busy; mkdir -p $O
r write $X write /dev/nullb0 -o 0 -l 4k -p 1
r read $X read /dev/nullb0 -o 0 -l 4k -O $O/read.bin
kill $H; wait $H
P=/sys/kernel/config/nullb/plain; mkdir $P
for kv in size=64 zoned=0 memory_backed=1 power=1; do echo ${{kv#*=}} > $P/${{kv%=*}}; done
sleep 1; B=$(ls /dev/plain /dev/nullb$(cat $P/index) 2>/dev/null | head -1)
O=$S/plain; mkdir -p $O
r() {{ n=$1; shift; "$@" > $O/$n.out 2> $O/$n.err; echo $? > $O/$n.rc; }}
r write $X write $B -o 0 -l 4k -p 1
r info $X info $B
r bench $X bench --image $B --rw write --size 1M
echo text > $S/text
r text $X write $S/text -o 0 -l 4k -p 1
echo 0 > $P/power; rmdir $P
"#,
        share = share.display(),
        nullb = PER_DEVICE.replace("ATTRS", &ATTRS.join(" ")),
        nvme = PER_DEVICE.replace("ATTRS", &ATTRS.join(" ")),
    );
    std::fs::write(share.join("guest.sh"), guest).unwrap();
    let guest_sh = share.join("guest.sh").display().to_string();
    let t = std::time::Instant::now();
    let (out, log) = vm::run_with(&script, share, NULLB, &["--zns"], &["sh", &guest_sh]);
    assert!(
        out.status.success() && log.contains("@@ exit 0"),
        "VM run failed:\n{log}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let times = std::fs::read_to_string(share.join("times.txt")).unwrap_or_default();
    eprintln!("VM run: {:.1} s; each command in the guest:\n{times}", t.elapsed().as_secs_f64());
    check_device(share, "nullb0", 2 * 8192, 512);
    check_device(share, "nvme0n1", 0, 4096);
    // A device another program holds exclusively (O_EXCL) is refused for writing,
    // saying so; reading does not need it exclusively.
    let busy = Cmd::new(share, "busy");
    busy.fails("write", "/dev/nullb0: in use by another program");
    busy.ok("read");
    let plain = Cmd::new(share, "plain");
    for n in ["write", "info", "bench"] {
        plain.fails(n, ": not a zoned block device");
    }
    plain.fails("text", "not a zblk image");
}

/// One device's directory of command results.
struct Cmd {
    dir: std::path::PathBuf,
    name: String,
}

impl Cmd {
    fn new(share: &Path, name: &str) -> Cmd {
        Cmd { dir: share.join(name), name: name.to_string() }
    }

    fn file(&self, f: &str) -> String {
        std::fs::read_to_string(self.dir.join(f)).unwrap_or_else(|e| panic!("{}/{f}: {e}", self.name))
    }

    fn rc(&self, n: &str) -> i32 {
        self.file(&format!("{n}.rc")).trim().parse().unwrap()
    }

    /// The standard output of a command that must have succeeded.
    fn ok(&self, n: &str) -> String {
        let err = self.file(&format!("{n}.err"));
        assert_eq!(self.rc(n), 0, "{}: zblk {n} failed: {err}", self.name);
        self.file(&format!("{n}.out"))
    }

    /// The error of a command that must have failed cleanly (status 1, a message
    /// naming the device, no panic) with `needle` in it.
    fn fails(&self, n: &str, needle: &str) -> String {
        let err = self.file(&format!("{n}.err"));
        assert_eq!(self.rc(n), 1, "{}: zblk {n} should fail with status 1: {err}", self.name);
        assert!(!err.contains("panicked"), "{}: zblk {n} panicked: {err}", self.name);
        assert!(err.contains(needle), "{}: zblk {n}: expected '{needle}' in: {err}", self.name);
        err
    }

    fn json(&self, n: &str) -> Value {
        serde_json::from_str(&self.ok(n)).unwrap_or_else(|e| panic!("{}: zblk {n}: not JSON: {e}", self.name))
    }
}

/// `zone` is the first sequential zone's start sector, `lbs` the logical block size.
fn check_device(share: &Path, name: &str, zone: u64, lbs: u64) {
    let c = Cmd::new(share, name);
    // info shows what sysfs says, attribute by attribute.
    let info = c.json("info");
    let sysfs: BTreeMap<String, String> = c
        .file("sysfs.txt")
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    assert_eq!(sysfs.len(), ATTRS.len(), "{name}: {sysfs:?}");
    for (k, v) in &sysfs {
        let shown = &info["queue"][k];
        let shown = shown.as_str().map_or_else(|| shown.to_string(), str::to_string);
        assert_eq!(&shown, v, "{name}: zblk info's {k} against sysfs");
    }
    assert_eq!(info["zone_append"], "emulated", "{name}");
    assert_eq!(info["queue"]["logical_block_size"], lbs, "{name}");
    let text = c.ok("info_text");
    assert!(text.contains("Linux zoned block device") && text.contains("max_open_zones"), "{name}: {text}");
    c.ok("reset_all");
    c.ok("write");
    // append returns the sector written: after the 8 KiB write, then after 12 KiB.
    assert_eq!(c.ok("append1").trim(), (zone + 16).to_string(), "{name}: the first append's sector");
    let a2: Value = c.json("append2");
    assert_eq!(a2["sector"], zone + 24, "{name}: the second append's sector");
    // What zblk read is what the kernel reads (dd with O_DIRECT), and what was written.
    c.ok("read");
    let read = std::fs::read(share.join(name).join("read.bin")).unwrap();
    let dd = std::fs::read(share.join(name).join("dd.bin")).unwrap();
    assert_eq!(read.len(), 24 << 10, "{name}");
    assert!(read == dd, "{name}: zblk read differs from dd");
    let expect: Vec<u8> =
        [(0x11, 8), (0x22, 4), (0x33, 8)].iter().flat_map(|&(b, k)| std::iter::repeat_n(b, k << 10)).collect();
    assert_eq!(&read[..20 << 10], &expect[..], "{name}: the data written");
    // Errors as the kernel gives them, each refused before or by the device.
    c.fails("off_wp", "EIO");
    // 512 bytes past the write pointer: misaligned to 4 KiB blocks (EINVAL), else a
    // write off the write pointer (EIO).
    c.fails("misaligned", if lbs == 4096 { "EINVAL" } else { "EIO" });
    c.fails("odd_offset", "EINVAL");
    c.fails("beyond", "EINVAL");
    c.ok("finish");
    c.fails("append_full", "EIO");
    // zblk's report is blkzone's, line for line.
    assert_eq!(c.ok("report"), c.file("blkzone.txt"), "{name}: zblk report against blkzone report");
    // bench: fio-like jobs, real I/O, no errors, as much written as asked.
    let w = c.json("bench_write");
    assert_eq!(w["zblk"]["simulated"], false, "{name}");
    let jobs = w["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "{name}");
    let written: u64 = jobs.iter().map(|j| j["write"]["io_bytes"].as_u64().unwrap()).sum();
    assert!(written > 0, "{name}: bench wrote nothing: {w}");
    for j in jobs {
        assert_eq!(j["error"], 0, "{name}: {j}");
    }
    let r = c.json("bench_read");
    assert_eq!(r["jobs"][0]["read"]["io_bytes"], 1 << 20, "{name}: {r}");
    // After every command the device's zones, as the kernel reports them, are zblk's.
    assert_eq!(c.ok("report_after"), c.file("blkzone-after.txt"), "{name}");
    let after = c.json("info_after");
    assert!(after["zones"]["full"].as_u64().unwrap() >= 1, "{name}: {after}");
    eprintln!("{name}: info {}", info["queue"]);
}
