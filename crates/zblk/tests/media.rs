//! `zblk::sim`'s medium faults: a power loss tears the write in progress (with a
//! write cache and without), leaving a prefix of whole blocks and the write pointer
//! where it ends, never other bytes; silent corruption changes one byte of what a
//! read returns, with no error, for every later read too. Each test runs seeds
//! (`ZBLK_SIM_SEED=S` replays one, `ZBLK_SIM_SEEDS=N` runs more).

use zblk::sim::{FaultConfig, SimOptions, check_seeds, seeds};

const DEVICE: &str = "sim:nullb:zone_size=1,size=8";
const WRITE: usize = 8192;

/// What write `k` of a test writes: 16 blocks, each saying its write and block.
fn data(k: usize) -> Vec<u8> {
    (0..WRITE).map(|i| (k * 16 + i / 512) as u8 ^ 0x5a).collect()
}

/// The zone at `zone` holds a prefix of `writes` laid end to end from `from`: its
/// write pointer on a block, the bytes below it as written, none past the writes.
/// Returns whether the write pointer ends inside a write (a torn one).
fn a_prefix_of(h: &zblk::Handle, zone: u64, from: u64, writes: usize) -> bool {
    let wp = h.zone(zone).unwrap().wp;
    assert!(wp >= zone + from && wp <= zone + from + (writes * WRITE) as u64, "wp {wp}");
    assert_eq!(wp % h.block_size(), 0, "a write pointer on a block");
    let kept = (wp - zone - from) as usize;
    if kept > 0 {
        let mut back = vec![0u8; kept];
        h.read_at(zone + from, &mut back).unwrap();
        let written: Vec<u8> = (0..writes).flat_map(data).take(kept).collect();
        assert!(back == written, "the bytes below the write pointer are what was written");
    }
    kept % WRITE != 0
}

#[test]
fn a_power_loss_tears_the_cached_write_in_progress() {
    let faults = FaultConfig { write_cache: true, ..FaultConfig::default() };
    for torn_writes in [true, false] {
        let (mut torn, mut counted) = (0, 0);
        check_seeds(seeds(1, 200), |seed| {
            let sim = SimOptions::new().faults(faults).torn_writes(torn_writes).open(DEVICE, seed).unwrap();
            let h = sim.handle();
            let zone = h.zone_size();
            h.write_at(zone, &[7; 4096]).unwrap();
            h.flush().unwrap();
            for k in 0..4 {
                h.write_at(zone + 4096 + (k * WRITE) as u64, &data(k)).unwrap();
            }
            sim.power_loss();
            torn += u64::from(a_prefix_of(&sim.handle(), zone, 4096, 4));
            counted += sim.stats().torn_writes;
        });
        eprintln!("torn_writes({torn_writes}): {torn} of 200 seeds tore a cached write");
        assert_eq!(torn, counted, "every write pointer inside a write is a torn write counted");
        assert_eq!(torn > 0, torn_writes, "torn writes only when on, and then some");
    }
}

#[test]
fn a_power_cut_tears_a_write_in_flight_without_a_cache() {
    let mut torn = 0;
    check_seeds(seeds(1, 200), |seed| {
        // Completions take 1 ms: writes reach the device at once, and are in flight
        // when the power goes a few steps in.
        let sim = SimOptions::new().open("sim:nullb:zone_size=1,size=8,completion_nsec=1000000", seed).unwrap();
        let h = sim.handle();
        let zone = h.zone_size();
        let writes = async move {
            let pending: Vec<_> = (0..4).map(|k| h.write_at_async(zone + (k * WRITE) as u64, data(k))).collect();
            for p in pending {
                p.await.unwrap();
            }
        };
        let cut = 1 + sim.random(8);
        sim.run(writes, Some(cut));
        torn += u64::from(a_prefix_of(&sim.handle(), zone, 0, 4));
        assert!(sim.stats().torn_writes <= 1, "one write per zone at most");
    });
    eprintln!("{torn} of 200 seeds tore a write in flight");
    assert!(torn > 0);
}

#[test]
fn silent_corruption_changes_a_byte_and_says_nothing() {
    let mut corrupted = 0;
    check_seeds(seeds(1, 50), |seed| {
        let sim = SimOptions::new().corrupt_read_ppm(500_000).open(DEVICE, seed).unwrap();
        let h = sim.handle();
        let zone = h.zone_size();
        h.write_at(zone, &data(1)).unwrap();
        let mut first = vec![0u8; WRITE];
        h.read_at(zone, &mut first).unwrap();
        let changed = first.iter().zip(data(1)).filter(|(a, b)| **a != *b).count();
        assert_eq!(changed, sim.stats().corrupted_reads as usize, "a byte changed per corrupted read");
        // It is the medium's: read again, the byte is still changed (and maybe
        // another one now).
        let mut again = vec![0u8; WRITE];
        h.read_at(zone, &mut again).unwrap();
        let still = first.iter().zip(&again).filter(|(a, b)| a != b).count();
        assert_eq!(still, sim.stats().corrupted_reads as usize - changed, "only a new corruption differs");
        // Nothing is written past a write pointer: an empty zone reads as zeroes.
        let before = sim.stats().corrupted_reads;
        let mut empty = vec![1u8; WRITE];
        h.read_at(3 * zone, &mut empty).unwrap();
        assert!(empty.iter().all(|&b| b == 0) && sim.stats().corrupted_reads == before);
        corrupted += changed;
    });
    assert!(corrupted > 10, "{corrupted} of 50 first reads corrupted at 50%");
    // Off by default.
    let sim = SimOptions::new().open(DEVICE, 1).unwrap();
    let h = sim.handle();
    h.write_at(h.zone_size(), &data(1)).unwrap();
    let mut back = vec![0u8; WRITE];
    for _ in 0..100 {
        h.read_at(h.zone_size(), &mut back).unwrap();
        assert_eq!(back, data(1));
    }
}
