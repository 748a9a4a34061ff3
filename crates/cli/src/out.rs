//! The one way `zblk` writes to standard output and standard error: no write panics
//! (a full disk, a closed descriptor, a device error are operating errors), and
//! what a command did is never left unsaid where it can still be said.
//!
//! A failed write is remembered (the first error of each stream) and the stream is
//! not written again. A command records what took effect as it happens ([`done`]:
//! an image created, data landed, zones reset, a repair), so that [`exit`] can say it
//! on standard error when standard output was lost, and the exit status says it
//! when both were:
//!
//! | status | meaning |
//! |---|---|
//! | 0 | done, and everything it printed was written |
//! | 1 | failed (the message says what took effect before), or nothing took effect and its output could not be written |
//! | 2 | usage error |
//! | 3 | done, but what it printed (or part of it) could not be written |
//!
//! `check` keeps e2fsck's statuses and adds 8 (operational error) when its report
//! could not be written ([`exit_check`]). A closed pipe is not an error here: SIGPIPE
//! ends the process first (status 141), as for coreutils.

use crate::CliError;
use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;
use std::sync::{Mutex, MutexGuard};

/// What the streams did, and what the command did.
struct State {
    /// The first error writing standard output.
    stdout: Option<io::Error>,
    /// The first error writing standard error.
    stderr: Option<io::Error>,
    /// What took effect, in words, in order.
    done: Vec<String>,
}

static STATE: Mutex<State> = Mutex::new(State { stdout: None, stderr: None, done: Vec::new() });

fn state() -> MutexGuard<'static, State> {
    // A panic elsewhere (an invariant assert) must not stop the error being said.
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Which stream.
#[derive(Clone, Copy)]
enum Stream {
    Out,
    Err,
}

/// Writes `args` to `stream` unless it failed before; remembers a failure. Returns
/// whether it was written.
fn write(stream: Stream, args: fmt::Arguments<'_>) -> bool {
    let mut st = state();
    let slot = match stream {
        Stream::Out => &mut st.stdout,
        Stream::Err => &mut st.stderr,
    };
    if slot.is_some() {
        return false;
    }
    // Flushed at once, so that the error shows here and not at exit (where the
    // standard library drops it).
    let r = match stream {
        Stream::Out => {
            let mut o = io::stdout().lock();
            o.write_fmt(args).and_then(|()| o.flush())
        }
        Stream::Err => io::stderr().lock().write_fmt(args),
    };
    match r {
        Ok(()) => true,
        Err(e) => {
            *slot = Some(e);
            false
        }
    }
}

/// A progress bar of `len` steps drawn with indicatif `template` on standard error,
/// only when standard error is a terminal (None otherwise: nothing of it reaches a
/// pipe or a file).
pub fn progress_bar(len: u64, template: &str) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal;
    if !io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(indicatif::ProgressStyle::with_template(template).expect("valid template"));
    Some(bar)
}

/// Writes to standard output (use [`outln!`] and [`out!`]).
pub fn stdout(args: fmt::Arguments<'_>) -> bool {
    write(Stream::Out, args)
}

/// Writes to standard error (use [`errln!`]).
pub fn stderr(args: fmt::Arguments<'_>) -> bool {
    write(Stream::Err, args)
}

/// A line on standard output, as `println!` without the panic.
macro_rules! outln {
    ($($arg:tt)*) => {{
        let _ = $crate::out::stdout(format_args!("{}\n", format_args!($($arg)*)));
    }};
}

/// Text on standard output, as `print!` without the panic.
macro_rules! out {
    ($($arg:tt)*) => {{
        let _ = $crate::out::stdout(format_args!($($arg)*));
    }};
}

/// A line on standard error, as `eprintln!` without the panic.
macro_rules! errln {
    ($($arg:tt)*) => {{
        let _ = $crate::out::stderr(format_args!("{}\n", format_args!($($arg)*)));
    }};
}

pub(crate) use {errln, out, outln};

/// Records that `what` took effect (in words: "created img.zbd", "the append landed
/// at sector 8192"): said on standard error if standard output is lost.
pub fn done(what: impl Into<String>) {
    state().done.push(what.into());
}

/// Whether standard output has failed (a long listing can stop early).
pub fn stdout_failed() -> bool {
    state().stdout.is_some()
}

/// Standard output through a buffer, for long listings (a trace): a failed write is
/// remembered as [`outln!`]'s, and what is buffered is flushed when it is dropped.
pub struct Buffered(Option<io::BufWriter<io::Stdout>>);

impl Buffered {
    /// A buffer in front of standard output.
    pub fn new() -> Buffered {
        Buffered(Some(io::BufWriter::with_capacity(64 << 10, io::stdout())))
    }

    /// Writes a line.
    pub fn line(&mut self, args: fmt::Arguments<'_>) {
        let mut st = state();
        if let (None, Some(w)) = (&st.stdout, &mut self.0) {
            if let Err(e) = w.write_fmt(format_args!("{args}\n")) {
                st.stdout = Some(e);
            }
        }
    }
}

impl Drop for Buffered {
    fn drop(&mut self) {
        let Some(mut w) = self.0.take() else { return };
        let mut st = state();
        match st.stdout {
            None => {
                if let Err(e) = w.flush() {
                    st.stdout = Some(e);
                }
            }
            // What follows the first error is lost anyway: dropped unwritten.
            Some(_) => drop(w.into_parts()),
        }
    }
}

/// Says on standard error what took effect, after standard output failed with `e`
/// (nothing is said if standard error fails too).
fn say_lost_stdout(e: &io::Error, done: &[String]) {
    if done.is_empty() {
        errln!("zblk: standard output: {e}");
    } else {
        errln!("zblk: standard output: {e}; done all the same: {}", done.join("; "));
    }
}

/// At the end of a command: when standard output was lost, says on standard error
/// what took effect. Returns whether any output was lost, and whether something took
/// effect.
fn settle() -> (bool, bool) {
    let (stdout, done) = {
        let mut st = state();
        (st.stdout.take(), std::mem::take(&mut st.done))
    };
    if let Some(e) = &stdout {
        say_lost_stdout(e, &done);
    }
    (stdout.is_some() || state().stderr.is_some(), !done.is_empty())
}

/// The exit status of a command that returned `result`, after saying its error.
pub fn exit(result: Result<(), CliError>) -> ExitCode {
    if let Err(e) = &result {
        errln!("zblk: {e}");
    }
    let (lost, done) = settle();
    match (result, lost, !done) {
        (Err(_), ..) => ExitCode::FAILURE,
        (Ok(()), false, _) => ExitCode::SUCCESS,
        (Ok(()), true, true) => ExitCode::FAILURE,
        (Ok(()), true, false) => ExitCode::from(3),
    }
}

/// e2fsck's "operational error", added to `check`'s status when its report could
/// not be written.
pub const OPERATIONAL: u8 = 8;

/// `check`'s exit status: `code` (e2fsck's), with [`OPERATIONAL`] added when what it
/// printed could not be written.
pub fn exit_check(code: u8) -> ExitCode {
    let (lost, _) = settle();
    ExitCode::from(if lost { code | OPERATIONAL } else { code })
}

/// The exit of a command line clap could not take (or `--help`, `--version`): its
/// message, and clap's status; help or a version that could not be written is a
/// failure, said on standard error.
pub fn exit_usage(e: &clap::Error) -> ExitCode {
    let code = e.exit_code();
    match e.print() {
        Ok(()) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(err) if !e.use_stderr() => {
            errln!("zblk: standard output: {err}");
            ExitCode::FAILURE
        }
        // A usage error that cannot be said: its status says it.
        Err(_) => ExitCode::from(code.clamp(0, 255) as u8),
    }
}
