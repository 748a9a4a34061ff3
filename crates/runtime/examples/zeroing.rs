//! Zeroing on a real image, by hand: the time to zero (and flush) each size with
//! unmap (the image's fallocate method) and by writing zeroes, alternating the two
//! over a few rounds; then a sequential writer's bandwidth (1 MiB writes, QD 8) alone
//! and with each kind of zeroing running beside it. Calls the functions of
//! `zblk_runtime::zeroing`; every image is created fresh and removed.
//!
//! `cargo run --release --example zeroing -- [DIR] [SIZES] [ROUNDS] [WRITER_SIZE] [ZERO_SIZE] [prefill]`
//!
//! Defaults: `/var/tmp 1G,10G 3 2G 2G` (no prefill: zeroing a fresh image, as
//! creating a zeroed file). `prefill` writes the range first (not timed).

use std::path::Path;
use zblk_core::units::{format_bytes_exact, parse_size};
use zblk_runtime::zeroing::{ZeroMethodChoice, ZeroingBenchOptions, time_writer_with_background_zeroing, time_zeroing};

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let dir = arg(0, "/var/tmp");
    let sizes: Vec<u64> = arg(1, "1G,10G").split(',').map(|s| parse_size(s).expect("a size")).collect();
    let rounds: usize = arg(2, "3").parse().expect("a number of rounds");
    let writer = parse_size(&arg(3, "2G")).expect("a size");
    let zero = parse_size(&arg(4, "2G")).expect("a size");
    let opts = ZeroingBenchOptions { prefill: arg(5, "") == "prefill", ..ZeroingBenchOptions::default() };
    let path = Path::new(&dir).join("zblk-zeroing.img");
    let fail = |e: &dyn std::fmt::Display| -> ! {
        eprintln!("{e}");
        std::process::exit(1)
    };
    for &bytes in &sizes {
        let (mut unmap, mut written) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            // Alternate which goes first: the storage's state drifts over a run.
            let order = if r % 2 == 0 {
                [ZeroMethodChoice::Unmap, ZeroMethodChoice::WriteZeroes]
            } else {
                [ZeroMethodChoice::WriteZeroes, ZeroMethodChoice::Unmap]
            };
            for choice in order {
                let t = time_zeroing(&path, bytes, choice, &opts).unwrap_or_else(|e| fail(&e));
                println!(
                    "{} {:<12} {:<22} {:>10.4} s (zeroing {:.4} s, flush {:.4} s){}",
                    format_bytes_exact(bytes),
                    t.method.name(),
                    t.file_method.name(),
                    t.seconds,
                    t.zeroing_seconds,
                    t.flush_seconds,
                    if r == 0 && choice == order[0] {
                        format!("  [{}; {}]", t.backend, t.probe)
                    } else {
                        String::new()
                    }
                );
                if choice == ZeroMethodChoice::Unmap { &mut unmap } else { &mut written }.push(t.seconds);
            }
        }
        let (u, w) = (median(&mut unmap), median(&mut written));
        println!(
            "{}: median unmap {u:.4} s, write-zeroes {w:.3} s: unmap {:.0}x faster ({rounds} rounds)",
            format_bytes_exact(bytes),
            w / u
        );
    }
    for bg in [None, Some(ZeroMethodChoice::Unmap), Some(ZeroMethodChoice::WriteZeroes)] {
        let t = time_writer_with_background_zeroing(&path, writer, zero, bg, &opts).unwrap_or_else(|e| fail(&e));
        println!(
            "writer {} (1 MiB, QD 8): {:>8.1} MB/s, background zeroing {:<12} {}",
            format_bytes_exact(writer),
            t.writer_mb_s,
            bg.map_or("none", ZeroMethodChoice::name),
            t.zero_seconds.map(|s| format!("({} in {s:.3} s)", format_bytes_exact(t.zero_bytes))).unwrap_or_default()
        );
    }
}
