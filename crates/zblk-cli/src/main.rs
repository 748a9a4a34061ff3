//! `zblk`: zoned block device management, fio-like benchmarks and the published
//! zoned-write experiments on simulated devices.

mod cmd;
mod devspec;
mod fio_out;
mod parse;
mod plot;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// zblk: a userspace zoned block layer (zone write plugging, zone append emulation,
/// single-issuer writes) with a deterministic simulator of zoned devices.
///
/// Results of commands that run on a simulated device are simulator numbers and are
/// labelled as such.
#[derive(Parser, Debug)]
#[command(name = "zblk", version, about, long_about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run fio-like jobs on a simulated device and print fio-style results.
    Bench(cmd::bench::BenchArgs),
    /// Measure the engine's own cost: BIOs/s with zone write plugging vs passthrough.
    Corebench(cmd::corebench::CorebenchArgs),
    /// Run a published experiment on simulated devices, all policies side by side.
    Sweep(cmd::sweep::SweepArgs),
    /// Trace every I/O of every device of a simulated stack, blkparse-style, with
    /// seek histograms.
    Trace(cmd::trace::TraceArgs),
}

/// A command failed: the message is printed as `zblk: <message>`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CliError(pub String);

impl CliError {
    /// An error from any displayable cause.
    pub fn msg(m: impl std::fmt::Display) -> CliError {
        CliError(m.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(a) => cmd::bench::run(&a),
        Command::Corebench(a) => cmd::corebench::run(&a),
        Command::Sweep(a) => cmd::sweep::run(&a),
        Command::Trace(a) => cmd::trace::run(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zblk: {e}");
            ExitCode::FAILURE
        }
    }
}
