//! A runtime whose threads cannot all start fails with the reason, and does not hang:
//! `zblk read` run as an unprivileged user allowed one process (RLIMIT_NPROC 1, so
//! that no thread can start) says "cannot start a thread" and exits 1. Needs root to
//! switch users; says SKIPPED otherwise.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

#[test]
fn a_thread_that_cannot_start_is_an_error_not_a_hang() {
    // SAFETY: geteuid takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED a_thread_that_cannot_start_is_an_error_not_a_hang: needs root to run zblk as another user"
        );
        return;
    }
    let zblk = env!("CARGO_BIN_EXE_zblk");
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let img = dir.path().join("t.zbd");
    let out = Command::new(zblk).args(["create", "--size", "64M", "-p", "zone_size=4"]).arg(&img).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::set_permissions(&img, std::fs::Permissions::from_mode(0o666)).unwrap();
    // The user the command runs as may not reach the build's directory: a copy of the
    // binary beside the image.
    let exe = dir.path().join("zblk");
    std::fs::copy(zblk, &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(&exe);
    cmd.args(["read", "-o", "0", "-l", "4k", "-O", "/dev/null"]).arg(&img).stdout(Stdio::null()).stderr(Stdio::piped());
    // SAFETY: only async-signal-safe calls between fork and exec; a failure is
    // returned as the spawn's error.
    unsafe {
        cmd.pre_exec(|| {
            let one = libc::rlimit { rlim_cur: 1, rlim_max: 1 };
            if libc::setgid(NOBODY) != 0 || libc::setuid(NOBODY) != 0 || libc::setrlimit(libc::RLIMIT_NPROC, &one) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED a_thread_that_cannot_start_is_an_error_not_a_hang: cannot run zblk as uid {NOBODY}: {e}"
            );
            return;
        }
        Err(e) => panic!("spawning zblk as uid {NOBODY}: {e}"),
    };
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("zblk read still running after 60 s with no thread allowed: it hangs");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("cannot start a thread"), "{err}");
}
