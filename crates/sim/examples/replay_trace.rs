//! Replays the writes, zone resets and flushes a trace says were issued to the disk
//! (its `D` lines: `zblk serve --trace`, `zblk bench --trace`) into a fresh SMR 30 TB
//! model, each request at its issue time, open loop, and prints each reset's time on
//! the disk (the model writes its cache back first), when a flush (fio's end_fsync)
//! is done, and the model's counters. Two hosts' streams can so be compared on
//! the same model, and a stream changed by hand (reordered, retimed) measured:
//! `cargo run --release -p zblk-sim --example replay_trace TRACE`. Every figure is
//! the model's (SIMULATED).
use std::io::BufRead;
use zblk_core::bio::{Op, Request};
use zblk_core::units::Sector;
use zblk_sim::DeviceModel;
use zblk_sim::hdd::{HddModel, HddParams};

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: replay_trace TRACE (a zblk serve --trace or zblk bench --trace file)");
        std::process::exit(2);
    };
    let f = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let mut reqs: Vec<(u64, Op, u64, u32)> = Vec::new();
    for line in f.lines() {
        let line = line.unwrap();
        if line.starts_with('#') {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() < 9 || w[5] != "D" {
            continue;
        }
        let t: f64 = w[3].parse().unwrap();
        let op = match w[6] {
            "W" => Op::Write,
            "N" if line.contains("RESET") => Op::ZoneReset,
            // A flush (fio's end_fsync): its completion is when the cache is written back.
            "F" | "FN" => Op::Flush,
            _ => continue,
        };
        let plus = w.iter().position(|x| *x == "+").unwrap();
        let sector: u64 = w[plus - 1].parse().unwrap();
        let n: u32 = w[plus + 1].parse().unwrap();
        reqs.push(((t * 1e9) as u64, op, sector, n));
    }
    let t0 = reqs.first().map(|r| r.0).unwrap_or(0);
    let mut m = HddModel::new(HddParams::smr_30tb());
    let mut done = Vec::new();
    let mut issued = std::collections::HashMap::new();
    let mut i = 0;
    let mut bytes = 0u64;
    let mut last_c = 0u64;
    loop {
        let next_sub = reqs.get(i).map(|r| r.0 - t0);
        let next_ev = m.next_event_ns();
        match (next_sub, next_ev) {
            (None, None) => break,
            (Some(s), e) if e.is_none_or(|e| s <= e) => {
                let (_, op, sector, n) = reqs[i];
                let mut r = Request::direct(op, Sector(sector), n);
                r.user_data = i as u64;
                issued.insert(i as u64, s);
                m.submit(s, &r);
                i += 1;
            }
            (_, Some(e)) => {
                m.advance(e, &mut done);
                for r in done.drain(..) {
                    let s = issued[&r.user_data];
                    if r.op == Op::Flush {
                        println!("flush issued {:.3} s, done {:.3} s", s as f64 / 1e9, e as f64 / 1e9);
                        last_c = last_c.max(e);
                    } else if r.op == Op::ZoneReset {
                        println!(
                            "reset zone {} issued {:.3} s, took {:.3} s",
                            r.sector.0 / 524288,
                            s as f64 / 1e9,
                            (e - s) as f64 / 1e9
                        );
                    } else {
                        bytes += u64::from(r.nr_sectors) * 512;
                        last_c = e;
                    }
                }
            }
            _ => unreachable!(),
        }
    }
    let counters: Vec<String> = m.counters().iter().map(|(k, v)| format!("{k}={v:.3}")).collect();
    println!("model: {}", counters.join(" "));
    println!("writes {:.1} MB, last completion {:.3} s (SIMULATED replay)", bytes as f64 / 1e6, last_c as f64 / 1e9);
}
