//! Zoned file systems on images served by `zblk serve`, one boot of
//! `scripts/kernel-vm.sh --ublk --modules "f2fs btrfs"`. For f2fs (`mkfs.f2fs -m`, an
//! image with 8 conventional zones for its metadata) and btrfs (`mkfs.btrfs -O zoned`):
//! make the file system on the served device, mount it, write four files of random
//! data (7 KiB to 4 MiB, each fsynced), take their checksums, unmount, stop the server
//! with SIGTERM, serve the image again: the zones are as the kernel last saw them, the
//! file system mounts and the files read back identical. Then `blkzone reset` of the
//! whole device sends RESET_ALL. The server's count of requests shows what the kernel
//! sent: btrfs writes its data with zone append, which must have reached zblk.
//!
//! Prints the times (mkfs, mount, the writes' throughput) for docs/serve.md: the
//! emulated guest's numbers.
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;

/// The files written, name and size in KiB: random data made in the guest.
const FILES: [(&str, u64); 4] = [("f1", 4096), ("f2", 1024), ("f3", 300), ("f4", 7)];

/// `fs NAME CREATE-OPTIONS MKFS...`: the whole cycle for one file system on a 512 MiB
/// image of 4 MiB zones in the guest's /tmp; outputs in $S/NAME-*, times (the guest's
/// uptime) in $S/times.
const FS_FN: &str = r#"
T() { read up _ < /proc/uptime; echo "$1 $up" >> $S/times; }
serve() { n=$1; shift; $X serve "$@" > $S/$n.out 2> $S/$n.err & P=$!; i=0
  while ! [ -s $S/$n.out ] && kill -0 $P 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  D=$(head -1 $S/$n.out); }
stop() { kill -TERM $P; wait $P; echo $? > $S/$1.rc; }
fs() {
  name=$1; opts=$2; shift 2
  $X create /tmp/$name.img --size 512 --zone_size 4 $opts > $S/$name-create.out 2>&1
  serve $name-1 /tmp/$name.img
  T $name-mkfs; "$@" $D > $S/$name-mkfs.out 2>&1; echo $? > $S/$name-mkfs.rc; T $name-mkfs-done
  mount -t $name $D $M > $S/$name-mount.out 2>&1; echo $? > $S/$name-mount.rc; T $name-mounted
  for f in $FILES; do dd if=/tmp/$f of=$M/$f bs=1M conv=fsync status=none; done; sync; T $name-written
  (cd $M && sha256sum $FILES) > $S/$name-sums1
  umount $M; echo $? > $S/$name-umount.rc; T $name-umounted
  blkzone report $D > $S/$name-zones1
  stop $name-1
  serve $name-2 /tmp/$name.img
  blkzone report $D > $S/$name-zones2
  T $name-mount2; mount -t $name $D $M > $S/$name-mount2.out 2>&1; echo $? > $S/$name-mount2.rc; T $name-mounted2
  (cd $M && sha256sum $FILES) > $S/$name-sums2
  umount $M
  blkzone reset $D; echo $? > $S/$name-resetall.rc
  stop $name-2
  dmesg | grep -i "$name" | tail -20 > $S/$name-dmesg
}
"#;

#[test]
fn zoned_file_systems_on_served_images() {
    let Some(script) = vm::ready_for_serve("zoned_file_systems_on_served_images") else {
        return;
    };
    for tool in ["mkfs.f2fs", "mkfs.btrfs"] {
        let found = std::process::Command::new("sh").args(["-c", &format!("command -v {tool}")]).output();
        if !found.is_ok_and(|o| o.status.success()) {
            return vm::skipped(
                "zoned_file_systems_on_served_images",
                &format!("{tool} is not installed on the host (scripts/vm-deps installs it)"),
            );
        }
    }
    let dir = tempfile::Builder::new().prefix("zblk-zonedfs-vm").tempdir_in("/var/tmp").unwrap();
    let share = dir.path();
    let zblk = vm::stage(share, env!("CARGO_BIN_EXE_zblk"));
    let files: Vec<&str> = FILES.iter().map(|f| f.0).collect();
    let make: String =
        FILES.iter().map(|(f, k)| format!("dd if=/dev/urandom of=/tmp/{f} bs=1k count={k} status=none\n")).collect();
    let guest = format!(
        r#"S={share}; mount -t tmpfs tmpfs /run; cp {zblk} /tmp/zblk; X=/tmp/zblk; M=/tmp/mnt; mkdir -p $M
FILES="{files}"
{make}(cd /tmp && sha256sum $FILES) > $S/src-sums
{FS_FN}
fs f2fs "--zone_nr_conv 8" mkfs.f2fs -f -m
fs btrfs "" mkfs.btrfs -f -O zoned
"#,
        share = share.display(),
        files = files.join(" "),
    );
    let log = vm::run_guest(&script, share, "zoned=1 gb=1", &["--ublk", "--modules", "f2fs btrfs"], &guest);
    let file = |f: &str| std::fs::read_to_string(share.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    let rc = |f: &str| file(&format!("{f}.rc")).trim().to_string();
    let times: Vec<(String, f64)> = file("times")
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect();
    let at = |k: &str| times.iter().find(|(n, _)| n == k).unwrap_or_else(|| panic!("no time {k}: {times:?}")).1;
    let bytes: u64 = FILES.iter().map(|f| f.1 * 1024).sum();

    let src = file("src-sums");
    for fs in ["f2fs", "btrfs"] {
        let ctx = || format!("{}\n{}", file(&format!("{fs}-mkfs.out")), file(&format!("{fs}-dmesg")));
        assert_eq!(rc(&format!("{fs}-mkfs")), "0", "mkfs {fs}: {}", ctx());
        assert_eq!(rc(&format!("{fs}-mount")), "0", "mount {fs}: {}\n{}", file(&format!("{fs}-mount.out")), ctx());
        assert_eq!(rc(&format!("{fs}-umount")), "0", "umount {fs}");
        assert_eq!(file(&format!("{fs}-sums1")), src, "{fs}: the files as written");
        assert_eq!(rc(&format!("{fs}-1")), "0", "serve {fs} after SIGTERM: {}", file(&format!("{fs}-1.err")));
        // Served again, the image shows the zones the kernel last saw, and the file
        // system mounts with its files intact.
        let zones = file(&format!("{fs}-zones1"));
        assert_eq!(zones.lines().count(), 128, "{fs}: {zones}");
        assert_eq!(file(&format!("{fs}-zones2")), zones, "{fs}: zones after serving the image again");
        assert_eq!(rc(&format!("{fs}-mount2")), "0", "mount {fs} again: {}", file(&format!("{fs}-mount2.out")));
        assert_eq!(file(&format!("{fs}-sums2")), src, "{fs}: the files after serving the image again");
        assert_eq!(rc(&format!("{fs}-resetall")), "0");
        assert_eq!(rc(&format!("{fs}-2")), "0", "serve {fs} again: {}", file(&format!("{fs}-2.err")));
        let served = |n: &str| {
            let err = file(&format!("{fs}-{n}.err"));
            err.lines().find(|l| l.contains("requests served")).unwrap_or_else(|| panic!("{err}")).to_string()
        };
        let (first, second) = (served("1"), served("2"));
        assert!(second.contains("zone_reset_all 1,"), "{fs}: the whole-device reset: {second}");
        if fs == "btrfs" {
            assert!(!first.contains("zone_append 0,"), "btrfs sent no zone append: {first}");
        }
        let write_s = at(&format!("{fs}-written")) - at(&format!("{fs}-mounted"));
        eprintln!(
            "{fs}: mkfs {:.1} s, mount {:.1} s, {:.1} MiB written (4 files, each fsynced) in {:.1} s = {:.1} MiB/s, \
             umount {:.1} s, mount again {:.1} s",
            at(&format!("{fs}-mkfs-done")) - at(&format!("{fs}-mkfs")),
            at(&format!("{fs}-mounted")) - at(&format!("{fs}-mkfs-done")),
            bytes as f64 / (1 << 20) as f64,
            write_s,
            bytes as f64 / (1 << 20) as f64 / write_s,
            at(&format!("{fs}-umounted")) - at(&format!("{fs}-written")),
            at(&format!("{fs}-mounted2")) - at(&format!("{fs}-mount2")),
        );
        eprintln!("{fs}: first server: {first}");
        eprintln!("{fs}: second server: {second}");
    }
}
