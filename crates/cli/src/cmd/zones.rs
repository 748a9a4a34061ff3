//! `zblk report|capacity|reset|open|close|finish IMG`: util-linux `blkzone`'s
//! commands, options (`-o/--offset`, `-l/--length`, `-c/--count`, `-v/--verbose`, in
//! 512-byte sectors) and output, on a zoned image (through the engine), a Linux
//! zoned block device (through the kernel's zone ioctls, as blkzone) or an NVMe ZNS
//! generic device (Zone Management Send and Receive through NVMe passthrough).

use crate::out::{self, outln};
use crate::{CliError, image};
use clap::Args;
use std::path::PathBuf;
use zblk_core::bio::Op;
use zblk_core::engine::EngineConfig;
use zblk_core::units::{Sector, ZoneNo};
use zblk_dev::file::FileImage;
use zblk_dev::linux::{self, RawZone, ZoneCtl};
use zblk_dev::nvme::{self, NvmeZns, cmd::ZoneAction};
use zblk_runtime::Backend;

/// blkzone's options.
#[derive(Args, Debug)]
pub struct ZoneArgs {
    /// The image, a Linux zoned block device (e.g. /dev/nullb0), or an NVMe ZNS
    /// namespace's generic device (/dev/ng0n1: NVMe passthrough, native zone append).
    pub image: PathBuf,
    /// Waiting for an image another process holds.
    #[command(flatten)]
    pub lock: crate::image::WaitArg,
    /// Start sector of the zone to act on (512-byte sectors; decimal, 0x hex, or with
    /// a K/M/G suffix as blkzone takes it).
    #[arg(short = 'o', long, default_value = "0", value_parser = image::sectors, value_name = "SECTOR")]
    pub offset: u64,
    /// Maximum sectors to act on.
    #[arg(short = 'l', long, value_parser = image::sectors, value_name = "SECTORS", conflicts_with = "count")]
    pub length: Option<u64>,
    /// Maximum number of zones.
    #[arg(short = 'c', long, value_name = "NUMBER")]
    pub count: Option<u32>,
    /// On a block device, act even if it is in use (no O_EXCL), as blkzone's -f.
    #[arg(short = 'f', long)]
    pub force: bool,
    /// Display more details.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Print JSON instead of blkzone's lines.
    #[arg(long)]
    pub json: bool,
}

/// The zone commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneCmd {
    /// Report zones.
    Report,
    /// Sum of zone capacities.
    Capacity,
    /// Reset a range of zones.
    Reset,
    /// Open a range of zones.
    Open,
    /// Close a range of zones.
    Close,
    /// Finish a range of zones.
    Finish,
}

impl ZoneCmd {
    fn op(self) -> Op {
        match self {
            ZoneCmd::Reset => Op::ZoneReset,
            ZoneCmd::Open => Op::ZoneOpen,
            ZoneCmd::Close => Op::ZoneClose,
            ZoneCmd::Finish => Op::ZoneFinish,
            c => unreachable!("{c:?} is not a zone action"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            ZoneCmd::Report => "report",
            ZoneCmd::Capacity => "capacity",
            ZoneCmd::Reset => "reset",
            ZoneCmd::Open => "open",
            ZoneCmd::Close => "close",
            ZoneCmd::Finish => "finish",
        }
    }
}

/// What the zone commands act on: an image, or a Linux zoned block device.
enum Target {
    Image(Box<FileImage>),
    Device(ZoneCtl),
    Nvme(Box<NvmeZns>),
}

impl Target {
    fn open(a: &ZoneArgs, write: bool) -> Result<Target, CliError> {
        if nvme::is_char_device(&a.image) {
            return Ok(Target::Nvme(Box::new(NvmeZns::open(&a.image, !write).map_err(CliError::msg)?)));
        }
        if linux::is_block_device(&a.image) {
            return Ok(Target::Device(ZoneCtl::open(&a.image, write, a.force).map_err(CliError::msg)?));
        }
        let img = image::open(&a.image, !write, a.lock)?;
        if !img.geo().is_zoned() {
            return Err(CliError(format!("{}: unable to determine zone size (not a zoned image)", a.image.display())));
        }
        Ok(Target::Image(Box::new(img)))
    }

    fn nr_sectors(&self) -> u64 {
        match self {
            Target::Image(i) => i.geo().nr_sectors(),
            Target::Device(d) => d.nr_sectors(),
            Target::Nvme(d) => zblk_dev::Device::geometry(d.as_ref()).nr_sectors(),
        }
    }

    fn zone_sectors(&self) -> u64 {
        match self {
            Target::Image(i) => i.geo().zone_sectors(),
            Target::Device(d) => d.zone_sectors(),
            Target::Nvme(d) => zblk_dev::Device::geometry(d.as_ref()).zone_sectors(),
        }
    }

    /// One report call: up to `max` zones from the zone holding `from`.
    fn report(&self, from: u64, max: usize) -> Result<Vec<RawZone>, CliError> {
        match self {
            Target::Image(i) => {
                let geo = i.geo();
                let first = geo.zone_no(Sector(from)).idx();
                let zones = i.zones();
                Ok(zones[first..(first + max).min(zones.len())].iter().map(image::raw).collect())
            }
            Target::Device(d) => d.report(Sector(from), max).map_err(CliError::msg),
            Target::Nvme(d) => d.report(Sector(from), max).map_err(|s| nvme_error(d, "report", s)),
        }
    }
}

/// Runs one of the zone commands.
pub fn run(cmd: ZoneCmd, a: &ZoneArgs) -> Result<(), CliError> {
    match cmd {
        ZoneCmd::Report | ZoneCmd::Capacity => report(cmd, a),
        _ => action(cmd, a),
    }
}

/// Zones per report call, as blkzone asks the kernel for them (its `-v` says so per
/// call).
const REPORT_BATCH: u64 = linux::REPORT_BATCH as u64;

fn report(cmd: ZoneCmd, a: &ZoneArgs) -> Result<(), CliError> {
    let target = Target::open(a, false)?;
    let zs = target.zone_sectors();
    let total = target.nr_sectors();
    if a.offset >= total {
        return Err(CliError(format!("{}: offset is greater than or equal to device size", a.image.display())));
    }
    let mut nr_zones = match (a.count.filter(|&c| c > 0), a.length.filter(|&l| l > 0)) {
        (Some(c), _) => u64::from(c),
        (None, Some(l)) => l.div_ceil(zs),
        (None, None) => 1 + (total - a.offset) / zs,
    };
    let mut offset = a.offset;
    let mut shown = Vec::new();
    let mut capacity_sum = 0u64;
    'batches: while nr_zones > 0 && offset < total {
        let batch = target.report(offset, nr_zones.min(REPORT_BATCH) as usize)?;
        if a.verbose && !a.json {
            outln!("Found {} zones from 0x{:x}", batch.len(), offset);
        }
        if batch.is_empty() {
            break;
        }
        for z in &batch {
            if z.len == 0 || out::stdout_failed() {
                break 'batches;
            }
            if cmd == ZoneCmd::Capacity {
                capacity_sum += z.capacity;
            } else if a.json {
                shown.push(image::zone_json(z));
            } else {
                outln!("{}", image::report_line(z));
            }
            nr_zones -= 1;
            offset = z.start + z.len;
        }
    }
    match (cmd, a.json) {
        (ZoneCmd::Capacity, false) => outln!("0x{capacity_sum:09x}"),
        (ZoneCmd::Capacity, true) => outln!("{}", serde_json::json!({ "capacity": capacity_sum })),
        (_, true) => {
            outln!("{}", serde_json::to_string_pretty(&serde_json::json!({ "zones": shown })).expect("JSON"))
        }
        _ => {}
    }
    Ok(())
}

fn action(cmd: ZoneCmd, a: &ZoneArgs) -> Result<(), CliError> {
    let name = a.image.display();
    let target = Target::open(a, true)?;
    let zs = target.zone_sectors();
    let total = target.nr_sectors();
    if a.offset & (zs - 1) != 0 {
        return Err(CliError(format!("{name}: offset {} is not aligned to zone size {zs}", a.offset)));
    }
    if a.offset > total {
        return Err(CliError(format!("{name}: offset is greater than device size")));
    }
    let mut zlen = match (a.count.filter(|&c| c > 0), a.length.filter(|&l| l > 0)) {
        (Some(c), _) => u64::from(c).saturating_mul(zs),
        (None, Some(l)) => l,
        (None, None) => total,
    };
    zlen = zlen.min(total - a.offset);
    if let Some(l) = a.length.filter(|&l| l > 0) {
        if zlen & (zs - 1) != 0 && a.offset + zlen != total {
            return Err(CliError(format!("{name}: number of sectors {l} is not aligned to zone size {zs}")));
        }
    }
    if zlen == 0 {
        // The offset is the device's end: no zone starts there. The kernel refuses
        // the empty range (EINVAL from BLKRESETZONE and the others), as `report`
        // refuses the offset.
        return Err(CliError(format!(
            "{name}: EINVAL: no zone to {} at sector {}: it is the device's end ({total} sectors)",
            cmd.name(),
            a.offset
        )));
    }
    let end = a.offset + zlen;
    let zones = match target {
        Target::Device(d) => {
            d.zone_mgmt(cmd.op(), Sector(a.offset), zlen).map_err(CliError::msg)?;
            zlen.div_ceil(zs)
        }
        Target::Image(img) => image_action(cmd, a, *img, zlen)?,
        Target::Nvme(d) => nvme_action(cmd, &d, a.offset, zlen)?,
    };
    out::done(format!("{} of {zones} zone(s) from sector {} to {end}", cmd.name(), a.offset));
    if a.json {
        let doc = serde_json::json!({ "op": cmd.name(), "from": a.offset, "to": end, "zones": zones });
        outln!("{doc}");
    } else if a.verbose {
        outln!("{name}: successful {} of zones in range from {}, to {}", cmd.name(), a.offset, end);
    }
    Ok(())
}

/// A zone action on an image, through the engine. Returns the zones acted on.
fn image_action(cmd: ZoneCmd, a: &ZoneArgs, img: FileImage, zlen: u64) -> Result<u64, CliError> {
    let name = a.image.display();
    let geo = img.geo().clone();
    let total = geo.nr_sectors();
    let engine = EngineConfig { policy: image::default_policy(&img), ..EngineConfig::default() };
    let rt = image::start(img, engine, Backend::Auto)?;
    let end = a.offset + zlen;
    // A reset of a range skips its conventional zones (they have nothing to reset),
    // unless the range holds nothing else: then there is no zone to act on, and the
    // first conventional zone is refused as the kernel refuses it.
    let zone_range = geo.zone_no(Sector(a.offset)).0..=geo.zone_no(Sector(end - 1)).0;
    let skip_conv = cmd == ZoneCmd::Reset && zone_range.clone().any(|z| !geo.zone_is_conv(ZoneNo(z)));
    let mut done: Vec<ZoneNo> = Vec::new();
    let reset_all = cmd == ZoneCmd::Reset && a.offset == 0 && zlen == total;
    let result = if reset_all {
        // As the kernel: a reset of the whole device is one RESET_ALL.
        let r = rt.zone_op(Op::ZoneResetAll, Sector::ZERO).map_err(|s| (Sector::ZERO, s));
        if r.is_ok() {
            done.extend((geo.nr_conv()..geo.nr_zones()).map(ZoneNo));
        }
        r
    } else {
        let mut r = Ok(());
        for z in zone_range.map(ZoneNo) {
            if skip_conv && geo.zone_is_conv(z) {
                continue;
            }
            let s = geo.zone_start(z);
            if let Err(st) = rt.zone_op(cmd.op(), s) {
                r = Err((s, st));
                break;
            }
            done.push(z);
        }
        r
    };
    // An EIO under an image is told by the file system's errno (ENOSPC, ...).
    let fs_cause = result.as_ref().err().and_then(|&(_, st)| image::fs_cause(&rt, st));
    rt.close().map_err(CliError::msg)?;
    result.map_err(|(at, st)| {
        let op = if reset_all { Op::ZoneResetAll } else { cmd.op() };
        let why = fs_cause.unwrap_or_else(|| crate::explain::explain(&geo, op, at, 0, st));
        // What took effect before the refusal is said with it.
        let before_it = match (done.first(), done.last()) {
            (Some(f), Some(l)) => format!(
                "; done before it: {} of zones {} to {} ({} zones, sectors {} to {})",
                cmd.name(),
                f.0,
                l.0,
                done.len(),
                geo.zone_start(*f).0,
                geo.zone_start(*l).0 + geo.zone_len(*l)
            ),
            _ => String::new(),
        };
        CliError(format!("{name}: {} of zone at sector {} failed: {why}{before_it}", cmd.name(), at.0))
    })?;
    Ok(done.len() as u64)
}

/// A failed NVMe command in words: the errno the kernel would give, and the NVMe
/// status the drive answered.
fn nvme_error(d: &NvmeZns, what: &str, s: zblk_core::bio::Status) -> CliError {
    let why = zblk_dev::Device::last_error(d).unwrap_or_else(|| format!("{}: {s}", s.errno_name()));
    CliError(format!("{}: {what} failed: {why}", d.path().display()))
}

/// A zone action on an NVMe namespace, zone by zone with Zone Management Send (a
/// reset of the whole namespace with Select All, as the kernel's RESET_ALL).
/// Returns the zones acted on.
fn nvme_action(cmd: ZoneCmd, d: &NvmeZns, offset: u64, zlen: u64) -> Result<u64, CliError> {
    let geo = zblk_dev::Device::geometry(d).clone();
    let action = match cmd {
        ZoneCmd::Reset => ZoneAction::Reset,
        ZoneCmd::Open => ZoneAction::Open,
        ZoneCmd::Close => ZoneAction::Close,
        ZoneCmd::Finish => ZoneAction::Finish,
        c => unreachable!("{c:?} is not a zone action"),
    };
    let zs = geo.zone_sectors();
    if cmd == ZoneCmd::Reset && offset == 0 && zlen == geo.nr_sectors() {
        d.zone_send(action, Sector::ZERO, true).map_err(|s| nvme_error(d, "reset of all zones", s))?;
        return Ok(u64::from(geo.nr_zones()));
    }
    let mut done = 0;
    let mut at = offset;
    while at < offset + zlen {
        d.zone_send(action, Sector(at), false).map_err(|s| {
            let e = nvme_error(d, &format!("{} of zone at sector {at}", cmd.name()), s);
            CliError(format!("{}; done before it: {done} zone(s)", e.0))
        })?;
        done += 1;
        at += zs;
    }
    Ok(done)
}
