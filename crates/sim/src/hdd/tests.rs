//! The disk model against the datasheet figures and the mechanisms it models:
//! seek curve, media rates, cache and destage, zone resume, flushing reset.

use super::*;
use zblk_core::bio::{BioFlags, ReqId};
use zblk_core::units::SECTOR_SIZE;
use zblk_core::units::Sector;

const MIB: u64 = 1 << 20;
/// Rounding of virtual time to whole nanoseconds, per command.
const HOST_SLACK_NS: f64 = 1e3;

fn req(id: u64, op: Op, byte: u64, bytes: u64) -> Request {
    Request {
        id: ReqId::unissued(id),
        op,
        sector: Sector(byte / SECTOR_SIZE),
        nr_sectors: (bytes / SECTOR_SIZE) as u32,
        flags: BioFlags::NONE,
        user_data: 0,
        bio_offset: 0,
    }
}

/// Runs `reqs` keeping `qd` in flight, each next one submitted when one
/// completes; returns each request's completion time (ns) by id.
fn run_qd(m: &mut HddModel, reqs: &[Request], qd: usize) -> Vec<u64> {
    let mut done_at = vec![0u64; reqs.len()];
    let mut next = 0;
    let mut now = 0u64;
    let mut inflight = 0;
    let mut done = Vec::new();
    while next < reqs.len() || inflight > 0 {
        while inflight < qd && next < reqs.len() {
            m.submit(now, &reqs[next]);
            next += 1;
            inflight += 1;
        }
        now = m.next_event_ns().expect("requests in flight");
        m.advance(now, &mut done);
        for r in done.drain(..) {
            done_at[r.id.raw() as usize] = now;
            inflight -= 1;
        }
    }
    done_at
}

fn disk(write_cache: bool) -> HddModel {
    HddModel::new(HddParams { write_cache, ..HddParams::smr_30tb() })
}

#[test]
fn seek_curve_matches_its_datasheet_figures() {
    let p = HddParams::smr_30tb();
    let m = HddModel::new(p.clone());
    for (curve, track, avg, full) in [
        (m.seek, p.seek_track_ns, p.seek_avg_ns, p.seek_full_ns),
        (m.write_seek, p.write_seek_track_ns, p.write_seek_avg_ns, p.write_seek_full_ns),
    ] {
        assert!((curve.time(1.0) - full).abs() < 1.0, "full stroke");
        assert!((curve.time(curve.one_track) - track).abs() < 1.0, "single track");
        // Mean over random pairs of positions: distance density 2(1 - d).
        let n = 200_000;
        let mean: f64 = (0..n)
            .map(|i| {
                let d = (i as f64 + 0.5) / n as f64;
                curve.time(d) * 2.0 * (1.0 - d) / n as f64
            })
            .sum();
        assert!((mean / avg - 1.0).abs() < 0.01, "average seek {mean} vs {avg}");
        // Monotonic and continuous at the knee.
        let k = curve.knee;
        assert!((curve.time(k - 1e-9) - curve.time(k + 1e-9)).abs() < 1e3);
        let mut last = 0.0;
        for i in 1..1000 {
            let t = curve.time(i as f64 / 1000.0);
            assert!(t >= last, "seek time falls at {i}");
            last = t;
        }
    }
}

#[test]
fn media_rate_falls_from_outer_to_inner_diameter() {
    let m = disk(true);
    let cap = m.params().capacity_bytes;
    let od = m.sustained_mb_s(0, 256 * MIB);
    let id = m.sustained_mb_s(cap - 256 * MIB, 256 * MIB);
    assert!((od / (OD_RATE / 1e6) - 1.0).abs() < 0.001, "OD {od}");
    assert!((id / (OD_RATE * 0.45 / 1e6) - 1.0).abs() < 0.01, "ID {id}");
    let mid = m.sustained_mb_s(cap / 2, 256 * MIB);
    assert!(id < mid && mid < od);
}

#[test]
fn write_through_at_qd1_loses_a_revolution_per_command() {
    // Without a cache, each sequential write reaches the media after the head
    // has passed its first sector: it waits almost a whole revolution.
    let mut m = disk(false);
    let reqs: Vec<Request> = (0..64).map(|i| req(i, Op::Write, i * MIB, MIB)).collect();
    let t = run_qd(&mut m, &reqs, 1);
    let per = (t[63] - t[31]) as f64 / 32.0;
    let xfer = MIB as f64 / (OD_RATE * 1e-9);
    let rev = 60e9 / 7200.0;
    assert!(per > xfer + 0.8 * rev && per < xfer + 1.1 * rev, "{per} ns per write");
}

#[test]
fn write_cache_acknowledges_on_insert_and_flush_waits_for_the_media() {
    let mut m = disk(true);
    let mut reqs: Vec<Request> = (0..16).map(|i| req(i, Op::Write, i * MIB, MIB)).collect();
    reqs.push(req(16, Op::Flush, 0, 0));
    let t = run_qd(&mut m, &reqs, 1);
    // 16 MiB fit in the cache: each write costs its link transfer, not the media.
    let link = MIB as f64 / 600e6 * 1e9;
    assert!((t[15] as f64) < 16.0 * (link + 20e3 + HOST_SLACK_NS), "writes took {} ns", t[15]);
    // The flush completes only once all 16 MiB are on the media.
    let media = 16.0 * MIB as f64 / (OD_RATE * 1e-9);
    assert!(t[16] as f64 >= media, "flush at {} ns, media needs {media} ns", t[16]);
    assert_eq!(m.stats.destaged_bytes, 16 * MIB);
}

#[test]
fn fua_write_completes_after_the_media() {
    let mut m = disk(true);
    let mut fua = req(0, Op::Write, 0, MIB);
    fua.flags = BioFlags::FUA;
    let t = run_qd(&mut m, &[fua], 1);
    assert!(t[0] as f64 >= MIB as f64 / (OD_RATE * 1e-9), "FUA completed at {} ns", t[0]);
    let t = run_qd(&mut disk(true), &[req(0, Op::Write, 0, MIB)], 1);
    assert!((t[0] as f64) < MIB as f64 / (OD_RATE * 1e-9), "cached write at {} ns", t[0]);
}

#[test]
fn full_cache_throttles_writes_to_the_media_rate() {
    let mut m = disk(true);
    let n = 3072u64; // 3 GiB: the cache (450 MiB) is full long before the second half
    let reqs: Vec<Request> = (0..n).map(|i| req(i, Op::Write, i * MIB, MIB)).collect();
    let t = run_qd(&mut m, &reqs, 4);
    let late = (t[n as usize - 1] - t[n as usize / 2]) as f64 / (n / 2 - 1) as f64;
    let media = MIB as f64 / (m.rate((n / 2) * MIB));
    assert!((late / media - 1.0).abs() < 0.02, "{late} ns per MiB vs media {media}");
}

#[test]
fn ncq_reordering_speeds_up_random_reads() {
    let cap = HddParams::smr_30tb().capacity_bytes;
    let reqs: Vec<Request> =
        (0..400).map(|i| req(i, Op::Read, (unit_hash(7, i) * (cap / 4096) as f64) as u64 * 4096, 4096)).collect();
    let t1 = *run_qd(&mut disk(true), &reqs, 1).iter().max().unwrap();
    let t32 = *run_qd(&mut disk(true), &reqs, 32).iter().max().unwrap();
    // QD1: seek + half a revolution each (~12 ms); QD32: shortest positioning
    // time first, more than twice the IOPS.
    let per1 = t1 as f64 / 400.0;
    assert!(per1 > 10e6 && per1 < 15e6, "QD1 random read {per1} ns");
    assert!(t32 * 2 < t1, "QD32 {t32} ns vs QD1 {t1} ns");
}

#[test]
fn a_reset_writes_the_cache_back_before_it_completes() {
    // Mechanism M1: nothing cached escapes the media; the reset is non-queued.
    let mut m = disk(true);
    let zone = 256 * MIB;
    let mut reqs: Vec<Request> = (0..32).map(|i| req(i, Op::Write, zone + i * MIB, MIB)).collect();
    reqs.push(req(32, Op::ZoneReset, zone, 0));
    reqs.push(req(33, Op::Write, 2 * zone, MIB));
    let t = run_qd(&mut m, &reqs, 4);
    assert_eq!(m.stats.resets, 1);
    assert!(m.stats.destaged_bytes >= 32 * MIB, "destaged {}", m.stats.destaged_bytes);
    let media = 32.0 * MIB as f64 / (OD_RATE * 1e-9);
    assert!(t[32] as f64 >= media, "reset at {} ns, the cached 32 MiB need {media} ns", t[32]);
    // Queued after the reset, the next write is not accepted before it completes.
    assert!(t[33] > t[32], "write at {} ns, reset at {} ns", t[33], t[32]);
}

#[test]
fn without_m1_a_reset_drops_the_zones_dirty_data() {
    let mut m = HddModel::new(HddParams { reset_flushes: false, ..HddParams::smr_30tb() });
    let zone = 256 * MIB;
    let mut reqs: Vec<Request> = (0..32).map(|i| req(i, Op::Write, zone + i * MIB, MIB)).collect();
    reqs.push(req(32, Op::ZoneReset, zone, 0));
    reqs.push(req(33, Op::Flush, 0, 0));
    run_qd(&mut m, &reqs, 1);
    assert!(m.stats.destaged_bytes < 32 * MIB, "destaged {}", m.stats.destaged_bytes);
}

/// Write-through 1 MiB writes alternating between two zones, each past its
/// first sector: time per write with `revs` revolutions of resume cost.
fn alternating_write_ns(revs: f64) -> (f64, HddStats) {
    let mut m = HddModel::new(HddParams { write_cache: false, zone_resume_revs: revs, ..HddParams::smr_30tb() });
    let zone = 256 * MIB;
    let reqs: Vec<Request> = (0..40).map(|i| req(i, Op::Write, (i % 2) * zone + (1 + i / 2) * MIB, MIB)).collect();
    let t = run_qd(&mut m, &reqs, 1);
    ((t[39] - t[19]) as f64 / 20.0, m.stats)
}

#[test]
fn resuming_a_zone_costs_a_revolution() {
    // Mechanism M2: every write here resumes the zone the head did not write last.
    let rev = 60e9 / 7200.0;
    let (with, s) = alternating_write_ns(1.0);
    let (without, s0) = alternating_write_ns(0.0);
    assert_eq!(s0.zone_resumes, 0);
    assert!(s.zone_resumes >= 39, "{} resumes", s.zone_resumes);
    assert!((with - without - rev).abs() < 0.05 * rev, "{with} vs {without} ns per write");
    // Continuing the zone last written, or starting a zone at its first sector,
    // costs no resume.
    let mut m = disk(false);
    let zone = 256 * MIB;
    let reqs: Vec<Request> = (0..8).map(|i| req(i, Op::Write, 3 * zone + i * MIB, MIB)).collect();
    run_qd(&mut m, &reqs, 1);
    assert_eq!(m.stats.zone_resumes, 0);
}

#[test]
fn the_same_layout_seed_replays_exactly() {
    // Write-through, so that every write meets the media (a 200 MiB run fits in
    // the write cache, where the layout makes no difference).
    let reqs: Vec<Request> = (0..200).map(|i| req(i, Op::Write, (i % 7) * 256 * MIB + (i / 7) * MIB, MIB)).collect();
    let drawn = |layout_seed| {
        HddModel::new(HddParams { layout_seed, zone_advance: None, write_cache: false, ..HddParams::smr_30tb() })
    };
    let a = run_qd(&mut drawn(1), &reqs, 8);
    assert_eq!(a, run_qd(&mut drawn(1), &reqs, 8));
    assert_ne!(a, run_qd(&mut drawn(99), &reqs, 8), "the layout seed draws the zone advance");
    // A fixed advance leaves the seed nothing to draw.
    let fixed = |layout_seed| HddModel::new(HddParams { layout_seed, write_cache: false, ..HddParams::smr_30tb() });
    assert_eq!(run_qd(&mut fixed(1), &reqs, 8), run_qd(&mut fixed(99), &reqs, 8));
}

/// The zone advance is one number for the disk: the angle between two zones'
/// sectors depends on how far apart their LBAs are, not on which zones they
/// are. So per-zone plugging's boundary alternation at a given QD (the tail of
/// zone n against the head of zone n + 1, QD − 1 MiB apart) meets the same
/// rotational phase at every boundary, and that phase moves with the QD.
#[test]
fn the_angle_between_two_zones_depends_only_on_their_lba_distance() {
    let m = HddModel::new(HddParams { zone_advance: Some(0.2), ..HddParams::smr_30tb() });
    let zone = 256 * MIB;
    let phase = |n: u64, gap: u64| (m.angle((n + 1) * zone) - m.angle((n + 1) * zone - gap)).rem_euclid(1.0);
    for gap in [63 * MIB, 127 * MIB] {
        let p0 = phase(0, gap);
        for n in 1..32 {
            // The media rate falls by 0.02 % over 32 zones at the OD: the phase
            // drifts by far less than a degree.
            let d = (phase(n, gap) - p0 + 0.5).rem_euclid(1.0) - 0.5;
            assert!(d.abs() < 0.01, "gap {} MiB: boundary {n} phase {:.3} against {p0:.3}", gap / MIB, phase(n, gap));
        }
    }
    let (p64, p128) = (phase(0, 63 * MIB), phase(0, 127 * MIB));
    assert!((p64 - p128).abs() > 0.05, "QD 64 and QD 128 meet different phases: {p64:.3} {p128:.3}");
}

#[test]
fn a_power_loss_drops_every_command_and_the_disk_comes_back_idle() {
    let mut m = HddModel::new(HddParams::smr_30tb());
    for i in 0..8 {
        m.submit(0, &req(i, Op::Write, i * MIB, MIB));
    }
    assert!(m.next_event_ns().is_some());
    m.power_loss(1_000);
    assert_eq!(m.next_event_ns(), None, "no command survives the power loss");
    m.submit(2_000, &req(9, Op::Read, 0, 4096));
    let mut done = Vec::new();
    while let Some(t) = m.next_event_ns() {
        m.advance(t, &mut done);
    }
    assert_eq!(done.iter().map(|r| r.id).collect::<Vec<_>>(), [ReqId::unissued(9)]);
}
