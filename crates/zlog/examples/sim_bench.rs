//! Records per second of the zone-append log on the simulated 30 TB SMR disk in
//! virtual time (`zblk::sim`: zblk's engine and the disk's timing model, seeks,
//! rotation and its write cache), under the issue policies `qd1`, `batch` and `zwp`,
//! with 1, 2, 4, 8 and 16 tasks appending records of 4 KiB frames, each task flushing
//! after every `--flush-every` of its appends (and once at its end). A figure is
//! records per second of the model's time: a SIMULATED figure, not a disk's, and
//! not the software path's (the `bench` example measures that).
//!
//! ```sh
//! cargo run --release -p zblk-log --example sim_bench
//! cargo run --release -p zblk-log --example sim_bench -- --records 4000 --flush-every 0 --seed 7
//! ```

use zblk::IssuePolicy;
use zblk::sim::SimOptions;
use zblk_log::{Log, LogOptions};

const TASKS: [u32; 5] = [1, 2, 4, 8, 16];
/// A record's payload: its frame (with the 32-byte header) is 4 KiB.
const PAYLOAD: usize = 4096 - 32;
/// The disk: the 30 TB model's geometry and timing, 1 GiB of it (its zones 256 MiB).
const DISK: &str = "sim:smr-30tb:size=1G";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (mut records, mut flush_every, mut seed) = (2000u32, 64u32, 1u64);
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            let v = it.next().ok_or(format!("{name} takes a number"))?;
            v.parse().map_err(|_| format!("{name}: {v} is not a number"))
        };
        match arg.as_str() {
            "--records" => records = (num("--records")? as u32).max(16),
            "--flush-every" => flush_every = num("--flush-every")? as u32,
            "--seed" => seed = num("--seed")?,
            _ => return Err("usage: sim_bench [--records N] [--flush-every N] [--seed S]".into()),
        }
    }
    println!(
        "SIMULATED: {DISK}, {records} records of 4 KiB frames, a flush every {flush_every} appends of a task, seed {seed}"
    );
    println!("records per second of model time, by tasks appending at once\n");
    println!("| policy | {} |", TASKS.map(|t| format!("{t:>6}")).join(" | "));
    println!("|---|{}", "---:|".repeat(TASKS.len()));
    for policy in [IssuePolicy::Qd1, IssuePolicy::Batch, IssuePolicy::Zwp] {
        let mut cells = Vec::new();
        for tasks in TASKS {
            let sim = SimOptions::new().policy(policy).open(DISK, seed)?;
            let log = Log::open(sim.handle(), LogOptions::new())?;
            let start = sim.stats().now_ns;
            let spawner = sim.spawner();
            let per_task = records / tasks;
            sim.block_on(async move {
                let workers: Vec<_> = (0..tasks)
                    .map(|_| {
                        let log = log.clone();
                        spawner.spawn(async move {
                            let payload = vec![0x5au8; PAYLOAD];
                            for n in 1..=per_task {
                                log.append_async(&payload).await?;
                                if flush_every > 0 && n % flush_every == 0 {
                                    log.flush_async().await?;
                                }
                            }
                            log.flush_async().await
                        })
                    })
                    .collect();
                for w in workers {
                    w.await?;
                }
                Ok::<_, zblk_log::LogError>(())
            })?;
            let secs = (sim.stats().now_ns - start) as f64 / 1e9;
            cells.push(format!("{:>6.0}", f64::from(per_task * tasks) / secs));
        }
        println!("| {} | {} |", policy.name(), cells.join(" | "));
    }
    Ok(())
}
