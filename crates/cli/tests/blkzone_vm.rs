//! `zblk report` on an image against util-linux `blkzone report` on a real zoned
//! null_blk device of the same geometry, after the same operations, inside a Linux VM
//! (`shared/tools/kernel-vm.sh`); and zblk's zone commands on the device itself.
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;
use std::process::Command;

const NULLB: &str = "zoned=1 gb=1 zone_size=4 zone_capacity=3 zone_nr_conv=2 memory_backed=1 zone_max_open=4";
const CREATE: &str = "size=1024,zone_size=4,zone_capacity=3,zone_nr_conv=2,zone_max_open=4";
/// Sectors per zone (4 MiB).
const ZONE: u64 = 8192;

#[test]
fn report_matches_blkzone_on_null_blk() {
    let script = match vm::ready() {
        Ok(s) => s,
        Err(why) => return vm::skipped("report_matches_blkzone_on_null_blk", &why),
    };
    let zblk = env!("CARGO_BIN_EXE_zblk");
    let dir = tempfile::Builder::new().prefix("zblk-vm").tempdir_in("/var/tmp").unwrap();
    let share = dir.path();
    let zblk = vm::stage(share, zblk);
    let img = share.join("t.img");
    let st = Command::new(&zblk).args(["create", &img.display().to_string(), "-p", CREATE]).status().unwrap();
    assert!(st.success());
    // The same operations on the device and on the image, then both reports (zblk
    // from the guest's tmpfs: over 9p every exec would read the binary again).
    let zone = |n: u64| n * ZONE;
    let guest = format!(
        r#"set -e
D=/dev/nullb0; I={img}; S={share}; cp {zblk} /tmp/zblk; Z=/tmp/zblk
dd if=/dev/zero of=$D bs=4k count=3 seek={w3} oflag=direct status=none
$Z write $I -o {w3b} -l 12k -p 0
blkzone open -o {z4} -c 1 $D; $Z open -o {z4} -c 1 $I
blkzone finish -o {z5} -c 1 $D; $Z finish -o {z5} -c 1 $I
dd if=/dev/zero of=$D bs=1M count=1 seek={w6} oflag=direct status=none
$Z write $I -o {w6b} -l 1M -p 0
blkzone close -o {z6} -c 1 $D; $Z close -o {z6} -c 1 $I
dd if=/dev/zero of=$D bs=1M count=3 seek={w7} oflag=direct status=none
$Z write $I -o {w7b} -l 3M -p 0
blkzone report $D > $S/dev.txt; $Z report $I > $S/img.txt
blkzone report -v -o {z3} -c 5 $D > $S/dev-v.txt; $Z report -v -o {z3} -c 5 $I > $S/img-v.txt
blkzone capacity $D > $S/dev-cap.txt; $Z capacity $I > $S/img-cap.txt
blkzone reset -o {z4} -l {l2} $D; $Z reset -o {z4} -l {l2} $I
blkzone report -l {l4} -o {z3} $D > $S/dev-r.txt; $Z report -l {l4} -o {z3} $I > $S/img-r.txt
$Z report $D > $S/zdev.txt; $Z capacity $D > $S/zdev-cap.txt
$Z finish -o {z8} -c 1 $D; $Z finish -o {z8} -c 1 $I
$Z reset -o {z7} -c 1 $D; $Z reset -o {z7} -c 1 $I
blkzone report -c 12 $D > $S/dev2.txt; $Z report -c 12 $I > $S/img2.txt; $Z report -c 12 $D > $S/zdev2.txt
blkzone reset -o {end} $D 2>$S/dev-end.err && echo 0 > $S/dev-end.rc || echo $? > $S/dev-end.rc
$Z reset -o {end} $I 2>$S/img-end.err && echo 0 > $S/img-end.rc || echo $? > $S/img-end.rc
blkzone reset -o 0 -c 1 $D 2>$S/dev-conv.err && echo 0 > $S/dev-conv.rc || echo $? > $S/dev-conv.rc
$Z reset -o 0 -c 1 $I 2>$S/img-conv.err && echo 0 > $S/img-conv.rc || echo $? > $S/img-conv.rc
blkzone reset -o 0 -c 3 $D 2>$S/dev-mixed.err && echo 0 > $S/dev-mixed.rc || echo $? > $S/dev-mixed.rc
"#,
        img = img.display(),
        share = share.display(),
        w3 = zone(3) / 8,
        w3b = zone(3) * 512,
        z4 = zone(4),
        z5 = zone(5),
        z6 = zone(6),
        z7 = zone(7),
        z8 = zone(8),
        w6 = (zone(6) * 512) >> 20,
        w6b = zone(6) * 512,
        w7 = (zone(7) * 512) >> 20,
        w7b = zone(7) * 512,
        z3 = zone(3),
        l2 = zone(2),
        l4 = zone(4),
        end = 1 << 21,
    );
    std::fs::write(share.join("guest.sh"), guest).unwrap();
    let guest_sh = share.join("guest.sh").display().to_string();
    let (out, log) = vm::run(&script, share, NULLB, &["sh", &guest_sh]);
    assert!(
        out.status.success() && log.contains("@@ exit 0"),
        "VM run failed:\n{log}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (dev, img) in
        [("dev.txt", "img.txt"), ("dev-v.txt", "img-v.txt"), ("dev-cap.txt", "img-cap.txt"), ("dev-r.txt", "img-r.txt")]
    {
        let d = std::fs::read_to_string(share.join(dev)).unwrap();
        let i = std::fs::read_to_string(share.join(img)).unwrap();
        assert!(!d.is_empty(), "{dev} is empty");
        let (dl, il): (Vec<&str>, Vec<&str>) = (d.lines().collect(), i.lines().collect());
        for (n, (a, b)) in dl.iter().zip(&il).enumerate() {
            assert_eq!(b, a, "line {n}: zblk ({img}) differs from blkzone ({dev})");
        }
        assert_eq!(il.len(), dl.len(), "zblk ({img}) and blkzone ({dev}) print different numbers of lines");
    }
    // A zone command at the device's end acts on no zone: the kernel refuses
    // blkzone's empty range with EINVAL, and zblk refuses it on an image.
    let read = |f: &str| std::fs::read_to_string(share.join(f)).unwrap_or_default();
    assert_ne!(read("dev-end.rc").trim(), "0", "blkzone reset at the end: {}", read("dev-end.err"));
    assert!(read("dev-end.err").contains("Invalid argument"), "{}", read("dev-end.err"));
    assert_ne!(read("img-end.rc").trim(), "0", "zblk reset at the end: {}", read("img-end.err"));
    assert!(read("img-end.err").contains("EINVAL: no zone to reset"), "{}", read("img-end.err"));
    // A reset of conventional zones only: the kernel fails it, zblk refuses it. A
    // range that also holds sequential zones the kernel fails too, where zblk
    // skips its conventional zones (docs/real-io.md).
    assert_ne!(read("dev-conv.rc").trim(), "0", "blkzone reset of a conventional zone: {}", read("dev-conv.err"));
    assert!(read("img-conv.err").contains("EINVAL: reset of conventional zone 0"), "{}", read("img-conv.err"));
    assert_ne!(read("dev-mixed.rc").trim(), "0", "blkzone reset over a conventional zone: {}", read("dev-mixed.err"));
    eprintln!("blkzone at the end: {}blkzone on a conventional zone: {}", read("dev-end.err"), read("dev-conv.err"));
    let dev = std::fs::read_to_string(share.join("dev.txt")).unwrap();
    let head: Vec<&str> = dev.lines().take(10).collect();
    eprintln!(
        "zblk report matches blkzone report on null_blk ({} zones); the first lines:\n{}",
        dev.lines().count(),
        head.join("\n")
    );
}
