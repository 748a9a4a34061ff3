//! Power cuts between the parts of a commit. A commit announces itself in the live
//! header (a shared mapping, written back whenever the kernel likes), writes its
//! durable table, syncs, then stores its witnesses (both superblocks, the live
//! table's last bytes), which the next sync carries. A cut between any two of these
//! leaves, on a disk with a volatile cache, any mix of them: the announcement
//! without the table, the table without the announcement, the witnesses without
//! one another.
//!
//! The workload (writes, a FUA write, a reset, a finish, flushes, all from one thread, so that
//! the operations on the media come in the same order every time) is run once to
//! count its operations, then once for each of them with the power cut just before
//! it ([`PowerCut::power_off_after`]). For each cut, every file the disk may have
//! kept ([`PowerCut::outcomes`]: each operation since the last sync kept or lost,
//! each sector of the live table as synced or as any version seen since) must
//! open for writing after a restart, with every write pointer at the end of a write
//! submitted to its zone and at or past every durable write (FUA, or acknowledged
//! before a completed flush began; a reset once acknowledged), every sector below
//! it holding what that write put there, zeroes past it up to the zone's capacity,
//! and a write at it accepted and kept through a clean close.
//!
//! With the planted bug `announced-as-complete` (recovery counts the announced
//! commit as complete) some of these files are refused for writing; the test that
//! says so is built with the `mutations` feature (the crate's tests always are: a dev-dependency feature).

use std::path::Path;
use zblk_core::bio::{BioFlags, Op, ReqId, Request};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::mutation::{self, Mutation};
use zblk_core::units::Sector;
use zblk_core::zone::ZoneCond;
use zblk_dev::file::powercut::PowerCut;
use zblk_dev::file::{FileImage, ImageOptions};
use zblk_dev::{Device, IoBuf};
use zblk_runtime::{Backend, Runtime, RuntimeConfig};
use zblk_workload::pattern::{Decoded, decode, fill};

mod common;

const ZONES: u32 = 4;
const ZONE_SECTORS: u64 = 256;
/// Files checked per cut at most (the first ones listed when there are more).
const OUTCOMES_PER_CUT: usize = 512;

fn geometry() -> GeometryParams {
    common::crash_geometry(ZONES, ZONE_SECTORS, 0)
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Write { z: u32, len: u64, fua: bool },
    Reset(u32),
    Finish(u32),
    Flush,
}

const fn w(z: u32, len: u64) -> Step {
    Step::Write { z, len, fua: false }
}

/// Before the cuts: each zone but the last written, and a commit.
const PREFIX: [Step; 4] = [w(1, 16), w(2, 16), w(3, 16), Step::Flush];
/// Where the power is cut: writes, a reset (a commit without a data sync), a FUA
/// write (a commit around its data), a finish (a hole punched past the write
/// pointer, then a full commit) of the zone reset, whose old data lies past its
/// write pointer, flushes (full commits).
const PHASE: [Step; 10] = [
    w(1, 8),
    w(2, 8),
    Step::Reset(3),
    Step::Write { z: 4, len: 8, fua: true },
    w(1, 8),
    Step::Flush,
    w(2, 8),
    w(3, 8),
    Step::Finish(3),
    Step::Flush,
];

/// A write as the model keeps it.
#[derive(Clone, Copy, Debug)]
struct W {
    off: u64,
    len: u64,
    stamp: u64,
    acked: bool,
    durable: bool,
}

/// A zone's writes since a reset, and whether that reset is sure (acknowledged).
#[derive(Clone, Debug, Default)]
struct Epoch {
    writes: Vec<W>,
    reset_acked: bool,
    /// A finish was submitted, and whether it was acknowledged.
    finish: Option<bool>,
}

/// Runs `steps` on `rt`, recording each in `zones` (per zone, its epochs).
fn run_steps(rt: &Runtime, steps: &[Step], zones: &mut [Vec<Epoch>], stamp: &mut u64) {
    for &step in steps {
        match step {
            Step::Write { z, len, fua } => {
                let epoch = zones[z as usize].last_mut().expect("an epoch");
                let off = epoch.writes.last().map_or(0, |w| w.off + w.len);
                *stamp += 1;
                let mut buf = vec![0u8; (len * 512) as usize];
                fill(*stamp, 0, &mut buf);
                let at = Sector(u64::from(z) * ZONE_SECTORS + off);
                let flags = if fua { BioFlags::FUA } else { BioFlags::NONE };
                let ok = rt.write_at_flags(at, &buf, flags).is_ok();
                // Failed writes stay in the model, not durable: the zone's write
                // pointer may be past them or not.
                epoch.writes.push(W { off, len, stamp: *stamp, acked: ok, durable: ok && fua });
            }
            Step::Reset(z) => {
                let ok = rt.zone_op(Op::ZoneReset, Sector(u64::from(z) * ZONE_SECTORS)).is_ok();
                zones[z as usize].push(Epoch { writes: Vec::new(), reset_acked: ok, finish: None });
            }
            Step::Finish(z) => {
                let ok = rt.zone_op(Op::ZoneFinish, Sector(u64::from(z) * ZONE_SECTORS)).is_ok();
                zones[z as usize].last_mut().expect("an epoch").finish = Some(ok);
            }
            Step::Flush => {
                // One thread: every write acknowledged so far was before the flush
                // began, and is durable once it completes.
                if rt.flush().is_ok() {
                    for w in zones.iter_mut().flatten().flat_map(|e| &mut e.writes) {
                        w.durable |= w.acked;
                    }
                }
            }
        }
    }
}

/// What one run of the workload leaves: the model, and the power-cut model of the
/// file, its power off.
struct Run {
    zones: Vec<Vec<Epoch>>,
    pc: PowerCut,
    /// Operations the phase started on the media.
    phase_ops: u64,
}

/// Runs the workload on a fresh image at `path`, the power cut before the phase's
/// `cut`-th operation on the media (never, for `None`), and off at the end.
fn run(path: &Path, cut: Option<u64>) -> Run {
    common::create_fresh(path, geometry());
    let (image, pc) = common::open_with_power_cut(path, &Geometry::new(&geometry()).unwrap());
    let rt = Runtime::start(image, RuntimeConfig { backend: Backend::Threads, ..RuntimeConfig::default() }).unwrap();
    let mut zones = vec![vec![Epoch { writes: Vec::new(), reset_acked: true, finish: None }]; ZONES as usize + 1];
    let mut stamp = 0;
    run_steps(&rt, &PREFIX, &mut zones, &mut stamp);
    for epochs in &mut zones {
        assert!(epochs[0].writes.iter().all(|w| w.durable), "the prefix's flush failed");
    }
    let before = pc.ops();
    if let Some(k) = cut {
        pc.power_off_after(k);
    }
    run_steps(&rt, &PHASE, &mut zones, &mut stamp);
    let phase_ops = pc.ops() - before;
    pc.power_off();
    drop(rt);
    Run { zones, pc, phase_ops }
}

/// Whether zone `z`'s write pointer `wp` and data fit `epoch`: at the end of one of
/// its writes (or 0), at or past its last durable write, and each sector below it
/// holding what its write put there; or, finished (for sure once the finish was
/// acknowledged), at the zone's end with zeroes past its writes.
fn fits(img: &FileImage, z: u32, wp: u64, epoch: &Epoch) -> Result<(), String> {
    let floor = epoch.writes.iter().filter(|w| w.durable).map(|w| w.off + w.len).max().unwrap_or(0);
    let finished = epoch.finish.is_some() && wp == ZONE_SECTORS;
    let at_write = wp == 0 || epoch.writes.iter().any(|w| w.off + w.len == wp);
    if wp < floor || !(finished || at_write) || (epoch.finish == Some(true) && !finished) {
        return Err(format!(
            "write pointer offset {wp}, durable up to {floor}, writes {:?}, finish {:?}",
            epoch.writes, epoch.finish
        ));
    }
    if wp == 0 {
        return Ok(());
    }
    let mut buf = vec![0u8; (wp * 512) as usize];
    img.read_direct(Sector(u64::from(z) * ZONE_SECTORS), &mut buf).map_err(|e| format!("read: {e}"))?;
    for w in epoch.writes.iter().take_while(|w| w.off < wp) {
        for s in w.off..w.off + w.len {
            let got = decode(&buf[(s * 512) as usize..][..512]);
            if got != Decoded::Data((w.stamp, (s - w.off) as u32)) {
                return Err(format!("sector offset {s} below the write pointer offset {wp} holds {got:?}, not {w:?}"));
            }
        }
    }
    let written = epoch.writes.iter().filter(|w| w.off < wp).map(|w| w.off + w.len).max().unwrap_or(0);
    if let Some(i) = buf[(written * 512) as usize..].iter().position(|&b| b != 0) {
        return Err(format!(
            "sector offset {} of the finished zone, past its writes (up to {written}), holds data",
            written + i as u64 / 512
        ));
    }
    Ok(())
}

/// Checks one file a cut may leave (see the module documentation).
fn check(path: &Path, zones: &[Vec<Epoch>]) -> Result<(), String> {
    let opts = ImageOptions { boot_id: Some(common::OTHER_BOOT), ..ImageOptions::default() };
    let img = common::retry_in_use(|| FileImage::open(path, &opts)).map_err(|e| format!("reopen: {e}"))?;
    for (z, info) in img.zones().iter().enumerate().skip(1) {
        let wp = info.wp.since(info.start);
        let epochs = &zones[z];
        // The last epoch; the one before too while its reset was not acknowledged.
        let mut why = Vec::new();
        let mut candidates = epochs.iter().rev();
        for epoch in candidates.by_ref() {
            match fits(&img, z as u32, wp, epoch) {
                Ok(()) => {
                    why.clear();
                    break;
                }
                Err(e) => why.push(e),
            }
            if epoch.reset_acked {
                break;
            }
        }
        if !why.is_empty() {
            return Err(format!("zone {z}: {}\nrepairs: {:?}", why.join("; or "), img.repairs()));
        }
    }
    common::zeroes_past_write_pointers(&img, path)?;
    accepts_writes(&img)?;
    img.close().map_err(|e| format!("close after the writes at the write pointers: {e}"))?;
    let again = common::retry_in_use(|| FileImage::open(path, &ImageOptions::default()))
        .map_err(|e| format!("reopen after the writes at the write pointers: {e}"))?;
    for (z, info) in again.zones().iter().enumerate().skip(1) {
        if info.cond != ZoneCond::Full && info.wp.since(info.start) < 8 {
            return Err(format!("zone {z}: the write at its write pointer was not kept ({info:?})"));
        }
    }
    Ok(())
}

/// A FUA write of 8 sectors at each zone's write pointer is accepted and reads back.
fn accepts_writes(img: &FileImage) -> Result<(), String> {
    for (z, info) in img.zones().iter().enumerate().skip(1) {
        if info.cond == ZoneCond::Full || info.wp.since(info.start) + 8 > info.capacity {
            continue;
        }
        let mut data = vec![0u8; 8 * 512];
        fill(0xc0de_0000 + z as u64, 0, &mut data);
        let req = Request {
            id: ReqId::unissued(0),
            op: Op::Write,
            sector: info.wp,
            nr_sectors: 8,
            flags: BioFlags::FUA,
            user_data: 0,
            bio_offset: 0,
        };
        img.execute(&req, IoBuf::Write(&data))
            .map_err(|e| format!("zone {z}: a write at the recovered write pointer {:#x} refused: {e}", info.wp.0))?;
        let mut back = vec![0u8; data.len()];
        img.read_direct(info.wp, &mut back).map_err(|e| format!("zone {z}: read back: {e}"))?;
        if back != data {
            return Err(format!("zone {z}: the write at the write pointer does not read back"));
        }
    }
    Ok(())
}

/// Every cut of the phase, every file each leaves: the files checked, or the first
/// failure.
fn every_cut() -> Result<(usize, u128), String> {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("commit.img");
    let after = dir.path().join("commit-after.img");
    let n = run(&img, None).phase_ops;
    let (mut checked, mut total) = (0usize, 0u128);
    for k in 0..=n {
        let r = run(&img, Some(k));
        let (outcomes, all) = r.pc.outcomes(OUTCOMES_PER_CUT);
        total += all;
        for (i, o) in outcomes.iter().enumerate() {
            std::fs::write(&after, &o.bytes).unwrap();
            check(&after, &r.zones)
                .map_err(|e| format!("cut before operation {k} of {n}, file {i} of {all} ({}): {e}", o.what))?;
            checked += 1;
        }
    }
    Ok((checked, total))
}

#[test]
fn every_cut_between_the_parts_of_a_commit_recovers() {
    let (checked, total) = every_cut().unwrap_or_else(|e| panic!("{e}"));
    eprintln!("cuts inside commits: {checked} files checked of {total} the cuts may leave");
    assert!(checked > 0);
}

#[test]
fn the_planted_announcement_as_complete_is_caught() {
    // The crate's tests build zblk-core with its planted bugs (a dev-dependency
    // feature): a build without them does not compile, rather than skip.
    const { assert!(mutation::AVAILABLE, "zblk-core built without its `mutations` feature") };
    // Recovery runs on the thread that opens the image: the planted bug is set there.
    mutation::set(Some(Mutation::AnnouncedAsComplete));
    let r = every_cut();
    mutation::set(None);
    let e = r.expect_err("announced-as-complete not caught by any cut inside a commit");
    println!("announced-as-complete caught: {}", e.lines().next().unwrap_or(&e));
    assert!(e.contains("refusing to open for writing"), "{e}");
}

#[test]
fn the_cuts_are_the_same_each_run() {
    // The cut points are counted in one run and used in others: the workload must
    // start the same operations on the media every time.
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("count.img");
    let counts: Vec<u64> = (0..3).map(|_| run(&img, None).phase_ops).collect();
    assert!(counts.iter().all(|&c| c == counts[0]), "operations of the phase differ between runs: {counts:?}");
}
