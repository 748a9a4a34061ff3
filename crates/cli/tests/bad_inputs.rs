//! The table of bad inputs (docs/bad-inputs.md): each row a shell command run on a
//! fresh directory holding `a.img` (64 MiB, 4 MiB zones, 1 conventional, max_open
//! 2) and `d4k` (4 KiB of data). Each row says the exit status wanted (`None`: any
//! failure, 1 or 2) and a piece of the message. No row may panic or hang (each runs
//! under a 20 s timeout). A row that cannot run here (it needs root) says `SKIPPED `
//! on stderr and is listed as skipped. The table in the docs is checked against
//! these rows, so it says what is run.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

use std::io::Write;
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
    (
        "preallocate-no-room",
        "$Z create b.img --size 10T -p zone_size=256M --preallocate",
        None,
        "cannot preallocate: the data region needs 10485760 MiB",
    ),
    ("missing-dir", "$Z create nodir/b.img --size 64M", None, "nodir: no such directory"),
    ("length-zero", "$Z write a.img -o 4M -l 0 -p 1", None, "EINVAL: length 0"),
    ("length-huge", "$Z read a.img -o 0 -l 8G", None, "is beyond the device end"),
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
    (
        "write-not-at-wp",
        "$Z write a.img -o 8392704 -l 512 -p 1",
        None,
        "EIO: write at sector 16392 is not at zone 2's write pointer (sector 16384); wrote 0 of 512 bytes",
    ),
    (
        "write-unaligned-wp",
        "$Z write a.img -o 12M -l 100 -p 1",
        None,
        "EINVAL: length 100 is not a multiple of the logical block size (512 bytes)",
    ),
    (
        "append-not-zone-start",
        "$Z append a.img -o 4198400 -l 512 -p 1",
        None,
        "EINVAL: zone append at sector 8200 is not a zone start",
    ),
    ("length-garbage-suffix", "$Z write a.img -o 4M -l 4kbb -p 1", Some(2), "unknown suffix"),
    ("offset-negative", "$Z read a.img -o -4096 -l 512", Some(2), ""),
    ("append-too-long", "$Z append a.img -o 4M -l 8M -p 1", None, "is larger than the device's zone append limit"),
    (
        "append-too-long-stdin",
        "head -c 8M /dev/zero | $Z append a.img -o 4M -i -",
        None,
        "is larger than the device's zone append limit",
    ),
    ("open-conventional", "$Z open a.img -o 0 -c 1", None, "EINVAL: open of conventional zone 0"),
    ("close-empty", "$Z close a.img -o 8192 -c 1", None, "EIO: cannot close zone 1: it is EMPTY"),
    (
        "open-limit",
        "$Z open a.img -o 8192 -c 1 && $Z open a.img -o 16384 -c 1 && $Z open a.img -o 24576 -c 1",
        None,
        "ETOOMANYREFS: cannot open zone 3: the open zone limit is reached (zone_max_open 2)",
    ),
    (
        "write-full-zone",
        "$Z finish a.img -o 8192 -c 1 && $Z write a.img -o 4M -l 4096 -p 1",
        None,
        "EIO: zone 1 is FULL",
    ),
    (
        "write-partial",
        "$Z create c.img --size 64M -p zone_size=16M,zone_capacity=10M,zone_nr_conv=1 >/dev/null; $Z write c.img -o 16M -l 13M -p 1",
        None,
        "EIO: the write goes past zone 1's capacity (10485760 bytes: its writable part ends at byte offset 27262976); wrote 9699328 of 13631488 bytes; zone 1's write pointer is now at byte offset 26476544 (sector 51712, IMP_OPEN)",
    ),
    (
        "input-ends-early",
        "head -c 1000 /dev/zero | $Z write a.img -o 4M -l 4096 -i -",
        None,
        "standard input ended after 1000 bytes, --length asks for 4096; wrote 0 of 4096 bytes",
    ),
    (
        "input-not-whole-blocks",
        "head -c 5000 /dev/zero | $Z write a.img -o 4M -i -",
        None,
        "standard input's length (5000 bytes) is not a multiple of the logical block size (512 bytes); wrote 0 bytes",
    ),
    (
        "stream-write-1200M",
        "$Z create big.img --size 4G -p zone_size=256M >/dev/null && /usr/bin/time -f %M -o rss $Z write big.img -o 0 -l 1200M -p 0xab && $Z report big.img -c 5 | tail -1 | grep -q 'wptr 0x058000' && [ $(tail -1 rss) -lt 204800 ]",
        Some(0),
        "",
    ),
    (
        "stream-read-3G",
        "$Z create big.img --size 4G -p zone_size=256M >/dev/null && /usr/bin/time -f %M -o rss $Z read big.img -o 0 -l 3G --json | grep -q '\"length\":3221225472' && [ $(tail -1 rss) -lt 204800 ]",
        Some(0),
        "",
    ),
    ("unknown-command", "$Z frobnicate", Some(2), ""),
    ("bench-bad-rw", "$Z bench --rw sideways", Some(2), ""),
    ("bench-host-latency-huge", "$Z bench --host-latency 1000000000s", Some(2), "at most 1s"),
    ("bench-plug-work-huge", "$Z bench --plug-work 1000000000s", Some(2), "at most 1s"),
    ("bench-host-wake-alone", "$Z bench --host-wake 30us", None, "give --host-cpus too"),
    ("bench-host-cpus-huge", "$Z bench --host-cpus 100000", Some(2), "not in 0..=64"),
    ("bench-host-p90-alone", "$Z bench --host-cpus 2 --host-wake-p90 80us", None, "give --host-wake too"),
    (
        "bench-host-p90-below",
        "$Z bench --host-cpus 2 --host-wake 50us --host-wake-p90 20us",
        None,
        "at most the 90th percentile",
    ),
    ("bench-host-open-alone", "$Z bench --host-open 20us", None, "give --host-cpus too"),
    ("bench-host-cpus-image", "$Z bench --image a.img --host-cpus 2", None, "they are for simulated devices"),
    ("bench-iodepth-huge", "$Z bench --image a.img --iodepth 100000", None, "at most 4096"),
    ("bench-numjobs-huge", "$Z bench --numjobs 100000 --runtime 1", None, "--numjobs is at most 256 (got 100000)"),
    ("bench-increment-unaligned", "$Z bench --numjobs 2 --offset_increment 1", None, "must be block aligned"),
    (
        "bench-increment-past-end",
        "$Z bench --dev smr-30tb --numjobs 4 --offset_increment 30T --size 256M",
        None,
        "outside the device",
    ),
    (
        "bench-increment-size-huge",
        "$Z bench --size 18446744073709551104 --numjobs 2 --offset_increment 1M",
        None,
        "must stay inside the device",
    ),
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
    (
        "check-data-past-end",
        "s=$(stat -c %s a.img); head -c 5000 /dev/zero >> a.img; $Z check a.img; a=$?; $Z check -y a.img; b=$?; $Z check a.img; c=$?; [ $a$b$c = 410 ] && [ $(stat -c %s a.img) = $s ]",
        Some(0),
        "",
    ),
    (
        "check-data-past-end-found",
        "head -c 5000 /dev/zero >> a.img; $Z check a.img >&2",
        Some(4),
        "5000 bytes past the image's end",
    ),
    (
        "check-other-image-metadata",
        "$Z create b.img --size 64M -p zone_size=4M,zone_nr_conv=1,zone_max_open=2 >/dev/null; $Z write a.img -o 4M -l 64k -p 1 >/dev/null; for o in 8 12 16; do $Z write b.img -o ${o}M -l 4k -p 2 >/dev/null; done; dd if=b.img of=a.img bs=4096 skip=2 seek=2 count=3 conv=notrunc 2>/dev/null; $Z check a.img >&2",
        Some(4),
        "both durable zone tables are unusable (A: every sector of the table belongs to another image",
    ),
    (
        "check-other-image-tables",
        "$Z create b.img --size 64M -p zone_size=4M,zone_nr_conv=1,zone_max_open=2 >/dev/null; $Z write a.img -o 4M -l 64k -p 1 >/dev/null; for o in 8 12 16; do $Z write b.img -o ${o}M -l 4k -p 2 >/dev/null; done; dd if=b.img of=a.img bs=4096 skip=2 seek=2 count=2 conv=notrunc 2>/dev/null; $Z check a.img >&2",
        Some(4),
        "WARNING: parts of another image were copied into this one (durable zone table A (every sector); durable zone table B (every sector))",
    ),
    (
        "check-other-image-repair",
        "$Z create b.img --size 64M -p zone_size=4M,zone_nr_conv=1,zone_max_open=2 >/dev/null; $Z write a.img -o 4M -l 64k -p 1 >/dev/null; for o in 8 12 16; do $Z write b.img -o ${o}M -l 4k -p 2 >/dev/null; done; dd if=b.img of=a.img bs=4096 skip=2 seek=2 count=2 conv=notrunc 2>/dev/null; $Z check -y a.img >/dev/null; [ $? = 1 ] && $Z check a.img >/dev/null && $Z report a.img -c 2 | tail -1 | grep -q 'wptr 0x000080'",
        Some(0),
        "",
    ),
    ("zero-length-check", ": > e.img; $Z check e.img", Some(8), "empty file"),
    (
        "kill-during-write",
        "( head -c 8M /dev/zero; : > sent; sleep 3 ) | $Z write a.img -o 4M -l 16M -i - & until [ -e sent ]; do sleep 0.05; done; sleep 1; kill -9 $!; wait; $Z check -y a.img >/dev/null; $Z check a.img && $Z report a.img -c 3 | tail -1 | grep -q 'wptr 0x002000 .*zcond:14(fu)'",
        Some(0),
        "",
    ),
    (
        "replay-table-and-header",
        "$Z write a.img -o 4M -l 4096 -p 1 --flush && cp a.img old.img && $Z write a.img -o 4198400 -l 4096 -p 2 --flush && for b in 2 3; do cmp -s <(dd if=a.img bs=4096 skip=$b count=1 2>/dev/null) <(dd if=old.img bs=4096 skip=$b count=1 2>/dev/null) || dd if=old.img of=a.img bs=4096 skip=$b seek=$b count=1 conv=notrunc 2>/dev/null; done; dd if=old.img of=a.img bs=1 skip=16384 seek=16384 count=64 conv=notrunc 2>/dev/null; $Z check a.img >&2",
        Some(4),
        "cannot be proven the newest: flushed writes, resets and finishes after it may be undone",
    ),
    (
        "replay-refused-for-writing",
        "$Z write a.img -o 4M -l 4096 -p 1 --flush && cp a.img old.img && $Z write a.img -o 4198400 -l 4096 -p 2 --flush && dd if=old.img of=a.img bs=4096 skip=2 seek=2 count=3 conv=notrunc 2>/dev/null; $Z write a.img -o 4202496 -l 4096 -p 3",
        None,
        "refusing to open for writing: the image's metadata contradicts itself",
    ),
    (
        "replay-repaired",
        "$Z write a.img -o 4M -l 4096 -p 1 --flush && cp a.img old.img && $Z write a.img -o 4198400 -l 4096 -p 2 --flush && dd if=old.img of=a.img bs=4096 skip=2 seek=2 count=3 conv=notrunc 2>/dev/null; $Z check -y a.img >/dev/null; [ $? = 1 ] && $Z check a.img >/dev/null && $Z report a.img -c 2 | tail -1 | grep -q 'wptr 0x000008'",
        Some(0),
        "",
    ),
    // Misuse
    ("fifo", "mkfifo f; $Z report f", None, "it is a FIFO"),
    ("directory", "mkdir d; $Z report d", None, "it is a directory"),
    ("char-device", "$Z report /dev/null", None, "character device"),
    (
        "char-device-not-nvme",
        "$Z write /dev/null -o 0 -l 4k -p 1",
        None,
        "a character device, not an NVMe namespace's generic device",
    ),
    ("char-device-bench", "$Z bench --image /dev/zero --rw write --size 1M", None, "not an NVMe namespace's"),
    ("zone-append-simulated", "$Z bench --zone_append", None, "--zone_append is for --image"),
    ("poll-simulated", "$Z bench --poll 100", None, "--poll is for --image"),
    ("poll-huge", "$Z bench --image a.img --poll 1000001", Some(2), "1000001"),
    ("poll-negative", "$Z bench --image a.img --poll -5", Some(2), ""),
    (
        "pipeline-depth-not-pipelining",
        "$Z bench --image a.img --policy zwp --pipeline-depth 4",
        None,
        "keeps one write per zone",
    ),
    ("pipeline-depth-garbage", "$Z bench --image a.img --pipeline-depth four", Some(2), "four"),
    ("create-f-fifo", "mkfifo f; $Z create -f f --size 64M", None, "not replaced"),
    ("create-f-symlink", "ln -s a.img l.img; $Z create -f l.img --size 64M", None, "symbolic link"),
    ("create-f-devnull", "$Z create -f /dev/null --size 64M", None, "not replaced"),
    ("create-f-dir", "mkdir d; $Z create -f d --size 64M", None, "directory"),
    (
        "create-f-in-use",
        "( flock -x 9; : > held; sleep 3 ) 9<a.img & until [ -e held ]; do sleep 0.05; done; $Z create -f a.img --size 64M; r=$?; wait; exit $r",
        None,
        "in use",
    ),
    (
        "create-f-waits",
        "( flock -x 9; : > held; sleep 1 ) 9<a.img & until [ -e held ]; do sleep 0.05; done; $Z create -f --wait=10 a.img --size 64M >/dev/null && $Z info a.img | grep -q 'capacity: *64MiB'",
        Some(0),
        "",
    ),
    (
        "create-f-wait-times-out",
        "( flock -x 9; : > held; sleep 3 ) 9<a.img & until [ -e held ]; do sleep 0.05; done; $Z create -f --wait=0.5 a.img --size 64M; r=$?; wait; exit $r",
        None,
        "image in use by another process",
    ),
    ("output-is-image", "$Z read a.img -o 0 -l 512 -O a.img", None, "the image itself"),
    ("output-is-image-link", "ln a.img h.img; $Z read a.img -o 0 -l 512 -O h.img", None, "the image itself"),
    (
        "in-use",
        "( flock -x 9; : > held; sleep 3 ) 9<a.img & until [ -e held ]; do sleep 0.05; done; $Z write a.img -o 4M -l 512 -p 1; r=$?; wait; exit $r",
        None,
        "in use",
    ),
    (
        "read-only-file",
        "chmod a-w a.img; $Z write a.img -o 4M -l 512 -p 1 || exit 1; [ $(id -u) = 0 ] && exit 1",
        None,
        "",
    ),
    (
        "concurrent-writes",
        "( sleep 2; head -c 4096 /dev/zero ) | $Z write a.img -o 4M -l 4096 -i - & until grep -q \":$(stat -c %i a.img) \" /proc/locks; do sleep 0.05; done; $Z write a.img -o 8M -l 512 -p 2; r=$?; wait $! || exit 9; exit $r",
        None,
        "image in use by another process",
    ),
    (
        "wait-for-lock",
        "( flock -x 9; : > held; sleep 1 ) 9<a.img & until [ -e held ]; do sleep 0.05; done; $Z write --wait=10 a.img -o 4M -l 512 -p 1 && $Z report a.img -c 2 | tail -1 | grep -q 'wptr 0x000001'",
        Some(0),
        "",
    ),
    (
        "wait-forever",
        "( flock -x 9; : > held; sleep 1 ) 9<a.img & until [ -e held ]; do sleep 0.05; done; $Z report --wait a.img >/dev/null",
        Some(0),
        "",
    ),
    (
        "wait-times-out",
        "( flock -x 9; : > held; sleep 3 ) 9<a.img & until [ -e held ]; do sleep 0.05; done; $Z write --wait=0.5 a.img -o 4M -l 512 -p 1; r=$?; wait; exit $r",
        None,
        "image in use by another process",
    ),
    ("wait-junk", "$Z report --wait=soon a.img", Some(2), "not a number of seconds"),
    ("wait-negative", "$Z check --wait=-1 a.img", Some(2), "not a number of seconds"),
    ("directory-symlink", "mkdir d; ln -s d l.img; $Z report l.img", None, "it is a directory"),
    ("finish-conventional", "$Z finish a.img -o 0 -l 4M", None, "EINVAL: finish of conventional zone 0"),
    (
        "reset-at-end",
        "$Z reset a.img -o 131072",
        None,
        "EINVAL: no zone to reset at sector 131072: it is the device's end (131072 sectors)",
    ),
    (
        "open-at-end",
        "$Z open a.img -o 131072 -c 1",
        None,
        "EINVAL: no zone to open at sector 131072: it is the device's end (131072 sectors)",
    ),
    (
        "close-at-end",
        "$Z close a.img -o 131072 -c 4",
        None,
        "EINVAL: no zone to close at sector 131072: it is the device's end (131072 sectors)",
    ),
    (
        "finish-at-end",
        "$Z finish a.img -o 131072 -l 8192",
        None,
        "EINVAL: no zone to finish at sector 131072: it is the device's end (131072 sectors)",
    ),
    ("reset-conventional-only", "$Z reset a.img -o 0 -c 1", None, "EINVAL: reset of conventional zone 0"),
    (
        "open-range-partial",
        "$Z open a.img -o 8192 -c 3",
        None,
        "ETOOMANYREFS: cannot open zone 3: the open zone limit is reached (zone_max_open 2); done before it: open of zones 1 to 2 (2 zones, sectors 8192 to 24576)",
    ),
    (
        "zone-count-zero",
        "$Z finish a.img -o 114688 -c 0 --json | grep -q '\"zones\":2' && [ $($Z report a.img -o 114688 | grep -c 'zcond:14(fu)') = 2 ]",
        Some(0),
        "",
    ),
    (
        "create-race",
        "$Z create r.img --size 4G -p zone_size=4k >/dev/null 2>err & c=$!; until readlink /proc/$c/fd/* 2>/dev/null | grep -q \"^$PWD/[.#]\"; do sleep 0.01; done; $Z create r.img --size 64M -p zone_size=4M >/dev/null && $Z write r.img -o 0 -l 4096 -p 7 --flush; wait $c; s=$?; cat err >&2; [ $s = 1 ] && $Z report r.img -c 1 | grep -q 'wptr 0x000008'",
        Some(0),
        "file exists",
    ),
    (
        "create-sigint",
        "set -m; $Z create r.img --size 4G -p zone_size=4k >/dev/null 2>/dev/null & c=$!; until readlink /proc/$c/fd/* 2>/dev/null | grep -q \"^$PWD/[.#]\"; do sleep 0.01; done; kill -INT $c; wait $c; ls -A >&2; [ -z \"$(ls -A | grep -v '^a\\.img$\\|^d4k$')\" ]",
        Some(0),
        "",
    ),
    (
        "create-sigint-preallocate",
        "set -m; $Z create r.img --size 4G -p zone_size=4k --preallocate >/dev/null 2>/dev/null & c=$!; until readlink /proc/$c/fd/* 2>/dev/null | grep -q \"^$PWD/[.#]\"; do sleep 0.01; done; kill -INT $c; wait $c; ls -A >&2; [ -z \"$(ls -A | grep -v '^a\\.img$\\|^d4k$')\" ]",
        Some(0),
        "",
    ),
    (
        "create-sigterm",
        "set -m; $Z create r.img --size 4G -p zone_size=4k >/dev/null 2>/dev/null & c=$!; until readlink /proc/$c/fd/* 2>/dev/null | grep -q \"^$PWD/[.#]\"; do sleep 0.01; done; kill -TERM $c; wait $c; ls -A >&2; [ -z \"$(ls -A | grep -v '^a\\.img$\\|^d4k$')\" ]",
        Some(0),
        "",
    ),
    (
        "create-sigterm-preallocate",
        "set -m; $Z create r.img --size 4G -p zone_size=4k --preallocate >/dev/null 2>/dev/null & c=$!; until readlink /proc/$c/fd/* 2>/dev/null | grep -q \"^$PWD/[.#]\"; do sleep 0.01; done; kill -TERM $c; wait $c; ls -A >&2; [ -z \"$(ls -A | grep -v '^a\\.img$\\|^d4k$')\" ]",
        Some(0),
        "",
    ),
    (
        "create-sigkill",
        "$Z create r.img --size 4G -p zone_size=4k --preallocate >/dev/null 2>/dev/null & c=$!; until readlink /proc/$c/fd/* 2>/dev/null | grep -q \"^$PWD/[.#]\"; do sleep 0.01; done; kill -KILL $c; wait $c; $Z create r.img --size 64M -p zone_size=4M >/dev/null && rm r.img && ls -A >&2 && [ -z \"$(ls -A | grep -v '^a\\.img$\\|^d4k$')\" ]",
        Some(0),
        "",
    ),
    (
        "create-names-leftover",
        "head -c 3M /dev/urandom > .r.img.zblk-new-4242-0; $Z create r.img --size 64M -p zone_size=4M >/dev/null && [ -e .r.img.zblk-new-4242-0 ]",
        Some(0),
        "zblk: warning: ./.r.img.zblk-new-4242-0: a temporary file left by an interrupted create, holding 3 MiB; remove it to free the space",
    ),
    (
        "preallocate-no-room-leftover",
        "head -c 3M /dev/urandom > .b.img.zblk-new-4242-0; $Z create b.img --size 10T -p zone_size=256M --preallocate",
        None,
        "free; 1 temporary file left by interrupted creates holds 3 MiB of the file system (remove it to free the space): ./.b.img.zblk-new-4242-0 (3 MiB)",
    ),
    (
        "wait-path-moved",
        "( flock -x 9; : > held; sleep 1 ) 9<a.img & until [ -e held ]; do sleep 0.05; done; $Z write --wait=10 a.img -o 4M -l 512 -p 1 --flush & w=$!; sleep 0.3; $Z create b.img --size 32M -p zone_size=4M,zone_nr_conv=1 >/dev/null; mv b.img a.img; wait $w && $Z check a.img >/dev/null && $Z info a.img | grep -q 'capacity: *32MiB' && $Z report a.img -c 2 | tail -1 | grep -q 'wptr 0x000001'",
        Some(0),
        "",
    ),
    (
        "wait-create-f",
        "$Z create -f a.img --size 4G -p zone_size=4k >/dev/null & c=$!; until readlink /proc/$c/fd/* 2>/dev/null | grep -q \"^$PWD/[.#]\"; do sleep 0.01; done; $Z write --wait=10 a.img -o 0 -l 512 -p 1 --flush && wait $c && $Z info a.img | grep -q 'capacity: *4GiB' && $Z report a.img -c 1 | grep -q 'wptr 0x000001'",
        Some(0),
        "",
    ),
    (
        "wait-symlink-swapped",
        "$Z create b.img --size 32M -p zone_size=4M,zone_nr_conv=1 >/dev/null; ln -s a.img l.img; ( flock -x 9; : > held; sleep 1 ) 9<a.img & until [ -e held ]; do sleep 0.05; done; $Z write --wait=10 l.img -o 4M -l 512 -p 1 --flush & w=$!; sleep 0.3; ln -sfn b.img l.img; wait $w && $Z check b.img >/dev/null && $Z report b.img -c 2 | tail -1 | grep -q 'wptr 0x000001' && $Z report a.img -c 2 | tail -1 | grep -q 'wptr 0x000000'",
        Some(0),
        "",
    ),
    (
        "read-output-other-image",
        "$Z create c.img --size 64M -p zone_size=4M >/dev/null; $Z read c.img -o 0 -l 512 -O a.img; r=$?; $Z check a.img >/dev/null || exit 9; exit $r",
        Some(1),
        "a.img: it is a zblk image (remove it first to reuse the name): not overwritten",
    ),
    (
        "read-output-image-in-use",
        "$Z create c.img --size 64M -p zone_size=4M >/dev/null; ( sleep 2; head -c 4096 /dev/zero ) | $Z write a.img -o 4M -l 4096 --flush -i - & until grep -q \":$(stat -c %i a.img) \" /proc/locks; do sleep 0.05; done; $Z read c.img -o 0 -l 512 -O a.img; r=$?; wait $! || exit 9; $Z check a.img >/dev/null && $Z report a.img -c 2 | tail -1 | grep -q 'wptr 0x000008' || exit 9; exit $r",
        Some(1),
        "a.img: it is in use by another process (its lock is held): not overwritten",
    ),
    (
        "read-output-locked-file",
        "echo keep > o.txt; ( flock -x 9; : > held; sleep 2 ) 9<o.txt & until [ -e held ]; do sleep 0.05; done; $Z read a.img -o 0 -l 512 -O o.txt; r=$?; grep -q keep o.txt || exit 9; exit $r",
        Some(1),
        "o.txt: it is in use by another process (its lock is held): not overwritten",
    ),
    (
        "read-output-block-device",
        "mknod bd b 7 250 2>/dev/null || { echo 'SKIPPED read-output-block-device: cannot make a device node (needs root)' >&2; exit 1; }; $Z read a.img -o 0 -l 512 -O bd",
        Some(1),
        "bd: it is a block device (an output is never a disk): not overwritten",
    ),
    (
        "plot-output-image",
        "mkdir o; ln -s ../a.img o/smr-seq.png; $Z sweep smr-seq --points 1 --policies zwp --layouts 1 --out o >/dev/null; r=$?; $Z check a.img >/dev/null || exit 9; exit $r",
        Some(1),
        "o/smr-seq.png: it is a zblk image (remove it first to reuse the name): not overwritten",
    ),
    // Environment
    (
        "sigpipe-report",
        "$Z report a.img | head -c1 >/dev/null; s=${PIPESTATUS[0]}; [ $s = 0 ] || [ $s = 141 ]",
        Some(0),
        "",
    ),
    ("sigpipe-status", "$Z read a.img -o 0 -l 1M -O - | true; s=$?; exit $s", Some(0), ""),
    ("file-size-limit", "ulimit -f 100; $Z create b.img --size 64M", None, "EFBIG"),
    ("bench-failed-ios", "$Z bench --image a.img --rw randwrite --zonemode none --runtime 1", Some(1), "I/Os failed"),
    ("closed-stdin", "$Z write a.img -o 4M -i - <&-", None, ""),
    (
        "full-file-system",
        "mkdir m && mount -t tmpfs -o size=8M tmpfs m 2>/dev/null || { echo 'SKIPPED full-file-system: cannot mount a tmpfs (needs root)' >&2; exit 1; }; $Z create m/s.img --size 64M -p zone_size=16M >/dev/null; $Z write m/s.img -o 0 -l 16M -p 7; r=$?; umount m; exit $r",
        None,
        "ENOSPC: no space left on the file system holding the image; wrote",
    ),
    (
        "file-size-limit-write",
        "ulimit -f 20000; $Z write a.img -o 32M -l 4M -p 1",
        None,
        "EFBIG: file size limit (ulimit -f) or the file system's largest file; wrote 0 of 4194304 bytes",
    ),
    (
        "report-into-head",
        "$Z report a.img | head -1 >/dev/null; s=${PIPESTATUS[0]}; [ $s = 0 ] || [ $s = 141 ]",
        Some(0),
        "",
    ),
    (
        "info-into-head",
        "$Z info a.img | head -2 >/dev/null; s=${PIPESTATUS[0]}; [ $s = 0 ] || [ $s = 141 ]",
        Some(0),
        "",
    ),
    (
        "bench-refused-deep",
        "$Z bench --image a.img --rw randwrite --zonemode none --runtime 1 --iodepth 256 --numjobs 4",
        Some(1),
        "I/Os failed",
    ),
    (
        "append-stdout-full",
        "$Z append a.img -o 4M -l 512 -p 1 >/dev/full",
        Some(3),
        "standard output: No space left on device (os error 28); done all the same: the append landed at sector 8192 (byte offset 4194304)",
    ),
    (
        "append-both-full",
        "$Z append a.img -o 4M -l 512 -p 1 >/dev/full 2>/dev/full; r=$?; $Z report a.img -o 8192 -c 1 | grep -q 'wptr 0x000001' && exit $r",
        Some(3),
        "",
    ),
    (
        "check-repair-stdout-full",
        "printf 'XX' | dd of=a.img bs=1 seek=20 conv=notrunc 2>/dev/null; $Z check -y a.img >/dev/full",
        Some(9),
        "done all the same: a.img: corrected: first superblock copy",
    ),
    (
        "create-stdout-full",
        "$Z create b.img --size 64M >/dev/full",
        Some(3),
        "done all the same: created b.img: 64MiB zoned image",
    ),
    (
        "write-json-stdout-full",
        "$Z write a.img -o 4M -l 4k -p 1 --json >/dev/full",
        Some(3),
        "done all the same: wrote 4096 bytes at byte offset 4194304",
    ),
    (
        "report-stdout-full",
        "$Z report a.img >/dev/full",
        Some(1),
        "zblk: standard output: No space left on device (os error 28)",
    ),
    (
        "info-stdout-full",
        "$Z info a.img >/dev/full",
        Some(1),
        "zblk: standard output: No space left on device (os error 28)",
    ),
    (
        "trace-stdout-full",
        "$Z trace --stack nullb:size=64,zone_size=4 --size 4M >/dev/full",
        Some(1),
        "zblk: standard output: No space left on device (os error 28)",
    ),
    (
        "vopr-stdout-full",
        "$Z vopr --seeds 2 --ops 50 >/dev/full",
        Some(1),
        "zblk: standard output: No space left on device (os error 28)",
    ),
    (
        "corebench-stdout-full",
        "$Z corebench --bios 1000 --rounds 1 >/dev/full",
        Some(1),
        "zblk: standard output: No space left on device (os error 28)",
    ),
    ("error-stderr-full", "$Z report nofile 2>/dev/full", Some(1), ""),
    (
        "help-stdout-full",
        "$Z --help >/dev/full",
        Some(1),
        "zblk: standard output: No space left on device (os error 28)",
    ),
    (
        "fallocate-full-file-system",
        "mkdir m && mount -t tmpfs -o size=8M tmpfs m 2>/dev/null || { echo 'SKIPPED fallocate-full-file-system: cannot mount a tmpfs (needs root)' >&2; exit 1; }; $Z create m/s.img --size 64M -p zone_size=16M >/dev/null; $Z fallocate -z -o 0 -l 16M m/s.img; r=$?; umount m; exit $r",
        None,
        "ENOSPC: no space left on the file system holding the image; zone 0's write pointer is now at byte offset 0",
    ),
    (
        "fallocate-file-size-limit",
        "ulimit -f 20000; $Z fallocate -z -o 32M -l 4M a.img",
        None,
        "EFBIG: file size limit (ulimit -f) or the file system's largest file; zone 8's write pointer is now at byte offset 33554432",
    ),
    (
        "bench-full-file-system",
        "mkdir m && mount -t tmpfs -o size=8M tmpfs m 2>/dev/null || { echo 'SKIPPED bench-full-file-system: cannot mount a tmpfs (needs root)' >&2; exit 1; }; $Z create m/s.img --size 64M -p zone_size=16M >/dev/null; $Z bench --image m/s.img --rw write --bs 1M --size 16M --offset 48M; r=$?; umount m; exit $r",
        Some(1),
        "I/Os failed (the report above names the first); the file system under the image said ENOSPC: no space left on the file system holding the image",
    ),
    (
        "bench-file-size-limit",
        "ulimit -f 20000; $Z bench --image a.img --rw write --bs 1M --size 4M --offset 32M",
        Some(1),
        "I/Os failed (the report above names the first); the file system under the image said EFBIG: file size limit (ulimit -f)",
    ),
];

/// The row as docs/bad-inputs.md shows it, from its command on: the command (pipes
/// escaped for Markdown), the exit status, the message.
fn doc_tail(cmd: &str, rc: Option<i32>, want: &str) -> String {
    let exit = rc.map_or_else(|| "fails".to_string(), |r| r.to_string());
    let want = if want.is_empty() { "(any clear message)".to_string() } else { want.replace('|', "\\|") };
    format!("| `{}` | {exit} | {want} |", cmd.replace('|', "\\|"))
}

#[test]
fn the_docs_table_is_these_rows() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/bad-inputs.md")).unwrap();
    // The table is the lines after its `| row |` header, up to the first line that is
    // not a table row: other tables of the page (fuzzing's) are not rows.
    let lines: Vec<&str> = doc
        .lines()
        .skip_while(|l| !l.starts_with("| row "))
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .filter(|l| l.starts_with("| "))
        .collect();
    let mut wrong = Vec::new();
    for &(row, cmd, rc, want) in ROWS {
        let tail = doc_tail(cmd, rc, want);
        let head = format!("| {row} | ");
        if !lines.iter().any(|l| l.starts_with(&head) && l.ends_with(&tail)) {
            wrong.push(format!("{row}: the docs should end its line with {tail}"));
        }
    }
    let names: Vec<String> = lines.iter().filter_map(|l| l.split(" | ").next()).map(|h| h[2..].to_string()).collect();
    for n in &names {
        if !ROWS.iter().any(|r| r.0 == n) {
            wrong.push(format!("{n}: in the docs, not run by this test"));
        }
    }
    assert!(doc.contains(&format!("\n{} rows.\n", ROWS.len())), "the docs should say {} rows", ROWS.len());
    assert!(wrong.is_empty(), "docs/bad-inputs.md and the rows differ:\n{}", wrong.join("\n"));
}

#[test]
fn every_row_of_the_bad_input_table() {
    let zblk = env!("CARGO_BIN_EXE_zblk");
    let mut failures = Vec::new();
    let mut skipped = Vec::new();
    // ZBLK_BAD_ROWS=row,row runs only those rows (to watch a few rows while
    // changing the code); unset, every row runs.
    let only = std::env::var("ZBLK_BAD_ROWS").ok();
    let chosen = |row: &str| only.as_deref().is_none_or(|o| o.split(',').any(|r| r == row));
    for &(row, cmd, rc, want) in ROWS.iter().filter(|r| chosen(r.0)) {
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
        if let Some(line) = err.lines().find(|l| l.starts_with("SKIPPED ")) {
            skipped.push(line.to_string());
            continue;
        }
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
    for s in &skipped {
        // Past the test harness's capture (which println! goes to), so that
        // scripts/test lists it.
        let _ = writeln!(std::io::stderr(), "{s}");
    }
    assert!(ROWS.len() >= 50, "the table has {} rows", ROWS.len());
    assert!(failures.is_empty(), "{} of {} rows failed:\n{}", failures.len(), ROWS.len(), failures.join("\n"));
}
