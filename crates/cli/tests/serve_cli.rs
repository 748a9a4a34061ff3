//! `zblk serve` on a machine without the ublk driver (the host the tests run on has
//! none; the VM test serves for real): a clear refusal, nothing on standard output
//! (scripts wait for its first line), status 1.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

#[test]
fn serve_without_the_ublk_driver_says_how_to_load_it() {
    if Path::new("/dev/ublk-control").exists() {
        // Past the test harness's capture, so that the suite's summary lists it.
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED serve_without_the_ublk_driver_says_how_to_load_it: this machine has /dev/ublk-control"
        );
        return;
    }
    let zblk = env!("CARGO_BIN_EXE_zblk");
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("a.img");
    let c = Command::new(zblk)
        .args(["create", &img.display().to_string(), "--size", "64", "--zone_size", "4"])
        .output()
        .unwrap();
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    for args in [vec![img.display().to_string()], vec!["--dev".to_string(), "nullb:zone_size=4,size=64".to_string()]] {
        let o = Command::new(zblk).arg("serve").args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing may look like a ready line");
        assert!(err.contains("/dev/ublk-control") && err.contains("modprobe ublk_drv"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // Neither an image nor --dev, or both: usage errors.
    let o = Command::new(zblk).arg("serve").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = Command::new(zblk).args(["serve", "x.img", "--dev", "nullb"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    // An image always keeps its data: the simulated devices' data options are refused.
    for opt in [&["--no-data"][..], &["--data-limit", "1M"]] {
        let o = Command::new(zblk).args(["serve", "x.img"]).args(opt).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{opt:?}: {err}");
        assert!(err.contains("cannot be used with"), "{opt:?}: {err}");
    }
    // A transport that does not exist: a usage error naming the three there are.
    let o = Command::new(zblk).args(["serve", "x.img", "--transport", "sideways"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("auto") && err.contains("command") && err.contains("batch"), "{err}");
}
