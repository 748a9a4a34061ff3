//! The image commands as a user runs them: blkzone's report format, single I/Os with
//! their errno on failure, JSON output, benchmarks on an image.

use std::io::Write as _;
use std::path::Path;
mod common;

use common::{fails, ok};

fn image(dir: &Path) -> String {
    let p = dir.join("t.img").display().to_string();
    ok(&["create", &p, "-p", "zone_size=64,zone_capacity=48,zone_nr_conv=2,zone_max_open=4"]);
    p
}

#[test]
fn report_lines_follow_blkzone() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    let out = ok(&["report", "-c", "3", &p]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "  start: 0x000000000, len 0x020000, cap 0x020000, wptr 0x000000 reset:0 non-seq:0, zcond: 0(nw) [type: 1(CONVENTIONAL)]",
            "  start: 0x000020000, len 0x020000, cap 0x020000, wptr 0x000000 reset:0 non-seq:0, zcond: 0(nw) [type: 1(CONVENTIONAL)]",
            "  start: 0x000040000, len 0x020000, cap 0x018000, wptr 0x000000 reset:0 non-seq:0, zcond: 1(em) [type: 2(SEQ_WRITE_REQUIRED)]",
        ]
    );
    assert_eq!(ok(&["capacity", &p]), "0x000190000\n");
    ok(&["write", &p, "-o", "192M", "-l", "12k", "-p", "0xab"]);
    ok(&["open", "-o", "0x80000", "-c", "1", &p]);
    ok(&["finish", "-o", "0xa0000", "-c", "1", &p]);
    let out = ok(&["report", "-v", "-o", "0x60000", "-c", "3", &p]);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "Found 3 zones from 0x60000",
            "  start: 0x000060000, len 0x020000, cap 0x018000, wptr 0x000018 reset:0 non-seq:0, zcond: 2(oi) [type: 2(SEQ_WRITE_REQUIRED)]",
            "  start: 0x000080000, len 0x020000, cap 0x018000, wptr 0x000000 reset:0 non-seq:0, zcond: 3(oe) [type: 2(SEQ_WRITE_REQUIRED)]",
            "  start: 0x0000a0000, len 0x020000, cap 0x018000, wptr 0x020000 reset:0 non-seq:0, zcond:14(fu) [type: 2(SEQ_WRITE_REQUIRED)]",
        ]
    );
    let e = fails(&["reset", "-o", "7", &p]);
    assert!(e.contains("offset 7 is not aligned to zone size 131072"), "{e}");
    let e = fails(&["report", "-o", "1G", &p]);
    assert!(e.contains("offset is greater than or equal to device size"), "{e}");
    ok(&["reset", &p]);
    let v: serde_json::Value = serde_json::from_str(&ok(&["report", "--json", &p])).unwrap();
    let zones = v["zones"].as_array().unwrap();
    assert_eq!(zones.len(), 16);
    assert!(zones[2..].iter().all(|z| z["cond_name"] == "EMPTY"), "{v}");
}

#[test]
fn single_ios_and_their_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = image(dir.path());
    // 4 KiB at the start of zone 2, then an append: prints the sector written.
    ok(&["write", &p, "-o", "128M", "-l", "4k", "-p", "1"]);
    assert_eq!(ok(&["append", &p, "-o", "128M", "-l", "4k", "-p", "2"]).trim(), "262152");
    let e = fails(&["write", &p, "-o", "128M", "-l", "4k", "-p", "3"]);
    assert!(e.contains("EIO: write at sector 262144 is not at zone 2's write pointer (sector 262160)"), "{e}");
    let e = fails(&["write", &p, "-o", "100", "-l", "512", "-p", "3"]);
    assert!(e.contains("EINVAL"), "{e}");
    let e = fails(&["append", &p, "-o", "129M", "-l", "4k", "-p", "3"]);
    assert!(e.contains("EINVAL"), "{e}");
    // data from a file, read back to a file
    let input = dir.path().join("in");
    std::fs::write(&input, vec![9u8; 8192]).unwrap();
    ok(&["write", &p, "-o", "8k", "-i", &input.display().to_string()]);
    let out = dir.path().join("out");
    ok(&["read", &p, "-o", "8k", "-l", "8k", "-O", &out.display().to_string()]);
    assert_eq!(std::fs::read(&out).unwrap(), vec![9u8; 8192]);
    let v: serde_json::Value = serde_json::from_str(&ok(&["read", &p, "-o", "128M", "-l", "8k", "--json"])).unwrap();
    assert_eq!(v["length"], 8192);
    let v: serde_json::Value =
        serde_json::from_str(&ok(&["append", &p, "-o", "128M", "-l", "512", "-p", "4", "--json"])).unwrap();
    assert_eq!(v["sector"], 262160);
}

#[test]
fn errors_name_the_file_and_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.img").display().to_string();
    let e = fails(&["report", &missing]);
    assert!(e.contains("missing.img: no such file"), "{e}");
    let text = dir.path().join("text");
    std::fs::write(&text, "not an image").unwrap();
    let e = fails(&["info", &text.display().to_string()]);
    assert!(e.contains("text: not a zblk image"), "{e}");
    let p = image(dir.path());
    let e = fails(&["create", &p]);
    assert!(e.contains("file exists"), "{e}");
    let e = fails(&["create", &dir.path().join("x").display().to_string(), "--zone_size", "3"]);
    assert!(e.contains("zone_size"), "{e}");
}

#[test]
fn info_shows_attributes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.img").display().to_string();
    ok(&["create", &p, "--size", "256", "--zone_size", "16", "--rotational", "1", "--zone_append_max_sectors", "0"]);
    let v: serde_json::Value = serde_json::from_str(&ok(&["info", "--json", &p])).unwrap();
    assert_eq!(v["queue"]["zoned_qd1_writes"], 1);
    assert_eq!(v["queue"]["rotational"], 1);
    assert_eq!(v["queue"]["chunk_sectors"], 32768);
    assert_eq!(v["zone_append"], "emulated");
    let text = ok(&["info", &p]);
    assert!(text.contains("zoned_qd1_writes                1"), "{text}");
}

#[test]
fn bench_on_an_image_is_not_simulated() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("b.img").display().to_string();
    ok(&["create", &p, "--size", "64", "--zone_size", "4"]);
    let out = ok(&["bench", "--image", &p, "--rw", "randwrite", "--bs", "4k", "--iodepth", "8", "--io_size", "2M"]);
    assert!(!out.to_lowercase().contains("simulated"), "{out}");
    assert!(out.contains("write: IOPS="), "{out}");
    // What the I/O cost the process, as fio's cpu line, and per I/O.
    let cpu = out.lines().find(|l| l.starts_with("cpu (the whole process")).unwrap_or_else(|| panic!("{out}"));
    assert!(cpu.contains("usr=") && cpu.contains("sys=") && cpu.ends_with("us of CPU per I/O"), "{cpu}");
    let out = ok(&["bench", "--image", &p, "--rw", "read", "--bs", "64k", "--iodepth", "4", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["zblk"]["simulated"], false);
    assert!(v["jobs"][0]["read"]["io_bytes"].as_u64().unwrap() > 0, "{v}");
    let (c, ios) = (&v["zblk"]["cpu"], v["jobs"][0]["read"]["total_ios"].as_f64().unwrap());
    let used = (c["user_ns"].as_u64().unwrap() + c["sys_ns"].as_u64().unwrap()) as f64;
    assert!(used > 0.0 && c["context_switches"].as_u64().is_some(), "{v}");
    let per_io = v["zblk"]["cpu_ns_per_io"].as_f64().unwrap();
    assert!((per_io * ios - used).abs() <= 1.0 + used * 1e-9, "{per_io} ns x {ios} I/Os against {used} ns: {v}");
}

/// A real bench's progress on a terminal: the run's milliseconds and its bandwidth,
/// updated while it runs; none of it through a pipe.
#[test]
fn bench_on_an_image_shows_progress_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("b.img").display().to_string();
    ok(&["create", &p, "--size", "64", "--zone_size", "4"]);
    let args = ["bench", "--image", &p, "--rw", "write", "--bs", "4k", "--runtime", "1s"];
    let o = common::zblk(&args);
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert!(!common::stderr(&o).contains(" ms ("), "no bar on a pipe: {}", common::stderr(&o));
    ok(&["reset", &p]);
    let Some(seen) = common::on_terminal("bench_on_an_image_shows_progress_on_a_terminal_only", &args) else {
        return;
    };
    assert!(seen.contains("/1000 ms ("), "{seen}");
    assert!(seen.contains(" MiB/s"), "{seen}");
    assert!(seen.contains("write: IOPS="), "{seen}");
}

/// `bench --image --poll`: the runtime's completion thread finds the completions of
/// a QD 1 stream while it polls, and the run says how many; without `--poll` it
/// says nothing of it. The image is on the disk the build is on (an image in
/// memory has its transfers done on the spot, without the ring).
#[test]
fn bench_poll_finds_completions_without_a_wait() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let p = dir.path().join("p.img").display().to_string();
    ok(&["create", &p, "--size", "64", "--zone_size", "4"]);
    let args = ["bench", "--image", &p, "--rw", "write", "--bs", "4k", "--iodepth", "1", "--io_size", "1M"];
    let o = common::zblk(&[&args[..], &["--poll", "100000"]].concat());
    let err = common::stderr(&o);
    assert!(o.status.success(), "{err}");
    if err.contains("no io_uring completion thread") {
        // Past the test harness's capture, so that the suite's summary lists it.
        let _ =
            writeln!(std::io::stderr(), "SKIPPED bench --poll: this runtime has no io_uring completion thread: {err}");
        return;
    }
    let line = err.lines().find(|l| l.contains("batches of completions")).unwrap_or_else(|| panic!("{err}"));
    let count = |what: &str| -> u64 {
        let head = line.split(what).next().unwrap();
        head.rsplit(|c: char| !c.is_ascii_digit()).find(|w| !w.is_empty()).unwrap().parse().unwrap()
    };
    let (found, waited) = (count(" found while polling"), count(" after a wait"));
    // 256 writes of 4 KiB one after the other: all but the first few come while
    // the thread polls.
    assert!(found >= 200 && found > 4 * waited, "{line}");
    let o = common::zblk(&args);
    assert!(o.status.success() && !common::stderr(&o).contains("batches of completions"), "{}", common::stderr(&o));
}

/// `create --preallocate`: the data region's blocks are allocated at once (a sparse
/// image's are not), the image works as any other; an image the file system has not
/// the room for is refused before anything is allocated, and leaves no file behind.
#[test]
fn create_preallocate_takes_the_space_now_or_refuses() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let allocated = |p: &str| std::fs::metadata(p).unwrap().blocks() * 512;
    let sparse = dir.path().join("sparse.img").display().to_string();
    ok(&["create", &sparse, "--size", "64", "--zone_size", "4"]);
    let full = dir.path().join("full.img").display().to_string();
    let out = ok(&["create", &full, "--size", "64", "--zone_size", "4", "--preallocate"]);
    assert!(out.contains("data preallocated"), "{out}");
    assert!(allocated(&sparse) < 8 << 20, "a sparse image holds {} bytes", allocated(&sparse));
    assert!(allocated(&full) >= 64 << 20, "a preallocated image holds {} bytes", allocated(&full));
    assert_eq!(ok(&["report", &full]), ok(&["report", &sparse]));
    ok(&["write", &full, "-o", "4M", "-l", "8k", "-p", "0x5a"]);
    assert!(ok(&["report", "-c", "2", &full]).contains("wptr 0x000010"));
    // More than any machine's free space (but not past ext4's largest file: the
    // length is set first, then the room is asked for).
    let huge = dir.path().join("huge.img").display().to_string();
    let e = fails(&["create", &huge, "--size", "10T", "--zone_size", "256", "--preallocate"]);
    assert!(e.contains("cannot preallocate: the data region needs 10485760 MiB, the file system has"), "{e}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left.len(), 2, "files left after the refusal: {left:?}");
}
