//! `zblk trace` and `zblk sweep split` as a user runs them.

mod common;

use common::{stderr, stdout, zblk};

const EXAMPLE: &str = "striped:chunk=512k[4*nullb:size=64,zoned=0,max_sectors=2048]";

#[test]
fn trace_prints_blkparse_lines_and_histograms() {
    let o = zblk(&["trace", "--stack", EXAMPLE, "--bs", "2M", "--size", "8M", "--seek-hist"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("# zblk trace: simulated"), "{out}");
    assert!(out.contains("  9,0    0        1     0.000000000     0  Q   R 0 + 4096 [job0]"), "{out}");
    assert!(out.contains("  9,0    0        2     0.000000000     0  X   R 0 / 2048 [job0]"), "{out}");
    assert!(out.contains("  8,0    0        1     0.000000000     0  A   R 0 + 1024 <- (9,0) 0"), "{out}");
    // Every D line has the blkparse shape: device, cpu, seq, time, pid, action, RWBS,
    // sector + length [comm].
    let d: Vec<&str> = out.lines().filter(|l| l.get(42..45) == Some(" D ")).collect();
    assert_eq!(d.len(), 16, "{out}");
    for l in &d {
        let f: Vec<&str> = l.split_whitespace().collect();
        assert_eq!((f[1], f[5], f[6], f[8]), ("0", "D", "R", "+"), "{l}");
        assert!(f[3].contains('.') && f[9] == "1024" && f[10] == "[job0]", "{l}");
    }
    assert!(out.contains("## sda (8,0): seek distances between requests issued (simulated)"), "{out}");
    assert!(out.contains("zero-distance seeks: 100.0% of 3"), "{out}");
    assert!(out.contains("MB/s (simulated)"), "{out}");
}

#[test]
fn trace_tail_order_seeks_and_writes_fail_on_zones() {
    let o = zblk(&[
        "trace",
        "--stack",
        "striped:chunk=64k[8*nullb:size=64,zoned=0,max_sectors=2048]",
        "--bs",
        "4480k",
        "--size",
        "35M",
        "--split_order",
        "tail",
        "--seek-hist",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains(" D "), "--quiet printed events");
    assert!(out.contains("<= 64KiB"), "{out}");
    let o = zblk(&[
        "trace",
        "--stack",
        "linear[nullb:size=64,zone_size=4@8m; nullb:size=64,zone_size=4]",
        "--rw",
        "write",
        "--bs",
        "64k",
        "--bs_max",
        "3m",
        "--iodepth",
        "64",
        "--size",
        "16M",
        "--split_order",
        "tail",
        "--check",
        "--actions",
        "C",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("unaligned writes), first: unaligned write (EIO)"), "{out}");
    // The members' zone write plugs refuse the misordered pieces before the disks
    // see them: every completion that reaches a disk succeeded.
    let events: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(!events.is_empty() && events.iter().all(|l| l.get(42..45) == Some(" C ") && l.ends_with("[0]")), "{out}");
}

#[test]
fn bad_stacks_and_options_are_named() {
    let cases: [(&[&str], &str); 7] = [
        (&["--stack", "striped:chunk=96k[2*nullb:zoned=0]"], "chunk 192 sectors: must be a power of two"),
        (&["--stack", "striped:chunk=64k[nullb:zoned=0; nullb:zoned=0,blocksize=4096]"], "4096-byte blocks"),
        (&["--stack", "linear[nullb:size=64,zone_size=4@1m]"], "not on zone boundaries"),
        (&["--stack", "striped:chunk=64k[2*nullb:zoned=0"], "expected ';' or ']'"),
        (&["--stack", "linear[bogus]"], "unknown preset 'bogus'"),
        (&["--stack", "linear[nullb:size=16,zoned=0]", "--size", "32M"], "runs past the end of dm-0"),
        (&["--stack", "linear[nullb:size=16,zoned=0]", "--bs", "1000"], "--bs: 1000"),
    ];
    for (args, want) in cases {
        let o = zblk(&[&["trace"], args].concat());
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn sweep_split_json_rows() {
    let o = zblk(&["sweep", "split", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let rows = rows.as_array().expect("an array of rows");
    assert_eq!(rows.len(), 2);
    for (row, order) in rows.iter().zip(["head", "tail"]) {
        assert_eq!(row["experiment"], "split");
        assert_eq!(row["order"], order);
        assert_eq!(row["simulated"], true);
        for k in ["mb_s", "zero_seek_fraction", "seeks"] {
            assert!(row[k].is_number(), "{k} in {row}");
        }
    }
    assert!(rows[0]["mb_s"].as_f64() >= rows[1]["mb_s"].as_f64().map(|t| 1.5 * t));
    let o = zblk(&["sweep", "split"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("All numbers are simulated"), "{}", stdout(&o));
}

#[test]
fn bench_trace_writes_every_request_and_reset_of_the_simulated_device() {
    // Two 1 MiB zones written twice over by one zbd job: two resets, each write
    // queued (Q), issued (D) and completed (C) on the device; --image refuses it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.txt");
    let trace = path.to_str().unwrap();
    let dev = "nullb:size=8,zone_size=1";
    let args = ["bench", "--dev", dev, "--rw", "write", "--bs", "256k", "--size", "2M", "--io_size", "4M"];
    let o = zblk(&[&args[..], &["--zonemode", "zbd", "--trace", trace]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let t = std::fs::read_to_string(&path).unwrap();
    assert!(t.starts_with("# zblk bench: a simulated device, virtual time (SIMULATED)"), "{t}");
    let count = |action: &str, rwbs: &str| {
        t.lines()
            .filter(|l| l.split_whitespace().nth(5) == Some(action) && l.split_whitespace().nth(6) == Some(rwbs))
            .count()
    };
    assert_eq!((count("Q", "W"), count("D", "W"), count("C", "W")), (16, 16, 16), "{t}");
    assert_eq!(t.lines().filter(|l| l.contains("ZONE_RESET")).count(), 4, "two resets, queued and issued: {t}");
    let o = zblk(&["bench", "--image", trace, "--trace", trace]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--trace are for simulated devices"), "{}", stderr(&o));
}

#[test]
fn plug_work_lets_the_next_zones_first_write_overtake_the_plug() {
    // fio's sequential job over two zones of the SMR model, QD 128, per-zone plugging:
    // each 1 MiB BIO goes out as 672 + 352 KiB (max_sectors), one piece a zone in flight.
    // At the zone boundary, a completion in zone 0 both releases zone 0's next piece
    // from its plug and lets fio submit its first write to zone 1. With the plug work
    // at the completion, zone 0's piece reaches the disk first; with the plug work
    // slower than fio's turnaround (18 us), zone 1's write does, and zone 1 leads the
    // two zones' alternation (the served host's second mode, docs/linux73.md).
    let dir = tempfile::tempdir().unwrap();
    let run = |plug_work: &str| {
        let path = dir.path().join(format!("pw{plug_work}.txt"));
        let trace = path.to_str().unwrap();
        let args = ["bench", "--dev", "smr-30tb", "--rw", "write", "--bs", "1M", "--iodepth", "128", "--size", "512M"];
        let more = ["--end_fsync", "1", "--policy", "zwp", "--json", "--plug-work", plug_work, "--trace", trace];
        let o = zblk(&[&args[..], &more[..]].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        let json: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        let mb_s = json["jobs"][0]["write"]["bw_bytes"].as_f64().unwrap() / 1e6;
        // (time in ns, action, sector, sectors) of every write issued and completed.
        let events: Vec<(u64, String, u64, u32)> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.len() > 9 && (f[5] == "D" || f[5] == "C") && f[6] == "W")
            .map(|f| {
                let (s, ns) = f[3].split_once('.').unwrap();
                (
                    s.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap(),
                    f[5].to_string(),
                    f[7].parse().unwrap(),
                    f[9].parse().unwrap(),
                )
            })
            .collect();
        (mb_s, events)
    };
    let zone = |sector: u64| sector / 524_288;
    let mut mb_s_of = Vec::new();
    for (plug_work, gap_ns, lead) in [("0", 0, 0), ("40us", 40_000, 1)] {
        let (mb_s, events) = run(plug_work);
        let issued: Vec<&(u64, String, u64, u32)> = events.iter().filter(|e| e.1 == "D").collect();
        let first = issued.iter().position(|e| zone(e.2) == 1).expect("a write to zone 1");
        // The piece before zone 1's first write: a BIO's first (672 KiB) when zone 0's
        // plug went first, its last (352 KiB) when zone 1's write overtook it.
        let before = issued[first - 1];
        assert_eq!(zone(before.2), 0);
        assert_eq!(
            before.3,
            if lead == 0 { 1344 } else { 704 },
            "plug work {plug_work}: {:?}",
            &issued[first - 2..first + 2]
        );
        assert_eq!(zone(issued[first + 1].2), 0, "then zone 0 again");
        // Below the boundary each piece is released by its predecessor's completion and
        // reaches the disk (its D) the plug work after it.
        let mut released = 0;
        for w in events.windows(2).take(400) {
            if w[0].1 == "C" && w[1].1 == "D" && zone(w[1].2) == 0 {
                assert_eq!(w[1].0 - w[0].0, gap_ns, "plug work {plug_work}: {w:?}");
                released += 1;
            }
        }
        assert!(released > 100, "{released}");
        mb_s_of.push(mb_s);
    }
    // On this model the cache's write-back waits less for the platter with zone 1
    // leading (163.1 MB/s against 143.7, docs/linux73.md).
    assert!(mb_s_of[1] > 1.1 * mb_s_of[0], "{mb_s_of:?}");
}
