//! Serving zblk devices to the Linux kernel as zoned block devices.
//!
//! - [`served`]: the interface a server hands the kernel's requests to ([`Served`]),
//!   and its implementation over zblk's runtime ([`RuntimeServed`]: an image, a Linux
//!   zoned device, the memory device).
//! - [`paced`]: a simulated device or stack whose timing model is paced to
//!   wall-clock time ([`PacedSim`]), optionally stretched by a time scale, its written
//!   data in a bounded store ([`DataStore`]).
//! - [`record`]: what a served device records of what it serves ([`ServedRecord`]),
//!   which a recovery checks before it takes the device over.
//! - `ublk` (feature `ublk`): the kernel side, a zoned ublk block device whose queue
//!   threads serve every request through a [`Served`] device.
//!
//! The `zblk serve` command builds the device from its arguments and prints; the
//! serving itself is here, so that a program can serve a zblk device without the CLI.

pub mod paced;
pub mod record;
pub mod served;
#[cfg(feature = "ublk")]
pub mod ublk;

pub use paced::{DataStore, PacedInfo, PacedSim, SimBuilder};
pub use record::ServedRecord;
pub use served::{
    CopyOut, DataLimit, Done, PagesOut, Replay, Replies, Reply, ReplyTo, Req, RuntimeServed, Served, Tagged,
    TaggedReplies,
};

use zblk_core::geometry::Geometry;

/// Why serving failed or was refused, in words for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ServeError(pub String);

/// Smallest buffer of a request the server takes: 512 KiB, the ublk library's
/// default, what a device whose `max_sectors` is smaller still gets.
pub const MIN_IO_BUF_BYTES: u32 = 512 * 1024;

/// Largest buffer of a request the server takes: 4 MiB (each tag of each queue has one;
/// its pages are touched only as far as requests reach).
pub const MAX_IO_BUF_BYTES: u32 = 4 << 20;

/// The largest request the server takes for a device of geometry `geo` (the driver's
/// `max_io_buf_bytes`): the device's `max_sectors`, so that the kernel splits requests
/// where the device's own host would (a disk model's timing depends on it), within
/// [`MIN_IO_BUF_BYTES`]..[`MAX_IO_BUF_BYTES`], in whole pages.
pub fn io_buf_bytes(geo: &Geometry) -> u32 {
    let want = u64::from(geo.max_sectors()) * zblk_core::units::SECTOR_SIZE;
    want.clamp(u64::from(MIN_IO_BUF_BYTES), u64::from(MAX_IO_BUF_BYTES)).next_multiple_of(4096) as u32
}

/// Size of the kernel's `struct blk_zone` (zblk-dev's `BlkZone`, the one layout).
pub const BLK_ZONE_BYTES: usize = zblk_dev::linux::BLK_ZONE_BYTES;

/// What the kernel can be given: a zoned geometry whose zones are a power of two
/// sectors (the block layer refuses others) and whose capacity is whole zones (ublk
/// counts zones as capacity / zone size).
pub fn check_geometry(geo: &Geometry) -> Result<(), ServeError> {
    if !geo.is_zoned() {
        return Err(ServeError("zblk serve serves zoned devices only (this one is not zoned)".into()));
    }
    let zs = geo.zone_sectors();
    if !zs.is_power_of_two() {
        return Err(ServeError(format!(
            "zone size {zs} sectors is not a power of two: the Linux block layer refuses such zoned devices"
        )));
    }
    if geo.nr_sectors() % zs != 0 {
        return Err(ServeError("the last zone is smaller than the others: ublk cannot expose it".into()));
    }
    if u32::try_from(zs).is_err() {
        return Err(ServeError("zone size too large for ublk (chunk_sectors is 32 bits)".into()));
    }
    Ok(())
}

/// Writes a server message to standard error (`zblk: ...`). A standard error that
/// cannot be written loses the message, never the request being served.
pub(crate) fn say(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "zblk: {msg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(zone_size: u64, size: u64) -> Geometry {
        let mut p = zblk_core::params::DeviceParams::default();
        p.apply(&format!("zone_size={zone_size},size={size}")).unwrap();
        p.validate().unwrap()
    }

    #[test]
    fn requests_as_large_as_the_devices_own_within_bounds() {
        let with = |max: u32| {
            let mut p = zblk_core::params::DeviceParams::default();
            p.apply(&format!("zone_size=4,size=64,max_sectors={max}")).unwrap();
            io_buf_bytes(&p.validate().unwrap())
        };
        assert_eq!(with(1344), 672 << 10, "an AHCI port's 672 KiB: the kernel splits 1 MiB as the disk's host");
        assert_eq!(with(255), MIN_IO_BUF_BYTES);
        assert_eq!(with(65535), MAX_IO_BUF_BYTES);
        assert_eq!(with(1345) % 4096, 0, "whole pages");
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
