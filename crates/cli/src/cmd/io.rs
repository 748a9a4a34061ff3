//! `zblk write|append|read IMG|DEV -o OFFSET -l LENGTH`: single I/Os through the
//! engine, on an image or a Linux zoned block device, for scripts and debugging.
//! Offsets and lengths are bytes, with size suffixes. On a block device an append is
//! zblk's emulation (the kernel has no zone append for userspace): a write at the
//! write pointer zblk's plug holds, and the sector it landed at.

use crate::{CliError, image, parse};
use clap::Args;
use std::io::{Read, Write};
use std::path::PathBuf;
use zblk_core::bio::BioFlags;
use zblk_core::engine::EngineConfig;
use zblk_core::units::{SECTOR_SIZE, Sector, format_bytes_exact};
use zblk_runtime::Backend;

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

/// The most one single I/O command moves: its buffer is held whole in memory.
const MAX_SINGLE_IO: u64 = 1 << 30;

/// Reads the input, up to `--length` bytes and never more (an endless input such as
/// /dev/zero is read only that far), and at most [`MAX_SINGLE_IO`].
fn read_bounded(mut r: impl Read, what: &str, limit: Option<u64>) -> Result<Vec<u8>, CliError> {
    let cap = limit.unwrap_or(MAX_SINGLE_IO + 1);
    let mut v = Vec::new();
    r.by_ref().take(cap).read_to_end(&mut v).map_err(|e| CliError(format!("{what}: {e}")))?;
    if limit.is_none() && v.len() as u64 > MAX_SINGLE_IO {
        return Err(CliError(format!(
            "{what}: the input is longer than {MAX_SINGLE_IO} bytes, the most one write or append moves; give \
             --length"
        )));
    }
    Ok(v)
}

fn input_data(a: &IoArgs) -> Result<Vec<u8>, CliError> {
    let mut data = match (&a.input, a.pattern) {
        (Some(p), _) if p.as_os_str() == "-" => read_bounded(std::io::stdin().lock(), "standard input", a.length)?,
        (Some(p), _) => {
            let f = std::fs::File::open(p).map_err(|e| CliError(format!("{}: {e}", p.display())))?;
            read_bounded(f, &p.display().to_string(), a.length)?
        }
        (None, Some(b)) => {
            let len = a.length.ok_or_else(|| CliError::msg("--pattern needs --length"))?;
            vec![b; usize::try_from(len).map_err(|_| CliError::msg("--length too large"))?]
        }
        (None, None) => return Err(CliError::msg("give the data with --input FILE (- for stdin) or --pattern BYTE")),
    };
    if let Some(len) = a.length {
        let len = usize::try_from(len).map_err(|_| CliError::msg("--length too large"))?;
        if data.len() < len {
            return Err(CliError(format!("the input has {} bytes, --length asks for {len}", data.len())));
        }
        data.truncate(len);
    }
    Ok(data)
}

/// Runs one single-I/O command.
pub fn run(cmd: IoCmd, a: &IoArgs) -> Result<(), CliError> {
    let name = a.image.display().to_string();
    if cmd == IoCmd::Read && (a.input.is_some() || a.pattern.is_some() || a.fua) {
        return Err(CliError::msg("read takes no --input, --pattern or --fua"));
    }
    if cmd != IoCmd::Read && a.output.is_some() {
        return Err(CliError::msg("--output is for read"));
    }
    if a.length == Some(0) {
        return Err(CliError(format!("{name}: EINVAL: length 0")));
    }
    if let Some(l) = a.length.filter(|&l| l > MAX_SINGLE_IO) {
        return Err(CliError(format!(
            "{name}: --length {l}: one command moves at most {MAX_SINGLE_IO} bytes (its buffer is held in memory)"
        )));
    }
    if let Some(out) = a.output.as_ref().filter(|p| p.as_os_str() != "-") {
        use std::os::unix::fs::MetadataExt;
        if let (Ok(o), Ok(i)) = (std::fs::metadata(out), std::fs::metadata(&a.image)) {
            if (o.dev(), o.ino()) == (i.dev(), i.ino()) {
                return Err(CliError(format!("{}: --output is the image itself: refused", out.display())));
            }
        }
    }
    if a.offset % SECTOR_SIZE != 0 {
        return Err(CliError(format!("{name}: EINVAL: offset {} is not a multiple of 512 bytes", a.offset)));
    }
    let img = image::Target::open(&a.image, cmd == IoCmd::Read)?;
    let dev_bytes = img.geo().nr_sectors() * SECTOR_SIZE;
    // Checked before any buffer is allocated: a length past the device end is the
    // device's EINVAL, not an allocation of that size.
    let beyond = |len: u64| a.offset.checked_add(len).is_none_or(|end| end > dev_bytes);
    if a.length.is_some_and(beyond) {
        return Err(CliError(format!(
            "{name}: EINVAL: offset {} + length {} is beyond the device end ({dev_bytes} bytes)",
            a.offset,
            a.length.unwrap_or(0)
        )));
    }
    let data = if cmd == IoCmd::Read { None } else { Some(input_data(a)?) };
    let len = match (&data, a.length) {
        (Some(d), _) => d.len() as u64,
        (None, Some(l)) => l,
        (None, None) => return Err(CliError::msg("read needs --length")),
    };
    let engine = EngineConfig { policy: img.default_policy(), ..EngineConfig::default() };
    let rt = img.start(engine, Backend::Auto)?;
    let sector = Sector(a.offset / SECTOR_SIZE);
    let flags = if a.fua { BioFlags::FUA } else { BioFlags::NONE };
    let mut out = vec![0u8; if cmd == IoCmd::Read { usize::try_from(len).unwrap_or(0) } else { 0 }];
    let result = match cmd {
        IoCmd::Write => rt.write_at_flags(sector, data.as_deref().unwrap_or_default(), flags).map(|()| sector),
        IoCmd::Append => rt.append_flags(sector, data.as_deref().unwrap_or_default(), flags),
        IoCmd::Read => rt.read_at(sector, &mut out).map(|()| sector),
    };
    let flushed = if a.flush && result.is_ok() { rt.flush() } else { Ok(()) };
    rt.close().map_err(CliError::msg)?;
    let what = match cmd {
        IoCmd::Write => "write",
        IoCmd::Append => "append",
        IoCmd::Read => "read",
    };
    let at = result.map_err(|s| {
        CliError(format!(
            "{name}: {what} at byte offset {} ({}): {}: {s}",
            a.offset,
            format_bytes_exact(len),
            s.errno_name()
        ))
    })?;
    flushed.map_err(|s| CliError(format!("{name}: flush: {}: {s}", s.errno_name())))?;
    if cmd == IoCmd::Read {
        write_output(a, &out)?;
    }
    if a.json {
        let doc = serde_json::json!({
            "op": what,
            "offset": a.offset,
            "length": len,
            "sector": at.0,
            "byte_offset": at.0 * SECTOR_SIZE,
            "crc32": (cmd == IoCmd::Read).then(|| crc32fast::hash(&out)),
        });
        println!("{doc}");
    } else if cmd == IoCmd::Append {
        println!("{}", at.0);
    }
    Ok(())
}

fn write_output(a: &IoArgs, out: &[u8]) -> Result<(), CliError> {
    match &a.output {
        Some(p) if p.as_os_str() != "-" => {
            std::fs::write(p, out).map_err(|e| CliError(format!("{}: {e}", p.display())))
        }
        None if a.json => Ok(()),
        _ => std::io::stdout().write_all(out).map_err(|e| CliError(format!("standard output: {e}"))),
    }
}
