//! `zblk info IMG|DEV`: an image's geometry, limits and queue attributes, by the names
//! of the kernel's `/sys/block/<dev>/queue/` attributes, and its state; for a Linux
//! zoned block device, what sysfs says and what zblk makes of it.

use crate::out::outln;
use crate::{CliError, image};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use zblk_core::geometry::DEFAULT_MAX_SECTORS;
use zblk_core::units::format_bytes_exact;
use zblk_core::zone::{ZoneCond, ZoneInfo};
use zblk_dev::Device;
use zblk_dev::file::FileImage;
use zblk_dev::linux::LinuxZoned;

/// Shows an image's geometry, limits, attributes and zone state.
#[derive(Args, Debug)]
pub struct InfoArgs {
    /// The image, a Linux zoned block device (e.g. /dev/nullb0), or an NVMe ZNS
    /// namespace's generic device (/dev/ng0n1: NVMe passthrough, native zone append).
    pub image: PathBuf,
    /// Waiting for an image another process holds.
    #[command(flatten)]
    pub lock: crate::image::WaitArg,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `zblk info`.
pub fn run(a: &InfoArgs) -> Result<(), CliError> {
    let img = match image::Target::open(&a.image, true, a.lock)? {
        image::Target::Image(img) => img,
        image::Target::Linux(dev) => return device(a, &dev),
        image::Target::Nvme(dev) => return nvme_device(a, &dev),
    };
    let doc = image_doc(a, &img);
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
        return Ok(());
    }
    print_image(a, &img, &doc);
    Ok(())
}

/// How the image zeroes a WRITE_ZEROES without NOUNMAP, in words.
fn unmap_method(img: &FileImage) -> &'static str {
    if img.geo().max_write_zeroes_sectors() == 0 {
        "none (no WRITE_ZEROES: zero buffers are written)"
    } else {
        img.zeroing().name()
    }
}

/// An image's queue attributes, by their `/sys/block/<dev>/queue/` names.
fn image_queue(img: &FileImage) -> serde_json::Value {
    let geo = img.geo();
    let lbs = geo.lbs_bytes();
    json!({
        "zoned": if geo.is_zoned() { "host-managed" } else { "none" },
        "logical_block_size": lbs,
        "physical_block_size": lbs,
        "hw_sector_size": lbs,
        "chunk_sectors": geo.zone_sectors(),
        "nr_zones": geo.nr_zones(),
        "max_open_zones": geo.max_open(),
        "max_active_zones": geo.max_active(),
        "zone_append_max_bytes": u64::from(geo.max_append_sectors()) << 9,
        "max_sectors_kb": geo.max_sectors() / 2,
        "max_hw_sectors_kb": geo.max_sectors() / 2,
        "rotational": u8::from(img.rotational()),
        "zoned_qd1_writes": u8::from(img.rotational() && geo.is_zoned()),
        "write_cache": "write back",
        "fua": 1,
        "write_zeroes_max_bytes": u64::from(geo.max_write_zeroes_sectors()) << 9,
        "write_zeroes_unmap_max_hw_bytes": u64::from(geo.max_hw_wzeroes_unmap_sectors()) << 9,
        // Not recorded in the image: every runtime starts with unmap enabled where
        // the image can unmap, as the kernel does.
        "write_zeroes_unmap_max_bytes": u64::from(geo.max_hw_wzeroes_unmap_sectors()) << 9,
    })
}

/// The format version of the image: 2 for an image made before identities.
fn format_version(img: &FileImage) -> u32 {
    use zblk_dev::file::format::{FORMAT_VERSION, FORMAT_VERSION_NO_ID};
    if img.identity().is_none() { FORMAT_VERSION_NO_ID } else { FORMAT_VERSION }
}

/// Everything `zblk info` says of an image, as its JSON document.
fn image_doc(a: &InfoArgs, img: &FileImage) -> serde_json::Value {
    let geo = img.geo();
    let sb = img.superblock();
    let (nr_open, nr_active) = img.open_active();
    let io_uring = zblk_runtime::io_uring_available().map_err(|e| e.to_string());
    let direct = img.data_fds().direct.map(|(_, a)| a);
    json!({
        "image": a.image.display().to_string(),
        "format_version": format_version(img),
        "identity": img.identity().to_string(),
        "capacity_bytes": geo.nr_sectors() << 9,
        "nr_sectors": geo.nr_sectors(),
        "zone_size_sectors": geo.zone_sectors(),
        "zone_capacity_sectors": geo.zone_cap_sectors(),
        "nr_conv_zones": geo.nr_conv(),
        "nr_seq_zones": if geo.is_zoned() { geo.nr_seq_zones() } else { 0 },
        "zone_append": if geo.emulates_zone_append() { "emulated" } else { "native" },
        "queue": image_queue(img),
        "layout": sb.layout,
        "commits": img.durable_seq(),
        "zones": zones_json(&img.zones(), u64::from(nr_open), u64::from(nr_active)),
        "open_repairs": img.repairs(),
        "zeroing": {
            "unmap": unmap_method(img),
            "nounmap": zblk_dev::file::zeroing::FileZeroing::PwriteZeroes.name(),
            "probe": img.zeroing_probe().detail,
        },
        "io": {
            "io_uring": io_uring.as_ref().map_or_else(|e| format!("not available: {e}"), |()| "available".to_string()),
            "o_direct": direct.map_or_else(|| "not used (the file system refuses it, or its alignment exceeds a logical block)".to_string(), |a| format!("aligned to {a} bytes")),
        },
    })
}

/// The queue attributes of a `zblk info` document, one per line.
fn print_queue(q: &serde_json::Value) {
    if let Some(q) = q.as_object() {
        for (k, v) in q {
            let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
            outln!("    {k:<31} {v}");
        }
    }
}

/// `zblk info` of an image in words, from its document.
fn print_image(a: &InfoArgs, img: &FileImage, doc: &serde_json::Value) {
    let geo = img.geo();
    let layout = &img.superblock().layout;
    outln!("{}: zblk image, format version {}", a.image.display(), format_version(img));
    outln!("  capacity:          {} ({} sectors)", format_bytes_exact(geo.nr_sectors() << 9), geo.nr_sectors());
    if geo.is_zoned() {
        let (nr_open, nr_active) = img.open_active();
        print_zones(geo, &doc["zones"]);
        outln!(
            "  open / active:     {} / {} (limits {} / {}; 0 = none)",
            nr_open,
            nr_active,
            geo.max_open(),
            geo.max_active()
        );
        let append = if geo.emulates_zone_append() {
            "emulated by zblk (zone write plugging)".to_string()
        } else {
            format!("native, up to {} sectors", geo.max_append_sectors())
        };
        outln!("  zone append:       {append}");
    }
    outln!("  queue attributes (/sys/block/<dev>/queue/ names):");
    print_queue(&doc["queue"]);
    if geo.max_sectors() != DEFAULT_MAX_SECTORS {
        outln!("  (max_sectors {} differs from the kernel default {DEFAULT_MAX_SECTORS})", geo.max_sectors());
    }
    outln!("  data region:       file offset {} ({})", layout.data_offset, format_bytes_exact(layout.data_offset));
    outln!("  commits:           {}", img.durable_seq());
    outln!("  identity:          {}", img.identity());
    outln!(
        "  zeroing:           {} (write zeroes without NOUNMAP); pwrite-zeroes with NOUNMAP or \
         write_zeroes_unmap_max_bytes=0",
        unmap_method(img)
    );
    outln!("  zeroing probe:     {}", doc["zeroing"]["probe"].as_str().unwrap_or(""));
    outln!("  io_uring:          {}", doc["io"]["io_uring"].as_str().unwrap_or(""));
    outln!("  O_DIRECT:          {}", doc["io"]["o_direct"].as_str().unwrap_or(""));
}

/// How many of `zones` are open (implicitly or explicitly), and how many active
/// (open or closed): what a device's open and active limits count.
fn open_and_active(zones: &[zblk_core::zone::ZoneInfo]) -> (usize, usize) {
    zones.iter().fold((0, 0), |(o, act), z| {
        let open = matches!(z.cond, ZoneCond::ImpOpen | ZoneCond::ExpOpen);
        (o + usize::from(open), act + usize::from(open || z.cond == ZoneCond::Closed))
    })
}

/// `zblk info` of a Linux zoned block device: the sysfs attributes zblk read (by
/// their names, as `cat /sys/block/<dev>/queue/<attr>` shows them), the geometry zblk
/// derived from them and the zone report, and the zones' state.
fn device(a: &InfoArgs, dev: &LinuxZoned) -> Result<(), CliError> {
    let zones =
        dev.zones().map_err(|s| CliError(format!("{}: zone report: {}: {s}", a.image.display(), s.errno_name())))?;
    let (nr_open, nr_active) = open_and_active(&zones);
    let geo = dev.geometry();
    let l = dev.limits();
    let io_uring = zblk_runtime::io_uring_available().map_err(|e| e.to_string());
    let doc = json!({
        "device": a.image.display().to_string(),
        "capacity_bytes": l.nr_sectors << 9,
        "nr_sectors": l.nr_sectors,
        "zone_size_sectors": geo.zone_sectors(),
        "zone_capacity_sectors": geo.zone_cap_sectors(),
        "nr_conv_zones": geo.nr_conv(),
        "nr_seq_zones": geo.nr_seq_zones(),
        // Userspace has no zone append on a raw block device: zblk's plugs emulate it.
        "zone_append": "emulated",
        "queue": device_queue(dev),
        "zblk": {
            "max_sectors": geo.max_sectors(),
            "o_direct_alignment": l.direct_alignment(),
            "zoned_qd1_writes": u8::from(l.rotational),
            "io_uring": io_uring.as_ref().map_or_else(|e| format!("not available: {e}"), |()| "available".to_string()),
        },
        "zones": zones_json(&zones, nr_open as u64, nr_active as u64),
    });
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
        return Ok(());
    }
    print_device(a, dev, &doc, (nr_open, nr_active));
    Ok(())
}

/// `zblk info` of an NVMe ZNS namespace's generic device: what its Identify data
/// say, the geometry zblk derived, and the zones' state.
fn nvme_device(a: &InfoArgs, dev: &zblk_dev::nvme::NvmeZns) -> Result<(), CliError> {
    let zones =
        dev.zones().map_err(|s| CliError(format!("{}: zone report: {}: {s}", a.image.display(), s.errno_name())))?;
    let (nr_open, nr_active) = open_and_active(&zones);
    let geo = dev.geometry();
    let id = dev.identity();
    let doc = json!({
        "device": a.image.display().to_string(),
        "nsid": dev.nsid(),
        "capacity_bytes": geo.nr_sectors() << 9,
        "nr_sectors": geo.nr_sectors(),
        "zone_size_sectors": geo.zone_sectors(),
        "zone_capacity_sectors": geo.zone_cap_sectors(),
        "nr_seq_zones": geo.nr_seq_zones(),
        "zone_append": "native",
        "identify": {
            "nsze": id.nsze,
            "lba_bytes": id.lba_bytes,
            "zone_blocks": id.zone_blocks,
            "max_open": id.max_open,
            "max_active": id.max_active,
            "zone_append_bytes": id.append_bytes,
            "max_transfer_bytes": id.max_transfer_bytes,
        },
        "zblk": { "max_sectors": geo.max_sectors(), "max_append_sectors": geo.max_append_sectors() },
        "zones": zones_json(&zones, nr_open as u64, nr_active as u64),
    });
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
        return Ok(());
    }
    outln!("{}: NVMe ZNS namespace {} (generic device, passthrough)", a.image.display(), dev.nsid());
    outln!("  capacity:          {} ({} sectors)", format_bytes_exact(geo.nr_sectors() << 9), geo.nr_sectors());
    print_zones(geo, &doc["zones"]);
    outln!("  open / active:     {nr_open} / {nr_active} (limits {} / {}; 0 = none)", geo.max_open(), geo.max_active());
    outln!("  logical block:     {} bytes", id.lba_bytes);
    outln!("  zone append:       native, up to {} sectors (ZASL)", geo.max_append_sectors());
    outln!("  zblk:              max_sectors {} (MDTS)", geo.max_sectors());
    Ok(())
}

/// The sysfs queue attributes zblk read from a Linux zoned block device, by their
/// names (those a kernel does not have are left out).
fn device_queue(dev: &LinuxZoned) -> serde_json::Map<String, serde_json::Value> {
    let l = dev.limits();
    let mut queue = serde_json::Map::new();
    let mut put = |k: &str, v: serde_json::Value| {
        queue.insert(k.to_string(), v);
    };
    put("zoned", json!("host-managed"));
    put("logical_block_size", json!(l.logical_block_size));
    put("chunk_sectors", json!(l.chunk_sectors));
    put("nr_zones", json!(l.nr_zones));
    put("max_open_zones", json!(l.max_open_zones));
    put("max_active_zones", json!(l.max_active_zones));
    put("zone_append_max_bytes", json!(l.zone_append_max_bytes));
    put("max_sectors_kb", json!(l.max_sectors_kb));
    put("rotational", json!(u8::from(l.rotational)));
    put("write_zeroes_max_bytes", json!(l.write_zeroes_max_bytes));
    if let Some(u) = l.write_zeroes_unmap_max_hw_bytes {
        put("write_zeroes_unmap_max_hw_bytes", json!(u));
    }
    if let Some(d) = l.dma_alignment {
        put("dma_alignment", json!(d));
    }
    if let Some(w) = &l.write_cache {
        put("write_cache", json!(w));
    }
    queue
}

/// `zblk info` of a Linux zoned block device in words, from its document.
fn print_device(a: &InfoArgs, dev: &LinuxZoned, doc: &serde_json::Value, (nr_open, nr_active): (usize, usize)) {
    let geo = dev.geometry();
    let l = dev.limits();
    outln!("{}: Linux zoned block device (host-managed)", a.image.display());
    outln!("  capacity:          {} ({} sectors)", format_bytes_exact(l.nr_sectors << 9), l.nr_sectors);
    print_zones(geo, &doc["zones"]);
    outln!(
        "  open / active:     {nr_open} / {nr_active} (limits {} / {}; 0 = none)",
        l.max_open_zones,
        l.max_active_zones
    );
    outln!("  zone append:       emulated by zblk (no zone append for userspace on a block device)");
    outln!("  queue attributes (sysfs, /sys/block/<dev>/queue/):");
    print_queue(&doc["queue"]);
    outln!(
        "  zblk:              max_sectors {}, O_DIRECT alignment {} bytes, zoned_qd1_writes {}",
        geo.max_sectors(),
        l.direct_alignment(),
        u8::from(l.rotational)
    );
    outln!("  io_uring:          {}", doc["zblk"]["io_uring"].as_str().unwrap_or(""));
}

/// The zone lines of `zblk info`, for an image or a device: the zone layout, and the
/// zones by condition (`z`, the JSON document's `zones` object).
fn print_zones(geo: &zblk_core::geometry::Geometry, z: &serde_json::Value) {
    outln!(
        "  zones:             {} of {} ({} conventional, {} sequential write required), capacity {}",
        geo.nr_zones(),
        format_bytes_exact(geo.zone_sectors() << 9),
        geo.nr_conv(),
        geo.nr_seq_zones(),
        format_bytes_exact(geo.zone_cap_sectors() << 9)
    );
    outln!(
        "  zone state:        {} empty, {} implicitly open, {} explicitly open, {} closed, {} full",
        z["empty"],
        z["implicit_open"],
        z["explicit_open"],
        z["closed"],
        z["full"]
    );
}

/// The `zones` object of `zblk info --json`, for an image or a device: the zones by
/// condition, and the open and active counts.
fn zones_json(zones: &[ZoneInfo], open: u64, active: u64) -> serde_json::Value {
    let count = |c: ZoneCond| zones.iter().filter(|z| z.cond == c).count();
    json!({
        "empty": count(ZoneCond::Empty),
        "implicit_open": count(ZoneCond::ImpOpen),
        "explicit_open": count(ZoneCond::ExpOpen),
        "closed": count(ZoneCond::Closed),
        "full": count(ZoneCond::Full),
        "read_only": count(ZoneCond::ReadOnly),
        "offline": count(ZoneCond::Offline),
        "open": open,
        "active": active,
    })
}
