//! `zblk write|append|read IMG|DEV -o OFFSET -l LENGTH`: single I/Os through the
//! engine, on an image or a Linux zoned block device, for scripts and debugging.
//! Offsets and lengths are bytes, with size suffixes. On a block device an append is
//! zblk's emulation (the kernel has no zone append for userspace): a write at the
//! write pointer zblk's plug holds, and the sector it landed at.
//!
//! The I/O itself is [`zblk_runtime::single`]'s: reads and writes of any length
//! stream through one buffer (constant memory), the input read up to `--length` and
//! no further; a write goes in chunks at the write pointer, an append is one
//! request, never split. Here are the arguments, and the words: a failed write
//! says how many bytes landed and where the zone's write pointer is, an append over
//! the device's zone append limit is refused with the limit in words.

use crate::explain::{self, explain};
use crate::out::{self, outln};
use crate::{CliError, image, output, parse};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use zblk_core::bio::{BioFlags, Op, Status};
use zblk_core::engine::EngineConfig;
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SIZE, Sector, format_bytes_exact};
use zblk_core::zone::{ZoneInfo, ZoneType};
use zblk_runtime::single::{self, AppendError, Input, ReadError, WriteError, WriteFailure};
use zblk_runtime::{Backend, Runtime};

/// A single I/O.
#[derive(Args, Debug)]
pub struct IoArgs {
    /// The image, a Linux zoned block device (e.g. /dev/nullb0, /dev/nvme0n1), or an
    /// NVMe ZNS namespace's generic device (/dev/ng0n1: NVMe passthrough, native zone
    /// append).
    pub image: PathBuf,
    /// Byte offset (a multiple of 512; for append, the start of the zone). Suffixes:
    /// 4k, 1M, ...
    #[arg(short = 'o', long, value_parser = parse::size)]
    pub offset: u64,
    /// Length in bytes (default: the input's length for write and append).
    #[arg(short = 'l', long, value_parser = parse::size)]
    pub length: Option<u64>,
    /// write/append: take the data from this file (`-`: standard input).
    #[arg(short = 'i', long, conflicts_with = "pattern")]
    pub input: Option<PathBuf>,
    /// write/append: fill the data with this byte (e.g. 0xab).
    #[arg(short = 'p', long, value_parser = parse_byte)]
    pub pattern: Option<u8>,
    /// read: where to put the data (`-`: standard output, the default).
    #[arg(short = 'O', long)]
    pub output: Option<PathBuf>,
    /// write/append: forced unit access (durable when it completes).
    #[arg(long)]
    pub fua: bool,
    /// Issue a FLUSH after the I/O.
    #[arg(long)]
    pub flush: bool,
    /// Print a JSON summary (read: the data goes only to --output).
    #[arg(long)]
    pub json: bool,
    /// Waiting for an image another process holds.
    #[command(flatten)]
    pub lock: image::WaitArg,
}

fn parse_byte(text: &str) -> Result<u8, String> {
    let t = text.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u8::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("'{text}' is not a byte (0..255 or 0x00..0xff)"))
}

/// Which single I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoCmd {
    /// WRITE at an offset.
    Write,
    /// ZONE_APPEND to a zone; prints the sector written.
    Append,
    /// READ.
    Read,
}

/// The input and its length when known up front (`--length`, or a regular file's
/// size); `None`: read to its end.
fn open_input(a: &IoArgs) -> Result<(Input<'static>, Option<u64>), CliError> {
    match (&a.input, a.pattern) {
        (Some(p), _) if p.as_os_str() == "-" => Ok((Input::Reader(Box::new(std::io::stdin())), a.length)),
        (Some(p), _) => {
            let f = std::fs::File::open(p).map_err(|e| CliError(format!("{}: {e}", p.display())))?;
            let size = f.metadata().ok().filter(|m| m.file_type().is_file()).map(|m| m.len());
            match (a.length, size) {
                (Some(l), Some(s)) if s < l => {
                    Err(CliError(format!("{}: the input has {s} bytes, --length asks for {l}", p.display())))
                }
                (Some(l), _) => Ok((Input::Reader(Box::new(f)), Some(l))),
                (None, s) => Ok((Input::Reader(Box::new(f)), s)),
            }
        }
        (None, Some(b)) => {
            let len = a.length.ok_or_else(|| CliError::msg("--pattern needs --length"))?;
            Ok((Input::Pattern(b), Some(len)))
        }
        (None, None) => Err(CliError::msg("give the data with --input FILE (- for stdin) or --pattern BYTE")),
    }
}

fn input_name(a: &IoArgs) -> String {
    match &a.input {
        Some(p) if p.as_os_str() == "-" => "standard input".to_string(),
        Some(p) => p.display().to_string(),
        None => "the pattern".to_string(),
    }
}

/// Refuses what the arguments alone make invalid, before anything is opened.
fn check_args(cmd: IoCmd, a: &IoArgs, name: &str) -> Result<(), CliError> {
    if cmd == IoCmd::Read && (a.input.is_some() || a.pattern.is_some() || a.fua) {
        return Err(CliError::msg("read takes no --input, --pattern or --fua"));
    }
    if cmd != IoCmd::Read && a.output.is_some() {
        return Err(CliError::msg("--output is for read"));
    }
    single::check_request(a.offset, a.length).map_err(|e| explain::range(name, a.offset, 0, e, ""))?;
    if cmd == IoCmd::Read && a.length.is_none() {
        return Err(CliError::msg("read needs --length"));
    }
    Ok(())
}

/// The input and its length, once the range is known good for the device: on
/// logical blocks and not past its end (checked before anything moves: a length
/// past the device end is the device's EINVAL for the whole request, not a partial
/// write).
fn checked_input(
    cmd: IoCmd,
    a: &IoArgs,
    name: &str,
    geo: &Geometry,
) -> Result<(Input<'static>, Option<u64>), CliError> {
    single::check_offset(geo, a.offset).map_err(|e| explain::range(name, a.offset, 0, e, ""))?;
    let (input, len) = if cmd == IoCmd::Read { (Input::Pattern(0), a.length) } else { open_input(a)? };
    if let Some(l) = len {
        let empty = format!(" ({} is empty)", input_name(a));
        single::check_length(geo, a.offset, l).map_err(|e| explain::range(name, a.offset, l, e, &empty))?;
    }
    Ok((input, len))
}

/// Runs one single-I/O command.
pub fn run(cmd: IoCmd, a: &IoArgs) -> Result<(), CliError> {
    let name = a.image.display().to_string();
    check_args(cmd, a, &name)?;
    let img = image::Target::open(&a.image, cmd == IoCmd::Read, a.lock)?;
    let geo = img.geo().clone();
    let (mut input, len) = checked_input(cmd, a, &name, &geo)?;
    let what = match cmd {
        IoCmd::Write => "write",
        IoCmd::Append => "append",
        IoCmd::Read => "read",
    };
    let tell = Tell { geo: &geo, name: &name, what, offset: a.offset, input: input_name(a) };
    // An append is one request: its data is read whole (at most the append limit,
    // checked before the runtime starts) and never split.
    let append_data = match cmd {
        IoCmd::Append => Some(single::append_data(&geo, &mut input, len).map_err(|e| tell.append_refused(e))?),
        _ => None,
    };
    // Opened once every argument is known good, and before anything is read: never an
    // image (this one or another), a device, or a file in use (see `output`).
    let out_file = match a.output.as_ref().filter(|p| p.as_os_str() != "-") {
        Some(p) => Some(output::create(p, img.image())?),
        None => None,
    };
    let engine = EngineConfig { policy: img.default_policy(), ..EngineConfig::default() };
    let rt = img.start(engine, Backend::Auto)?;
    let flags = if a.fua { BioFlags::FUA } else { BioFlags::NONE };
    let result = match (cmd, append_data) {
        (IoCmd::Append, Some(data)) => tell.append(&rt, &data, flags).map(|at| (at, data.len() as u64, None)),
        (IoCmd::Read, _) => {
            tell.read(&rt, a, out_file, len.unwrap_or(0)).map(|(n, crc)| (Sector(a.offset / SECTOR_SIZE), n, Some(crc)))
        }
        _ => single::write(&rt, a.offset, &mut input, len, flags)
            .map(|n| (Sector(a.offset / SECTOR_SIZE), n, None))
            .map_err(|e| tell.write_failed(&rt, len, e)),
    };
    let flushed = if a.flush && result.is_ok() { rt.flush().map_err(|s| image::status_words(&rt, s)) } else { Ok(()) };
    rt.close().map_err(CliError::msg)?;
    let (at, moved, crc) = result?;
    say_done(cmd, a, at, moved);
    flushed.map_err(|why| CliError(format!("{name}: flush: {why}")))?;
    if a.json {
        let doc = serde_json::json!({
            "op": what,
            "offset": a.offset,
            "length": moved,
            "sector": at.0,
            "byte_offset": at.0 * SECTOR_SIZE,
            "crc32": crc,
        });
        outln!("{doc}");
    } else if cmd == IoCmd::Append {
        outln!("{}", at.0);
    }
    Ok(())
}

/// What took effect, said on standard error if standard output is lost.
fn say_done(cmd: IoCmd, a: &IoArgs, at: Sector, moved: u64) {
    match (cmd, &a.output) {
        (IoCmd::Write, _) => out::done(format!("wrote {moved} bytes at byte offset {}", a.offset)),
        (IoCmd::Append, _) => {
            out::done(format!("the append landed at sector {} (byte offset {})", at.0, at.0 * SECTOR_SIZE))
        }
        (IoCmd::Read, Some(p)) if p.as_os_str() != "-" => out::done(format!("read {moved} bytes into {}", p.display())),
        (IoCmd::Read, _) => {}
    }
}

/// What of a write landed, in words.
fn landed(len: Option<u64>, done: u64) -> String {
    match len {
        Some(l) => format!("wrote {done} of {l} bytes"),
        None => format!("wrote {done} bytes"),
    }
}

/// One command's request, and how its failures are told.
struct Tell<'a> {
    geo: &'a Geometry,
    /// The image or device.
    name: &'a str,
    what: &'a str,
    offset: u64,
    /// The input, by name.
    input: String,
}

impl Tell<'_> {
    /// The cause of a failed request, in words: the zone rule, or what the device
    /// knows of an EIO (the file system's ENOSPC or EFBIG under an image).
    fn cause(&self, rt: &Runtime, op: Op, pos: u64, n: u64, st: Status) -> String {
        image::fs_cause(rt, st).unwrap_or_else(|| explain(self.geo, op, Sector(pos / SECTOR_SIZE), n / SECTOR_SIZE, st))
    }

    fn fail(&self, len: Option<u64>, why: &str) -> CliError {
        let len = len.map_or_else(|| "the input".to_string(), format_bytes_exact);
        CliError(format!("{}: {} at byte offset {} ({len}): {why}", self.name, self.what, self.offset))
    }

    /// Where a zone's write pointer is now, in words (nothing for a conventional
    /// zone or none).
    fn wp_now(&self, zone: Option<ZoneInfo>) -> String {
        match zone {
            Some(z) if z.ztype != ZoneType::Conventional => format!(
                "; zone {}'s write pointer is now at byte offset {} (sector {}, {})",
                self.geo.zone_no(z.start).0,
                z.wp.0 * SECTOR_SIZE,
                z.wp.0,
                z.cond.name()
            ),
            _ => String::new(),
        }
    }

    /// A streamed write of `len` bytes (`None`: the input's) that stopped, in words:
    /// why, what landed, and where the zone's write pointer is.
    fn write_failed(&self, rt: &Runtime, len: Option<u64>, e: WriteError) -> CliError {
        let (input, landed, wp) = (&self.input, landed(len, e.done), self.wp_now(e.zone));
        let why = match e.kind {
            WriteFailure::Empty => return self.fail(len, &format!("EINVAL: length 0 ({input} is empty)")),
            WriteFailure::Input(err) => {
                return CliError(format!("{input}: {err}; {} at byte offset {}: {landed}", self.what, self.offset));
            }
            WriteFailure::InputAtEnd(err) => return CliError(format!("{input}: {err}")),
            WriteFailure::PastEnd => {
                format!("EINVAL: {input} is longer than the {} bytes up to the device end", e.done)
            }
            WriteFailure::Short { read } => {
                format!("{input} ended after {read} bytes, --length asks for {}", len.unwrap_or(0))
            }
            WriteFailure::NotBlock { read, lbs } => format!(
                "EINVAL: {input}'s length ({read} bytes) is not a multiple of the logical block size ({lbs} bytes)"
            ),
            WriteFailure::Refused { past_capacity: Some(c), .. } => format!(
                "EIO: the write goes past zone {}'s capacity ({} bytes: its writable part ends at byte offset {})",
                c.zone.0, c.capacity, c.end
            ),
            WriteFailure::Refused { status, pos, chunk, past_capacity: None } => {
                self.cause(rt, Op::Write, pos, chunk, status)
            }
        };
        self.fail(len, &format!("{why}; {landed}{wp}"))
    }

    /// An append refused before it was submitted, in words.
    fn append_refused(&self, e: AppendError) -> CliError {
        let (name, input) = (self.name, &self.input);
        CliError(match e {
            AppendError::NotZoned => format!("{name}: EOPNOTSUPP: zone append on a device that is not zoned"),
            AppendError::OverLimit { length, limit } => {
                let n = length.map_or_else(|| format!("more than {limit}"), |l| l.to_string());
                format!(
                    "{name}: EINVAL: zone append of {n} bytes is larger than the device's zone append limit ({limit} \
                     bytes); an append is never split: use write at the write pointer"
                )
            }
            AppendError::Input(err) => format!("{input}: {err}"),
            AppendError::Short { read, length } => {
                format!("{input}: the input has {read} bytes, --length asks for {length}")
            }
            AppendError::Empty => format!("{name}: EINVAL: length 0 ({input} is empty)"),
        })
    }

    /// One zone append; returns the sector it landed at.
    fn append(&self, rt: &Runtime, data: &[u8], flags: BioFlags) -> Result<Sector, CliError> {
        let n = data.len() as u64;
        single::append(rt, self.offset, data, flags)
            .map_err(|st| self.fail(Some(n), &self.cause(rt, Op::ZoneAppend, self.offset, n, st)))
    }

    /// Reads `len` bytes to the output (`file`, or standard output); returns the
    /// bytes read and their CRC32.
    fn read(&self, rt: &Runtime, a: &IoArgs, file: Option<std::fs::File>, len: u64) -> Result<(u64, u32), CliError> {
        let mut out: Box<dyn Write> = match (file, &a.output) {
            (Some(f), _) => Box::new(f),
            (None, None) if a.json => Box::new(std::io::sink()),
            _ => Box::new(std::io::stdout().lock()),
        };
        let out_name = a
            .output
            .as_ref()
            .filter(|p| p.as_os_str() != "-")
            .map_or("standard output".into(), |p| p.display().to_string());
        match single::read(rt, self.offset, len, &mut out) {
            Ok(r) => Ok((r.bytes, r.crc32)),
            Err(ReadError::Refused { status, pos, chunk, done }) => {
                let why = self.cause(rt, Op::Read, pos, chunk, status);
                Err(self.fail(Some(len), &format!("{why}; read {done} of {len} bytes")))
            }
            Err(ReadError::Output { error, done }) => {
                Err(CliError(format!("{out_name}: {error}; read {done} of {len} bytes")))
            }
            Err(ReadError::Flush(error)) => Err(CliError(format!("{out_name}: {error}"))),
        }
    }
}
