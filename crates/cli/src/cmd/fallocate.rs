//! `zblk fallocate -w -o OFFSET -l LENGTH IMAGE`: zero a range of an image with
//! WRITE_ZEROES, with util-linux fallocate's option names, and say how it was done
//! and how long it took.

use crate::out::{self, outln};
use crate::{CliError, image, parse};
use clap::Args;
use std::path::PathBuf;
use std::time::Instant;
use zblk_core::bio::{Status, StatusCode};
use zblk_core::engine::{EngineConfig, ZeroingMethod};
use zblk_core::geometry::Geometry;
use zblk_core::rule::Rule;
use zblk_core::units::{SECTOR_SIZE, Sector, format_bytes_exact};
use zblk_core::zone::ZoneType;
use zblk_runtime::single::{self, RangeError};
use zblk_runtime::{Backend, Runtime, ZeroingFlags, ZeroingReport};

const ABOUT: &str = "\
Zeroes a range of an image as fallocate(1) zeroes a range of a block device. \
-w/--write-zeroes sends WRITE_ZEROES through the engine (split at write_zeroes_max_bytes \
and at zone boundaries; on a sequential zone the range must start at the write pointer, \
which it moves, as a write). -w is FALLOC_FL_WRITE_ZEROES and follows Linux's rule for \
it on a block device: where the image can unmap (write_zeroes_unmap_max_bytes is not 0: \
the host file system zeroes with fallocate) the range is deallocated, a metadata \
operation; where it cannot (the attribute is 0, by the image or by --set), -w fails with \
EOPNOTSUPP, as fallocate -w on such a Linux block device does. With --nounmap the \
zeroes are written as data. -z/--zero-range is what fallocate -z does on a block \
device: WRITE_ZEROES with NOUNMAP, the zeroes written, on any image.

Offsets and lengths are bytes (suffixes k, M, G, T: powers of 1024) and must be \
multiples of the logical block size. The zeroes are committed (flushed) before the \
command ends; the times of both are printed. `zblk info IMAGE` shows the zeroing limits \
and method.

Other fallocate modes (allocation, -p, -c, -i, -d, -x) are refused: a block device has \
no file size or extents to change.";

/// `zblk fallocate`.
#[derive(Args, Debug)]
#[command(after_help = ABOUT)]
pub struct FallocateArgs {
    /// The image.
    pub image: PathBuf,
    /// Waiting for an image another process holds.
    #[command(flatten)]
    pub lock: crate::image::WaitArg,
    /// Zero the range with WRITE_ZEROES, unmapped where the image can.
    #[arg(short = 'w', long)]
    pub write_zeroes: bool,
    /// Zero the range by writing zeroes (WRITE_ZEROES with NOUNMAP), as fallocate -z
    /// on a block device; the same as -w --nounmap.
    #[arg(short = 'z', long)]
    pub zero_range: bool,
    /// Byte offset of the range.
    #[arg(short = 'o', long, value_parser = parse::size, default_value = "0")]
    pub offset: u64,
    /// Length of the range in bytes.
    #[arg(short = 'l', long, value_parser = parse::size)]
    pub length: u64,
    /// Never unmap: the image writes the zeroes as data (REQ_NOUNMAP).
    #[arg(long)]
    pub nounmap: bool,
    /// Set a queue attribute before zeroing, as writing /sys/block/<dev>/queue/NAME
    /// would (for this command only): write_zeroes_unmap_max_bytes=0 disables unmap,
    /// =<write_zeroes_unmap_max_hw_bytes> enables it.
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Also print the limits, the attribute, the probe and the I/O driver.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Accepted with -z (an image never changes size); refused with -w, as
    /// fallocate(2) refuses it with FALLOC_FL_WRITE_ZEROES.
    #[arg(short = 'n', long)]
    pub keep_size: bool,
    #[arg(short = 'p', long, hide = true)]
    punch_hole: bool,
    #[arg(short = 'c', long, hide = true)]
    collapse_range: bool,
    #[arg(short = 'i', long, hide = true)]
    insert_range: bool,
    #[arg(short = 'd', long, hide = true)]
    dig_holes: bool,
    #[arg(short = 'x', long, hide = true)]
    posix: bool,
}

/// The attributes `--set` knows.
const SETTABLE: &str = "write_zeroes_unmap_max_bytes";

fn check_mode(a: &FallocateArgs) -> Result<(), CliError> {
    let refused = [
        (a.punch_hole, "-p/--punch-hole"),
        (a.collapse_range, "-c/--collapse-range"),
        (a.insert_range, "-i/--insert-range"),
        (a.dig_holes, "-d/--dig-holes"),
        (a.posix, "-x/--posix"),
    ];
    if let Some((_, name)) = refused.iter().find(|(on, _)| *on) {
        return Err(CliError(format!(
            "{name} is not supported on zblk images: only -w/--write-zeroes and -z/--zero-range are"
        )));
    }
    match (a.write_zeroes, a.zero_range) {
        (true, true) => Err(CliError::msg("-w/--write-zeroes and -z/--zero-range are exclusive")),
        (false, false) => Err(CliError::msg(
            "no mode given: use -w/--write-zeroes (or -z/--zero-range); plain allocation means nothing on a block \
             device (fallocate(2) on one fails with EOPNOTSUPP)",
        )),
        (true, false) if a.keep_size => Err(CliError::msg(
            "-n/--keep-size cannot be used with -w/--write-zeroes (fallocate(2) refuses the combination)",
        )),
        _ => Ok(()),
    }
}

/// Parses `NAME=VALUE` of `--set`.
fn parse_set(text: &str) -> Result<(String, u64), CliError> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| CliError(format!("--set {text}: expected NAME=VALUE (e.g. {SETTABLE}=0)")))?;
    if name != SETTABLE {
        return Err(CliError(format!("--set {text}: unknown or read-only attribute '{name}' (settable: {SETTABLE})")));
    }
    let v = parse::size(value).map_err(|e| CliError(format!("--set {text}: {e}")))?;
    Ok((name.to_string(), v))
}

/// What went wrong, in words: the errno, the status and, for the zoned refusals, the
/// rule that refused the range (carried in the status from where it was decided);
/// for an EIO under an image, the file system's errno (ENOSPC, EFBIG, EDQUOT, ...)
/// and where the zone's write pointer is now.
fn explain(rt: &Runtime, offset: u64, status: Status) -> String {
    let geo = rt.geometry();
    let base = image::status_words(rt, status);
    if status == Status::IoErr {
        let zone = rt.report_zone(Sector(offset / SECTOR_SIZE)).ok();
        return match zone {
            Some(z) if z.ztype != ZoneType::Conventional => format!(
                "{base}; zone {}'s write pointer is now at byte offset {} (sector {}, {})",
                geo.zone_no(z.start).0,
                z.wp.0 * SECTOR_SIZE,
                z.wp.0,
                z.cond
            ),
            _ => base,
        };
    }
    match (status.rule(), status.code()) {
        (Some(Rule::NotAtWp { wp }), _) => format!(
            "{base}: on a sequential zone the range must start at the zone's write pointer, byte {} (sector {}); \
             it starts at byte {offset}",
            wp.0 * SECTOR_SIZE,
            wp.0,
        ),
        (Some(Rule::PastCapacity { wp }), _) => {
            let z = geo.zone_no(wp);
            format!(
                "{base}: the range runs past the capacity of a zone ({} from byte {})",
                format_bytes_exact(geo.zone_capacity(z) * SECTOR_SIZE),
                geo.zone_start(z).0 * SECTOR_SIZE
            )
        }
        (Some(Rule::ZoneFull), _) => format!("{base}: the range runs into a full zone"),
        (_, StatusCode::ZoneOpenResource | StatusCode::ZoneActiveResource) => {
            format!("{base}: the range needs a zone opened beyond the image's open or active zone limit")
        }
        _ => base,
    }
}

/// What a zeroing did, for its report.
struct Zeroed {
    report: ZeroingReport,
    nounmap: bool,
    zeroing_s: f64,
    commit_s: f64,
    geo: Geometry,
    unmap_attr: u64,
    backend: String,
}

/// Runs `zblk fallocate`.
pub fn run(a: &FallocateArgs) -> Result<(), CliError> {
    check_mode(a)?;
    let sets = a.set.iter().map(|s| parse_set(s)).collect::<Result<Vec<_>, _>>()?;
    let name = a.image.display().to_string();
    if a.length == 0 {
        return Err(crate::explain::range(&name, a.offset, 0, RangeError::LengthZero, ": nothing to zero"));
    }
    let img = image::open(&a.image, false, a.lock)?;
    // Refused before the image is touched: not on logical blocks, or past the
    // device's end (the kernel's EINVAL for the whole request).
    single::check_range(img.geo(), a.offset, a.length)
        .map_err(|e| crate::explain::range(&name, a.offset, a.length, e, ": nothing to zero"))?;
    let probe = img.zeroing_probe().detail.clone();
    let engine = EngineConfig { policy: image::default_policy(&img), ..EngineConfig::default() };
    let rt = image::start(img, engine, Backend::Auto)?;
    let z = zero(a, &name, rt, &sets)?;
    out::done(format!("zeroed {} bytes at byte offset {} of {name}", a.length, a.offset));
    print(a, &name, &probe, &z);
    Ok(())
}

/// Sets the attributes asked, zeroes the range and commits; closes the runtime.
fn zero(a: &FallocateArgs, name: &str, rt: Runtime, sets: &[(String, u64)]) -> Result<Zeroed, CliError> {
    for (_, value) in sets {
        // The engine's refusal names the attribute, the value and the limit.
        if let Err(e) = rt.set_write_zeroes_unmap_max_bytes(*value) {
            rt.close().map_err(CliError::msg)?;
            return Err(CliError(format!("{name}: --set: {e}")));
        }
    }
    let nounmap = a.nounmap || a.zero_range;
    let geo = rt.geometry().clone();
    let unmap_attr = rt.write_zeroes_unmap_max_bytes();
    // blkdev_fallocate(): FALLOC_FL_WRITE_ZEROES on a device that does not unmap
    // (write_zeroes_unmap_max_bytes 0) is refused before anything is written.
    if !nounmap && unmap_attr == 0 {
        let hw = u64::from(geo.max_hw_wzeroes_unmap_sectors()) * SECTOR_SIZE;
        rt.close().map_err(CliError::msg)?;
        return Err(CliError(format!(
            "{name}: EOPNOTSUPP: -w/--write-zeroes (FALLOC_FL_WRITE_ZEROES) needs a device that unmaps, and this \
             image does not (write_zeroes_unmap_max_bytes 0, write_zeroes_unmap_max_hw_bytes {hw}): Linux refuses \
             it so on a block device; -z/--zero-range writes the zeroes"
        )));
    }
    let t0 = Instant::now();
    let result = rt.write_zeroes(
        Sector(a.offset / SECTOR_SIZE),
        a.length / SECTOR_SIZE,
        ZeroingFlags { nounmap, no_fallback: false },
    );
    let t1 = Instant::now();
    let flushed = if result.is_ok() { rt.flush().map_err(|s| image::status_words(&rt, s)) } else { Ok(()) };
    let t2 = Instant::now();
    let failure = result.as_ref().err().map(|&s| explain(&rt, a.offset, s));
    let backend = rt.backend().to_string();
    rt.close().map_err(CliError::msg)?;
    let report = result.map_err(|_| {
        CliError(format!(
            "{name}: write zeroes at byte offset {} ({}): {}",
            a.offset,
            format_bytes_exact(a.length),
            failure.unwrap_or_default()
        ))
    })?;
    flushed.map_err(|why| CliError(format!("{name}: commit: {why}")))?;
    let (zeroing_s, commit_s) = ((t1 - t0).as_secs_f64(), (t2 - t1).as_secs_f64());
    Ok(Zeroed { report, nounmap, zeroing_s, commit_s, geo, unmap_attr, backend })
}

/// The zeroing's report: a line (and the attributes with `--verbose`), or JSON.
fn print(a: &FallocateArgs, name: &str, probe: &str, z: &Zeroed) {
    let Zeroed { report, nounmap, zeroing_s, commit_s, geo, unmap_attr, backend } = z;
    let file_method = report.device_method.map_or("zero buffers (ordinary writes)", |m| m.name());
    if a.json {
        let doc = serde_json::json!({
            "image": name,
            "op": if a.zero_range { "zero-range" } else { "write-zeroes" },
            "offset": a.offset,
            "length": a.length,
            "nounmap": nounmap,
            "method": report.method.name(),
            "file_method": report.device_method.map(|m| m.name()),
            "seconds": zeroing_s + commit_s,
            "zeroing_seconds": zeroing_s,
            "commit_seconds": commit_s,
            "write_zeroes_max_bytes": u64::from(geo.max_write_zeroes_sectors()) * SECTOR_SIZE,
            "write_zeroes_unmap_max_hw_bytes": u64::from(geo.max_hw_wzeroes_unmap_sectors()) * SECTOR_SIZE,
            "write_zeroes_unmap_max_bytes": unmap_attr,
            "probe": probe,
            "backend": backend,
        });
        outln!("{doc}");
        return;
    }
    let how = match report.method {
        ZeroingMethod::Unmap => format!("unmapped ({file_method})"),
        ZeroingMethod::WriteZeroes => format!("written as zeroes ({file_method})"),
        ZeroingMethod::ZeroBuffers => "written as zero buffers (the image has no WRITE_ZEROES)".to_string(),
    };
    outln!(
        "{name}: {} ({} bytes) at offset {} zeroed: {how}, in {:.6} s + commit {:.6} s",
        format_bytes_exact(a.length),
        a.length,
        a.offset,
        zeroing_s,
        commit_s
    );
    if a.verbose {
        outln!("  method:                          {}", report.method.name());
        outln!("  write_zeroes_max_bytes:          {}", u64::from(geo.max_write_zeroes_sectors()) * SECTOR_SIZE);
        outln!("  write_zeroes_unmap_max_hw_bytes: {}", u64::from(geo.max_hw_wzeroes_unmap_sectors()) * SECTOR_SIZE);
        outln!("  write_zeroes_unmap_max_bytes:    {unmap_attr}");
        outln!("  nounmap:                         {}", u8::from(*nounmap));
        outln!("  probe:                           {probe}");
        outln!("  I/O driver:                      {backend}");
    }
}
