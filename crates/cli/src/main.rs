//! `zblk`: zoned block device management (blkzone's commands on zoned images),
//! single I/Os, fio-like benchmarks on images or simulated devices, and the published
//! zoned-write experiments on simulated devices.

mod cmd;
mod devspec;
mod explain;
mod fio_out;
mod image;
mod jobargs;
mod out;
mod output;
mod parse;
mod plot;
mod stacksim;

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
    Bench(jobargs::BenchArgs),
    /// Measure the core's own cost: BIOs/s with zone write plugging vs passthrough.
    Corebench(cmd::corebench::CorebenchArgs),
    /// Run a published experiment on simulated devices, all policies side by side.
    Sweep(cmd::sweep::SweepArgs),
    /// Trace every I/O of every device of a simulated stack, blkparse-style, with
    /// seek histograms.
    Trace(cmd::trace::TraceArgs),
    /// Fault-injected random simulation checked against a reference model of the
    /// kernel's zoned block layer (seeds, replay, shrunk traces).
    Vopr(cmd::vopr::VoprArgs),
    /// Create a zoned image on a regular file (null_blk geometry parameters).
    Create(cmd::create::CreateArgs),
    /// Report zones of an image or a zoned block device, as blkzone report.
    Report(cmd::zones::ZoneArgs),
    /// Report the sum of zone capacities (image or device), as blkzone capacity.
    Capacity(cmd::zones::ZoneArgs),
    /// Reset a range of zones, as blkzone reset.
    Reset(cmd::zones::ZoneArgs),
    /// Open a range of zones, as blkzone open.
    Open(cmd::zones::ZoneArgs),
    /// Close a range of zones, as blkzone close.
    Close(cmd::zones::ZoneArgs),
    /// Finish a range of zones (set them FULL), as blkzone finish.
    Finish(cmd::zones::ZoneArgs),
    /// Show an image's or a zoned block device's geometry, limits, attributes and state.
    Info(cmd::info::InfoArgs),
    /// Check an image's metadata, as e2fsck (-n: check only, the default; -y or
    /// --repair: repair). Exit 0 clean, 1 corrected, 4 left uncorrected, 8 error
    Check(cmd::check::CheckArgs),
    /// Write to an image or a zoned block device at a byte offset (data from a file,
    /// stdin or a pattern).
    Write(cmd::io::IoArgs),
    /// Append to a zone of an image or a zoned block device; prints the sector written.
    Append(cmd::io::IoArgs),
    /// Read from an image or a zoned block device at a byte offset.
    Read(cmd::io::IoArgs),
    /// Serve an image or a memory device to the kernel as a zoned ublk block device
    /// (/dev/ublkbN), until SIGINT/SIGTERM.
    Serve(cmd::serve::ServeArgs),
    /// Zero a range of an image (fallocate -w: WRITE_ZEROES unmapped, refused where the image cannot unmap; -z
    /// writes the zeroes).
    Fallocate(cmd::fallocate::FallocateArgs),
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
    // SAFETY: first thing in main, before any thread is started; both dispositions
    // are the kernel's defaults, no handler runs.
    unsafe {
        // A closed pipe (`zblk report IMG | head -1`) ends the process quietly with
        // status 141, as coreutils do; other write errors are the output layer's
        // (`out.rs`).
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        // Past the file size limit (`ulimit -f`) a write fails with EFBIG, which the
        // command reports, instead of the process dying without a word.
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return out::exit_usage(&e),
    };
    let result = match cli.command {
        Command::Bench(a) => match &a.image {
            Some(target) => cmd::imgbench::run(&a, target),
            None => cmd::bench::run(&a),
        },
        Command::Corebench(a) => cmd::corebench::run(&a),
        Command::Sweep(a) => cmd::sweep::run(&a),
        Command::Trace(a) => plant_from_env().and_then(|()| cmd::trace::run(&a)),
        Command::Vopr(a) => cmd::vopr::run(&a),
        Command::Create(a) => cmd::create::run(&a),
        Command::Report(a) => cmd::zones::run(cmd::zones::ZoneCmd::Report, &a),
        Command::Capacity(a) => cmd::zones::run(cmd::zones::ZoneCmd::Capacity, &a),
        Command::Reset(a) => cmd::zones::run(cmd::zones::ZoneCmd::Reset, &a),
        Command::Open(a) => cmd::zones::run(cmd::zones::ZoneCmd::Open, &a),
        Command::Close(a) => cmd::zones::run(cmd::zones::ZoneCmd::Close, &a),
        Command::Finish(a) => cmd::zones::run(cmd::zones::ZoneCmd::Finish, &a),
        Command::Info(a) => cmd::info::run(&a),
        Command::Check(a) => return out::exit_check(cmd::check::run(&a)),
        Command::Write(a) => plant_from_env().and_then(|()| cmd::io::run(cmd::io::IoCmd::Write, &a)),
        Command::Append(a) => plant_from_env().and_then(|()| cmd::io::run(cmd::io::IoCmd::Append, &a)),
        Command::Read(a) => plant_from_env().and_then(|()| cmd::io::run(cmd::io::IoCmd::Read, &a)),
        Command::Fallocate(a) => cmd::fallocate::run(&a),
        Command::Serve(a) => plant_from_env().and_then(|()| cmd::serve::run(&a)),
    };
    out::exit(result)
}

/// Plants the bug `ZBLK_MUTATION` names in every thread of a served device, a
/// trace or a single I/O, for the tests that show a check against the kernel catches
/// it (docs/vopr.md, "Planted bugs") and the fail-stop tests (a planted panic). Only
/// builds with the `mutations` feature have them: elsewhere, and for a name that is
/// none of them, the variable is refused rather than ignored, so that such a test
/// cannot pass without its bug.
fn plant_from_env() -> Result<(), CliError> {
    use zblk_core::mutation::{self, Mutation};
    let Some(name) = std::env::var_os("ZBLK_MUTATION") else { return Ok(()) };
    let name = name.to_string_lossy();
    let m = Mutation::parse(&name).ok_or_else(|| CliError(format!("ZBLK_MUTATION: unknown mutation '{name}'")))?;
    if !mutation::AVAILABLE {
        return Err(CliError("ZBLK_MUTATION: this zblk was built without the `mutations` feature".into()));
    }
    mutation::set_global(Some(m));
    Ok(())
}
