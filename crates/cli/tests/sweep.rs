//! `zblk sweep` for the SMR experiments, as a user runs it (small runs).

mod common;

use common::{stderr, stdout, zblk};

const SMALL_SEQ: [&str; 6] = ["--points", "1,64", "--seq-zones", "2", "--layouts", "1"];

#[test]
fn smr_seq_json_rows_have_the_documented_fields() {
    let o = zblk(&[&["sweep", "smr-seq", "--json", "--no-plot"][..], &SMALL_SEQ].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("one JSON array");
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2 * 4, "two points, four policies");
    let keys = [
        "experiment",
        "device",
        "policy",
        "workload",
        "qd",
        "jobs",
        "zones",
        "bs_bytes",
        "mb_s",
        "iops",
        "published_mb_s",
    ];
    for r in rows {
        for k in keys {
            assert!(r.get(k).is_some(), "row lacks {k}: {r}");
        }
        assert_eq!(r["experiment"], "smr-seq");
        assert_eq!(r["simulated"], true);
        assert_eq!(r["bs_bytes"], 1 << 20);
        assert!(r["zones"].is_null());
        let published = !r["published_mb_s"].is_null();
        let policy = r["policy"].as_str().unwrap();
        assert_eq!(published, policy == "zwp" || policy == "qd1", "{r}");
    }
    let policies: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(&policies[..4], ["zwp", "qd1", "batch", "zwl"]);
    assert!(stderr(&o).contains("simulated I/Os per second"), "{}", stderr(&o));
}

#[test]
fn smr_seq_tables_and_plots() {
    let dir = std::env::temp_dir().join(format!("zblk-sweep-test-{}", std::process::id()));
    let out = dir.to_str().unwrap();
    let o = zblk(&[&["sweep", "smr-seq", "--out", out, "--policies", "zwp,qd1"][..], &SMALL_SEQ].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for want in ["SIMULATED", "sim MB/s", "pub MB/s", "244.0", "193.0", "media rate", "smr-seq.png", "smr-seq.svg"] {
        assert!(text.contains(want), "lacks {want}:\n{text}");
    }
    assert!(!text.contains("batch"), "only the policies asked for:\n{text}");
    let png = std::fs::read(dir.join("smr-seq.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    let svg = std::fs::read_to_string(dir.join("smr-seq.svg")).unwrap();
    assert!(svg.contains("SIMULATED") && svg.contains("published"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn smr_20tb_points_by_test_name() {
    let o = zblk(&[
        "sweep",
        "smr-20tb",
        "--points",
        "rndw128K16",
        "--rand20-ios",
        "200",
        "--layouts",
        "1",
        "--no-plot",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 4);
    assert!(rows.iter().all(|r| r["workload"] == "rndw128K16" && r["qd"] == 16));
    let zwl = rows.iter().find(|r| r["policy"] == "zwl").unwrap();
    assert!((zwl["published_mb_s"].as_f64().unwrap() - 100.007936).abs() < 1e-3);
}

#[test]
fn bad_sweep_options_are_named() {
    let cases: [(&[&str], &str); 7] = [
        (&["sweep", "smr-seq", "--points", "x"], "--points: 'x' is not a number"),
        (&["sweep", "smr-seq", "--points", "0"], "queue depth must be 1 to 4096"),
        (&["sweep", "smr-20tb", "--points", "seqw9"], "is not a test"),
        (&["sweep", "smr-seq", "--policies", "passthrough"], "passthrough"),
        (&["sweep", "smr-seq", "--policies", "fifo"], "unknown policy 'fifo'"),
        (&["sweep", "smr-seq", "--policies", "pipeline"], "needs a device that keeps a zone's writes in the order"),
        (&["sweep", "all", "--points", "1"], "give one experiment"),
    ];
    for (args, want) in cases {
        let o = zblk(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(stderr(&o).contains(want), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn sweep_help_lists_experiments_and_policies() {
    let o = zblk(&["sweep", "--help"]);
    assert!(o.status.success());
    for word in ["smr-seq", "smr-zones", "smr-20tb", "smr-nocache", "split", "zwp", "qd1", "batch", "zwl", "simulator"]
    {
        assert!(stdout(&o).contains(word), "sweep --help lacks {word}");
    }
}

#[test]
fn sweep_zeroes_on_the_ssd_model_and_a_small_image() {
    let dir = std::env::temp_dir().join(format!("zblk-sweep-zeroes-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let o = zblk(&[
        "sweep",
        "zeroes",
        "--json",
        "--image-dir",
        dir.to_str().unwrap(),
        "--zero-sizes",
        "8M",
        "--image-writer-size",
        "8M",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let rows = rows.as_array().unwrap();
    let zero_rows: Vec<_> = rows.iter().filter(|r| r["experiment"] == "zeroes").collect();
    let writer_rows: Vec<_> = rows.iter().filter(|r| r["experiment"] == "zeroes-writer").collect();
    assert_eq!(zero_rows.len(), 6 + 2, "3 methods x 2 sizes simulated, 2 methods x 1 size on the image");
    assert_eq!(writer_rows.len(), 3 + 3);
    for r in &zero_rows {
        for k in ["experiment", "device", "method", "bytes", "seconds"] {
            assert!(!r[k].is_null(), "{k} missing: {r}");
        }
    }
    for r in &writer_rows {
        for k in ["experiment", "device", "background_zeroing", "writer_mb_s"] {
            assert!(!r[k].is_null(), "{k} missing: {r}");
        }
    }
    // Simulated: unmap at least 10x faster than writing zeroes, at each size.
    let sim = |m: &str, b: u64| {
        zero_rows.iter().find(|r| r["simulated"] == true && r["method"] == m && r["bytes"] == b).unwrap()["seconds"]
            .as_f64()
            .unwrap()
    };
    for b in [1u64 << 30, 10 << 30] {
        assert!(sim("unmap", b) * 10.0 < sim("write-zeroes", b));
    }
    let image: Vec<_> = zero_rows.iter().filter(|r| r["simulated"] == false).collect();
    assert!(image.iter().all(|r| r["bytes"] == 8 << 20 && r["how"].is_string()), "{image:?}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "image files are removed");
    let _ = std::fs::remove_dir(&dir);
    let o = zblk(&["sweep", "zeroes", "--image-dir", "/nonexistent-dir"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not a directory"), "{}", stderr(&o));
}
