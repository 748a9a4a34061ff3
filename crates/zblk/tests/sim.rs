//! `zblk::sim`: the handle on a simulated device in virtual time, under the seeded
//! executor: a seed replays exactly, faults come back as the handle's errors, a
//! power loss keeps what was flushed, a deadlock names its seed.

use zblk::sim::{FaultConfig, Sim, SimOptions};
use zblk::{Error, ZoneCond};

const DEVICE: &str = "sim:nullb:zone_size=1,size=8";

/// Four tasks append 32 records each to two zones, flushing now and then, under
/// faults; returns the digest, where each record landed (or its errno) and the
/// zones' write pointers.
fn run(seed: u64) -> (u64, Vec<Result<u64, i32>>, Vec<u64>) {
    let faults = FaultConfig { write_error_ppm: 20_000, timeout_ppm: 10_000, write_cache: true, ..Default::default() };
    let sim = SimOptions::new().faults(faults).open(DEVICE, seed).unwrap();
    let h = sim.handle();
    let spawner = sim.spawner();
    let zone = h.zone_size();
    let placed = sim.block_on(async move {
        let tasks: Vec<_> = (0..4u64)
            .map(|t| {
                let h = h.clone();
                spawner.spawn(async move {
                    let mut out = Vec::new();
                    for k in 0..32u64 {
                        let at = h.append_async(zone * (1 + t % 2), vec![(t * 32 + k) as u8; 1024]).await;
                        out.push(at.map(|(at, _)| at).map_err(|e| e.errno()));
                        if k % 8 == 7 {
                            let _ = h.flush_async().await;
                        }
                    }
                    out
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await);
        }
        all
    });
    let wps = sim.handle().report().unwrap().iter().map(|z| z.wp).collect();
    (sim.digest(), placed, wps)
}

#[test]
fn a_seed_replays_exactly_and_seeds_differ() {
    for seed in 1..=5 {
        let a = run(seed);
        assert_eq!(a, run(seed), "seed {seed}");
        assert_ne!(a.0, run(seed + 100).0, "seeds {seed} and {}", seed + 100);
    }
}

#[test]
fn tasks_interleave_by_the_seed() {
    // Records of the four tasks interleave in a zone, differently from seed to seed.
    let orders: std::collections::BTreeSet<Vec<u64>> = (1..=8)
        .map(|seed| {
            let (_, placed, _) = run(seed);
            let mut by_place: Vec<(u64, u64)> =
                placed.iter().enumerate().filter_map(|(i, r)| r.ok().map(|at| (at, i as u64 / 32))).collect();
            by_place.sort();
            by_place.iter().map(|&(_, t)| t).collect()
        })
        .collect();
    assert!(orders.len() > 1, "every seed ran the tasks in the same order");
}

#[test]
fn faults_come_back_as_the_handles_errors() {
    let faults = FaultConfig { write_error_ppm: 1_000_000, read_error_ppm: 1_000_000, ..Default::default() };
    let sim = SimOptions::new().faults(faults).open(DEVICE, 3).unwrap();
    let h = sim.handle();
    let zone = h.zone_size();
    let e = h.append(zone, &[1; 4096]).unwrap_err();
    assert!(matches!(e, Error::Io { .. }) && e.errno() == 5, "{e}");
    let e = sim.block_on(async move { h.read_at_async(zone, vec![0; 4096]).await.map(drop) }).unwrap_err();
    assert_eq!(e.errno(), 5, "{e}");
    assert!(sim.stats().faults >= 2);

    // A zone failing: READONLY or OFFLINE, the write refused, the report saying so.
    let faults = FaultConfig { zone_fail_ppm: 1_000_000, ..Default::default() };
    let sim = SimOptions::new().faults(faults).open(DEVICE, 4).unwrap();
    let h = sim.handle();
    let zone = h.zone_size();
    assert_eq!(h.write_at(zone, &[1; 4096]).unwrap_err().errno(), 5);
    assert!(matches!(h.zone(zone).unwrap().cond, ZoneCond::ReadOnly | ZoneCond::Offline));
}

#[test]
fn a_power_loss_keeps_what_was_flushed() {
    let faults = FaultConfig { write_cache: true, ..Default::default() };
    let mut lost = 0;
    for seed in 1..=20 {
        let sim = SimOptions::new().faults(faults).open(DEVICE, seed).unwrap();
        let h = sim.handle();
        let zone = h.zone_size();
        h.append(zone, &[1; 4096]).unwrap();
        h.flush().unwrap();
        for _ in 0..4 {
            h.append(zone, &[2; 4096]).unwrap();
        }
        sim.power_loss();
        assert_eq!(h.append(zone, &[3; 512]).unwrap_err().errno(), 19, "the old host's handle is gone");
        let h = sim.handle();
        let wp = h.zone(zone).unwrap().wp;
        assert!(wp >= zone + 4096 && wp <= zone + 5 * 4096, "seed {seed}: wp {wp}");
        let mut back = vec![0; 4096];
        h.read_at(zone, &mut back).unwrap();
        assert_eq!(back, [1; 4096], "seed {seed}: the flushed record");
        lost += u64::from(wp < zone + 5 * 4096);
        // The new host appends where the device says.
        assert_eq!(h.append(zone, &[4; 512]).unwrap(), wp);
    }
    assert!(lost > 0, "no seed lost an unflushed record from the cache");
}

#[test]
fn a_power_cut_at_a_step_drops_the_tasks() {
    let sim = Sim::new(DEVICE, 9).unwrap();
    let h = sim.handle();
    let zone = h.zone_size();
    let out = sim.run(
        async move {
            for _ in 0..100 {
                h.append_async(zone, vec![1; 512]).await.unwrap();
            }
        },
        Some(50),
    );
    assert!(out.is_none());
    assert_eq!(sim.stats().power_losses, 1);
    let wp = sim.handle().zone(zone).unwrap().wp;
    assert!(wp > zone && wp < zone + 100 * 512, "part of the appends ran: wp {wp}");
}

#[test]
fn a_closed_handle_is_replaced() {
    let sim = Sim::new(DEVICE, 2).unwrap();
    let h = sim.handle();
    let zone = h.zone_size();
    h.append(zone, &[1; 512]).unwrap();
    h.close().unwrap();
    assert!(matches!(h.flush(), Err(Error::Closed)));
    assert_eq!(sim.handle().zone(zone).unwrap().wp, zone + 512);
}

#[test]
#[should_panic(expected = "zblk::sim seed 5: every task waits")]
fn a_deadlock_names_its_seed() {
    let sim = Sim::new(DEVICE, 5).unwrap();
    sim.block_on(std::future::pending::<()>());
}

#[test]
fn only_simulated_presets() {
    assert_eq!(Sim::new("img.zbd", 1).unwrap_err().errno(), 95);
    assert_eq!(Sim::new("sim:nosuch", 1).unwrap_err().errno(), 22);
    assert!(SimOptions::new().queue_depth(0).open(DEVICE, 1).is_err());
}

#[test]
fn seeds_come_from_the_environment_or_the_default() {
    // (The variables are unset in the test suite.)
    if std::env::var_os("ZBLK_SIM_SEED").is_none() && std::env::var_os("ZBLK_SIM_SEEDS").is_none() {
        assert_eq!(zblk::sim::seeds(10, 5), 10..=14);
    }
}

/// A seed that is not a number is said, not ignored (a replay that silently ran the
/// default seeds would pass for a replay); the largest seed is a seed.
#[test]
fn a_bad_seed_variable_is_refused() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "seeds_of_the_environment", "--ignored", "--nocapture", "--test-threads", "1"])
        .env("ZBLK_SIM_SEED", "12x")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("ZBLK_SIM_SEED=12x: not a seed"), "{text}");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "seeds_of_the_environment", "--ignored", "--nocapture", "--test-threads", "1"])
        .env("ZBLK_SIM_SEED", u64::MAX.to_string())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("seeds {0}..={0}", u64::MAX)), "{out:?}");
}

/// Prints the seeds the environment gives: the child of the test above.
#[test]
#[ignore = "the child process of a_bad_seed_variable_is_refused"]
fn seeds_of_the_environment() {
    println!("seeds {:?}", zblk::sim::seeds(1, 10));
}

/// Prints seed 11's digest: the child of the test below, which runs it.
#[test]
#[ignore = "the child process of another_process_gets_the_same_digest"]
fn child_digest() {
    println!("digest={:x}", run(11).0);
}

#[test]
fn another_process_gets_the_same_digest() {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_digest", "--ignored", "--nocapture", "--test-threads", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // (The harness prints the test's name on the same line.)
    let theirs = text.split("digest=").nth(1).and_then(|t| t.split_whitespace().next()).expect("the child's digest");
    assert_eq!(theirs, format!("{:x}", run(11).0), "{text}");
}
