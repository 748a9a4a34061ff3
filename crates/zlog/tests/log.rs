//! The log on an image and on simulated presets: threads append, flush, reopen, and
//! every durable record is found in its thread's order, none invented; kill -9 at
//! random points (a child process appending and flushing, saying which records are
//! durable); reclaim by reset; a torn record skipped; bad input as typed errors.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use zblk::{Handle, ZoneCond};
use zblk_log::{Location, Log, LogError, LogOptions, Record};

// The kill -9 harness of the runtime's crash tests, shared by path.
#[path = "../../runtime/tests/common/mod.rs"]
mod common;

/// Thread `t`'s record `n`: `t`, `n`, then bytes drawn from both, of a length drawn
/// from both (8 to 3000 bytes: frames of one to six 512-byte blocks).
fn payload(t: u32, n: u32) -> Vec<u8> {
    let h = (u64::from(t) << 32 | u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let len = 8 + (h >> 40) as usize % 2993;
    let mut p: Vec<u8> = (0..len).map(|i| (h >> (i % 7 * 8)) as u8 ^ i as u8).collect();
    p[0..4].copy_from_slice(&t.to_le_bytes());
    p[4..8].copy_from_slice(&n.to_le_bytes());
    p
}

/// Which thread's record a found one is, if it is one of [`payload`]'s.
fn whose(r: &Record) -> Option<(u32, u32)> {
    let word = |i: usize| Some(u32::from_le_bytes(r.payload.get(i..i + 4)?.try_into().ok()?));
    let (t, n) = (word(0)?, word(4)?);
    (payload(t, n) == r.payload).then_some((t, n))
}

/// `found` (in sequence order) against the records appended: each is one a thread
/// appended (none invented), each thread's in its order, each only once, and every
/// record `durable` says (per thread, its records up to that number) is there.
fn check(found: &[Record], durable: &BTreeMap<u32, u32>) -> Result<(), String> {
    let mut last: BTreeMap<u32, u32> = BTreeMap::new();
    for r in found {
        let (t, n) = whose(r).ok_or_else(|| format!("record {} at byte {} was never appended", r.seq, r.offset))?;
        match last.get(&t) {
            Some(&prev) if n <= prev => {
                return Err(format!("thread {t}: record {n} (seq {}) found after its record {prev}", r.seq));
            }
            prev if n != prev.map_or(0, |p| p + 1) => {
                return Err(format!("thread {t}: record {n} found, the one before it missing"));
            }
            _ => {}
        }
        last.insert(t, n);
    }
    for (&t, &n) in durable {
        if last.get(&t).is_none_or(|&l| l < n) {
            return Err(format!("thread {t}: record {n} was durable, found only up to {:?}", last.get(&t)));
        }
    }
    Ok(())
}

/// `threads` threads append `per_thread` records each; every location returned
/// reads back.
fn append_from_threads(log: &Log, threads: u32, per_thread: u32) -> Vec<Location> {
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    (0..per_thread).map(|n| log.append(&payload(t, n)).expect("append")).collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    })
}

fn image(path: &Path, seq_zones: u32, zone_sectors: u64) -> String {
    common::create_fresh(path, common::crash_geometry(seq_zones, zone_sectors, 0));
    path.to_str().unwrap().into()
}

/// Appends from 8 threads, flushes, closes and opens again: on an image; on the
/// simulated null_blk, ZNS drive and SMR disk (those start empty, so the scan runs on
/// the same handle instead of a reopen).
#[test]
fn threads_append_and_a_reopen_finds_every_record_in_order() {
    let (threads, per_thread) = (8, 150);
    let all: BTreeMap<u32, u32> = (0..threads).map(|t| (t, per_thread - 1)).collect();
    let dir = tempfile::tempdir().unwrap();
    let spec = image(&dir.path().join("log.img"), 16, 2048);
    let log = Log::open(open_image(&spec), LogOptions::new()).unwrap();
    assert_eq!((log.recovery().zones, log.recovery().records), (16, 0));
    let landed = append_from_threads(&log, threads, per_thread);
    log.flush().unwrap();
    for at in landed.iter().step_by(37) {
        whose(&Record { seq: at.seq, offset: at.offset, payload: log.read(at).unwrap() }).expect("reads back");
    }
    log.close().unwrap();

    let mut found = Vec::new();
    let again = Log::open_with(open_image(&spec), LogOptions::new(), |r| found.push(r)).unwrap();
    found.sort_by_key(|r| r.seq);
    let rec = again.recovery();
    assert_eq!((rec.records, rec.skipped_bytes), (u64::from(threads * per_thread), 0));
    check(&found, &all).unwrap();
    assert_eq!(again.records().unwrap(), found);
    assert_eq!(again.next_seq(), u64::from(threads * per_thread), "sequence numbers continue");
    // The zones the first run used are sealed and finished: appends go on elsewhere.
    let at = again.append(b"after the reopen").unwrap();
    assert!(found.iter().all(|r| r.offset / (1 << 20) != at.offset / (1 << 20)), "a fresh zone");

    // null_blk with native zone append and without (emulated, as on an SMR disk), the
    // ZNS drive (native, 14 active zones), the SMR disk (the single issuer).
    for spec in [
        "sim:nullb:zone_size=4,size=64",
        "sim:nullb:zone_size=4,size=64,zone_append_max_sectors=0",
        "sim:zns",
        "sim:smr-30tb",
    ] {
        let log = Log::open(Handle::open(spec).unwrap(), LogOptions::new()).unwrap();
        append_from_threads(&log, 4, 100);
        log.flush().unwrap();
        check(&log.records().unwrap(), &(0..4).map(|t| (t, 99)).collect()).unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
}

#[test]
fn trimming_resets_the_zones_of_old_records() {
    let dir = tempfile::tempdir().unwrap();
    let spec = image(&dir.path().join("trim.img"), 8, 2048);
    let log = Log::open(open_image(&spec), LogOptions::new()).unwrap();
    let rec = vec![7u8; 100 << 10];
    let mut landed = Vec::new();
    let full = loop {
        match log.append(&rec) {
            Ok(at) => landed.push(at),
            Err(e) => break e,
        }
    };
    assert!(matches!(full, LogError::Full { zones: 8 }), "{full:?}");
    assert_eq!(full.errno(), 28);
    let zone_of = |at: &Location| at.offset >> 20;
    let per_zone = landed.iter().filter(|at| zone_of(at) == zone_of(&landed[0])).count();
    assert_eq!(landed.len(), 8 * per_zone, "every zone filled alike");
    // The first record of the fourth zone: the first three zones' records precede it.
    let cut = landed[3 * per_zone];
    assert_eq!(log.trim_to(cut.seq).unwrap(), 3);
    let zones = log.handle().report().unwrap();
    let empty: Vec<u64> = zones.iter().filter(|z| z.cond == ZoneCond::Empty).map(|z| z.start >> 20).collect();
    assert_eq!(empty, [1, 2, 3], "the first three sequential zones reset");
    assert_eq!(log.trim_to(cut.seq).unwrap(), 0, "nothing more to reclaim");
    let found = log.records().unwrap();
    assert_eq!(found.len(), landed.len() - 3 * per_zone);
    assert_eq!(found[0].seq, cut.seq);
    // The freed zones take appends again; the zone of the newest record is kept.
    let at = log.append(&rec).unwrap();
    assert_eq!(zone_of(&at), 1);
    log.close().unwrap();
    let again = Log::open(open_image(&spec), LogOptions::new()).unwrap();
    assert_eq!(again.next_seq(), at.seq + 1);
    assert_eq!(again.trim_to(u64::MAX).unwrap(), 5, "all but the newest record's zone");
    assert_eq!(again.records().unwrap().iter().map(|r| r.seq).collect::<Vec<_>>(), [at.seq]);
}

/// Under an active zone limit of 2 (a ZNS drive's 14, smaller): the log finishes each
/// zone it leaves, or the third zone's first append would fail with EOVERFLOW.
#[test]
fn zones_left_behind_are_finished_under_an_active_zone_limit() {
    let h = Handle::open("sim:nullb:zone_size=1,size=16,zone_max_open=2,zone_max_active=2").unwrap();
    let log = Log::open(h, LogOptions::new()).unwrap();
    let landed = append_from_threads(&log, 4, 600);
    assert!(landed.iter().map(|at| at.offset >> 20).max() > Some(3), "more zones used than the limit");
    log.flush().unwrap();
    check(&log.records().unwrap(), &(0..4).map(|t| (t, 599)).collect()).unwrap();
    let zones = log.handle().report().unwrap();
    let active = zones.iter().filter(|z| !matches!(z.cond, ZoneCond::Empty | ZoneCond::Full)).count();
    assert_eq!(active, 1, "only the head zone is active");
}

/// A zone filled behind the log's back (finished through the handle): the append
/// there fails, with the device's error, and the next one goes to a fresh zone.
#[test]
fn a_failed_append_leaves_its_zone_behind() {
    let log = Log::open(Handle::open("sim:nullb:zone_size=1,size=8").unwrap(), LogOptions::new()).unwrap();
    let first = log.append(b"one").unwrap();
    log.handle().finish_zone(first.offset).unwrap();
    let e = log.append(b"two").unwrap_err();
    assert!(matches!(e, LogError::Device(zblk::Error::Io { .. })), "{e:?}");
    assert_eq!(e.errno(), 5);
    let third = log.append(b"three").unwrap();
    assert_eq!(third.offset, first.offset + (1 << 20), "the next zone");
    let found: Vec<_> = log.records().unwrap().into_iter().map(|r| r.payload).collect();
    assert_eq!(found, [&b"one"[..], b"three"]);
}

#[test]
fn a_torn_record_is_skipped_and_the_records_after_it_found() {
    let dir = tempfile::tempdir().unwrap();
    let spec = image(&dir.path().join("torn.img"), 4, 2048);
    let log = Log::open(open_image(&spec), LogOptions::new()).unwrap();
    let first = log.append(&payload(0, 0)).unwrap();
    // A frame whose payload was not all written: the record's own frame, a byte of
    // its payload changed, appended behind it (as a crash leaves a write pointer
    // past data that did not all reach the media).
    let mut frame = vec![0u8; first.len as usize];
    log.handle().read_at(first.offset, &mut frame).unwrap();
    frame[36] ^= 0xff; // a byte of the payload (its bytes 32..40)
    let torn = log.handle().append(first.offset, &frame).unwrap();
    let next = log.append(&payload(0, 1)).unwrap();
    assert_eq!((torn, next.offset), (first.offset + first.len, torn + first.len));
    assert!(matches!(log.read(&Location { offset: torn, ..first }), Err(LogError::NotARecord { .. })));
    log.close().unwrap();
    let again = Log::open(open_image(&spec), LogOptions::new()).unwrap();
    assert_eq!((again.recovery().records, again.recovery().skipped_bytes), (2, first.len));
    // Reported where it lies, with the number its header claims.
    let damaged = zblk_log::Damaged { offset: torn, len: first.len, claimed_seq: Some(first.seq) };
    assert_eq!(again.recovery().damaged, [damaged]);
    check(&again.records().unwrap(), &BTreeMap::from([(0, 1)])).unwrap();
}

#[test]
fn bad_input_is_a_typed_error() {
    let log = Log::open(Handle::open("sim:nullb:zone_size=1,size=8").unwrap(), LogOptions::new()).unwrap();
    assert_eq!(log.max_payload(), (1 << 20) - 32);
    let e = log.append(&vec![0; log.max_payload() + 1]).unwrap_err();
    assert!(matches!(e, LogError::TooLarge { len, max } if len == max + 1 && max == (1 << 20) - 32), "{e:?}");
    assert_eq!(e.errno(), 22);
    let at = log.append(&vec![1; log.max_payload()]).unwrap();
    assert_eq!(at.len, 1 << 20, "a record as large as a zone");
    let outside = Location { offset: at.offset + 512, ..at };
    assert!(matches!(log.read(&outside), Err(LogError::NotARecord { .. })));
    for bad in [Location { len: 0, ..at }, Location { len: 2 << 20, ..at }, Location { seq: at.seq + 1, ..at }] {
        assert!(matches!(log.read(&bad), Err(LogError::NotARecord { .. })), "{bad:?}");
    }
    log.close().unwrap();
    log.close().unwrap();
    for e in [log.append(b"x").unwrap_err(), log.flush().unwrap_err(), log.trim_to(1).unwrap_err()] {
        assert!(matches!(e, LogError::Closed), "{e:?}");
        assert_eq!(e.errno(), 19);
    }
    let closed = Log::open(log.handle().clone(), LogOptions::new()).unwrap_err();
    assert!(matches!(closed, LogError::Device(zblk::Error::Closed)), "{closed:?}");

    let h = Handle::open("sim:nullb:zone_size=1,size=8,zone_nr_conv=2").unwrap();
    for range in [0..2, 5..5, 9..12] {
        let e = Log::open(h.clone(), LogOptions::new().zones(range.clone())).unwrap_err();
        assert!(matches!(e, LogError::NoZones { .. }), "{range:?}: {e:?}");
        assert_eq!(e.errno(), 22);
    }
    let log = Log::open(h, LogOptions::new().zones(0..4)).unwrap();
    assert_eq!(log.recovery().zones, 2);
}

// -------------------------------------------------------------------- kill -9

const CHILD_ENV: &str = "ZLOG_KILL_CHILD";

/// Runs of kill -9: `ZLOG_RUNS`, or 20; seeds from `ZLOG_SEED`, or 1.
fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// The child of [`kill_nine_at_random_points`]: 4 threads append their records to
/// the log on the image; each flushes after a number of appends drawn from the seed
/// and then says which of its records are durable (`D thread record`), until it is
/// killed (or 20 s have gone, should the parent be gone).
#[test]
#[ignore = "the child process of kill_nine_at_random_points"]
fn zlog_child() {
    use rand::{RngExt, SeedableRng};
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let mut parts = spec.split('|');
    let (img, out, seed) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let seed: u64 = seed.parse().unwrap();
    let log = Log::open(Handle::open(img).unwrap(), LogOptions::new()).unwrap();
    let out = Mutex::new(std::fs::OpenOptions::new().create(true).append(true).open(out).unwrap());
    let say = |line: String| out.lock().unwrap().write_all(line.as_bytes()).unwrap();
    say("# started\n".into());
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let (log, say) = (&log, &say);
            s.spawn(move || {
                let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(seed ^ u64::from(t) << 32);
                let mut n = 0u32;
                while t0.elapsed() < Duration::from_secs(20) {
                    for _ in 0..rng.random_range(1..8) {
                        match log.append(&payload(t, n)) {
                            Ok(_) => n += 1,
                            Err(LogError::Full { .. }) => return,
                            Err(e) => panic!("append: {e}"),
                        }
                    }
                    log.flush().unwrap();
                    say(format!("D {t} {}\n", n - 1));
                }
            });
        }
    });
}

/// Per thread, its newest record the child said was durable.
fn durable_said(out: &Path) -> BTreeMap<u32, u32> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    // A line cut by the kill (no newline) is dropped: it was not said.
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    let mut durable = BTreeMap::new();
    for l in complete.lines().filter_map(|l| l.strip_prefix("D ")) {
        let (t, n) = l.split_once(' ').unwrap();
        let (t, n): (u32, u32) = (t.parse().unwrap(), n.parse().unwrap());
        let e = durable.entry(t).or_insert(n);
        *e = (*e).max(n);
    }
    durable
}

/// The handle on an image, tried again for up to 10 s while the image is in use: a
/// killed process's lingering I/O may hold its lock for a moment, and so may a child
/// the kill -9 test forks, which holds every descriptor of this process (an image
/// another test just closed) until it execs.
fn open_image(spec: &str) -> Handle {
    let t = Instant::now();
    loop {
        match Handle::open(spec) {
            Err(e) if e.errno() == 16 && t.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            r => return r.unwrap_or_else(|e| panic!("open {spec}: {e}")),
        }
    }
}

#[test]
fn kill_nine_at_random_points() {
    let (runs, base) = (env_or("ZLOG_RUNS", 20), env_or("ZLOG_SEED", 1));
    let dir = tempfile::tempdir().unwrap();
    let (mut said, mut found_total, mut zones) = (0u64, 0u64, 0usize);
    for seed in base..base + runs {
        let img = dir.path().join("kill.img");
        let out = dir.path().join("kill.out");
        // Zones of 64 KiB: a run crosses from zone to zone (sealed, finished) while killed.
        let spec = image(&img, 32, 128);
        let _ = std::fs::remove_file(&out);
        common::kill_nine("zlog_child", (CHILD_ENV, format!("{spec}|{}|{seed}", out.display())), &out, seed, 1..60);
        let durable = durable_said(&out);
        let mut found = Vec::new();
        let log = Log::open_with(open_image(&spec), LogOptions::new(), |r| found.push(r)).unwrap();
        found.sort_by_key(|r| r.seq);
        if let Err(e) = check(&found, &durable) {
            panic!(
                "kill -9, seed {seed}: {e}\nrepairs: {:?}\nreplay: ZLOG_SEED={seed} ZLOG_RUNS=1 cargo test \
                 --profile test-release -p zblk-log --test log kill_nine",
                log.handle().repairs()
            );
        }
        said += durable.values().map(|&n| u64::from(n) + 1).sum::<u64>();
        found_total += found.len() as u64;
        zones += log.recovery().zones_with_records;
        log.close().unwrap();
    }
    eprintln!(
        "kill -9: {runs} runs from seed {base}: {said} records said durable, {found_total} found in {zones} zones, \
         all checked"
    );
    assert!(said > 0, "no record was ever said durable");
}
