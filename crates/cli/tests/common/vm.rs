//! Tests that need a Linux kernel with zoned block devices run in a VM
//! (`scripts/kernel-vm.sh`: Linux 6.12 or 7.3, a zoned null_blk at /dev/nullb0,
//! optionally an NVMe ZNS namespace and the ublk driver).
//!
//! The guest kernel is `ZBLK_VM_KERNEL` (`6.12`, the default, or `7.3`): `scripts/test`
//! runs every VM test binary once on each. A test that needs what only one kernel has
//! boots that kernel itself ([`run_on`]) and is run once.
//!
//! They run when the VM is ready (qemu installed and a kernel cached in
//! `ZBLK_KVM_DIR`, by default `/var/tmp/zblk-kvm`) or when `ZBLK_VM=1` (which may
//! install qemu and download a kernel first); `ZBLK_VM=0` skips them. A skipped test
//! says SKIPPED on the test output itself, not only in its captured output.
//!
//! `ZBLK_REQUIRE_VM=1` (set by `scripts/test` and CI) makes the VM required: it is set
//! up as with `ZBLK_VM=1`, and a test that cannot run fails instead of skipping.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn vm_script() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kernel-vm.sh");
    p.exists().then_some(p)
}

/// The guest kernel the VM tests boot: `ZBLK_VM_KERNEL`, `6.12` by default.
pub fn kernel() -> String {
    std::env::var("ZBLK_VM_KERNEL").unwrap_or_else(|_| "6.12".to_string())
}

/// Whether a VM test that cannot run must fail (`ZBLK_REQUIRE_VM=1`).
pub fn required() -> bool {
    std::env::var("ZBLK_REQUIRE_VM").is_ok_and(|v| v == "1")
}

/// The VM script, if the VM can run; else why not.
pub fn ready() -> Result<PathBuf, String> {
    let script = vm_script().ok_or("scripts/kernel-vm.sh not found in the repository")?;
    match std::env::var("ZBLK_VM").as_deref() {
        Ok("0") => return Err("ZBLK_VM=0".to_string()),
        Ok("1") => return Ok(script),
        _ if required() => return Ok(script),
        _ => {}
    }
    let qemu = Command::new("sh").args(["-c", "command -v qemu-system-x86_64"]).output();
    if !qemu.is_ok_and(|o| o.status.success()) {
        return Err("qemu-system-x86_64 is not installed (ZBLK_VM=1 installs it)".to_string());
    }
    let cache = std::env::var("ZBLK_KVM_DIR").unwrap_or_else(|_| "/var/tmp/zblk-kvm".to_string());
    let dir = match kernel().as_str() {
        "6.12" => "k",
        _ => "k-7.3",
    };
    if !Path::new(&cache).join(dir).exists() {
        return Err(format!("no Linux {} kernel cached in {cache} (ZBLK_VM=1 downloads one)", kernel()));
    }
    Ok(script)
}

/// Says that `test` did not run and why, past the test harness's output capture (a
/// direct write to the standard error, which the harness does not capture), so that
/// it shows beside the test's "ok" and in `scripts/test`'s summary. With
/// `ZBLK_REQUIRE_VM=1` the test fails instead.
pub fn skipped(test: &str, why: &str) {
    assert!(!required(), "{test}: the Linux VM is required (ZBLK_REQUIRE_VM=1) but not available: {why}");
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: the Linux VM is not available: {why}");
}

/// Runs `command` in the VM with `nullb` as null_blk's parameters and `share`
/// writable; returns its output and standard output. See [`run_with`].
pub fn run(script: &Path, share: &Path, nullb: &str, command: &[&str]) -> (Output, String) {
    run_with(script, share, nullb, &[], command)
}

/// Runs `command` in the VM with `nullb` as null_blk's parameters, the script's
/// `options` (`--zns`, `--ublk`, `--modules "f2fs btrfs"`) and `share` writable;
/// returns its output and standard output. A guest kernel that dies while booting (it
/// happens under emulation) never ran the command: it boots again, up to three times.
/// A command that ran and failed is returned as it is.
pub fn run_with(script: &Path, share: &Path, nullb: &str, options: &[&str], command: &[&str]) -> (Output, String) {
    run_on(&kernel(), script, share, nullb, options, command)
}

/// [`run_with`] on the guest kernel `kernel` (`6.12` or `7.3`), whatever
/// `ZBLK_VM_KERNEL` says: for a test of what only that kernel has.
pub fn run_on(
    kernel: &str,
    script: &Path,
    share: &Path,
    nullb: &str,
    options: &[&str],
    command: &[&str],
) -> (Output, String) {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let out = Command::new(script)
            .args(["--kernel", kernel, "--share", &share.display().to_string(), "--nullb", nullb])
            .args(options)
            .arg("--")
            .args(command)
            .output()
            .expect("run kernel-vm.sh");
        let log = String::from_utf8_lossy(&out.stdout).into_owned();
        // The script ends with "@@ exit N", N the command's status, or "@@ exit unknown"
        // when the guest never reported one (it died while booting).
        let ran = log.lines().any(|l| l.strip_prefix("@@ exit ").is_some_and(|rc| rc.trim().parse::<i32>().is_ok()));
        if ran || attempts == 3 {
            if !ran {
                // The script itself failed (no kernel, no qemu): say why.
                assert!(
                    !required(),
                    "the Linux VM is required (ZBLK_REQUIRE_VM=1) but did not run: {}\n{log}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            return (out, log);
        }
        eprintln!("the VM did not boot (attempt {attempts}); booting again");
    }
}

/// Guest shell functions: `serve NAME ARGS...` starts `$X serve ARGS` in the background
/// as $P, its standard output in $S/NAME.out (the ready line, with `--json`: $D is its
/// device), its standard error in $S/NAME.err; `rc NAME` keeps the last status in
/// $S/NAME.rc.
pub const SERVE_JSON_FN: &str = r#"
serve() { n=$1; shift; rm -f $S/$n.out; $X serve "$@" > $S/$n.out 2> $S/$n.err & P=$!; i=0
  while ! [ -s $S/$n.out ] && kill -0 $P 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  D=$(head -1 $S/$n.out | sed 's/.*"device":"\([^"]*\)".*/\1/'); }
rc() { echo $? > $S/$1.rc; }
"#;

/// The share of a VM test: a fresh directory under /var/tmp (the guest's /tmp is its
/// own tmpfs), removed when the first value is dropped, or kept (and said) with
/// `ZBLK_KEEP_VM_DIR=1` for a look after a failure.
pub fn share(prefix: &str) -> (Option<tempfile::TempDir>, PathBuf) {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir_in("/var/tmp").unwrap();
    if std::env::var("ZBLK_KEEP_VM_DIR").is_ok_and(|v| v == "1") {
        let kept = dir.keep();
        eprintln!("keeping {}", kept.display());
        (None, kept)
    } else {
        let p = dir.path().to_path_buf();
        (Some(dir), p)
    }
}

/// Copies the host program `exe` into the share and returns its path there (the share
/// is mounted at the same path in the guest). The guest sees the host's root file
/// system, but with a tmpfs over /tmp: a build under /tmp (a CI checkout, say) is not
/// visible to the guest where it was built.
pub fn stage(share: &Path, exe: &str) -> String {
    let name = Path::new(exe).file_name().expect("a program's file name");
    let dir = share.join("bin");
    std::fs::create_dir_all(&dir).expect("create the share's bin directory");
    let staged = dir.join(name);
    // Without its debug information: the guest reads the program over 9p, a few MB/s
    // under emulation, and the test build's debug information is five sixths of it.
    // A plain copy where binutils' objcopy is missing or fails.
    let stripped =
        Command::new("objcopy").arg("--strip-debug").arg(exe).arg(&staged).output().is_ok_and(|o| o.status.success());
    if !stripped {
        std::fs::copy(exe, &staged).unwrap_or_else(|e| panic!("copy {exe} into the VM's share: {e}"));
    }
    // A process forked by another test thread while the copy's file was open for
    // writing holds that descriptor until it execs, and the kernel refuses to run a
    // file open for writing (ETXTBSY): run it once, retrying while that lasts, so
    // that no later run meets it (no new writer can appear once the copy is closed).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Command::new(&staged).arg("--version").output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("run {}: {e}", staged.display()),
            Ok(_) => break,
        }
    }
    staged.display().to_string()
}

/// The VM script for a test of `zblk serve`, or `None` once the test has said
/// SKIPPED: serving needs the `ublk` feature as well as the VM.
pub fn ready_for_serve(test: &str) -> Option<PathBuf> {
    if !cfg!(feature = "ublk") {
        skipped(test, "zblk was built without `--features zblk-cli/ublk`");
        return None;
    }
    match ready() {
        Ok(script) => Some(script),
        Err(why) => {
            skipped(test, &why);
            None
        }
    }
}

/// Writes `guest` to `share/guest.sh` and runs it with `sh` in the VM (see
/// [`run_with`]); the test fails unless it ran and exited 0. Returns the VM's log.
pub fn run_guest(script: &Path, share: &Path, nullb: &str, options: &[&str], guest: &str) -> String {
    run_guest_on(&kernel(), script, share, nullb, options, guest)
}

/// [`run_guest`] on the guest kernel `kernel`, whatever `ZBLK_VM_KERNEL` says.
pub fn run_guest_on(kernel: &str, script: &Path, share: &Path, nullb: &str, options: &[&str], guest: &str) -> String {
    std::fs::write(share.join("guest.sh"), guest).unwrap();
    let guest_sh = share.join("guest.sh").display().to_string();
    let t = std::time::Instant::now();
    let (out, log) = run_on(kernel, script, share, nullb, options, &["sh", &guest_sh]);
    assert!(
        out.status.success() && log.contains("@@ exit 0"),
        "VM run on Linux {kernel} failed:\n{log}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("VM run on Linux {kernel}: {:.1} s", t.elapsed().as_secs_f64());
    log
}

/// fio's `--output-format=json` report from a guest's file (`text`, after whatever
/// fio printed before it), or a panic naming `what` with the text and fio's standard
/// error `stderr`.
pub fn fio_report(text: &str, stderr: &str, what: &str) -> serde_json::Value {
    serde_json::from_str(&text[text.find('{').unwrap_or(0)..])
        .unwrap_or_else(|e| panic!("fio {what}: {e}: {text}\n{stderr}"))
}

/// Asserts that every job of fio's write-and-verify report ended without an error,
/// each having written `bytes` and read them all back.
pub fn assert_verified(text: &str, stderr: &str, what: &str, bytes: u64) {
    for job in fio_report(text, stderr, what)["jobs"].as_array().expect("fio's jobs") {
        assert_eq!(job["error"], 0, "fio {what}: {job}\n{stderr}");
        assert_eq!(job["write"]["io_bytes"], bytes, "{what}: {job}");
        assert_eq!(job["read"]["io_bytes"], bytes, "{what}: verify read back what was written: {job}");
    }
}
