//! The table of bad inputs (docs/bad-inputs.md): each row a shell command run on a
//! fresh directory holding `a.img` (64 MiB, 4 MiB zones, 1 conventional, max_open
//! 2) and `d4k` (4 KiB of data). Each row says the exit status wanted (`None`: any
//! failure, 1 or 2) and a piece of the message. No row may panic or hang (each runs
//! under a 20 s timeout).

use std::process::Command;

/// (row, shell command with `$Z` for zblk, exit status wanted, stderr must contain)
const ROWS: &[(&str, &str, Option<i32>, &str)] = &[
    // Arguments
    ("size-overflow", "$Z create b.img --size 16383P -p zone_size=1P", None, "at most"),
    ("too-many-zones", "$Z create b.img --size 1T -p zone_size=1k", None, "at most 4194304"),
    ("size-garbage", "$Z create b.img --size 12Q", None, "unknown suffix"),
    ("size-zero", "$Z create b.img --size 0", None, ""),
    ("size-negative", "$Z create b.img --size -5", Some(2), ""),
    ("zone-not-pow2", "$Z create b.img --size 64M -p zone_size=3M", None, ""),
    ("zone-bigger-than-disk", "$Z create b.img --size 4M -p zone_size=8M", None, ""),
    ("unknown-param", "$Z create b.img --size 64M -p bogus=1", None, "unknown parameter"),
    ("param-no-value", "$Z create b.img --size 64M -p zone_size", None, ""),
    ("blocksize-odd", "$Z create b.img --size 64M -p blocksize=1000", None, ""),
    ("exists", "$Z create a.img --size 64M", None, "file exists"),
    ("missing-dir", "$Z create nodir/b.img --size 64M", None, "no such file"),
    ("length-zero", "$Z write a.img -o 4M -l 0 -p 1", None, "EINVAL: length 0"),
    ("length-huge", "$Z read a.img -o 0 -l 8G", None, "at most 1073741824 bytes"),
    ("length-past-limit", "$Z read a.img -o 0 -l 2000000000000", None, ""),
    ("offset-unaligned", "$Z write a.img -o 100 -l 512 -p 1", None, "EINVAL: offset 100"),
    ("offset-past-end", "$Z read a.img -o 1G -l 512", None, "beyond the device end"),
    ("offset-overflow", "$Z read a.img -o 18446744073709551104 -l 4096", None, ""),
    ("no-data", "$Z write a.img -o 4M", None, "give the data"),
    ("pattern-no-length", "$Z write a.img -o 4M -p 1", None, "--pattern needs --length"),
    ("input-short", "$Z write a.img -o 4M -l 8192 -i d4k", None, "the input has 4096 bytes"),
    ("input-missing", "$Z write a.img -o 4M -i nofile", None, "nofile"),
    ("input-endless", "$Z write a.img -o 4M -l 512 -i /dev/zero", Some(0), ""),
    ("input-endless-no-length", "$Z write a.img -o 4M -i /dev/zero", None, "longer than"),
    ("read-with-input", "$Z read a.img -o 0 -l 512 -i d4k", None, "read takes no"),
    ("write-with-output", "$Z write a.img -o 4M -l 512 -p 1 -O x", None, "--output is for read"),
    ("write-not-at-wp", "$Z write a.img -o 8M+4096 -l 512 -p 1", None, ""),
    ("write-unaligned-wp", "$Z write a.img -o 12M -l 100 -p 1", None, ""),
    ("append-not-zone-start", "$Z append a.img -o 4M+4096 -l 512 -p 1", None, ""),
    ("unknown-command", "$Z frobnicate", Some(2), ""),
    ("bench-bad-rw", "$Z bench --rw sideways", Some(2), ""),
    ("bench-iodepth-huge", "$Z bench --image a.img --iodepth 100000", None, "at most 4096"),
    // Image damage
    ("not-an-image", "echo hello > t.img; $Z report t.img", None, "not a zblk image"),
    ("empty-file", ": > t.img; $Z report t.img", None, "empty file"),
    ("truncated", "cp a.img t.img; truncate -s 1M t.img; $Z report t.img", None, "truncated image"),
    (
        "both-superblocks",
        "cp a.img t.img; printf 'XX' | dd of=t.img bs=1 seek=20 conv=notrunc 2>/dev/null; printf 'XX' | dd of=t.img bs=1 seek=4116 conv=notrunc 2>/dev/null; $Z report t.img",
        None,
        "both superblock copies",
    ),
    (
        "one-superblock",
        "printf 'XX' | dd of=a.img bs=1 seek=20 conv=notrunc 2>/dev/null; $Z report a.img >/dev/null && $Z info a.img",
        Some(0),
        "",
    ),
    (
        "newer-version",
        "printf '\\011' | dd of=a.img bs=1 seek=8 conv=notrunc 2>/dev/null; printf '\\011' | dd of=a.img bs=1 seek=4104 conv=notrunc 2>/dev/null; $Z report a.img",
        None,
        "made by a newer zblk",
    ),
    (
        "superblocks-zeroed",
        "dd if=/dev/zero of=a.img bs=8192 count=1 conv=notrunc 2>/dev/null; $Z report a.img",
        None,
        "not a zblk image",
    ),
    ("check-clean", "$Z check a.img", Some(0), ""),
    (
        "check-one-superblock",
        "printf 'XX' | dd of=a.img bs=1 seek=20 conv=notrunc 2>/dev/null; $Z check a.img",
        Some(4),
        "",
    ),
    (
        "check-repair",
        "printf 'XX' | dd of=a.img bs=1 seek=20 conv=notrunc 2>/dev/null; $Z check -y a.img; [ $? = 1 ] && $Z check -n a.img",
        Some(0),
        "",
    ),
    (
        "check-both-superblocks",
        "printf 'XX' | dd of=a.img bs=1 seek=20 conv=notrunc 2>/dev/null; printf 'XX' | dd of=a.img bs=1 seek=4116 conv=notrunc 2>/dev/null; $Z check --repair a.img",
        Some(4),
        "both superblock copies",
    ),
    ("check-missing", "$Z check nofile", Some(8), "no such file"),
    // Misuse
    ("fifo", "mkfifo f; $Z report f", None, "it is a FIFO"),
    ("directory", "mkdir d; $Z report d", None, "it is a directory"),
    ("char-device", "$Z report /dev/null", None, "character device"),
    ("create-f-fifo", "mkfifo f; $Z create -f f --size 64M", None, "not replaced"),
    ("create-f-symlink", "ln -s a.img l.img; $Z create -f l.img --size 64M", None, "symbolic link"),
    ("create-f-devnull", "$Z create -f /dev/null --size 64M", None, "not replaced"),
    ("create-f-dir", "mkdir d; $Z create -f d --size 64M", None, "directory"),
    (
        "create-f-in-use",
        "( flock -x 9; sleep 3 ) 9<a.img & sleep 0.5; $Z create -f a.img --size 64M; r=$?; wait; exit $r",
        None,
        "in use",
    ),
    ("output-is-image", "$Z read a.img -o 0 -l 512 -O a.img", None, "the image itself"),
    ("output-is-image-link", "ln a.img h.img; $Z read a.img -o 0 -l 512 -O h.img", None, "the image itself"),
    (
        "in-use",
        "( flock -x 9; sleep 3 ) 9<a.img & sleep 0.5; $Z write a.img -o 4M -l 512 -p 1; r=$?; wait; exit $r",
        None,
        "in use",
    ),
    (
        "read-only-file",
        "chmod a-w a.img; $Z write a.img -o 4M -l 512 -p 1 || exit 1; [ $(id -u) = 0 ] && exit 1",
        None,
        "",
    ),
    ("finish-conventional", "$Z finish a.img -o 0 -l 4M", None, ""),
    // Environment
    ("sigpipe-report", "$Z report a.img | head -c1 >/dev/null; exit ${PIPESTATUS:-0}", Some(0), ""),
    ("sigpipe-status", "$Z read a.img -o 0 -l 1M -O - | true; s=$?; exit $s", Some(0), ""),
    ("file-size-limit", "ulimit -f 100; $Z create b.img --size 64M", None, "EFBIG"),
    ("bench-failed-ios", "$Z bench --image a.img --rw randwrite --zonemode none --runtime 1", Some(1), "I/Os failed"),
    ("closed-stdin", "$Z write a.img -o 4M -i - <&-", None, ""),
];

#[test]
fn every_row_of_the_bad_input_table() {
    let zblk = env!("CARGO_BIN_EXE_zblk");
    let mut failures = Vec::new();
    for &(row, cmd, rc, want) in ROWS {
        let dir = tempfile::tempdir().unwrap();
        let setup = Command::new(zblk)
            .args(["create", "a.img", "--size", "64M", "-p", "zone_size=4M,zone_nr_conv=1,zone_max_open=2"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(setup.status.success(), "{row}: set-up: {}", String::from_utf8_lossy(&setup.stderr));
        std::fs::write(dir.path().join("d4k"), [7u8; 4096]).unwrap();
        let out = Command::new("timeout")
            .args(["20", "bash", "-c", cmd])
            .env("Z", zblk)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        let bad = if err.contains("panicked") || err.contains("overflow") && err.contains("attempt") {
            Some("panicked".to_string())
        } else if code == Some(124) {
            Some("hung (timeout)".to_string())
        } else if rc.map_or(code == Some(0) || code.is_none(), |r| code != Some(r)) {
            Some(format!("exit {code:?}, wanted {rc:?}"))
        } else if !err.contains(want) {
            Some(format!("stderr lacks {want:?}"))
        } else {
            None
        };
        if let Some(why) = bad {
            failures.push(format!("{row}: {why}\n  $ {cmd}\n  {}", err.trim()));
        }
    }
    assert!(ROWS.len() >= 50, "the table has {} rows", ROWS.len());
    assert!(failures.is_empty(), "{} of {} rows failed:\n{}", failures.len(), ROWS.len(), failures.join("\n"));
}
