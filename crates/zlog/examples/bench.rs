//! Records per second of the zone-append log: 1, 2, 4, 8 and 16 threads appending
//! records of 4 KiB frames, each thread flushing after every `--flush-every` of its
//! appends (and once at its end), on an image and on the simulated 30 TB SMR disk
//! under the issue policies `qd1`, `batch` and `zwp`; each point the median of
//! `--runs` runs (3).
//!
//! ```sh
//! cargo run --release -p zblk-log --example bench                    # the table of docs/zlog.md
//! cargo run --release -p zblk-log --example bench -- --records 50000 --flush-every 0 --policy zwp sim:zns
//! ```
//!
//! A simulated preset runs on zblk's memory device without its timing model
//! (docs/library.md): its figures are the software path's, not a disk's.

use std::time::Instant;
use zblk::{Handle, IssuePolicy, Options};
use zblk_log::{Log, LogOptions};

const THREADS: [u32; 5] = [1, 2, 4, 8, 16];
/// A record's payload: its frame (with the 32-byte header) is 4 KiB.
const PAYLOAD: usize = 4096 - 32;

struct Args {
    records: u32,
    /// Runs of each point: the median is shown.
    runs: u32,
    flush_every: u32,
    policy: Option<IssuePolicy>,
    targets: Vec<String>,
}

fn args() -> Result<Args, String> {
    let mut a = Args { records: 20_000, runs: 3, flush_every: 64, policy: None, targets: vec![] };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |name: &str| -> Result<u32, String> {
            let v = it.next().ok_or(format!("{name} takes a number"))?;
            v.parse().map_err(|_| format!("{name}: {v} is not a number"))
        };
        match arg.as_str() {
            "--records" => a.records = num("--records")?.max(16),
            "--runs" => a.runs = num("--runs")?.max(1),
            "--flush-every" => a.flush_every = num("--flush-every")?,
            "--policy" => {
                let name = it.next().ok_or("--policy takes a policy's name")?;
                a.policy = Some(IssuePolicy::parse(&name).ok_or(format!("--policy: no policy {name}"))?);
            }
            "-h" | "--help" => {
                return Err("usage: bench [--records N] [--runs N] [--flush-every N] [--policy P] [TARGET ...]".into());
            }
            t => a.targets.push(t.into()),
        }
    }
    Ok(a)
}

/// `threads` threads append `records` records in all, each flushing after every
/// `flush_every` of its appends (0: only at its end): records per second.
fn run(log: &Log, threads: u32, records: u32, flush_every: u32) -> Result<f64, zblk_log::LogError> {
    let per_thread = records / threads;
    let payload = vec![0x5au8; PAYLOAD];
    let t = Instant::now();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    for n in 1..=per_thread {
                        log.append(&payload)?;
                        if flush_every > 0 && n % flush_every == 0 {
                            log.flush()?;
                        }
                    }
                    log.flush()
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().expect("a bench thread panicked"))
    })?;
    Ok(f64::from(per_thread * threads) / t.elapsed().as_secs_f64())
}

/// One row: the log on `spec` under `policy` (the device's own when `None`).
fn row(spec: &str, policy: Option<IssuePolicy>, a: &Args) -> Result<String, Box<dyn std::error::Error>> {
    let opts = policy.map_or_else(Options::new, |p| Options::new().policy(p));
    let h: Handle = opts.open(spec)?;
    let name = h.policy().name();
    let log = Log::open(h, LogOptions::new())?;
    let mut cells = Vec::new();
    for threads in THREADS {
        let mut rates = Vec::new();
        for _ in 0..a.runs {
            rates.push(run(&log, threads, a.records, a.flush_every)?);
            // The zones of this run's records reset for the next one.
            log.trim_to(log.next_seq())?;
        }
        rates.sort_by(f64::total_cmp);
        cells.push(format!("{:>9.0}", rates[rates.len() / 2]));
    }
    log.close()?;
    Ok(format!("| {spec} | {name} | {} |", cells.join(" | ")))
}

/// A fresh image of 32 zones of 64 MiB in a temporary directory.
fn image(dir: &std::path::Path) -> Result<String, Box<dyn std::error::Error>> {
    use zblk_dev::file::{CreateOptions, FileImage};
    let path = dir.join("bench.zbd");
    let geometry = zblk_core::geometry::GeometryParams {
        capacity_bytes: 32 << 26,
        zone_size_bytes: 64 << 20,
        ..Default::default()
    };
    FileImage::create(&path, &CreateOptions { geometry, rotational: false, force: true, preallocate: false })?;
    Ok(path.to_str().ok_or("a temporary directory that is not UTF-8")?.into())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let dir = tempfile::tempdir()?;
    let runs: Vec<(String, Option<IssuePolicy>)> = if a.targets.is_empty() {
        let smr = [IssuePolicy::Qd1, IssuePolicy::Batch, IssuePolicy::Zwp].map(|p| ("sim:smr-30tb".into(), Some(p)));
        std::iter::once((image(dir.path())?, None)).chain(smr).collect()
    } else {
        a.targets.iter().map(|t| (t.clone(), a.policy)).collect()
    };
    let flush = match a.flush_every {
        0 => "a flush at each thread's end only".to_string(),
        n => format!("a flush every {n} appends of a thread"),
    };
    println!("records per second, the median of {} runs of {} records of 4 KiB frames, {flush}\n", a.runs, a.records);
    println!("| target | policy | {} |", THREADS.map(|t| format!("{t} thr")).join(" | "));
    println!("|---|---|{}", "---:|".repeat(THREADS.len()));
    let temporary_image = a.targets.is_empty();
    for (spec, policy) in runs {
        // The temporary image's path says nothing; a target given is shown as given.
        let shown = if temporary_image && !spec.starts_with("sim:") { "image".into() } else { spec.clone() };
        match row(&spec, policy, &a) {
            Ok(r) => println!("{}", r.replacen(&format!("| {spec} "), &format!("| {shown} "), 1)),
            Err(e) => println!("| {shown} | {} | {e} |", policy.map_or("default", IssuePolicy::name)),
        }
    }
    Ok(())
}
