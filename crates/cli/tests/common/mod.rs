//! Running the `zblk` binary from the CLI tests.

#![allow(dead_code)]

pub mod vm;

use std::process::{Command, Output};

/// Runs `zblk` with `args`.
pub fn zblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zblk")).args(args).output().expect("run zblk")
}

/// Runs `zblk` with `args` on a terminal: under util-linux `script`, which gives it a
/// pseudo-terminal for standard input, output and error; returns what the terminal
/// showed (the command must succeed). None, and a SKIPPED line for `test`, where
/// `script` cannot be run.
pub fn on_terminal(test: &str, args: &[&str]) -> Option<String> {
    // One shell word per argument, as `script -c` hands the line to a shell.
    let quote = |a: &str| format!("'{}'", a.replace('\'', r"'\''"));
    let cmd = std::iter::once(env!("CARGO_BIN_EXE_zblk")).chain(args.iter().copied()).map(quote).collect::<Vec<_>>();
    match Command::new("script").args(["-qec", &cmd.join(" "), "/dev/null"]).stdin(std::process::Stdio::null()).output()
    {
        Ok(o) => {
            let seen = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(o.status.success(), "zblk {args:?} on a terminal: {:?}: {seen}", o.status);
            Some(seen)
        }
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: `script` (util-linux) cannot run: {e}");
            None
        }
    }
}

/// Its standard output.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Its standard error.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs a command that must succeed; returns its standard output.
pub fn ok(args: &[&str]) -> String {
    let o = zblk(args);
    assert!(o.status.success(), "zblk {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// Runs a command that must fail cleanly (exit status 1, or clap's 2 for a bad
/// option; never a panic); returns its error output.
pub fn fails(args: &[&str]) -> String {
    let o = zblk(args);
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(matches!(o.status.code(), Some(1 | 2)), "zblk {args:?}: status {:?}: {err}", o.status);
    assert!(!err.contains("panicked"), "zblk {args:?} panicked: {err}");
    err
}
