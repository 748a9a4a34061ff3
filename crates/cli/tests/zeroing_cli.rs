//! `zblk fallocate` (util-linux fallocate's options) and the zeroing lines of
//! `zblk info`, as a user runs them: zeroed ranges read back as zeroes, the method is
//! said, every bad input gets an error naming the problem and no command panics.

use std::path::Path;
mod common;

use common::{fails, ok, zblk};

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&ok(args)).unwrap()
}

fn image(dir: &Path) -> String {
    let p = dir.join("z.img").display().to_string();
    ok(&["create", &p, "-p", "zone_size=64,zone_capacity=48,zone_nr_conv=2,zone_max_open=4"]);
    p
}

/// Reads `len` bytes at `offset` and returns them.
fn read(p: &str, offset: &str, len: &str) -> Vec<u8> {
    let o = zblk(&["read", p, "-o", offset, "-l", len]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

#[test]
fn fallocate_zeroes_and_says_how() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let unmap = json(&["info", "--json", &p])["zeroing"]["unmap"].as_str().unwrap().to_string();
    let can_unmap = unmap.starts_with("fallocate");
    // Conventional zone: 64 KiB of data, zeroes over [4.5 KiB, 4.5 KiB + 33 KiB).
    ok(&["write", &p, "-o", "0", "-l", "64k", "-p", "0xab"]);
    // -w is FALLOC_FL_WRITE_ZEROES: on an image that cannot unmap it is refused, as
    // Linux refuses it on such a block device, and -z writes the zeroes.
    let mode = if can_unmap { "-w" } else { "-z" };
    if !can_unmap {
        let e = fails(&["fallocate", "-w", "-o", "4608", "-l", "33k", &p]);
        assert!(e.contains("EOPNOTSUPP") && e.contains("-z/--zero-range"), "{e}");
    }
    let v = json(&["fallocate", mode, "-o", "4608", "-l", "33k", "--json", &p]);
    assert_eq!(v["method"], if can_unmap { "unmap" } else { "write-zeroes" }, "{v}");
    assert_eq!(v["file_method"], if can_unmap { unmap.as_str() } else { "pwrite-zeroes" }, "{v}");
    assert_eq!((v["offset"].as_u64(), v["length"].as_u64()), (Some(4608), Some(33 << 10)));
    assert!(v["seconds"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(v["write_zeroes_max_bytes"], 1u64 << 30);
    let data = read(&p, "0", "64k");
    for (i, &b) in data.iter().enumerate() {
        let want = if (4608..4608 + (33 << 10)).contains(&i) { 0 } else { 0xab };
        assert_eq!(b, want, "byte {i}");
    }
    // Forcing the written path two ways; with unmap switched off, -w is refused and
    // leaves the data as it was.
    ok(&["write", &p, "-o", "0", "-l", "64k", "-p", "0xcd"]);
    let e = fails(&["fallocate", "-w", "-o", "16k", "-l", "4k", "--set", "write_zeroes_unmap_max_bytes=0", &p]);
    assert!(e.contains("EOPNOTSUPP") && e.contains("write_zeroes_unmap_max_bytes 0"), "{e}");
    for extra in [&["-w", "--nounmap"][..], &["-z"]] {
        let mut args = vec!["fallocate", "-o", "8k", "-l", "8k", "--json", &p];
        args.extend_from_slice(extra);
        let v = json(&args);
        assert_eq!((v["method"].as_str(), v["file_method"].as_str()), (Some("write-zeroes"), Some("pwrite-zeroes")));
    }
    assert!(read(&p, "8k", "8k").iter().all(|&b| b == 0));
    assert!(read(&p, "16k", "4k").iter().all(|&b| b == 0xcd));
    // Text output: what, where, how, how long.
    let out = ok(&["fallocate", mode, "-o", "1M", "-l", "1M", &p]);
    assert!(out.contains("1MiB (1048576 bytes) at offset 1048576 zeroed"), "{out}");
    assert!(out.contains(if can_unmap { "unmapped" } else { "written as zeroes" }), "{out}");
    assert!(out.contains(" s + commit "), "{out}");
    let out = ok(&["fallocate", mode, "-v", "-o", "1M", "-l", "4k", &p]);
    assert!(out.contains("write_zeroes_unmap_max_hw_bytes") && out.contains("probe:"), "{out}");
}

#[test]
fn fallocate_on_a_sequential_zone_goes_at_the_write_pointer() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    // Zone 2 (byte 128 MiB): data, reset (its blocks stay in the file), 12 KiB, then
    // zeroes at the write pointer over the stale data.
    ok(&["write", &p, "-o", "128M", "-l", "64k", "-p", "0x77"]);
    ok(&["reset", "-o", "0x40000", "-c", "1", &p]);
    ok(&["write", &p, "-o", "128M", "-l", "12k", "-p", "0x11"]);
    let e = fails(&["fallocate", "-z", "-o", "128M", "-l", "4k", &p]);
    assert!(e.contains("EIO: unaligned write"), "{e}");
    assert!(e.contains("must start at the zone's write pointer, byte 134230016"), "{e}");
    ok(&["fallocate", "-z", "-o", "134230016", "-l", "20k", &p]);
    let out = ok(&["report", "-o", "0x40000", "-c", "1", &p]);
    assert!(out.contains("wptr 0x000040 "), "the write pointer moved by the zeroes: {out}");
    let data = read(&p, "128M", "64k");
    assert!(data[..12 << 10].iter().all(|&b| b == 0x11));
    assert!(data[12 << 10..].iter().all(|&b| b == 0), "zeroes below the write pointer, zeroes past it");
    // Past the zone capacity.
    let e = fails(&["fallocate", "-z", "-o", "134250496", "-l", "48M", &p]);
    assert!(e.contains("zone is full") && e.contains("capacity"), "{e}");
}

#[test]
fn fallocate_errors_name_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let cases: &[(&[&str], &str)] = &[
        (
            &["-w", "-o", "100", "-l", "4k"],
            "EINVAL: offset 100 is not a multiple of the logical block size (512 bytes)",
        ),
        (&["-w", "-o", "0", "-l", "1000"], "EINVAL: length 1000 is not a multiple of the logical block size"),
        (&["-w", "-o", "0", "-l", "0"], "length 0"),
        (&["-w", "-o", "1023M", "-l", "2M"], "beyond the device end"),
        (&["-w", "-o", "12x", "-l", "4k"], "unknown suffix"),
        (&["-w", "-o", "0"], "--length"),
        (&["-o", "0", "-l", "4k"], "no mode given"),
        (&["-w", "-z", "-l", "4k"], "exclusive"),
        (&["-p", "-l", "4k"], "-p/--punch-hole is not supported"),
        (&["-c", "-l", "4k"], "-c/--collapse-range is not supported"),
        (&["-w", "-n", "-l", "4k"], "--keep-size cannot be used with -w"),
        (&["-w", "-l", "4k", "--set", "write_zeroes_unmap_max_bytes=2G"], "above the hardware limit"),
        (&["-w", "-l", "4k", "--set", "write_zeroes_unmap_max_bytes=4096"], "neither 0 (disable unmap)"),
        (&["-w", "-l", "4k", "--set", "max_sectors_kb=4"], "unknown or read-only attribute 'max_sectors_kb'"),
        (&["-w", "-l", "4k", "--set", "write_zeroes_unmap_max_bytes"], "expected NAME=VALUE"),
    ];
    for (args, want) in cases {
        let mut all = vec!["fallocate"];
        all.extend_from_slice(args);
        all.push(&p);
        let e = fails(&all);
        assert!(e.contains(want), "zblk {all:?}: expected '{want}' in: {e}");
    }
    let missing = dir.path().join("missing.img").display().to_string();
    let e = fails(&["fallocate", "-w", "-l", "4k", &missing]);
    assert!(e.contains("missing.img: no such file"), "{e}");
    let help = ok(&["fallocate", "--help"]);
    for word in ["--write-zeroes", "--zero-range", "--offset", "--length", "--nounmap", "write_zeroes_unmap_max_bytes"]
    {
        assert!(help.contains(word), "--help lacks {word}: {help}");
    }
}

#[test]
fn info_shows_the_zeroing_limits_and_method() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let v = json(&["info", "--json", &p]);
    let q = &v["queue"];
    assert_eq!(q["write_zeroes_max_bytes"], 1u64 << 30);
    let hw = q["write_zeroes_unmap_max_hw_bytes"].as_u64().unwrap();
    assert_eq!(q["write_zeroes_unmap_max_bytes"].as_u64(), Some(hw));
    let unmap = v["zeroing"]["unmap"].as_str().unwrap();
    assert!(
        ["fallocate-write-zeroes", "fallocate-zero-range", "pwrite-zeroes"].contains(&unmap),
        "unknown method {unmap}"
    );
    assert_eq!(hw == 1 << 30, unmap.starts_with("fallocate"), "{v}");
    assert_eq!(v["zeroing"]["nounmap"], "pwrite-zeroes");
    assert!(v["zeroing"]["probe"].as_str().unwrap().contains("probed"), "{v}");
    let text = ok(&["info", &p]);
    for line in [
        "write_zeroes_max_bytes          1073741824".to_string(),
        format!("write_zeroes_unmap_max_hw_bytes {hw}"),
        format!("write_zeroes_unmap_max_bytes    {hw}"),
        format!("zeroing:           {unmap}"),
    ] {
        assert!(text.contains(&line), "info lacks '{line}': {text}");
    }
}
