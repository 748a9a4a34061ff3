//! Every command with its standard output, its standard error, or both on
//! `/dev/full` (every write fails with ENOSPC): no panic, the exit status the output
//! layer documents (`crates/cli/src/out.rs`), and what took effect said on standard
//! error when standard output is lost.
//!
//! Each command runs four times, each on a fresh directory: with both streams
//! captured (what it writes where, and its status), then with each stream on
//! `/dev/full`, then both. A command whose run wrote nothing to a stream keeps its
//! status when that stream is full; otherwise the status is 3 when it took effect
//! (1 when nothing did), a failure keeps its status, and `check` adds 8 to e2fsck's.
//! The table must name every subcommand `zblk help` lists.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// (name, shell set-up, arguments, what the command did in words when it succeeds:
/// said on standard error when standard output is lost)
const COMMANDS: &[(&str, &str, &str, Option<&str>)] = &[
    ("bench", "", "bench --dev nullb:size=64,zone_size=4 --rw write --size 4M --bs 64k", None),
    (
        "bench-image",
        "",
        "bench --image a.img --rw write --bs 64k --size 4M --offset 4M",
        Some("the benchmark wrote 4194304 bytes to a.img"),
    ),
    ("corebench", "", "corebench --bios 1000 --rounds 1", None),
    (
        "sweep",
        "",
        "sweep smr-seq --points 1 --layouts 1 --policies zwp --out plots",
        Some("plot written: plots/smr-seq.png"),
    ),
    ("trace", "", "trace --stack nullb:size=64,zone_size=4 --size 4M", None),
    ("vopr", "", "vopr --seeds 2 --ops 50 --jobs 1", None),
    ("create", "", "create b.img --size 64M", Some("created b.img: 64MiB zoned image")),
    ("report", "", "report a.img", None),
    ("capacity", "", "capacity a.img", None),
    (
        "reset",
        "finish a.img -o 8192 -c 1",
        "reset -v a.img -o 8192 -c 1",
        Some("reset of 1 zone(s) from sector 8192 to 16384"),
    ),
    ("open", "", "open -v a.img -o 8192 -c 1", Some("open of 1 zone(s) from sector 8192 to 16384")),
    (
        "close",
        "open a.img -o 8192 -c 1",
        "close -v a.img -o 8192 -c 1",
        Some("close of 1 zone(s) from sector 8192 to 16384"),
    ),
    ("finish", "", "finish -v a.img -o 8192 -c 2", Some("finish of 2 zone(s) from sector 8192 to 24576")),
    ("info", "", "info a.img", None),
    ("check", "", "check a.img", None),
    ("check-repair", "DAMAGE", "check -y a.img", Some("a.img: corrected: first superblock copy")),
    ("write", "", "write a.img -o 4M -l 4k -p 1 --json", Some("wrote 4096 bytes at byte offset 4194304")),
    ("write-failing", "", "write a.img -o 4M -l 4k -i nofile", None),
    ("append", "", "append a.img -o 4M -l 512 -p 1", Some("the append landed at sector 8192 (byte offset 4194304)")),
    ("read", "", "read a.img -o 0 -l 4k", None),
    ("read-json", "", "read a.img -o 0 -l 4k -O f --json", Some("read 4096 bytes into f")),
    ("serve", "", "serve a.img", None),
    ("fallocate", "", "fallocate -z -o 4M -l 4M a.img", Some("zeroed 4194304 bytes at byte offset 4194304 of a.img")),
    ("help", "", "help", None),
    ("help-flag", "", "--help", None),
    ("version", "", "--version", None),
    ("usage-error", "", "frobnicate", None),
];

/// The exit status with output lost: see the module documentation.
fn status_when_lost(cmd: &str, normal: i32, effect: bool) -> i32 {
    if cmd.starts_with("check") {
        normal | 8
    } else if normal != 0 {
        normal
    } else if effect {
        3
    } else {
        1
    }
}

/// A fresh directory holding `a.img` (64 MiB, 4 MiB zones, one conventional, at most
/// two open), after `setup` (`DAMAGE`: the first superblock's checksum broken).
fn fresh(zblk: &str, setup: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let ok = Command::new(zblk)
        .args(["create", "a.img", "--size", "64M", "-p", "zone_size=4M,zone_nr_conv=1,zone_max_open=2"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(ok.status.success(), "set-up: {}", String::from_utf8_lossy(&ok.stderr));
    if setup == "DAMAGE" {
        use std::os::unix::fs::FileExt;
        let f = File::options().write(true).open(dir.path().join("a.img")).unwrap();
        f.write_all_at(b"XX", 20).unwrap();
    } else if !setup.is_empty() {
        let ok = Command::new(zblk).args(setup.split(' ')).current_dir(dir.path()).output().unwrap();
        assert!(ok.status.success(), "set-up {setup}: {}", String::from_utf8_lossy(&ok.stderr));
    }
    dir
}

fn full() -> Stdio {
    Stdio::from(File::options().write(true).open("/dev/full").unwrap())
}

/// Runs `zblk ARGS` in `dir` with each stream captured or on /dev/full.
fn run(zblk: &str, dir: &Path, args: &str, stdout_full: bool, stderr_full: bool) -> Output {
    let mut c = Command::new(zblk);
    c.args(args.split(' ')).current_dir(dir).env("RUST_BACKTRACE", "0").stdin(Stdio::null());
    c.stdout(if stdout_full { full() } else { Stdio::piped() });
    c.stderr(if stderr_full { full() } else { Stdio::piped() });
    c.output().unwrap()
}

#[test]
fn every_command_with_its_output_on_dev_full() {
    let zblk = env!("CARGO_BIN_EXE_zblk");
    // Every subcommand `zblk help` lists has a row.
    let help = Command::new(zblk).arg("help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(listed.len() >= 20, "zblk help lists {listed:?}");
    for name in &listed {
        assert!(
            COMMANDS.iter().any(|(_, _, args, _)| args.split(' ').next() == Some(*name)),
            "zblk {name} has no row here"
        );
    }
    let mut wrong = Vec::new();
    for &(name, setup, args, effect) in COMMANDS {
        let normal = run(zblk, fresh(zblk, setup).path(), args, false, false);
        let code = normal.status.code().unwrap_or(-1);
        let (wrote_out, wrote_err) = (!normal.stdout.is_empty(), !normal.stderr.is_empty());
        let err = String::from_utf8_lossy(&normal.stderr);
        assert!(!err.contains("panicked"), "{name}: panicked with nothing full: {err}");
        if effect.is_some() && code == 0 {
            assert!(wrote_out, "{name}: a command with an effect to say prints something");
        }
        // (stdout full, stderr full, whether something of the run is lost)
        for (out_full, err_full) in [(true, false), (false, true), (true, true)] {
            let r = run(zblk, fresh(zblk, setup).path(), args, out_full, err_full);
            let got = r.status.code();
            let stderr = String::from_utf8_lossy(&r.stderr);
            let lost = (out_full && wrote_out) || (err_full && wrote_err);
            let want = if lost { status_when_lost(name, code, effect.is_some() && code == 0) } else { code };
            let what = format!("{name} (stdout full: {out_full}, stderr full: {err_full}): `zblk {args}`");
            if got == Some(101) || stderr.contains("panicked") {
                wrong.push(format!("{what}: panicked: {stderr}"));
            } else if got != Some(want) {
                wrong.push(format!("{what}: exit {got:?}, wanted {want} (with nothing full: {code}): {stderr}"));
            } else if out_full && !err_full && wrote_out {
                // What took effect is said where it still can be.
                let said = stderr.contains("standard output: No space left on device")
                    || (code != 0 && stderr.contains("zblk: "));
                let effect_said = effect.is_none_or(|e| code != 0 || stderr.contains(e));
                if !said || !effect_said {
                    wrong.push(format!("{what}: standard error does not say it (effect {effect:?}): {stderr}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{} runs wrong:\n{}", wrong.len(), wrong.join("\n"));
}
