//! The `zblk` command as a user runs it.

mod common;

use common::{stderr, stdout, zblk};

const SMALL: &str = "nullb:size=256,zone_size=16,completion_dist=uniform";

#[test]
fn help_explains_the_commands_and_options() {
    let o = zblk(&["--help"]);
    assert!(o.status.success());
    for word in ["bench", "corebench", "sweep", "simulat"] {
        assert!(stdout(&o).contains(word), "--help lacks {word}: {}", stdout(&o));
    }
    let o = zblk(&["bench", "--help"]);
    assert!(o.status.success());
    for word in
        ["--rw", "--bs", "--iodepth", "--numjobs", "--zonemode", "zone_size", "zone_append_max_sectors", "nullb"]
    {
        assert!(stdout(&o).contains(word), "bench --help lacks {word}");
    }
}

#[test]
fn bench_json_has_fios_structure() {
    let o = zblk(&[
        "bench",
        "--dev",
        SMALL,
        "--rw",
        "randwrite",
        "--bs",
        "4k",
        "--iodepth",
        "8",
        "--size",
        "64M",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("valid JSON");
    assert_eq!(v["zblk"]["simulated"], true);
    let w = &v["jobs"][0]["write"];
    assert!(w["iops"].as_f64().unwrap() > 0.0);
    assert!(w["bw_bytes"].as_u64().unwrap() > 0);
    assert_eq!(w["io_bytes"].as_u64().unwrap(), 64 << 20);
    let p99 = w["clat_ns"]["percentile"]["99.000000"].as_u64().unwrap();
    let p50 = w["clat_ns"]["percentile"]["50.000000"].as_u64().unwrap();
    assert!(p99 >= p50 && p50 > 0);
    assert_eq!(v["jobs"][0]["read"]["total_ios"], 0);
    assert_eq!(v["jobs"][0]["error"], 0);
}

#[test]
fn bench_text_says_it_is_simulated_and_is_deterministic() {
    let args = ["bench", "--dev", SMALL, "--rw", "randwrite", "--iodepth", "4", "--size", "32M", "--seed", "9"];
    let a = zblk(&args);
    let b = zblk(&args);
    assert!(a.status.success(), "{}", stderr(&a));
    assert!(stdout(&a).contains("SIMULATED"));
    assert!(stdout(&a).contains("simulated"));
    assert!(stdout(&a).contains("IOPS="));
    assert_eq!(stdout(&a), stdout(&b), "same seed, different output");
    let c = zblk(&["bench", "--dev", SMALL, "--rw", "randwrite", "--iodepth", "4", "--size", "32M", "--seed", "10"]);
    assert_ne!(stdout(&a), stdout(&c), "the seed changes nothing");
}

#[test]
fn bench_with_the_checker_and_fio_output_format_option() {
    let o = zblk(&[
        "bench",
        "--dev",
        "nullb:size=64,zone_size=4,memory_backed=1,zone_append_max_sectors=0",
        "--rw",
        "write",
        "--iodepth",
        "16",
        "--numjobs",
        "2",
        "--group_reporting",
        "--check",
        "--output-format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(v["jobs"][0]["zblk"]["jobs"], 2);
    assert!(v["zblk"]["sim"]["checks"].as_u64().unwrap() > 0);
}

#[test]
fn bad_input_is_refused_with_a_message_and_no_panic() {
    let cases: &[(&[&str], &str)] = &[
        (&["bench", "--dev", "bogus"], "unknown preset"),
        (&["bench", "--dev", "nullb:zone_size=3"], "zone_size"),
        (&["bench", "--dev", "nullb:frobnicate=1"], "frobnicate"),
        (&["bench", "--dev", SMALL, "--bs", "1000"], "bs"),
        (&["bench", "--dev", SMALL, "--bs", "4x"], "invalid size"),
        (&["bench", "--dev", SMALL, "--iodepth", "0"], "iodepth"),
        (&["bench", "--dev", SMALL, "--size", "1T"], "size"),
        (&["bench", "--dev", SMALL, "--offset", "4k"], "offset"),
        (&["bench", "--dev", SMALL, "--runtime", "10parsecs"], "duration"),
        (&["bench", "--dev", "nullb:zoned=0,size=64", "--zonemode", "zbd"], "zonemode"),
        (&["bench", "--dev", "nullb:zoned=0,size=64", "--zoned_qd1_writes", "1"], "not zoned"),
        (&["bench", "--dev", SMALL, "--policy", "zwp", "--zoned_qd1_writes", "1"], "contradicts"),
        (&["bench", "--dev", SMALL, "--rw", "sideways"], "sideways"),
        (&["bench", "--dev", SMALL, "--policy", "pipeline"], "a simulated device: policy pipeline needs a device"),
        (&["corebench", "--bios", "0"], "at least 1"),
        (&["corebench", "--shapes", "diagonal"], "unknown shape"),
    ];
    for (args, needle) in cases {
        let o = zblk(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = stderr(&o);
        assert!(err.contains(needle), "{args:?}: stderr lacks '{needle}': {err}");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
}

/// corebench's progress: runs counted on a terminal, nothing on standard error
/// through a pipe.
#[test]
fn corebench_progress_shows_on_a_terminal_only() {
    let args = ["corebench", "--bios", "2000", "--rounds", "2", "--shapes", "queued,append"];
    let o = zblk(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "nothing on a pipe");
    let Some(seen) = common::on_terminal("corebench_progress_shows_on_a_terminal_only", &args) else { return };
    assert!(seen.contains("/8 runs"), "{seen}");
    assert!(seen.contains("core cost: the engine alone"), "{seen}");
}

#[test]
fn corebench_reports_both_policies() {
    let o = zblk(&["corebench", "--bios", "20000", "--rounds", "1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let shapes = v["shapes"].as_array().unwrap();
    let names: Vec<&str> = shapes.iter().map(|s| s["shape"].as_str().unwrap()).collect();
    assert_eq!(names, ["uncontended", "queued", "append", "pipelined"]);
    let policies: Vec<&str> = shapes.iter().map(|s| s["policy"].as_str().unwrap()).collect();
    assert_eq!(policies, ["zwp", "zwp", "zwp", "pipeline"]);
    for s in shapes {
        assert!(s["zwp_bios_per_s"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["passthrough_bios_per_s"].as_f64().unwrap() > 0.0, "{s}");
        let ratio = s["plugging_over_passthrough"].as_f64().unwrap();
        let rates = s["passthrough_bios_per_s"].as_f64().unwrap() / s["zwp_bios_per_s"].as_f64().unwrap();
        assert!((ratio - rates).abs() < 1e-9 * rates, "{s}: the ratio is the rates' ratio");
    }
    // The queued shape queues: nearly every BIO waited in a plug; the uncontended one never.
    assert!(shapes[1]["plugged"].as_u64().unwrap() >= 18_000, "{}", shapes[1]);
    assert_eq!(shapes[0]["plugged"].as_u64().unwrap(), 0, "{}", shapes[0]);
}
