//! What a user of a simulation reads and sets between steps: the clock and seed,
//! the stack and its disks' engines and devices, the models' descriptions and
//! counters, zone reports and data read straight from the disks' stores.

use super::{ProgressFn, Sim, SimStats};
use std::borrow::Cow;
use std::io::Write as _;
use zblk_core::bio::Status;
use zblk_core::engine::{Engine, EngineStats};
use zblk_core::geometry::Geometry;
use zblk_core::stack::{DevId, Stack};
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::ZoneInfo;
use zblk_dev::{BlockDevice, MemDevice};
use zblk_workload::fio::HostCpus;

impl Sim {
    /// Virtual time now, in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns
    }

    /// The run's seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Runs fio's jobs ([`crate::run_jobs_on`]) on `cpus` in time: see [`HostCpus`].
    pub fn set_host_cpus(&mut self, cpus: HostCpus) {
        self.host_cpus = cpus;
    }

    /// The CPUs fio's jobs run on ([`Sim::set_host_cpus`]).
    pub fn host_cpus(&self) -> HostCpus {
        self.host_cpus
    }

    /// The stack.
    pub fn stack(&self) -> &Stack {
        &self.stack
    }

    pub(super) fn disk_index(&self, dev: DevId) -> usize {
        self.disk_of[dev.idx()].unwrap_or_else(|| panic!("{} is not a disk", self.stack.info(dev).name))
    }

    /// The top device as a disk: what a simulation of one device has.
    pub(super) fn top_disk(&self) -> usize {
        let top = self.stack.top();
        self.disk_of[top.idx()].unwrap_or_else(|| {
            panic!("the top device {} is a stacked device: name the disk", self.stack.info(top).name)
        })
    }

    /// The engine of the device (the top device must be a disk), for inspection.
    pub fn engine(&self) -> &Engine {
        self.disk_engine(self.disks[self.top_disk()].dev)
    }

    /// The engine of the device (the top device must be a disk), to make zone
    /// reports or change settings as a user would.
    pub fn engine_mut(&mut self) -> &mut Engine {
        let dev = self.disks[self.top_disk()].dev;
        self.engines_touched = true;
        self.stack.engine_mut(dev)
    }

    /// Writes `zoned_qd1_writes` (0 or 1) of every zoned disk whose engine plugs
    /// (per-zone plugging, pipelining, the single issuer or the batching issuer), as
    /// a user writing the queue attribute while I/O runs: an engine whose attribute
    /// changes freezes, drains and switches (0 brings back the per-zone policy the
    /// single issuer replaced, pipelining included).
    pub fn set_zoned_qd1_writes(&mut self, value: u64) {
        if self.tracing.debug {
            let _ = writeln!(std::io::stderr(), "{:>12} zoned_qd1_writes={value}", self.clock.now_ns);
        }
        for i in 0..self.disks.len() {
            let dev = self.disks[i].dev;
            let e = self.stack.engine_mut(dev);
            if e.geometry().is_zoned() && e.policy_traits().plugs {
                e.set_zoned_qd1_writes(value).expect("zoned_qd1_writes of a zoned disk");
                self.engines_touched = true;
            }
        }
    }

    /// Forces `fault` on the next request of the top device (a disk) it applies
    /// to (see [`Faults::force`](crate::faults::Faults::force)): scenarios script their faults.
    pub fn force_fault(&mut self, fault: crate::faults::Fault) {
        let i = self.top_disk();
        self.disks[i].faults.force(fault);
    }

    /// The engine of disk `dev`.
    pub fn disk_engine(&self, dev: DevId) -> &Engine {
        self.stack.engine(dev).unwrap_or_else(|| panic!("{} is not a disk", self.stack.info(dev).name))
    }

    /// The top device's geometry.
    pub fn device_geometry(&self) -> Geometry {
        self.stack.info(self.stack.top()).geometry.clone()
    }

    /// Calls `report(now_ns, completions)` every `every` BIO completions while
    /// [`Sim::run`] runs: progress for long simulations.
    pub fn set_progress(&mut self, every: u64, report: ProgressFn) {
        assert!(every > 0, "progress every 0 completions");
        self.progress = Some((every, report));
    }

    /// The device (the top device must be a disk).
    pub fn device(&self) -> &MemDevice {
        &self.disks[self.top_disk()].mem
    }

    /// The device (the top device must be a disk), for fault injection.
    pub fn device_mut(&mut self) -> &mut MemDevice {
        let i = self.top_disk();
        &mut self.disks[i].mem
    }

    /// The in-memory device behind disk `dev`.
    pub fn disk(&self, dev: DevId) -> &MemDevice {
        &self.disks[self.disk_index(dev)].mem
    }

    /// The in-memory device behind disk `dev`, for fault injection.
    pub fn disk_mut(&mut self, dev: DevId) -> &mut MemDevice {
        let i = self.disk_index(dev);
        &mut self.disks[i].mem
    }

    /// The timing model's description; for a stack, every disk's, named.
    pub fn model_description(&self) -> String {
        if let [d] = &self.disks[..] {
            return d.model.describe();
        }
        let each: Vec<String> =
            self.model_descriptions().into_iter().map(|(d, m)| format!("{}: {m}", self.stack.info(d).name)).collect();
        each.join("; ")
    }

    /// The timing model of each disk, described.
    pub fn model_descriptions(&self) -> Vec<(DevId, String)> {
        self.disks.iter().map(|d| (d.dev, d.model.describe())).collect()
    }

    /// The timing model's counters (see [`DeviceModel::counters`](crate::model::DeviceModel::counters)); for a stack,
    /// each counter summed over the disks.
    pub fn model_counters(&self) -> Vec<(&'static str, f64)> {
        let mut sum: Vec<(&'static str, f64)> = Vec::new();
        for d in &self.disks {
            for (name, v) in d.model.counters() {
                match sum.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, s)) => *s += v,
                    None => sum.push((name, v)),
                }
            }
        }
        sum
    }

    /// Counters.
    pub fn stats(&self) -> SimStats {
        let checks = self.disks.iter().filter_map(|d| d.checker.as_ref()).map(|c| c.checks).sum();
        let faults = self.disks.iter().map(|d| d.faults.injected).sum::<u64>() + self.durability.power_losses;
        SimStats { checks, faults, ..self.stats }
    }

    /// Faults injected so far, by kind, over every disk.
    pub fn faults_by_kind(&self) -> std::collections::BTreeMap<&'static str, u64> {
        let mut sum = std::collections::BTreeMap::new();
        for d in &self.disks {
            for (k, n) in &d.faults.by_kind {
                *sum.entry(*k).or_insert(0) += n;
            }
        }
        if self.durability.power_losses > 0 {
            sum.insert(crate::faults::POWER_LOSS, self.durability.power_losses);
        }
        sum
    }

    /// Engine counters of the device (the top device must be a disk).
    pub fn engine_stats(&self) -> EngineStats {
        self.engine().stats()
    }

    /// Zone `z` of device `dev` as its disks' zones make it up.
    pub fn report_zone(&self, dev: DevId, z: ZoneNo) -> Result<ZoneInfo, Status> {
        let (disks, disk_of) = (&self.disks, &self.disk_of);
        self.stack.report_zone(dev, z, &mut |d, s| disks[disk_of[d.idx()].expect("a disk")].mem.report_zone(s))
    }

    /// Every zone of device `dev` (none if it is not zoned): a disk's zone table as
    /// it is, a stacked device's made up zone by zone.
    pub fn report_zones(&self, dev: DevId) -> Cow<'_, [ZoneInfo]> {
        if let Some(i) = self.disk_of[dev.idx()] {
            return self.disks[i].mem.zones().map_or(Cow::Borrowed(&[]), |z| Cow::Borrowed(z.zones()));
        }
        let geo = &self.stack.info(dev).geometry;
        if !geo.is_zoned() {
            return Cow::Borrowed(&[]);
        }
        (0..geo.nr_zones()).filter_map(|z| self.report_zone(dev, ZoneNo(z)).ok()).collect()
    }

    /// Reads `buf.len()` bytes of device `dev` at `sector` straight from the disks'
    /// stores through the stack's mapping (for checks: no I/O, no time).
    pub fn peek(&self, dev: DevId, sector: Sector, buf: &mut [u8]) {
        for (k, chunk) in buf.chunks_mut(SECTOR_SIZE as usize).enumerate() {
            let (d, s) = self.stack.map_to_disk(dev, sector + k as u64);
            self.disk(d).peek(s, chunk);
        }
    }
}
