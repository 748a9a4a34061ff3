//! `zblk create IMG`: a zoned image on a regular file, with null_blk's geometry
//! parameters.

use crate::CliError;
use crate::out::{self, errln, outln};
use clap::Args;
use std::path::PathBuf;
use zblk_core::params::{DeviceParams, PARAMS};
use zblk_core::units::format_bytes_exact;
use zblk_dev::file::{CreateOptions, FileImage};

/// Creates a zoned image (a sparse file): every sequential zone EMPTY.
///
/// The geometry takes null_blk's parameter names, as options
/// (`--zone_size 64 --zone_nr_conv 4`) or as one list (`-p zone_size=64,zone_nr_conv=4`).
/// Sizes are in MB as null_blk takes them, or with a suffix (`64k`, `1G`).
/// Defaults: size=1024 (MB), zone_size=64 (MB), native zone append, no conventional
/// zones, no open/active limits, 512-byte blocks.
#[derive(Args, Debug)]
#[command(after_help = params_help())]
pub struct CreateArgs {
    /// The image file to create.
    pub image: PathBuf,
    /// null_blk parameters, e.g. `zone_size=64,zone_capacity=48,zone_nr_conv=2`.
    #[arg(short = 'p', long = "params", value_name = "LIST")]
    pub params: Option<String>,
    /// Device capacity, MB (or with a suffix).
    #[arg(long)]
    pub size: Option<String>,
    /// Logical block size, bytes (512 or 4096).
    #[arg(long)]
    pub blocksize: Option<String>,
    /// Zone size, MB (or with a suffix), a power of two.
    #[arg(long = "zone_size", alias = "zone-size")]
    pub zone_size: Option<String>,
    /// Writable part of each zone, MB (or with a suffix); 0: the zone size.
    #[arg(long = "zone_capacity", alias = "zone-capacity")]
    pub zone_capacity: Option<String>,
    /// Number of conventional zones at the start.
    #[arg(long = "zone_nr_conv", alias = "zone-nr-conv")]
    pub zone_nr_conv: Option<String>,
    /// Limit on open zones; 0: none.
    #[arg(long = "zone_max_open", alias = "zone-max-open")]
    pub zone_max_open: Option<String>,
    /// Limit on open + closed zones; 0: none.
    #[arg(long = "zone_max_active", alias = "zone-max-active")]
    pub zone_max_active: Option<String>,
    /// Largest native zone append, sectors; 0: no native append (emulated by zblk).
    #[arg(long = "zone_append_max_sectors", alias = "zone-append-max-sectors")]
    pub zone_append_max_sectors: Option<String>,
    /// Largest request, sectors.
    #[arg(long = "max_sectors", alias = "max-sectors")]
    pub max_sectors: Option<String>,
    /// 1: the image stands for a hard disk (zoned_qd1_writes defaults to 1).
    #[arg(long)]
    pub rotational: Option<String>,
    /// Replace an existing file.
    #[arg(short, long)]
    pub force: bool,
    /// Allocate the whole data region now (fallocate), as a device's blocks all exist:
    /// the image takes its full size on the file system at once (in memory on tmpfs),
    /// writes never wait for blocks to be allocated, and a file system without the
    /// room is refused now instead of failing a write later with ENOSPC. Default: a
    /// sparse file, space taken as data is written.
    #[arg(long)]
    pub preallocate: bool,
    #[command(flatten)]
    pub lock: crate::image::WaitArg,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

fn params_help() -> String {
    let mut s = String::from("Parameters (null_blk names) accepted by --params:\n");
    for (name, what) in PARAMS {
        if !matches!(*name, "memory_backed" | "hw_queue_depth" | "completion_nsec" | "completion_dist") {
            s.push_str(&format!("  {name:<24} {what}\n"));
        }
    }
    s
}

/// The device parameters `a` describes.
pub fn device_params(a: &CreateArgs) -> Result<DeviceParams, CliError> {
    let mut p = DeviceParams::default();
    p.apply("size=1024,zone_size=64").expect("valid defaults");
    let named = [
        ("size", &a.size),
        ("blocksize", &a.blocksize),
        ("zone_size", &a.zone_size),
        ("zone_capacity", &a.zone_capacity),
        ("zone_nr_conv", &a.zone_nr_conv),
        ("zone_max_open", &a.zone_max_open),
        ("zone_max_active", &a.zone_max_active),
        ("zone_append_max_sectors", &a.zone_append_max_sectors),
        ("max_sectors", &a.max_sectors),
        ("rotational", &a.rotational),
    ];
    if let Some(list) = &a.params {
        for item in list.split([',', ' ']).filter(|s| !s.is_empty()) {
            let key = item.split_once('=').map_or(item, |(k, _)| k);
            if matches!(key, "memory_backed" | "hw_queue_depth" | "completion_nsec" | "completion_dist") {
                return Err(CliError(format!("--params: {key} describes a simulated device, not an image")));
            }
            if named.iter().any(|(n, v)| *n == key && v.is_some()) {
                return Err(CliError(format!("--params: {key} is also given as --{key}")));
            }
        }
        p.apply(list).map_err(|e| CliError(format!("--params: {e}")))?;
    }
    for (name, value) in named {
        if let Some(v) = value {
            p.apply(&format!("{name}={v}")).map_err(|e| CliError(format!("--{name}: {e}")))?;
        }
    }
    p.validate().map_err(|e| CliError(format!("geometry: {e}")))?;
    Ok(p)
}

/// Runs `zblk create`.
pub fn run(a: &CreateArgs) -> Result<(), CliError> {
    let p = device_params(a)?;
    let geo = p.validate().map_err(CliError::msg)?;
    let opts = CreateOptions {
        geometry: p.geometry.clone(),
        rotational: p.rotational,
        force: a.force,
        preallocate: a.preallocate,
    };
    // Left by a create killed while its new image had a name (SIGKILL during the
    // swap of `create -f`, or a file system without O_TMPFILE): said, not removed.
    for t in FileImage::stale_temporaries(&a.image) {
        errln!(
            "zblk: warning: {}: a temporary file left by an interrupted create, holding {} MiB; remove it to free the space",
            t.path.display(),
            t.allocated_bytes.div_ceil(1 << 20)
        );
    }
    FileImage::create_waiting(&a.image, &opts, a.lock.wait).map_err(CliError::msg)?;
    let g = &p.geometry;
    let what = if geo.is_zoned() {
        format!(
            "{}: {} zoned image, {} zones of {} (capacity {}), {} conventional",
            a.image.display(),
            format_bytes_exact(g.capacity_bytes),
            geo.nr_zones(),
            format_bytes_exact(g.zone_size_bytes),
            format_bytes_exact(geo.zone_cap_sectors() << 9),
            geo.nr_conv()
        )
    } else {
        format!("{}: {} regular (not zoned) image", a.image.display(), format_bytes_exact(g.capacity_bytes))
    };
    let what = if a.preallocate { format!("{what}, data preallocated") } else { what };
    out::done(format!("created {what}"));
    if a.json {
        let doc = serde_json::json!({
            "image": a.image.display().to_string(),
            "geometry": g,
            "rotational": p.rotational,
            "nr_zones": geo.nr_zones(),
            "preallocated": a.preallocate,
        });
        outln!("{}", serde_json::to_string_pretty(&doc).expect("JSON"));
    } else {
        outln!("{what}");
    }
    Ok(())
}
