//! `zblk sweep zeroes`: how long zeroing takes with unmapped WRITE_ZEROES, with
//! WRITE_ZEROES that writes (NOUNMAP) and with buffers of zeroes, and what zeroing
//! in the background costs a sequential writer, on the simulated SSD.

use super::sweep::SweepArgs;
use crate::CliError;
use std::fmt::Write as _;
use zblk::core::ZeroingMethod;
use zblk::sim::presets::DeviceSpec;
use zblk::sim::zeroing::{time_zeroing, writer_with_background_zeroing};

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
    /// The writer's bandwidth, MB/s.
    pub writer_mb_s: f64,
    /// Whether the device is simulated.
    pub simulated: bool,
}

/// The sizes zeroed.
pub const SIZES: [u64; 2] = [1 << 30, 10 << 30];
/// The background experiment: 4 GiB written while 10 GiB are zeroed.
const WRITER_BYTES: u64 = 4 << 30;
const ZERO_BYTES: u64 = 10 << 30;

/// The simulated part: every size and method on the `ssd` preset, and the writer.
pub fn simulated(seed: u64) -> Result<(Vec<ZeroRow>, Vec<WriterRow>), CliError> {
    let spec = DeviceSpec::parse("ssd").map_err(CliError::msg)?;
    let mut rows = Vec::new();
    for bytes in SIZES {
        for m in [ZeroingMethod::Unmap, ZeroingMethod::WriteZeroes, ZeroingMethod::ZeroBuffers] {
            let t = time_zeroing(&spec, bytes, m, seed).map_err(CliError::msg)?;
            let published = PUBLISHED.iter().find(|p| p.0 == bytes && p.1 == t.method).map(|p| p.2);
            rows.push(ZeroRow {
                experiment: "zeroes",
                device: t.device,
                method: t.method,
                bytes,
                seconds: t.seconds,
                published_seconds: published,
                simulated: true,
            });
        }
    }
    let mut writers = Vec::new();
    for bg in [None, Some(ZeroingMethod::Unmap), Some(ZeroingMethod::WriteZeroes)] {
        let w = writer_with_background_zeroing(&spec, WRITER_BYTES, ZERO_BYTES, bg, seed).map_err(CliError::msg)?;
        writers.push(WriterRow {
            experiment: "zeroes-writer",
            device: w.device,
            background_zeroing: w.background_zeroing,
            zero_bytes: w.zero_bytes,
            writer_mb_s: w.writer_mb_s,
            simulated: true,
        });
    }
    Ok((rows, writers))
}

/// Runs `zblk sweep zeroes`.
pub fn run(a: &SweepArgs) -> Result<(), CliError> {
    let (rows, writers) = simulated(a.seed)?;
    if a.json {
        let mut all: Vec<serde_json::Value> = Vec::new();
        for r in &rows {
            all.push(serde_json::to_value(r).map_err(CliError::msg)?);
        }
        for w in &writers {
            all.push(serde_json::to_value(w).map_err(CliError::msg)?);
        }
        println!("{}", serde_json::to_string_pretty(&all).map_err(CliError::msg)?);
    } else {
        print!("{}", report(&rows, &writers));
    }
    Ok(())
}

fn gib(b: u64) -> String {
    zblk::units::format_bytes_exact(b)
}

/// The tables.
pub fn report(rows: &[ZeroRow], writers: &[WriterRow]) -> String {
    let mut o = String::new();
    let mut devices: Vec<(&str, bool)> = Vec::new();
    for r in rows {
        if !devices.iter().any(|d| d.0 == r.device) {
            devices.push((&r.device, r.simulated));
        }
    }
    for (dev, sim) in devices {
        let _ = writeln!(o, "== zeroes: {dev}{}", if sim { " (SIMULATED: virtual time)" } else { "" });
        let _ = writeln!(
            o,
            "{:>8} {:>14} {:>12} {:>16} {:>10}",
            "size", "method", "seconds", "published (file)", "vs unmap"
        );
        for r in rows.iter().filter(|r| r.device == dev) {
            let unmap = rows.iter().find(|u| u.device == dev && u.bytes == r.bytes && u.method == "unmap");
            let ratio = unmap.map_or(String::from("-"), |u| format!("{:.1}x", r.seconds / u.seconds.max(1e-12)));
            let published = r.published_seconds.map_or(String::from("-"), |p| format!("{p:.2}"));
            let _ =
                writeln!(o, "{:>8} {:>14} {:>12.4} {:>16} {:>10}", gib(r.bytes), r.method, r.seconds, published, ratio);
        }
        o.push('\n');
    }
    if !writers.is_empty() {
        let _ = writeln!(
            o,
            "== zeroes-writer: sequential 1 MiB writer, QD 8, {} while zeroing {} elsewhere",
            gib(WRITER_BYTES),
            gib(ZERO_BYTES)
        );
        let none = writers.iter().find(|w| w.background_zeroing == "none").map(|w| w.writer_mb_s);
        for w in writers {
            let vs = none.map_or(String::new(), |n| format!(" ({:+.1}% vs none)", (w.writer_mb_s / n - 1.0) * 100.0));
            let _ = writeln!(
                o,
                "  background {:<13} writer {:>8.1} MB/s{vs}{}",
                w.background_zeroing,
                w.writer_mb_s,
                if w.simulated { " (simulated)" } else { "" }
            );
        }
    }
    let _ = writeln!(
        o,
        "\nPublished: dd (buffers of zeroes) vs fallocate -w (unmapped write zeroes) creating a zeroed file on an \
         NVMe SSD with DEAC; the simulated rows zero the raw device, without a file system."
    );
    o
}
