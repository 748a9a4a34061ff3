//! Fault injection for the simulated device: media errors that leave a write half
//! done, and zones that turn READONLY or OFFLINE, at seeded random points.

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

/// How often faults happen, in parts per million of the requests they apply to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FaultConfig {
    /// A write fails with an I/O error after writing a random part of its data.
    pub write_error_ppm: u32,
    /// A write's zone turns READONLY or OFFLINE before it executes.
    pub zone_fail_ppm: u32,
    /// A read fails with an I/O error.
    pub read_error_ppm: u32,
    /// A request's completion is lost or delayed past the driver's timeout: the
    /// driver fails it with an I/O error [`TIMEOUT_NS`] later, as the kernel's
    /// timeout handler does (`blk_mq_rq_timed_out()`). Half the time the device had
    /// executed it (the completion was lost), half the time the command was aborted
    /// before it executed (delayed past the timeout).
    pub timeout_ppm: u32,
    /// The disks have a volatile write cache: a write completes into it, FLUSH and
    /// FUA make what completed before them durable (see docs/vopr.md).
    #[serde(default)]
    pub write_cache: bool,
    /// Power fails between two operations of the workload (parts per million of
    /// its operations): what the write caches hold and did not destage is lost,
    /// and the host restarts from what is durable.
    #[serde(default)]
    pub power_loss_ppm: u32,
}

/// How long after a request's lost completion the driver's timeout fails it (a
/// short timeout keeps simulated runs short; its length changes no outcome).
pub const TIMEOUT_NS: u64 = 1_000_000;

/// The name of a power loss in the counts of faults by kind.
pub const POWER_LOSS: &str = "power loss";

/// What happens to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Nothing: execute normally.
    None,
    /// Write only this many leading sectors, then fail with an I/O error.
    PartialWrite(u32),
    /// The zone turns READONLY first.
    ZoneReadOnly,
    /// The zone turns OFFLINE first.
    ZoneOffline,
    /// Fail the read with an I/O error.
    ReadError,
    /// The completion is lost; the request executed (`true`) or was aborted before
    /// it did (`false`); the driver times it out.
    Timeout(bool),
}

impl Fault {
    /// Its name in counts.
    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::PartialWrite(0) => "write error",
            Fault::PartialWrite(_) => "partial write",
            Fault::ZoneReadOnly => "zone READONLY",
            Fault::ZoneOffline => "zone OFFLINE",
            Fault::ReadError => "read error",
            Fault::Timeout(true) => "lost completion",
            Fault::Timeout(false) => "timed out before executing",
        }
    }
}

/// Seeded fault source.
#[derive(Debug)]
pub struct Faults {
    cfg: FaultConfig,
    rng: ChaCha8Rng,
    /// Faults injected so far.
    pub injected: u64,
    /// Faults injected so far, by kind.
    pub by_kind: std::collections::BTreeMap<&'static str, u64>,
    /// Faults forced on the next requests they apply to, in order (scenarios).
    forced: std::collections::VecDeque<Fault>,
}

impl Faults {
    /// A fault source; `seed` makes it replayable.
    pub fn new(cfg: FaultConfig, seed: u64) -> Faults {
        Faults {
            cfg,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0xfa17_fa17),
            injected: 0,
            by_kind: Default::default(),
            forced: Default::default(),
        }
    }

    /// Forces `fault` on the next request it applies to (a write fault on the next
    /// write to a sequential zone, a read error on the next read, a timeout on the
    /// next request), after the faults forced before it: scenarios script faults.
    pub fn force(&mut self, fault: Fault) {
        self.forced.push_back(fault);
    }

    fn take_forced(&mut self, applies: impl Fn(Fault) -> bool) -> Option<Fault> {
        let f = *self.forced.front()?;
        if !applies(f) {
            return None;
        }
        self.injected += 1;
        self.forced.pop_front()
    }

    /// Counts an injected fault by kind.
    pub fn count(&mut self, f: Fault) {
        if f != Fault::None {
            *self.by_kind.entry(f.name()).or_insert(0) += 1;
        }
    }

    fn hit(&mut self, ppm: u32) -> bool {
        ppm != 0 && self.rng.random_range(0..1_000_000) < ppm
    }

    /// The fate of a write of `nr_sectors` (in blocks of `lbs_sectors`) to a
    /// sequential zone.
    pub fn for_write(&mut self, nr_sectors: u32, lbs_sectors: u32) -> Fault {
        let write_fault = |f| matches!(f, Fault::PartialWrite(_) | Fault::ZoneReadOnly | Fault::ZoneOffline);
        if let Some(f) = self.take_forced(write_fault) {
            return f;
        }
        if self.hit(self.cfg.zone_fail_ppm) {
            self.injected += 1;
            return if self.rng.random_bool(0.5) { Fault::ZoneReadOnly } else { Fault::ZoneOffline };
        }
        if self.hit(self.cfg.write_error_ppm) {
            self.injected += 1;
            let blocks = nr_sectors / lbs_sectors;
            return Fault::PartialWrite(self.rng.random_range(0..blocks) * lbs_sectors);
        }
        Fault::None
    }

    /// Whether the completion of a request is lost (`Some(executed)`): drawn for
    /// every request, after the fault of its kind.
    pub fn for_completion(&mut self) -> Option<bool> {
        if let Some(Fault::Timeout(executed)) = self.take_forced(|f| matches!(f, Fault::Timeout(_))) {
            return Some(executed);
        }
        if self.hit(self.cfg.timeout_ppm) {
            self.injected += 1;
            return Some(self.rng.random_bool(0.5));
        }
        None
    }

    /// How many of `cached` operations, in arrival order, a disk's write cache had
    /// destaged when the power failed: any number, all of them as likely as none.
    pub fn destaged(&mut self, cached: usize) -> usize {
        self.rng.random_range(0..=cached)
    }

    /// The fate of a read.
    pub fn for_read(&mut self) -> Fault {
        if let Some(f) = self.take_forced(|f| f == Fault::ReadError) {
            return f;
        }
        if self.hit(self.cfg.read_error_ppm) {
            self.injected += 1;
            return Fault::ReadError;
        }
        Fault::None
    }
}
