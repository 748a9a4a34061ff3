//! Deterministic tests of a program's own code: the same [`Handle`] on a
//! simulated device in virtual time, the program's async code driven by a seeded
//! single-threaded executor, with the simulator's faults and power loss drawn from
//! the seed. A run is a function of its seed: a failing seed replays exactly.
//!
//! ```
//! use zblk::sim::{FaultConfig, SimOptions};
//!
//! let faults = FaultConfig { write_cache: true, ..FaultConfig::default() };
//! let sim = SimOptions::new().faults(faults).open("sim:nullb:zone_size=1,size=8", 42)?;
//! let h = sim.handle();
//! let zone = h.zone_size();
//! let spawner = sim.spawner();
//! let placed = sim.block_on(async move {
//!     // Two tasks append to one zone: each learns where its record landed.
//!     let tasks: Vec<_> = (0..2u8)
//!         .map(|i| {
//!             let h = h.clone();
//!             spawner.spawn(async move { h.append_async(zone, vec![i; 4096]).await.map(|(at, _)| at) })
//!         })
//!         .collect();
//!     let mut at = Vec::new();
//!     for t in tasks {
//!         at.push(t.await?);
//!     }
//!     h.flush_async().await?;
//!     Ok::<_, zblk::Error>(at)
//! })?;
//! assert_eq!(placed.len(), 2);
//! assert!(sim.stats().now_ns > 0, "virtual time passed");
//! // The power fails: what the flush made durable is there after it.
//! sim.power_loss();
//! let h = sim.handle();
//! assert_eq!(h.zone(zone)?.wp, zone + 8192);
//! # Ok::<(), zblk::Error>(())
//! ```
//!
//! - [`SimOptions::open`] (or [`Sim::new`]) makes the simulated device of a
//!   `sim:PRESET[:name=value,...]` string with zblk's engine (zblk_core) over it,
//!   under the issue policy a handle would have there; [`Sim::handle`] is a
//!   [`Handle`] on it. Its blocking calls run the simulated device until their
//!   request ends (virtual time passes, other tasks' requests progress); its async
//!   calls return futures the simulation's executor wakes.
//! - [`Sim::run`] and [`Sim::block_on`] drive a future, and the tasks spawned
//!   with [`Sim::spawner`], one poll at a time: which ready task goes next, and
//!   whether the device moves to its next event first, are drawn from the seed.
//!   No thread, no wall clock.
//! - Faults ([`FaultConfig`], the simulator's): write errors that leave part of
//!   the write done, zones turning READONLY or OFFLINE, read errors, lost
//!   completions (the driver's timeout fails them); a volatile write cache
//!   (`write_cache`) that a FLUSH, a FUA write, a RESET or FINISH destages; a
//!   power loss ([`Sim::power_loss`], or at a step of [`Sim::run`]) keeps what is
//!   durable and a prefix of the cache drawn from the seed, and may tear the write
//!   in progress ([`SimOptions::torn_writes`]); silent corruption of reads at a
//!   rate ([`SimOptions::corrupt_read_ppm`], off by default).
//! - [`Sim::digest`] sums up every event of the run: the same seed gives the same
//!   digest. [`seeds`] and [`check_seeds`] run a test over seeds, one replayed by
//!   `ZBLK_SIM_SEED=S`.

mod exec;
mod link;
mod media;
mod world;

pub use exec::{JoinHandle, Spawner};
pub(crate) use link::{SimErr, SimIo, SimLink};
pub use world::SimStats;
pub use zblk_sim::faults::FaultConfig;

use crate::spec::Target;
use crate::{Error, Handle, IssuePolicy, MAX_QUEUE_DEPTH};
use exec::Exec;
use media::MediaConfig;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard};
use world::World;
use zblk_core::engine::EngineConfig;

/// How to build a [`Sim`]: the faults (the simulator's, and the medium's: torn
/// writes, silent corruption), the issue policy, the queue depth.
#[derive(Clone, Copy, Debug)]
pub struct SimOptions {
    faults: FaultConfig,
    media: MediaConfig,
    policy: Option<IssuePolicy>,
    queue_depth: u32,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions::new()
    }
}

impl SimOptions {
    /// No faults but the power loss's own (a power loss keeps a prefix of the
    /// write cache and may tear the write in progress: [`SimOptions::torn_writes`]),
    /// the device's own policy, a queue depth of 64.
    pub fn new() -> SimOptions {
        let media = MediaConfig { torn_writes: true, corrupt_read_ppm: 0 };
        SimOptions { faults: FaultConfig::default(), media, policy: None, queue_depth: 64 }
    }

    /// The faults to inject, and the write cache ([`FaultConfig::write_cache`]);
    /// `power_loss_ppm` is not used here ([`Sim::run`] takes the power cut).
    pub fn faults(mut self, faults: FaultConfig) -> SimOptions {
        self.faults = faults;
        self
    }

    /// Whether a power loss may tear the write in progress (on by default, as the
    /// power loss's cache prefix is): with a write cache, the oldest cached write
    /// the power loss throws away (its destaging had begun); without one, a write
    /// that executed and had not completed, if nothing reached its zone after it.
    /// Half the power losses that find such a write of two logical blocks or more
    /// tear it: a prefix of its whole blocks, 1 to all but one, reaches the medium,
    /// and the zone's write pointer after the power loss is where it ends. Counted
    /// in [`SimStats::torn_writes`].
    ///
    /// ```
    /// use zblk::sim::{FaultConfig, SimOptions};
    ///
    /// let faults = FaultConfig { write_cache: true, ..FaultConfig::default() };
    /// let opts = SimOptions::new().faults(faults);
    /// let torn = (1..=40u64).filter(|&seed| {
    ///     let sim = opts.open("sim:nullb:zone_size=1,size=8", seed).unwrap();
    ///     let h = sim.handle();
    ///     let zone = h.zone_size();
    ///     h.write_at(zone, &[1; 8192]).unwrap(); // 16 blocks, in the cache only
    ///     sim.power_loss();
    ///     let wp = sim.handle().zone(zone).unwrap().wp - zone;
    ///     assert!(wp % 512 == 0 && wp <= 8192);
    ///     wp != 0 && wp != 8192 // a prefix: the write torn
    /// });
    /// assert!(torn.count() > 0);
    /// # Ok::<(), zblk::Error>(())
    /// ```
    pub fn torn_writes(mut self, on: bool) -> SimOptions {
        self.media.torn_writes = on;
        self
    }

    /// Silent corruption (0, none, by default): the reads, in parts per million of
    /// those that succeed, that find a byte of one of the sectors they read (below
    /// its zone's write pointer) changed, with no error: the medium's bits flipped,
    /// changed for every later read too. A byte changed is a burst of at most 8 bits,
    /// which a CRC-32 always detects. Counted in [`SimStats::corrupted_reads`].
    pub fn corrupt_read_ppm(mut self, ppm: u32) -> SimOptions {
        self.media.corrupt_read_ppm = ppm;
        self
    }

    /// The issue policy (by default the one a handle gets on the preset).
    pub fn policy(mut self, policy: IssuePolicy) -> SimOptions {
        self.policy = Some(policy);
        self
    }

    /// The engine's queue depth (1 to [`crate::MAX_QUEUE_DEPTH`]).
    pub fn queue_depth(mut self, depth: u32) -> SimOptions {
        self.queue_depth = depth;
        self
    }

    /// The simulated device `spec` names (`sim:PRESET[:name=value,...]`), run by
    /// `seed`.
    pub fn open(&self, spec: &str, seed: u64) -> Result<Sim, Error> {
        if !(1..=MAX_QUEUE_DEPTH).contains(&self.queue_depth) {
            let bounds = format!("1 to {MAX_QUEUE_DEPTH}");
            return Err(Error::Limit { what: "queue depth", value: self.queue_depth.into(), bounds });
        }
        let d = match Target::parse(spec)? {
            Target::Sim(d) => d,
            Target::Stack(_) => {
                // The world is one engine on one memory device, whose cache and
                // power loss it models itself; a stack's disks are the simulator's,
                // with faults, caches and power loss of their own that keep no data.
                let why = "a simulation runs on one simulated device, sim:PRESET[:name=value,...]: a stack's \
                           disks keep zone state and timing but no data, and their faults and power loss are \
                           not this simulation's (Handle::open runs a stack, without virtual time)"
                    .into();
                return Err(Error::Unsupported { spec: spec.into(), why });
            }
            Target::Path(_) => {
                let why = "a simulation runs on a simulated preset, sim:PRESET[:name=value,...]".into();
                return Err(Error::Unsupported { spec: spec.into(), why });
            }
        };
        let geo = d.params.validate().map_err(|e| Error::Spec { spec: spec.into(), why: e.to_string() })?;
        let policy = self.policy.unwrap_or_else(|| IssuePolicy::default_for(geo.is_zoned(), d.rotational(), true));
        let cfg = EngineConfig { policy, queue_depth: self.queue_depth, ..EngineConfig::default() };
        let world = World::new(geo, cfg, d.model(seed), (self.faults, self.media), seed);
        let exec = Exec::default();
        Ok(Sim {
            queue: exec.queue.clone(),
            world: Arc::new(Mutex::new(world)),
            name: spec.into(),
            seed,
            exec: RefCell::new(exec),
            rng: RefCell::new(ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_e8ec)),
            user_rng: RefCell::new(ChaCha8Rng::seed_from_u64(seed ^ 0x7e57_0000)),
            handle: RefCell::new(None),
        })
    }
}

/// A simulated device, the handles on it and the executor of the program's tasks,
/// all run by one seed. See the module documentation.
pub struct Sim {
    world: Arc<Mutex<World>>,
    name: String,
    seed: u64,
    exec: RefCell<Exec>,
    /// Where tasks are spawned (the executor's).
    queue: Rc<RefCell<exec::SpawnQueue>>,
    /// The executor's choices.
    rng: RefCell<ChaCha8Rng>,
    /// [`Sim::random`]'s.
    user_rng: RefCell<ChaCha8Rng>,
    /// The handle of the host since the last power loss.
    handle: RefCell<Option<Handle>>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim").field("name", &self.name).field("seed", &self.seed).finish_non_exhaustive()
    }
}

impl Sim {
    /// [`SimOptions::new`]'s simulation of `spec` (no faults), run by `seed`.
    pub fn new(spec: &str, seed: u64) -> Result<Sim, Error> {
        SimOptions::new().open(spec, seed)
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// A handle on the simulated device (clones of one handle until it is closed or
    /// the next power loss, whose host starts anew with a new handle; the handles
    /// of before fail with [`Error::Closed`]).
    pub fn handle(&self) -> Handle {
        let mut h = self.handle.borrow_mut();
        if let Some(h) = h.as_ref().filter(|h| h.sim_epoch() == Some(self.world().epoch)) {
            return h.clone();
        }
        let w = self.world();
        let link = SimLink::new(self.world.clone(), w.epoch);
        let handle = Handle::new_sim(link, &self.name, w.cfg.policy, w.geo.clone());
        *h = Some(handle.clone());
        handle
    }

    /// Spawns tasks onto the executor.
    pub fn spawner(&self) -> Spawner {
        Spawner { queue: self.queue.clone() }
    }

    /// A number below `bound` (at least 1) drawn from the seed, for the test's own
    /// choices (not the executor's nor the device's).
    pub fn random(&self, bound: u64) -> u64 {
        self.user_rng.borrow_mut().random_range(0..bound.max(1))
    }

    /// Runs `fut` to its end with every task spawned, and returns its output.
    /// Panics when every task waits and the device has nothing left to do.
    pub fn block_on<T: 'static>(&self, fut: impl Future<Output = T> + 'static) -> T {
        self.run(fut, None).expect("no power cut asked for")
    }

    /// Runs `fut` and the tasks spawned, one step at a time (a task polled, or the
    /// device's next event): which ready task goes, and whether the device goes
    /// first, drawn from the seed. Returns `fut`'s output, or `None` when the power
    /// was cut first, at step `cut_at` of this run ([`Sim::power_loss`]). The tasks
    /// still running when it returns are dropped (their requests go on in the
    /// device). Panics when every task waits and the device has nothing left to do
    /// (a deadlock), naming the seed.
    ///
    /// ```
    /// let sim = zblk::sim::Sim::new("sim:nullb:zone_size=1,size=8", 1)?;
    /// let h = sim.handle();
    /// let zone = h.zone_size();
    /// let appends = async move {
    ///     for _ in 0..100 {
    ///         h.append_async(zone, vec![1; 512]).await?;
    ///     }
    ///     Ok::<_, zblk::Error>(())
    /// };
    /// assert!(sim.run(appends, Some(40)).is_none(), "the power went at step 40");
    /// let wp = sim.handle().zone(zone)?.wp; // a new host, on what the device kept
    /// assert!(wp < zone + 100 * 512);
    /// # Ok::<(), zblk::Error>(())
    /// ```
    pub fn run<T: 'static>(&self, fut: impl Future<Output = T> + 'static, cut_at: Option<u64>) -> Option<T> {
        let main = self.spawner().spawn(fut);
        let mut steps = 0u64;
        loop {
            if let Some(v) = main.try_take() {
                self.exec.borrow_mut().clear();
                return Some(v);
            }
            steps += 1;
            if cut_at == Some(steps) {
                self.power_loss();
                return None;
            }
            let ready = {
                let mut ex = self.exec.borrow_mut();
                ex.take_spawned();
                ex.ready()
            };
            let mut w = self.world();
            w.stats.steps += 1;
            let events = w.next_event().is_some();
            if ready.is_empty() && !events {
                drop(w);
                self.exec.borrow_mut().clear();
                panic!("zblk::sim seed {}: every task waits and the device has nothing to do", self.seed);
            }
            if !ready.is_empty() && (!events || self.rng.borrow_mut().random_bool(0.5)) {
                let id = ready[self.rng.borrow_mut().random_range(0..ready.len())];
                w.mix(&[7, id]);
                drop(w);
                // (A task spawns through the queue, not the executor.)
                self.exec.borrow_mut().poll(id);
            } else {
                w.step();
            }
        }
    }

    /// The power fails and comes back: every task is dropped (the host dies), the
    /// requests in flight never end, the device keeps what is durable and a prefix
    /// of its write cache drawn from the seed, its open zones come back CLOSED, and
    /// the next [`Sim::handle`] is a new host's, its engine started from a zone
    /// report.
    pub fn power_loss(&self) {
        self.exec.borrow_mut().clear();
        self.world().power_loss();
        *self.handle.borrow_mut() = None;
    }

    /// The counters so far.
    pub fn stats(&self) -> SimStats {
        self.world().stats()
    }

    /// A digest of every event so far (submissions, requests issued, completions
    /// and their times, task polls, power losses): the same seed gives the same.
    pub fn digest(&self) -> u64 {
        self.world().digest
    }

    fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The seeds a test runs: `count` from `first`, or the one `ZBLK_SIM_SEED` names
/// (to replay it), or `ZBLK_SIM_SEEDS` of them from `first` (to run more).
///
/// # Panics
/// If a variable is set to something that is not a number: a replay that ran the
/// default seeds instead would pass for one. (A test's tool, where a panic is the
/// failure a person reads.)
pub fn seeds(first: u64, count: u64) -> std::ops::RangeInclusive<u64> {
    let env = |k: &str| {
        let v = std::env::var(k).ok()?;
        Some(
            v.trim().parse::<u64>().unwrap_or_else(|_| panic!("{k}={v}: not a seed (a number from 0 to {})", u64::MAX)),
        )
    };
    // A range of `n` seeds from `s`, up to the largest seed there is (none for 0:
    // an inclusive range whose end is before its start).
    let from = |s: u64, n: u64| match n.checked_sub(1) {
        Some(last) => s..=s.saturating_add(last),
        None => std::ops::RangeInclusive::new(1, 0),
    };
    match (env("ZBLK_SIM_SEED"), env("ZBLK_SIM_SEEDS")) {
        (Some(s), _) => s..=s,
        (None, Some(n)) => from(first, n),
        _ => from(first, count),
    }
}

/// Runs `test` for every seed of `seeds`; a seed that panics is named, with the
/// way to replay it (`ZBLK_SIM_SEED=S`), and its panic goes on.
pub fn check_seeds(seeds: impl IntoIterator<Item = u64>, mut test: impl FnMut(u64)) {
    for seed in seeds {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| test(seed)));
        if let Err(p) = r {
            eprintln!("seed {seed} failed: replay it with ZBLK_SIM_SEED={seed}");
            std::panic::resume_unwind(p);
        }
    }
}
