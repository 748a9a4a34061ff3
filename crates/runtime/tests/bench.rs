//! fio-like jobs on an image through the runtime (`bench::run_jobs`): fio's zbd rules
//! hold for real I/O as in the simulator (zone locks shared by the jobs, the open
//! zone limit, resets of full zones, starting from the device's write pointers),
//! time-based runs end on time, and a job with nothing to do ends at once. With
//! io_uring where the kernel allows it, else the thread pool, and with the pool.

use std::path::{Path, PathBuf};
use zblk_core::engine::EngineConfig;
use zblk_core::geometry::GeometryParams;
use zblk_core::units::Sector;
use zblk_core::zone::ZoneCond;
use zblk_dev::file::{CreateOptions, FileImage, ImageOptions};
use zblk_runtime::bench::{RealReport, run_jobs};
use zblk_runtime::{Backend, Runtime, RuntimeConfig};
use zblk_workload::job::{JobSpec, Rw, ZoneMode};

const MIB: u64 = 1 << 20;
const ZONE: u64 = 2048; // sectors (1 MiB)

/// 32 zones of 1 MiB, at most 3 open.
fn create(dir: &Path) -> PathBuf {
    let p = dir.join("img");
    let geometry = GeometryParams {
        capacity_bytes: 32 * MIB,
        zone_size_bytes: MIB,
        max_open: 3,
        nr_conv: 0,
        ..GeometryParams::default()
    };
    FileImage::create(&p, &CreateOptions { geometry, rotational: false, force: false, preallocate: false }).unwrap();
    p
}

fn start(path: &Path, backend: Backend) -> Runtime {
    let img = FileImage::open(path, &ImageOptions::default()).unwrap();
    let engine = EngineConfig { queue_depth: 64, ..EngineConfig::default() };
    Runtime::start(img, RuntimeConfig { engine, backend, ..RuntimeConfig::default() }).unwrap()
}

fn bench(rt: &Runtime, spec: JobSpec) -> RealReport {
    let r = run_jobs(rt, "img", &[spec], 1, true).unwrap();
    assert_eq!(r.image, "img");
    r
}

fn backends() -> [Backend; 2] {
    [Backend::Auto, Backend::Threads]
}

#[test]
fn random_zbd_writers_fill_reset_and_never_fail() {
    for backend in backends() {
        let dir = tempfile::tempdir().unwrap();
        let rt = start(&create(dir.path()), backend);
        // 4 jobs writing 16 MiB each at random over 32 zones, 3 of them open at a
        // time: zones fill, and full zones picked again are reset.
        let spec = JobSpec {
            rw: Rw::RandWrite,
            bs_bytes: 64 << 10,
            iodepth: 4,
            numjobs: 4,
            io_size_bytes: Some(16 * MIB),
            zonemode: ZoneMode::Zbd,
            ..JobSpec::default()
        };
        let r = bench(&rt, spec);
        let j = &r.jobs[0];
        assert_eq!((j.errors, j.first_error), (0, None), "{backend:?}: {j:?}");
        assert_eq!(j.write.io_bytes, 64 * MIB, "{backend:?}");
        assert!(j.zone_resets > 0, "{backend:?}: 64 MiB on a 32 MiB device without a reset");
        assert_eq!(r.engine.write_errors, 0, "{backend:?}");
        // With a ring and O_DIRECT, every write's data went from the registered
        // buffers; a buffered file (/tmp in tmpfs) registers none.
        match r.ring {
            Some(ring) if rt.direct_io() => assert!(ring.fixed >= 1024, "{backend:?}: {ring:?}"),
            Some(ring) => assert_eq!(ring.fixed, 0, "{backend:?}: {ring:?}"),
            None => {}
        }
        // Every zone holds whole 64 KiB writes from its start.
        for z in rt.report_zones().expect("zone report") {
            assert_eq!(z.wp.since(z.start) % 128, 0, "{backend:?}: {z:?}");
        }
        rt.close().unwrap();
    }
}

#[test]
fn sequential_writer_wraps_with_a_reset_per_zone_and_flushes() {
    for backend in backends() {
        let dir = tempfile::tempdir().unwrap();
        let rt = start(&create(dir.path()), backend);
        // 4 zones written three times over: each zone reset before its second and
        // third pass.
        let spec = JobSpec {
            rw: Rw::Write,
            bs_bytes: 256 << 10,
            iodepth: 8,
            size_bytes: Some(4 * MIB),
            io_size_bytes: Some(12 * MIB),
            zonemode: ZoneMode::Zbd,
            end_fsync: true,
            ..JobSpec::default()
        };
        let r = bench(&rt, spec);
        let j = &r.jobs[0];
        assert_eq!((j.errors, j.zone_resets, j.write.io_bytes), (0, 8, 12 * MIB), "{backend:?}: {j:?}");
        let zones = rt.report_zones().expect("zone report");
        assert!(zones[..4].iter().all(|z| z.cond == ZoneCond::Full), "{backend:?}: {:?}", &zones[..4]);
        assert_eq!(zones[4].cond, ZoneCond::Empty, "{backend:?}");
        rt.close().unwrap();
    }
}

#[test]
fn jobs_start_at_the_write_pointers_the_device_reports() {
    let dir = tempfile::tempdir().unwrap();
    let rt = start(&create(dir.path()), Backend::Threads);
    rt.write_at(Sector(2 * ZONE), &vec![7u8; 3 << 16]).unwrap();
    let spec = JobSpec {
        rw: Rw::Write,
        bs_bytes: 64 << 10,
        iodepth: 4,
        offset_bytes: 2 * MIB,
        size_bytes: Some(2 * MIB),
        io_size_bytes: Some(2 * MIB - (3 << 16)),
        zonemode: ZoneMode::Zbd,
        ..JobSpec::default()
    };
    let r = bench(&rt, spec);
    let j = &r.jobs[0];
    // Zone 2 already held 192 KiB: the job wrote the rest of it, then zone 3.
    assert_eq!((j.errors, j.zone_resets, j.write.io_bytes), (0, 0, 2 * MIB - (3 << 16)), "{j:?}");
    let zones = rt.report_zones().expect("zone report");
    assert_eq!((zones[2].cond, zones[3].cond), (ZoneCond::Full, ZoneCond::Full));
    rt.close().unwrap();
}

#[test]
fn time_based_run_ends_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let rt = start(&create(dir.path()), Backend::Threads);
    let spec = JobSpec {
        rw: Rw::RandWrite,
        bs_bytes: 4096,
        iodepth: 8,
        numjobs: 2,
        runtime_ns: Some(200_000_000),
        zonemode: ZoneMode::Zbd,
        ..JobSpec::default()
    };
    let r = bench(&rt, spec);
    let j = &r.jobs[0];
    assert_eq!(j.errors, 0, "{j:?}");
    assert!(j.write.ios > 0);
    assert!(r.elapsed_ns >= 200_000_000 && r.elapsed_ns < 20_000_000_000, "{}", r.elapsed_ns);
    rt.close().unwrap();
}

#[test]
fn a_reader_of_an_empty_device_ends_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = start(&create(dir.path()), Backend::Threads);
    let spec = JobSpec { rw: Rw::RandRead, iodepth: 4, numjobs: 2, zonemode: ZoneMode::Zbd, ..JobSpec::default() };
    let r = bench(&rt, spec);
    assert_eq!((r.jobs[0].read.ios, r.jobs[0].errors), (0, 0));
    assert_eq!(r.engine.bios, 0);
    rt.close().unwrap();
}
