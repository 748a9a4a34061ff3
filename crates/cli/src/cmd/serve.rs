//! `zblk serve IMG | --dev SPEC`: a zblk device exposed to the kernel as a zoned ublk
//! block device (`/dev/ublkbN`), every request going through zblk's runtime and engine.
//!
//! The ublk driver requires `UBLK_F_USER_COPY` with `UBLK_F_ZONED` (it refuses a zoned
//! device without it: zone reports travel back through the character device), so data
//! moves with `pread`/`pwrite` on `/dev/ublkcN` at the request's user-copy position.
//! Each queue thread serves its requests one at a time through the runtime's blocking
//! API: the kernel plugs zone writes itself (one write per zone in flight), and with
//! several queues requests of different zones still run side by side.

//!
//! The ublk part needs the `ublk` feature (`cargo build --release --features
//! zblk-cli/ublk`): the ublk library generates its bindings at build time with
//! libclang, which the rest of zblk does not need. Without it, `zblk serve` says how
//! to get it.

#[cfg(feature = "ublk")]
mod paced;
#[cfg(feature = "ublk")]
mod served;
#[cfg(feature = "ublk")]
mod ublk;

use crate::CliError;
use clap::Args;
use std::path::{Path, PathBuf};
use zblk_core::geometry::Geometry;

/// Where the ublk driver's control device is (`ublk_drv`).
const UBLK_CONTROL: &str = "/dev/ublk-control";

/// Largest request the server takes (the driver's `max_io_buf_bytes`): 512 KiB, the
/// library's default, so each tag's buffer stays small.
#[cfg_attr(not(feature = "ublk"), allow(dead_code))]
pub(crate) const IO_BUF_BYTES: u32 = 512 * 1024;

/// Serve a zblk device to the kernel as a zoned ublk block device.
///
/// Prints the block device's path (`/dev/ublkbN`) as its first line once the device
/// is ready, then serves until SIGINT or SIGTERM: it then removes the device, persists
/// every acknowledged write (an image is closed cleanly) and exits 0. Needs the ublk
/// driver (`modprobe ublk_drv`, Linux 6.6+ for zoned devices) and the rights to open
/// /dev/ublk-control (root). The kernel sees a host-managed zoned disk with the
/// device's zone size, conventional zones, open/active limits and a volatile write
/// cache with FUA: its flushes reach the image's durable state before they complete.
///
/// A simulated device (`--dev smr-30tb`) or stack (`--stack ...`) is paced to
/// wall-clock time: each request enters the simulation when it arrives and completes
/// when wall time reaches the time the device's timing model completes it. Its data
/// is kept in memory, only what is written, up to `--data-limit` (further writes fail
/// with ENOSPC); with `--no-data` nothing is kept and every read returns zeroes.
#[derive(Args, Debug)]
#[command(after_help = serve_help())]
pub struct ServeArgs {
    /// The image to serve (persistent).
    #[arg(required_unless_present_any = ["dev", "stack"], conflicts_with_all = ["dev", "stack"])]
    pub image: Option<PathBuf>,
    /// Serve a simulated device paced to wall-clock time: a preset with null_blk
    /// parameters, as `zblk bench --dev` takes it (`smr-30tb`,
    /// `nullb:zone_size=64,size=1024`; its data is lost when the server stops).
    #[arg(long, conflicts_with = "stack")]
    pub dev: Option<String>,
    /// Waiting for an image another process holds.
    #[command(flatten)]
    pub lock: crate::image::WaitArg,
    /// Serve a simulated stack paced to wall-clock time (`striped:chunk=64k[2*nullb:...]`,
    /// as `zblk trace --stack` takes it; its disks timed by their `completion_nsec`).
    #[arg(long)]
    pub stack: Option<String>,
    /// Simulated devices: memory for written data (`1G`, `512M`); writes beyond it
    /// fail with ENOSPC.
    #[arg(long, default_value = "1G", value_parser = parse_limit, conflicts_with = "image")]
    pub data_limit: u64,
    /// Simulated devices: keep no data; every read returns zeroes (timing only). An
    /// image always keeps its data: refused with one.
    #[arg(long, conflicts_with = "image")]
    pub no_data: bool,
    /// Zone write issue policy of zblk's engine under the kernel (zwp, qd1, batch,
    /// zwl, passthrough). Default: an image's (qd1 on a rotational one, else zwp);
    /// zwp for simulated devices, so the model sees the kernel's own order.
    #[arg(long, value_parser = crate::jobargs::policy_parser())]
    pub policy: Option<zblk_core::engine::IssuePolicy>,
    /// Hardware queues of the ublk device (one serving thread each).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub queues: u16,
    /// Requests in flight per queue the kernel may send.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub depth: u16,
    /// Print the ready line as a JSON object ({"device": "/dev/ublkbN", "data": ...}).
    #[arg(long)]
    pub json: bool,
}

fn parse_limit(text: &str) -> Result<u64, String> {
    zblk_core::units::parse_size(text).map_err(|e| e.to_string())
}

fn serve_help() -> String {
    format!(
        "Simulated devices keep their written data in memory (4 KiB pages, only what is written) up to \
         --data-limit; --no-data keeps none (reads return zeroes; the JSON ready line says \
         \"data\": \"none: reads return zeroes\").\n\n{}",
        crate::devspec::help()
    )
}

/// The ublk driver's state on this machine, checked before anything is opened, so the
/// message says what to do.
fn check_driver(control: &Path) -> Result<(), CliError> {
    if !control.exists() {
        return Err(CliError(format!(
            "{}: no such device: the ublk driver is not loaded (run `modprobe ublk_drv` as root; \
             zoned ublk devices need Linux 6.6 or later built with CONFIG_BLK_DEV_UBLK)",
            control.display()
        )));
    }
    match std::fs::OpenOptions::new().read(true).write(true).open(control) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(CliError(format!(
            "{}: permission denied: serving a ublk device needs root (or CAP_SYS_ADMIN)",
            control.display()
        ))),
        Err(e) => Err(CliError(format!("{}: {e}", control.display()))),
    }
}

/// What the kernel can be given: a zoned geometry whose zones are a power of two
/// sectors (the block layer refuses others) and whose capacity is whole zones (ublk
/// counts zones as capacity / zone size).
#[cfg_attr(not(feature = "ublk"), allow(dead_code))]
pub(crate) fn check_geometry(geo: &Geometry) -> Result<(), CliError> {
    if !geo.is_zoned() {
        return Err(CliError::msg("zblk serve serves zoned devices only (this one is not zoned)"));
    }
    let zs = geo.zone_sectors();
    if !zs.is_power_of_two() {
        return Err(CliError(format!(
            "zone size {} sectors is not a power of two: the Linux block layer refuses such zoned devices",
            zs
        )));
    }
    if geo.nr_sectors() % zs != 0 {
        return Err(CliError::msg("the last zone is smaller than the others: ublk cannot expose it"));
    }
    if u32::try_from(zs).is_err() {
        return Err(CliError::msg("zone size too large for ublk (chunk_sectors is 32 bits)"));
    }
    Ok(())
}

/// Runs the command.
pub fn run(a: &ServeArgs) -> Result<(), CliError> {
    check_driver(Path::new(UBLK_CONTROL))?;
    #[cfg(feature = "ublk")]
    return ublk::run(a);
    #[cfg(not(feature = "ublk"))]
    {
        let _ = a;
        Err(CliError::msg(
            "this zblk was built without ublk: build it with `cargo build --release --features zblk-cli/ublk` \
             (needs libclang: apt-get install libclang-dev)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_control_device_says_to_load_the_driver() {
        let e = check_driver(Path::new("/nonexistent/ublk-control")).unwrap_err();
        assert!(e.0.contains("modprobe ublk_drv"), "{}", e.0);
    }

    fn geo(zone_size: u64, size: u64) -> Geometry {
        let mut p = zblk_core::params::DeviceParams::default();
        p.apply(&format!("zone_size={zone_size},size={size}")).unwrap();
        p.validate().unwrap()
    }

    #[test]
    fn the_kernel_gets_only_whole_zones() {
        // (Zone sizes that are not a power of two never get this far: the device
        // parameters refuse them, as the VM test's `--dev nullb:zone_size=3` shows.)
        assert!(check_geometry(&geo(4, 64)).is_ok());
        let e = check_geometry(&geo(4, 66)).unwrap_err();
        assert!(e.0.contains("smaller than the others"), "{}", e.0);
    }
}
