use super::*;
use crate::job::Rw;
use zblk_core::geometry::GeometryParams;
use zblk_core::zone::ZoneSet;

/// 8 zones of 1 MiB, none conventional, at most `max_open` open.
fn geo(max_open: u32) -> Geometry {
    let p = GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        nr_conv: 0,
        max_open,
        ..GeometryParams::default()
    };
    Geometry::new(&p).unwrap()
}

fn fresh(geo: &Geometry, specs: &[JobSpec]) -> FioGen {
    FioGen::new(specs, geo, ZoneSet::new(geo).zones(), 1).unwrap()
}

fn drain(g: &mut FioGen) -> Vec<FioAction> {
    std::iter::from_fn(|| g.next(0)).collect()
}

fn done(io: &FioIo, result: Result<Sector, Status>) -> FioDone {
    let b = io.bio;
    FioDone { token: io.token, op: b.op, sector: b.sector, nr_sectors: b.nr_sectors, result, latency_ns: 1 }
}

fn submitted(actions: &[FioAction]) -> Vec<FioIo> {
    actions
        .iter()
        .map(|a| match a {
            FioAction::Submit(io) => *io,
            other => panic!("{other:?} among submissions"),
        })
        .collect()
}

#[test]
fn a_failed_write_holds_the_job_until_its_zone_is_reported() {
    let g0 = geo(0);
    let spec = JobSpec { bs_bytes: 64 << 10, size_bytes: Some(1 << 20), ..JobSpec::default() };
    let mut g = fresh(&g0, &[spec]);
    g.start();
    let first = submitted(&drain(&mut g));
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].bio.sector, Sector(0));
    g.on_complete(5, done(&first[0], Err(Status::IoErr)));
    assert_eq!(g.next(5), Some(FioAction::ReportZone(ZoneNo(0))));
    assert_eq!(g.next(5), None, "nothing before the report's answer");
    // The device wrote 32 KiB of the failed write: fio goes on from there.
    g.zone_report(ZoneNo(0), Ok(ZoneInfo::of(&g0, ZoneNo(0), ZoneCond::ImpOpen, 64)));
    let next = submitted(&drain(&mut g));
    assert_eq!(next[0].bio.sector, Sector(64));
    let r = g.results(false);
    assert_eq!((r[0].errors, r[0].first_error), (1, Some(Status::IoErr)));
}

#[test]
fn a_job_waits_for_a_zone_another_job_holds() {
    // One open zone for two sequential writers of the same zone: the second job
    // blocks on the zone's lock until the first has nothing out there.
    let spec = JobSpec {
        bs_bytes: 64 << 10,
        iodepth: 2,
        numjobs: 2,
        size_bytes: Some(1 << 20),
        max_open_zones: 1,
        ..JobSpec::default()
    };
    let mut g = fresh(&geo(0), &[spec]);
    g.start();
    let ios = submitted(&drain(&mut g));
    assert_eq!(ios.iter().map(|io| io.token).collect::<Vec<_>>(), vec![0, 0], "job 1 is blocked");
    g.on_complete(1, done(&ios[0], Ok(ios[0].bio.sector)));
    let more = submitted(&drain(&mut g));
    assert_eq!(more.iter().map(|io| io.token).collect::<Vec<_>>(), vec![0], "job 0 keeps the zone");
    assert_eq!(more[0].bio.sector, Sector(256));
    g.on_complete(2, done(&ios[1], Ok(ios[1].bio.sector)));
    assert!(!g.is_done());
    assert!(g.inflight() > 0);
}

/// `numjobs` sequential writers at QD `iodepth`, each of its own 1 MiB zone, 64 KiB
/// writes.
fn own_zones(numjobs: u32, iodepth: u32) -> JobSpec {
    JobSpec {
        bs_bytes: 64 << 10,
        iodepth,
        numjobs,
        size_bytes: Some(1 << 20),
        offset_increment_bytes: 1 << 20,
        ..JobSpec::default()
    }
}

#[test]
fn every_bio_names_the_job_that_submits_it() {
    // Two jobs, each in its own zone: a trace names each BIO's job as blktrace names
    // the submitting process.
    let spec = own_zones(2, 2);
    let mut g = fresh(&geo(0), &[spec]);
    g.start();
    let ios = submitted(&drain(&mut g));
    let jobs: Vec<u32> = ios.iter().map(|io| io.job).collect();
    assert_eq!(jobs, vec![0, 1, 0, 1], "the jobs take turns, one submission each");
    for io in &ios {
        assert_eq!(io.bio.sector.0 >> 11, u64::from(io.job), "job {} writes its own zone", io.job);
    }
}

#[test]
fn open_zones_beyond_the_limit_refuse_the_start() {
    let g0 = geo(0);
    let mut zones = ZoneSet::new(&g0).zones().to_vec();
    for (z, info) in zones.iter_mut().enumerate().take(3) {
        *info = ZoneInfo::of(&g0, ZoneNo(z as u32), ZoneCond::ImpOpen, 8);
    }
    let spec = JobSpec { max_open_zones: 2, ..JobSpec::default() };
    let e = FioGen::new(std::slice::from_ref(&spec), &g0, &zones, 1).unwrap_err();
    assert_eq!(e.option, "max_open_zones");
    let spec = JobSpec { max_open_zones: 3, ..spec };
    assert!(FioGen::new(&[spec], &g0, &zones, 1).is_ok());
}

#[test]
fn offset_increment_gives_each_job_its_own_region() {
    let geo = geo(0);
    let zone = geo.zone_sectors() << 9;
    let spec = JobSpec {
        bs_bytes: 256 << 10,
        numjobs: 3,
        offset_bytes: zone,
        offset_increment_bytes: 2 * zone,
        size_bytes: Some(zone),
        ..JobSpec::default()
    };
    assert_eq!(spec.copy_region(&geo, 0), (zone, zone));
    assert_eq!(spec.copy_region(&geo, 2), (5 * zone, zone));
    let mut g = fresh(&geo, std::slice::from_ref(&spec));
    g.start();
    let mut zones = std::collections::BTreeSet::new();
    let mut now = 0;
    loop {
        let ios = submitted(&drain(&mut g));
        if ios.is_empty() {
            break;
        }
        for io in &ios {
            zones.insert(geo.zone_no(io.bio.sector).0);
            now += 1;
            g.on_complete(now, done(io, Ok(io.bio.sector)));
        }
    }
    assert_eq!(zones.into_iter().collect::<Vec<_>>(), vec![1, 3, 5], "each copy writes its own zone, all of it");
    // The last copy must start inside the device, and on a zone with zonemode=zbd.
    let past = JobSpec { numjobs: 5, ..spec.clone() };
    assert_eq!(past.validate(&geo).unwrap_err().option, "offset_increment");
    let unaligned = JobSpec { offset_increment_bytes: zone + 4096, ..spec };
    assert_eq!(unaligned.validate(&geo).unwrap_err().option, "offset_increment");
}

#[test]
fn a_job_asks_for_at_most_max_numjobs_copies() {
    let g = geo(0);
    let spec = |numjobs| JobSpec { numjobs, bs_bytes: 4096, size_bytes: Some(1 << 20), ..JobSpec::default() };
    assert!(spec(crate::job::MAX_NUMJOBS).validate(&g).is_ok());
    let e = spec(crate::job::MAX_NUMJOBS + 1).validate(&g).unwrap_err();
    assert_eq!((e.option, e.message.as_str()), ("numjobs", "is at most 256, got 257"));
}

#[test]
fn an_open_zone_filled_by_writes_in_flight_sends_the_next_write_to_an_open_zone() {
    // fio 3.33 with an open zone limit (zbd_open_zone(): "If the zone is going to be
    // completely filled by writes already in-flight, handle it as a full zone"): the
    // job's write to such a zone goes to open_zones[offset * num_open / io_size]
    // (zbd_convert_to_open_zone()). Two zones of four 256 KiB writes, both open: for
    // the first zone that index is 0, for the second 1. So when zone 1 was opened
    // first, each full zone sends the job to the other, and the job queues both zones
    // full before it waits (to reset one); when zone 0 was, it waits at the first
    // pick of a full zone, as without a limit.
    let spec = JobSpec {
        rw: Rw::RandWrite,
        bs_bytes: 256 << 10,
        iodepth: 16,
        size_bytes: Some(2 << 20),
        max_open_zones: 2,
        ..JobSpec::default()
    };
    let g0 = geo(0);
    let mut redirected = 0;
    for seed in 1..=24 {
        let mut g = FioGen::new(std::slice::from_ref(&spec), &g0, ZoneSet::new(&g0).zones(), seed).unwrap();
        g.start();
        let ios = submitted(&drain(&mut g));
        let zone_of = |io: &FioIo| g0.zone_no(io.bio.sector).0;
        let per_zone = |z| ios.iter().filter(|io| zone_of(io) == z).count();
        assert!(per_zone(0) <= 4 && per_zone(1) <= 4, "seed {seed}: a zone written past its end");
        if zone_of(&ios[0]) == 1 {
            redirected += 1;
            assert_eq!((per_zone(0), per_zone(1)), (4, 4), "seed {seed}: zone 1 opened first, both zones fill");
        }
    }
    assert!(redirected >= 4, "only {redirected} seeds opened zone 1 first");
}

#[test]
fn linux_reports_the_zone_write_plug_pool_as_the_open_zone_limit() {
    let geo_of = |zones: u64, max_open: u32, max_active: u32| {
        let p = GeometryParams {
            capacity_bytes: zones << 20,
            zone_size_bytes: 1 << 20,
            nr_conv: 0,
            max_open,
            max_active,
            ..GeometryParams::default()
        };
        Geometry::new(&p).unwrap()
    };
    assert_eq!(linux_max_open(&geo_of(200, 0, 0)), 128, "no limit, more zones than the pool");
    assert_eq!(linux_max_open(&geo_of(100, 0, 0)), 0, "no limit, fewer zones than the pool");
    assert_eq!(linux_max_open(&geo_of(200, 14, 14)), 14, "the device's limit");
    assert_eq!(linux_max_open(&geo_of(200, 0, 14)), 0, "an active limit only");
    assert_eq!(linux_max_open(&geo_of(8, 8, 0)), 0, "a limit covering every zone");
}

/// Completes `io` at its sector, at time 1.
fn complete(g: &mut FioGen, io: &FioIo) {
    g.on_complete(1, done(io, Ok(io.bio.sector)));
}

#[test]
fn a_released_lock_goes_to_the_job_that_gets_there_first() {
    // Two sequential writers of zone 0 at QD 1: job 1 waits for the lock job 0
    // holds. When job 0's write completes, the lock is free and job 1 is woken; but
    // job 0 runs first (its completion's turn), wants zone 0 again and takes it, as
    // a glibc mutex lets it. A lock handed to the first waiter would go to job 1.
    let spec = JobSpec { bs_bytes: 64 << 10, numjobs: 2, size_bytes: Some(1 << 20), ..JobSpec::default() };
    let mut g = fresh(&geo(0), &[spec]);
    g.start();
    let first = submitted(&drain(&mut g));
    assert_eq!(first.iter().map(|io| io.job).collect::<Vec<_>>(), vec![0], "job 1 waits for zone 0");
    let mut io = first[0];
    for n in 1..16 {
        complete(&mut g, &io);
        let next = submitted(&drain(&mut g));
        assert_eq!(next.len(), 1);
        assert_eq!((next[0].job, next[0].bio.sector), (0, Sector(n * 128)), "write {n}: job 0 keeps the zone");
        io = next[0];
    }
    // Job 0's last write: it is done, and the woken job 1 takes the zone at last.
    complete(&mut g, &io);
    let after = submitted(&drain(&mut g));
    assert!(!after.is_empty() && after.iter().all(|io| io.job == 1), "job 1 goes on once job 0 is done: {after:?}");
}

#[test]
fn a_job_starts_with_every_zone_of_its_range_locked_once() {
    // fio's zbd_file_reset() as a job starts: job B (zones 0 and 1, random writes)
    // takes every zone lock of its range before its first write, so it waits while
    // job A writes zone 0, whichever zone B's first write would go to.
    let a = JobSpec { name: "a".into(), bs_bytes: 64 << 10, size_bytes: Some(1 << 20), ..JobSpec::default() };
    let b = JobSpec {
        name: "b".into(),
        rw: Rw::RandWrite,
        bs_bytes: 64 << 10,
        size_bytes: Some(2 << 20),
        ..JobSpec::default()
    };
    let mut g = fresh(&geo(0), &[a, b]);
    g.start();
    let mut io = submitted(&drain(&mut g));
    assert_eq!(io.iter().map(|io| io.job).collect::<Vec<_>>(), vec![0], "B waits for zone 0");
    for _ in 0..16 {
        assert_eq!((io.len(), io[0].job), (1, 0), "only A writes while it holds zone 0");
        complete(&mut g, &io[0]);
        io = submitted(&drain(&mut g));
    }
    assert!(!io.is_empty() && io.iter().all(|io| io.job == 1), "B starts once A is done: {io:?}");
}

#[test]
fn a_random_writer_spreads_a_cycle_evenly_and_scans_again_after_it() {
    // fio's random map: 2 zones of 16 blocks each; in every cycle of 32 writes each
    // zone gets exactly 16 (drawn with repetition, 16/16 comes 14 % of the time).
    for seed in 1..=4 {
        let spec = JobSpec {
            rw: Rw::RandWrite,
            bs_bytes: 64 << 10,
            size_bytes: Some(2 << 20),
            runtime_ns: Some(u64::MAX / 2),
            ..JobSpec::default()
        };
        let g0 = geo(0);
        let mut g = FioGen::new(&[spec], &g0, ZoneSet::new(&g0).zones(), seed).unwrap();
        g.start();
        let mut per_zone = [0u32; 2];
        let mut io = submitted(&drain(&mut g));
        for n in 0..32 {
            assert_eq!(io.len(), 1, "seed {seed}, write {n}");
            assert_eq!(io[0].bio.op, Op::Write, "seed {seed}, write {n}: no zone filled early, none reset");
            per_zone[(io[0].bio.sector.0 >> 11) as usize] += 1;
            complete(&mut g, &io[0]);
            io = submitted(&drain(&mut g));
        }
        assert_eq!(per_zone, [16, 16], "seed {seed}: a cycle writes each zone its share");
        assert!(
            g.jobs[0].scan.is_none() && g.jobs[0].map.as_ref().is_some_and(|m| m.free == 31),
            "seed {seed}: a new cycle began"
        );
    }
}

/// Everything `g` submits by `now`, its due steps run.
fn drain_at(g: &mut FioGen, now: u64) -> Vec<FioIo> {
    submitted(&std::iter::from_fn(|| g.next(now)).collect::<Vec<_>>())
}

#[test]
fn on_timed_cpus_a_submission_takes_its_time_and_jobs_wait_for_a_cpu() {
    // Two jobs of their own zones, QD 2, each submission 10 us of CPU. On one CPU
    // the jobs take turns in time; on two, they run side by side.
    let spec = own_zones(2, 2);
    for (cpus, want) in [(1, [(10, 0), (20, 1), (30, 0), (40, 1)]), (2, [(10, 0), (10, 1), (20, 0), (20, 1)])] {
        let mut g = fresh(&geo(0), std::slice::from_ref(&spec));
        g.set_host(HostCpus { cpus, submit_ns: 10_000, ..HostCpus::default() });
        g.start();
        let mut got = Vec::new();
        let mut now = 0;
        assert!(drain_at(&mut g, now).is_empty(), "a submission takes its CPU time first");
        while let Some(t) = g.next_due() {
            assert!(t > now, "steps come in time order");
            now = t;
            got.extend(drain_at(&mut g, now).iter().map(|io| (now / 1000, io.job)));
        }
        assert_eq!(got, want, "{cpus} CPU(s)");
    }
}

#[test]
fn on_timed_cpus_the_jobs_start_one_after_another() {
    // Three jobs of their own zones at QD 1, starting 100 us apart, a submission
    // 10 us: their first BIOs at 10, 110 and 210 us.
    let spec = own_zones(3, 1);
    let mut g = fresh(&geo(0), &[spec]);
    g.set_host(HostCpus { cpus: 2, submit_ns: 10_000, start_ns: 100_000, ..HostCpus::default() });
    g.start();
    let mut got = Vec::new();
    while let Some(t) = g.next_due() {
        got.extend(drain_at(&mut g, t).iter().map(|io| (t / 1000, io.job)));
    }
    assert_eq!(got, [(10, 0), (110, 1), (210, 2)]);
}

#[test]
fn on_timed_cpus_a_woken_job_runs_after_its_wake_up() {
    // As a_released_lock_goes_to_the_job_that_gets_there_first, in time: job 1 waits
    // for zone 0 until job 0's last write; it then runs 50 us after the lock was let
    // go, and submits 10 us later.
    let spec = JobSpec { bs_bytes: 64 << 10, numjobs: 2, size_bytes: Some(1 << 20), ..JobSpec::default() };
    let mut g = fresh(&geo(0), &[spec]);
    g.set_host(HostCpus { cpus: 2, submit_ns: 10_000, wake_ns: 50_000, ..HostCpus::default() });
    g.start();
    assert!(drain_at(&mut g, 0).is_empty(), "a submission takes its CPU time first");
    let mut now = g.next_due().expect("the first steps");
    let mut io = drain_at(&mut g, now);
    assert_eq!(io.iter().map(|io| io.job).collect::<Vec<_>>(), vec![0], "job 1 waits for zone 0");
    for n in 1..=16u64 {
        let done_at = now + 1_000_000;
        g.on_complete(done_at, done(&io[0], Ok(io[0].bio.sector)));
        now = done_at;
        io = Vec::new();
        while io.is_empty() {
            assert!(drain_at(&mut g, now).is_empty() || now > done_at, "write {n}: a submission takes its time");
            now = g.next_due().expect("a step");
            io = drain_at(&mut g, now);
        }
        // Job 0 goes on 10 us after its completion; after its last write, job 1
        // takes the zone once it has woken up (50 us) and made its submission (10 us).
        let (job, after) = if n < 16 { (0, 10_000) } else { (1, 60_000) };
        assert_eq!((io.len(), io[0].job, now - done_at), (1, job, after), "write {n}");
    }
}

#[test]
fn timed_cpus_with_no_time_take_the_same_turns_as_without() {
    // Two random writers of two zones behind an instant device: the same BIOs in
    // the same order, whether the jobs take turns at each instant or on CPUs whose
    // steps take no time.
    let spec = JobSpec {
        rw: Rw::RandWrite,
        bs_bytes: 64 << 10,
        iodepth: 4,
        numjobs: 2,
        size_bytes: Some(2 << 20),
        io_size_bytes: Some(4 << 20),
        ..JobSpec::default()
    };
    let run = |host: Option<HostCpus>| {
        let mut g = fresh(&geo(0), std::slice::from_ref(&spec));
        if let Some(h) = host {
            g.set_host(h);
        }
        g.start();
        let mut out = VecDeque::new();
        let mut seen = Vec::new();
        let mut now = 0;
        loop {
            for a in std::iter::from_fn(|| g.next(now)).collect::<Vec<_>>() {
                match a {
                    FioAction::Submit(io) => {
                        seen.push((io.job, io.bio.op, io.bio.sector));
                        out.push_back(io);
                    }
                    FioAction::ReportZone(z) => panic!("no write fails here: report of {z}"),
                }
            }
            now += 1;
            match out.pop_front() {
                Some(io) => g.on_complete(now, done(&io, Ok(io.bio.sector))),
                None if g.is_done() => break,
                None => g.idle(),
            }
            assert!(now < 100_000, "the run ends");
        }
        seen
    };
    let turns = run(None);
    assert!(turns.len() > 64, "{} BIOs", turns.len());
    assert_eq!(run(Some(HostCpus { cpus: 2, ..HostCpus::default() })), turns);
    assert_eq!(run(Some(HostCpus { cpus: 1, ..HostCpus::default() })), turns);
}

#[test]
fn on_timed_cpus_the_open_after_the_start_scan_is_a_step_of_its_own() {
    // One writer of its own zone: its start scan is its first step (10 us); its first
    // submission follows the rest of its file open (40 us) and its own step (10 us).
    // Without an open time, the scan and the first submission are one step.
    let spec = own_zones(1, 1);
    for (open_ns, first_at) in [(0, 10_000), (40_000, 60_000)] {
        let mut g = fresh(&geo(0), std::slice::from_ref(&spec));
        g.set_host(HostCpus { cpus: 2, submit_ns: 10_000, open_ns, ..HostCpus::default() });
        g.start();
        let mut first = None;
        while let Some(t) = g.next_due() {
            if !drain_at(&mut g, t).is_empty() {
                first = Some(t);
                break;
            }
        }
        assert_eq!(first, Some(first_at), "open {open_ns} ns");
    }
}

#[test]
fn spread_wake_ups_have_the_median_and_90th_percentile_asked_for() {
    let cpus = HostCpus { cpus: 2, wake_ns: 15_000, wake_p90_ns: 80_000, ..HostCpus::default() };
    let draw = |seed| {
        let mut h = host::Host::new(cpus, 1, seed);
        let mut v: Vec<u64> = (0..20_000).map(|_| h.wake_up()).collect();
        v.sort_unstable();
        v
    };
    let v = draw(1);
    let (p50, p90) = (v[v.len() / 2] as f64, v[v.len() * 9 / 10] as f64);
    assert!((p50 / 15_000.0 - 1.0).abs() < 0.05, "median {p50}");
    assert!((p90 / 80_000.0 - 1.0).abs() < 0.10, "90th percentile {p90}");
    assert_eq!(draw(1), v, "the same seed, the same wake-ups");
    assert_ne!(draw(2), v, "another seed, other wake-ups");
    // Without a spread, every wake-up is the one given.
    let mut h = host::Host::new(HostCpus { wake_p90_ns: 0, ..cpus }, 1, 1);
    assert!((0..100).all(|_| h.wake_up() == 15_000));
    // A tail far past the median stays within a second, the longest wake-up given.
    let mut h = host::Host::new(HostCpus { wake_ns: 1, wake_p90_ns: 1_000_000_000, ..cpus }, 1, 1);
    let tail: Vec<u64> = (0..1000).map(|_| h.wake_up()).collect();
    assert!(tail.iter().all(|&w| w <= 1_000_000_000) && tail.contains(&1_000_000_000), "clipped at 1 s");
}
