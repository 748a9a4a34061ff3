//! `zblk write|append|read IMG|DEV -o OFFSET -l LENGTH`: single I/Os through the
//! engine, on an image or a Linux zoned block device, for scripts and debugging.
//! Offsets and lengths are bytes, with size suffixes. On a block device an append is
//! zblk's emulation (the kernel has no zone append for userspace): a write at the
//! write pointer zblk's plug holds, and the sector it landed at.
//!
//! Reads and writes of any length stream through one buffer of at most [`CHUNK`]
//! bytes (constant memory), the input read up to `--length` and no further. A
//! write goes in chunks, in order, at the write pointer, as the kernel's pieces of
//! a split BIO do: when one fails, the message says how many bytes landed and
//! where the zone's write pointer is. An append is one request, never split, so it
//! is refused (EINVAL, the limit in words) when longer than the device's zone
//! append limit, as the kernel refuses it.

use crate::explain::explain;
use crate::out::{self, outln};
use crate::{CliError, image, output, parse};
use clap::Args;
use std::io::{Read, Write};
use std::path::PathBuf;
use zblk_core::bio::{BioFlags, Op, Status};
use zblk_core::engine::EngineConfig;
use zblk_core::geometry::Geometry;
use zblk_core::rule::Rule;
use zblk_core::units::{SECTOR_SIZE, Sector, format_bytes_exact};
use zblk_core::zone::{ZoneInfo, ZoneType};
use zblk_runtime::{AlignedBuf, Backend, Runtime};

/// A single I/O.
#[derive(Args, Debug)]
pub struct IoArgs {
    /// The image, or a Linux zoned block device (e.g. /dev/nullb0, /dev/nvme0n1).
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

/// The largest request a streamed read or write makes (its one buffer).
const CHUNK: u64 = 4 << 20;

/// Where a write's or an append's data comes from.
enum Input {
    /// Every byte the same.
    Pattern(u8),
    /// A file or standard input, read as the data goes.
    Reader(Box<dyn Read>),
}

/// The input and its length when known up front (`--length`, or a regular file's
/// size); `None`: read to its end.
fn open_input(a: &IoArgs) -> Result<(Input, Option<u64>), CliError> {
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

/// Fills `buf` from the input as far as it goes; returns the bytes read (short only
/// at its end).
fn fill(input: &mut Input, buf: &mut [u8]) -> std::io::Result<usize> {
    match input {
        Input::Pattern(_) => Ok(buf.len()),
        Input::Reader(r) => {
            let mut got = 0;
            while got < buf.len() {
                match r.read(&mut buf[got..]) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(got)
        }
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
    if a.length == Some(0) {
        return Err(CliError(format!("{name}: EINVAL: length 0")));
    }
    if a.offset % SECTOR_SIZE != 0 {
        return Err(CliError(format!("{name}: EINVAL: offset {} is not a multiple of 512 bytes", a.offset)));
    }
    if cmd == IoCmd::Read && a.length.is_none() {
        return Err(CliError::msg("read needs --length"));
    }
    Ok(())
}

/// The input and its length, once the range is known good for the device: on
/// logical blocks and not past its end (checked before anything moves: a length
/// past the device end is the device's EINVAL for the whole request, not a partial
/// write).
fn checked_input(cmd: IoCmd, a: &IoArgs, name: &str, geo: &Geometry) -> Result<(Input, Option<u64>), CliError> {
    let dev_bytes = geo.nr_sectors() * SECTOR_SIZE;
    let lbs = u64::from(geo.lbs_bytes());
    if a.offset % lbs != 0 {
        return Err(CliError(format!(
            "{name}: EINVAL: offset {} is not a multiple of the logical block size ({lbs} bytes)",
            a.offset
        )));
    }
    let beyond = |len: u64| a.offset.checked_add(len).is_none_or(|end| end > dev_bytes);
    let (input, len) = if cmd == IoCmd::Read { (Input::Pattern(0), a.length) } else { open_input(a)? };
    if let Some(l) = len.filter(|&l| beyond(l)) {
        return Err(CliError(format!(
            "{name}: EINVAL: offset {} + length {l} is beyond the device end ({dev_bytes} bytes)",
            a.offset
        )));
    }
    if let Some(l) = len.filter(|&l| l % lbs != 0) {
        return Err(CliError(format!(
            "{name}: EINVAL: length {l} is not a multiple of the logical block size ({lbs} bytes)"
        )));
    }
    if len == Some(0) {
        return Err(CliError(format!("{name}: EINVAL: length 0 ({} is empty)", input_name(a))));
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
    // An append is one request: its data is read whole (at most the append limit,
    // checked before the runtime starts) and never split.
    let append_data = if cmd == IoCmd::Append { Some(append_data(a, &geo, &mut input, len)?) } else { None };
    // Opened once every argument is known good, and before anything is read: never an
    // image (this one or another), a device, or a file in use (see `output`).
    let out_file = match a.output.as_ref().filter(|p| p.as_os_str() != "-") {
        Some(p) => Some(output::create(p, img.image())?),
        None => None,
    };
    let engine = EngineConfig { policy: img.default_policy(), ..EngineConfig::default() };
    let rt = img.start(engine, Backend::Auto)?;
    let flags = if a.fua { BioFlags::FUA } else { BioFlags::NONE };
    let io = Io { rt: &rt, geo: &geo, name: &name, what, offset: a.offset };
    let result = match (cmd, append_data) {
        (IoCmd::Append, Some(data)) => io.append(&data, flags).map(|at| (at, data.len() as u64, None)),
        (IoCmd::Read, _) => {
            io.read(a, out_file, len.unwrap_or(0)).map(|(n, crc)| (Sector(a.offset / SECTOR_SIZE), n, Some(crc)))
        }
        _ => io.write(&mut input, len, flags, &input_name(a)).map(|n| (Sector(a.offset / SECTOR_SIZE), n, None)),
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

/// An append's data, whole: refused as the kernel refuses an append longer than
/// the device's zone append limit, before anything is read past that limit.
fn append_data(a: &IoArgs, geo: &Geometry, input: &mut Input, len: Option<u64>) -> Result<Vec<u8>, CliError> {
    let name = a.image.display();
    if !geo.is_zoned() {
        return Err(CliError(format!("{name}: EOPNOTSUPP: zone append on a device that is not zoned")));
    }
    let limit = u64::from(geo.append_limit_sectors()) * SECTOR_SIZE;
    let too_long = |n: &dyn std::fmt::Display| {
        CliError(format!(
            "{name}: EINVAL: zone append of {n} bytes is larger than the device's zone append limit ({limit} bytes); \
             an append is never split: use write at the write pointer"
        ))
    };
    if let Some(l) = len.filter(|&l| l > limit) {
        return Err(too_long(&l));
    }
    let mut data = vec![0u8; len.unwrap_or(limit + 1) as usize];
    if let Input::Pattern(b) = input {
        data.fill(*b);
        return Ok(data);
    }
    let got = fill(input, &mut data).map_err(|e| CliError(format!("{}: {e}", input_name(a))))?;
    if got as u64 > limit {
        return Err(too_long(&format!("more than {limit}")));
    }
    if let Some(l) = len.filter(|&l| got as u64 != l) {
        return Err(CliError(format!("{}: the input has {got} bytes, --length asks for {l}", input_name(a))));
    }
    data.truncate(got);
    if data.is_empty() {
        return Err(CliError(format!("{name}: EINVAL: length 0 ({} is empty)", input_name(a))));
    }
    Ok(data)
}

/// What of a write landed, in words.
fn landed(len: Option<u64>, done: u64) -> String {
    match len {
        Some(l) => format!("wrote {done} of {l} bytes"),
        None => format!("wrote {done} bytes"),
    }
}

/// One command's I/O on a running runtime, and how it tells a failure.
struct Io<'a> {
    rt: &'a Runtime,
    geo: &'a Geometry,
    name: &'a str,
    what: &'a str,
    offset: u64,
}

impl Io<'_> {
    /// The zone holding byte `pos` as the device reports it now (`None` for a
    /// regular device, or if the report fails).
    fn zone_at(&self, pos: u64) -> Option<ZoneInfo> {
        if !self.geo.is_zoned() {
            return None;
        }
        self.rt.report_zone(Sector(pos / SECTOR_SIZE)).ok()
    }

    /// The cause of a failed request, in words: the zone rule, or what the device
    /// knows of an EIO (the file system's ENOSPC or EFBIG under an image).
    fn cause(&self, op: Op, pos: u64, n: u64, st: Status) -> String {
        image::fs_cause(self.rt, st)
            .unwrap_or_else(|| explain(self.geo, op, Sector(pos / SECTOR_SIZE), n / SECTOR_SIZE, st))
    }

    fn fail(&self, len: Option<u64>, why: &str) -> CliError {
        let len = len.map_or_else(|| "the input".to_string(), format_bytes_exact);
        CliError(format!("{}: {} at byte offset {} ({len}): {why}", self.name, self.what, self.offset))
    }

    /// Where a zone's write pointer is now, in words.
    fn wp_now(&self, pos: u64) -> String {
        match self.zone_at(pos) {
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

    /// Writes the input at the offset in chunks that never cross a zone, each at the
    /// write pointer the one before left. Returns the bytes written.
    fn write(&self, input: &mut Input, len: Option<u64>, flags: BioFlags, input_name: &str) -> Result<u64, CliError> {
        let dev_bytes = self.geo.nr_sectors() * SECTOR_SIZE;
        let first = len.unwrap_or(CHUNK).min(CHUNK) as usize;
        let mut buf = AlignedBuf::zeroed(first);
        if let Input::Pattern(b) = input {
            buf.fill(*b);
        }
        let (mut pos, mut done) = (self.offset, 0u64);
        let landed = |done: u64| landed(len, done);
        loop {
            let left = len.map_or(u64::MAX, |l| l - done);
            if left == 0 {
                return Ok(done);
            }
            if pos == dev_bytes {
                // Only an input of unknown length gets here: is there more of it?
                let more = fill(input, &mut buf[..1]).map_err(|e| CliError(format!("{input_name}: {e}")))?;
                if more == 0 {
                    return Ok(done);
                }
                let why = format!("EINVAL: {input_name} is longer than the {done} bytes up to the device end");
                return Err(self.fail(len, &format!("{why}; {}{}", landed(done), self.wp_now(pos - 1))));
            }
            let zone_end = if self.geo.is_zoned() {
                let z = self.geo.zone_no(Sector(pos / SECTOR_SIZE));
                (self.geo.zone_start(z).0 + self.geo.zone_len(z)) * SECTOR_SIZE
            } else {
                dev_bytes
            };
            let n = left.min(CHUNK).min(zone_end - pos) as usize;
            let got = fill(input, &mut buf[..n]).map_err(|e| {
                CliError(format!("{input_name}: {e}; {} at byte offset {}: {}", self.what, self.offset, landed(done)))
            })?;
            if got < n && len.is_some() {
                let l = len.unwrap_or(0);
                let why = format!("{input_name} ended after {} bytes, --length asks for {l}", done + got as u64);
                return Err(self.fail(len, &format!("{why}; {}{}", landed(done), self.wp_now(pos.max(1) - 1))));
            }
            if got == 0 {
                if done == 0 {
                    return Err(self.fail(len, &format!("EINVAL: length 0 ({input_name} is empty)")));
                }
                return Ok(done);
            }
            let lbs = u64::from(self.geo.lbs_bytes());
            if got as u64 % lbs != 0 {
                let why = format!(
                    "EINVAL: {input_name}'s length ({} bytes) is not a multiple of the logical block size ({lbs} bytes)",
                    done + got as u64
                );
                return Err(self.fail(len, &format!("{why}; {}{}", landed(done), self.wp_now(pos.max(1) - 1))));
            }
            let sector = Sector(pos / SECTOR_SIZE);
            if let Err(st) = self.rt.write_at_flags(sector, &buf[..got], flags) {
                return Err(self.write_failed(st, pos, got as u64, len, done));
            }
            done += got as u64;
            pos += got as u64;
            if got < n {
                return Ok(done);
            }
        }
    }

    /// A chunk of `got` bytes at `pos` refused with `st`, after `done` bytes of the
    /// command landed: what failed and what of the chunk landed.
    fn write_failed(&self, st: Status, pos: u64, got: u64, len: Option<u64>, done: u64) -> CliError {
        // What of this chunk landed: the pieces before the one refused. The rule says
        // where they ended when the write ran into the capacity; otherwise the write
        // pointer tells, unless the chunk was refused for not starting there.
        let part = match (st.rule(), self.zone_at(pos)) {
            (Some(Rule::PastCapacity { wp }), _) => (wp.0 * SECTOR_SIZE).saturating_sub(pos),
            (Some(Rule::NotAtWp { .. } | Rule::ZoneFull), _) => 0,
            (_, Some(z)) if z.ztype != ZoneType::Conventional => {
                (z.wp.min(z.start + z.capacity).0 * SECTOR_SIZE).saturating_sub(pos)
            }
            _ => 0,
        }
        .min(got);
        let why = match self.past_capacity(st, pos) {
            Some(why) => why,
            None => self.cause(Op::Write, pos, got, st),
        };
        self.fail(len, &format!("{why}; {}{}", landed(len, done + part), self.wp_now(pos)))
    }

    /// Why a write refused at `pos` ran past its zone's capacity, when it did: the
    /// rule says so, or the zone is one this command's earlier chunks filled.
    fn past_capacity(&self, st: Status, pos: u64) -> Option<String> {
        if !self.geo.is_zoned() {
            return None;
        }
        let z = self.geo.zone_no(Sector(pos / SECTOR_SIZE));
        let zone_start = self.geo.zone_start(z).0 * SECTOR_SIZE;
        let past = match st.rule() {
            Some(Rule::PastCapacity { .. }) => true,
            Some(Rule::ZoneFull) => self.offset < pos && zone_start < pos,
            _ => false,
        };
        let cap = self.geo.zone_capacity(z) * SECTOR_SIZE;
        past.then(|| {
            format!(
                "EIO: the write goes past zone {}'s capacity ({cap} bytes: its writable part ends at byte offset {})",
                z.0,
                zone_start + cap
            )
        })
    }

    /// One zone append; returns the sector it landed at.
    fn append(&self, data: &[u8], flags: BioFlags) -> Result<Sector, CliError> {
        let buf = AlignedBuf::from_slice(data);
        self.rt.append_flags(Sector(self.offset / SECTOR_SIZE), &buf, flags).map_err(|st| {
            let why = self.cause(Op::ZoneAppend, self.offset, data.len() as u64, st);
            self.fail(Some(data.len() as u64), &why)
        })
    }

    /// Reads `len` bytes in chunks to the output (`file`, or standard output);
    /// returns the bytes read and their CRC32.
    fn read(&self, a: &IoArgs, file: Option<std::fs::File>, len: u64) -> Result<(u64, u32), CliError> {
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
        let mut buf = AlignedBuf::zeroed(len.min(CHUNK) as usize);
        let mut crc = crc32fast::Hasher::new();
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(CHUNK) as usize;
            let pos = self.offset + done;
            if let Err(st) = self.rt.read_at(Sector(pos / SECTOR_SIZE), &mut buf[..n]) {
                let why = self.cause(Op::Read, pos, n as u64, st);
                return Err(self.fail(Some(len), &format!("{why}; read {done} of {len} bytes")));
            }
            crc.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(|e| CliError(format!("{out_name}: {e}; read {done} of {len} bytes")))?;
            done += n as u64;
        }
        out.flush().map_err(|e| CliError(format!("{out_name}: {e}")))?;
        Ok((done, crc.finalize()))
    }
}
