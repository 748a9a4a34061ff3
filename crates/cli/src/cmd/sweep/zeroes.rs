//! `zblk sweep zeroes`: how long zeroing takes with unmapped WRITE_ZEROES, with
//! WRITE_ZEROES that writes (NOUNMAP) and with buffers of zeroes, and what zeroing
//! in the background costs a sequential writer, on the simulated SSD (the lab's
//! rows, `zblk_lab::zeroes`) and on a real image file (wall-clock time, timed here
//! through the runtime), printed as tables or as JSON rows.

use crate::out::{out, outln};
use crate::{CliError, parse};
use clap::Args;
use std::fmt::Write as _;
use std::path::Path;
use zblk_lab::zeroes::{SIZES, WRITER_BYTES, WriterRow, ZERO_BYTES, ZeroRow, simulated};
use zblk_runtime::zeroing::{ZeroMethodChoice, ZeroingBenchOptions};

/// The real part: every size with unmap and with written zeroes on a fresh image in
/// `dir`, and the writer beside background zeroing. Wall-clock time.
/// `writer_bytes` are written beside as many zeroed (by default 2 GiB: less than the
/// simulated experiment, as it writes to the machine's disk).
pub fn on_image(dir: &Path, sizes: &[u64], writer_bytes: u64) -> Result<(Vec<ZeroRow>, Vec<WriterRow>), CliError> {
    if !dir.is_dir() {
        return Err(CliError(format!("--image-dir {}: not a directory", dir.display())));
    }
    let steps = sizes.len() * 2 + 3;
    let bar = crate::out::progress_bar(steps as u64, "{bar:30} {pos}/{len} ({elapsed}) {msg}");
    let path = |tag: &str| dir.join(format!("zblk-sweep-zeroes-{}-{tag}.img", std::process::id()));
    let opts = ZeroingBenchOptions::default();
    let fail = |e: zblk_runtime::zeroing::ZeroBenchError| CliError(format!("image in {}: {e}", dir.display()));
    let mut rows = Vec::new();
    for &bytes in sizes {
        for choice in [ZeroMethodChoice::Unmap, ZeroMethodChoice::WriteZeroes] {
            if let Some(b) = &bar {
                b.set_message(format!("image: zeroing {} with {}", gib(bytes), choice.name()));
            }
            let t = zblk_runtime::zeroing::time_zeroing(&path(choice.name()), bytes, choice, &opts).map_err(fail)?;
            rows.push(ZeroRow {
                experiment: "zeroes",
                device: format!("image file in {}", dir.display()),
                method: choice.name(),
                how: Some(t.file_method.name()),
                bytes,
                seconds: t.seconds,
                published_seconds: None,
                simulated: false,
            });
            if let Some(b) = &bar {
                b.inc(1);
            }
        }
    }
    let mut writers = Vec::new();
    for bg in [None, Some(ZeroMethodChoice::Unmap), Some(ZeroMethodChoice::WriteZeroes)] {
        if let Some(b) = &bar {
            b.set_message(format!("image: writer, background {}", bg.map_or("none", |c| c.name())));
        }
        let w = zblk_runtime::zeroing::time_writer_with_background_zeroing(
            &path("writer"),
            writer_bytes,
            writer_bytes,
            bg,
            &opts,
        )
        .map_err(fail)?;
        writers.push(WriterRow {
            experiment: "zeroes-writer",
            device: format!("image file in {}", dir.display()),
            background_zeroing: bg.map_or("none", |c| c.name()),
            zero_bytes: w.zero_bytes,
            writer_bytes,
            writer_mb_s: w.writer_mb_s,
            simulated: false,
        });
        if let Some(b) = &bar {
            b.inc(1);
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok((rows, writers))
}

/// `zblk sweep zeroes`' own options (flattened into `zblk sweep`'s).
#[derive(Args, Debug)]
pub struct ZeroesArgs {
    /// zeroes: directory for the real image files (default: the system's temporary
    /// directory). The sweep writes up to the largest size there, then removes it.
    #[arg(long = "image-dir", value_name = "DIR")]
    pub image_dir: Option<std::path::PathBuf>,
    /// zeroes: skip the real image part (simulated rows only).
    #[arg(long = "no-image")]
    pub no_image: bool,
    /// zeroes: bytes the writer writes on the image, and zeroed beside it.
    #[arg(long = "image-writer-size", default_value = "2G", value_parser = parse::size)]
    pub image_writer_size: u64,
    /// zeroes: sizes zeroed on the image, comma-separated (default 1G,10G).
    #[arg(long = "zero-sizes", value_delimiter = ',', value_parser = parse::size)]
    pub zero_sizes: Vec<u64>,
}

/// Runs `zblk sweep zeroes` with `seed`, as tables or as JSON.
pub fn run(a: &ZeroesArgs, seed: u64, json: bool) -> Result<(), CliError> {
    let (mut rows, mut writers) = simulated(seed).map_err(CliError::msg)?;
    if !a.no_image {
        let dir = a.image_dir.clone().unwrap_or_else(std::env::temp_dir);
        let sizes = if a.zero_sizes.is_empty() { SIZES.to_vec() } else { a.zero_sizes.clone() };
        let (r, w) = on_image(&dir, &sizes, a.image_writer_size)?;
        rows.extend(r);
        writers.extend(w);
    }
    if json {
        let mut all: Vec<serde_json::Value> = Vec::new();
        for r in &rows {
            all.push(serde_json::to_value(r).map_err(CliError::msg)?);
        }
        for w in &writers {
            all.push(serde_json::to_value(w).map_err(CliError::msg)?);
        }
        outln!("{}", serde_json::to_string_pretty(&all).map_err(CliError::msg)?);
    } else {
        out!("{}", report(&rows, &writers));
    }
    Ok(())
}

fn gib(b: u64) -> String {
    zblk_core::units::format_bytes_exact(b)
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
        let _ =
            writeln!(o, "== zeroes: {dev}{}", if sim { " (SIMULATED: virtual time)" } else { " (wall-clock time)" });
        let _ = writeln!(
            o,
            "{:>8} {:>36} {:>12} {:>16} {:>10}",
            "size", "method", "seconds", "published (file)", "vs unmap"
        );
        for r in rows.iter().filter(|r| r.device == dev) {
            let unmap = rows.iter().find(|u| u.device == dev && u.bytes == r.bytes && u.method == "unmap");
            let ratio = unmap.map_or(String::from("-"), |u| format!("{:.1}x", r.seconds / u.seconds.max(1e-12)));
            let published = r.published_seconds.map_or(String::from("-"), |p| format!("{p:.2}"));
            let method = match r.how {
                Some(h) => format!("{} ({h})", r.method),
                None => r.method.to_string(),
            };
            let _ = writeln!(o, "{:>8} {method:>36} {:>12.4} {published:>16} {ratio:>10}", gib(r.bytes), r.seconds);
        }
        o.push('\n');
    }
    for sim in [true, false] {
        let group: Vec<&WriterRow> = writers.iter().filter(|w| w.simulated == sim).collect();
        let Some(first) = group.first() else { continue };
        let (wb, zb) = if sim { (WRITER_BYTES, ZERO_BYTES) } else { (first.writer_bytes, first.writer_bytes) };
        let _ = writeln!(
            o,
            "== zeroes-writer: {}{}: sequential 1 MiB writer, QD 8, {} while zeroing {} elsewhere",
            first.device.split(" (").next().unwrap_or(""),
            if sim { " (SIMULATED)" } else { " (wall-clock time)" },
            gib(wb),
            gib(zb)
        );
        let none = group.iter().find(|w| w.background_zeroing == "none").map(|w| w.writer_mb_s);
        for w in group {
            let vs = none.map_or(String::new(), |n| format!(" ({:+.1}% vs none)", (w.writer_mb_s / n - 1.0) * 100.0));
            let _ = writeln!(
                o,
                "  background {:<13} writer {:>8.1} MB/s{vs}{}",
                w.background_zeroing,
                w.writer_mb_s,
                if w.simulated { " (simulated)" } else { "" }
            );
        }
        o.push('\n');
    }
    let _ = writeln!(
        o,
        "Published: dd (buffers of zeroes) vs fallocate -w (unmapped write zeroes) creating a zeroed file on an \
         NVMe SSD with DEAC; the simulated rows zero the raw device, without a file system."
    );
    o
}
