//! The `zeroes` experiment: how long zeroing 1 GiB and 10 GiB takes with unmapped
//! WRITE_ZEROES, with WRITE_ZEROES that writes (NOUNMAP) and with buffers of zeroes,
//! beside the published figures, and what zeroing in the background costs a
//! sequential writer. The rows here are the simulated SSD's (virtual time); `zblk
//! sweep zeroes` adds rows of the same shape timed on a real image file.

use crate::zeroing::{ZeroingError, time_zeroing, writer_with_background_zeroing};
use zblk_core::engine::ZeroingMethod;
use zblk_sim::presets::DeviceSpec;

/// Published: a zeroed 1 GiB / 10 GiB file on an NVMe SSD with DEAC, by `dd`
/// (buffers of zeroes) and by `fallocate -w` (unmapped write zeroes), seconds.
pub const PUBLISHED: [(u64, &str, f64); 4] = [
    (1 << 30, "zero-buffers", 0.5),
    (1 << 30, "unmap", 0.17),
    (10 << 30, "zero-buffers", 5.0),
    (10 << 30, "unmap", 1.7),
];

/// One zeroing measurement.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ZeroRow {
    /// Always `zeroes`.
    pub experiment: &'static str,
    /// The device.
    pub device: String,
    /// `unmap`, `write-zeroes` or `zero-buffers`.
    pub method: &'static str,
    /// How the device carried the method out, where it has a choice (an image:
    /// `fallocate-write-zeroes`, `fallocate-zero-range`, `pwrite-zeroes`).
    pub how: Option<&'static str>,
    /// Bytes zeroed.
    pub bytes: u64,
    /// Seconds, the final FLUSH included.
    pub seconds: f64,
    /// The published figure (a file on a file system), if there is one.
    pub published_seconds: Option<f64>,
    /// Whether the device is simulated (then `seconds` is virtual time).
    pub simulated: bool,
}

/// A writer's bandwidth with or without zeroing in the background.
#[derive(Clone, Debug, serde::Serialize)]
pub struct WriterRow {
    /// Always `zeroes-writer`.
    pub experiment: &'static str,
    /// The device.
    pub device: String,
    /// `none`, `unmap` or `write-zeroes`.
    pub background_zeroing: &'static str,
    /// Bytes zeroed in the background.
    pub zero_bytes: u64,
    /// Bytes the writer wrote.
    pub writer_bytes: u64,
    /// The writer's bandwidth, MB/s.
    pub writer_mb_s: f64,
    /// Whether the device is simulated.
    pub simulated: bool,
}

/// The sizes zeroed.
pub const SIZES: [u64; 2] = [1 << 30, 10 << 30];
/// The background experiment: 4 GiB written while 10 GiB are zeroed.
pub const WRITER_BYTES: u64 = 4 << 30;
/// See [`WRITER_BYTES`].
pub const ZERO_BYTES: u64 = 10 << 30;

/// The simulated part: every size and method on the `ssd` preset, and the writer.
pub fn simulated(seed: u64) -> Result<(Vec<ZeroRow>, Vec<WriterRow>), ZeroingError> {
    let spec = DeviceSpec::parse("ssd")?;
    let mut rows = Vec::new();
    for bytes in SIZES {
        for m in [ZeroingMethod::Unmap, ZeroingMethod::WriteZeroes, ZeroingMethod::ZeroBuffers] {
            let t = time_zeroing(&spec, bytes, m, seed)?;
            let published = PUBLISHED.iter().find(|p| p.0 == bytes && p.1 == t.method).map(|p| p.2);
            rows.push(ZeroRow {
                experiment: "zeroes",
                device: t.device,
                method: t.method,
                how: None,
                bytes,
                seconds: t.seconds,
                published_seconds: published,
                simulated: true,
            });
        }
    }
    let mut writers = Vec::new();
    for bg in [None, Some(ZeroingMethod::Unmap), Some(ZeroingMethod::WriteZeroes)] {
        let w = writer_with_background_zeroing(&spec, WRITER_BYTES, ZERO_BYTES, bg, seed)?;
        writers.push(WriterRow {
            experiment: "zeroes-writer",
            device: w.device,
            background_zeroing: w.background_zeroing,
            zero_bytes: w.zero_bytes,
            writer_bytes: WRITER_BYTES,
            writer_mb_s: w.writer_mb_s,
            simulated: true,
        });
    }
    Ok((rows, writers))
}
