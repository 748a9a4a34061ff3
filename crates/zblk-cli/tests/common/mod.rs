//! Running the `zblk` binary from the CLI tests.

#![allow(dead_code)]

use std::process::{Command, Output};

/// Runs `zblk` with `args`.
pub fn zblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zblk")).args(args).output().expect("run zblk")
}

/// Its standard output.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Its standard error.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
