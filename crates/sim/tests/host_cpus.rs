//! fio's jobs on a host in time (`Sim::set_host_cpus`): the event loop runs the
//! jobs' steps when they are due, checker and oracles on.

use zblk_core::params::DeviceParams;
use zblk_sim::driver::{Sim, SimConfig};
use zblk_sim::{HostCpus, JobSpec, Rw, ZoneMode, run_jobs_on};

/// Two random writers of four 1 MiB zones (zbd mode, QD 4), 64 writes each, on a
/// memory-backed null device with 10 us completions, on `host`: the run's
/// virtual time and the BIOs written.
fn run(host: HostCpus) -> (u64, u64) {
    let mut device = DeviceParams::default();
    device.apply("size=16,zone_size=1,zone_nr_conv=0,memory_backed=1,completion_nsec=10000").expect("params");
    let mut sim = Sim::new(&SimConfig { check: true, ..SimConfig::new(device, 3) }).expect("device");
    sim.set_host_cpus(host);
    let job = JobSpec {
        rw: Rw::RandWrite,
        bs_bytes: 64 << 10,
        iodepth: 4,
        numjobs: 2,
        size_bytes: Some(4 << 20),
        io_size_bytes: Some(4 << 20),
        zonemode: ZoneMode::Zbd,
        ..JobSpec::default()
    };
    let r = run_jobs_on(&mut sim, &[job], true).expect("a valid job");
    (r.virtual_ns, r.jobs[0].write.ios)
}

#[test]
fn the_jobs_steps_run_when_due_and_take_their_time() {
    let instant = run(HostCpus::default());
    assert_eq!(instant.1, 128, "every write done");
    // With no time per step, the CPUs change nothing.
    assert_eq!(run(HostCpus { cpus: 2, ..HostCpus::default() }), instant);
    // The second job starts 5 ms in: the run ends later, every write done.
    let late = run(HostCpus { cpus: 2, start_ns: 5_000_000, ..HostCpus::default() });
    assert_eq!(late.1, 128);
    assert!(late.0 >= instant.0 && late.0 > 5_000_000, "{late:?} against {instant:?}");
    // One CPU, 100 us a submission: 128 submissions in a row take 12.8 ms at least.
    let slow = run(HostCpus { cpus: 1, submit_ns: 100_000, ..HostCpus::default() });
    assert_eq!(slow.1, 128);
    assert!(slow.0 >= 12_800_000, "{slow:?}");
}
