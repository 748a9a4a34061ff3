//! Device timing models: when a request issued to the simulated device completes.
//!
//! A model only decides time. The simulator executes a request on the device's data
//! and zone state when the model completes it, so a model that reorders completions
//! also reorders execution, as a device with a queue does; unless the device keeps a
//! zone's writes in order (`SimConfig::keeps_zone_order`), where it executes each
//! request when it arrives and the model decides only when it completes.

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use zblk_core::bio::Request;
use zblk_core::params::LatencyDist;

/// A timing model of a device, in virtual nanoseconds. `Send`: the library's
/// simulation (`zblk::sim`) keeps one behind a lock its handles share across threads.
pub trait DeviceModel: Send {
    /// A request reaches the device at `now_ns`.
    fn submit(&mut self, now_ns: u64, req: &Request);
    /// When the model next has something to do, if anything is pending.
    fn next_event_ns(&self) -> Option<u64>;
    /// Moves the model to `now_ns` (its [`DeviceModel::next_event_ns`]) and appends the
    /// requests that complete then, in completion order.
    fn advance(&mut self, now_ns: u64, done: &mut Vec<Request>);
    /// The device loses power at `now_ns`: every request it holds is gone (its
    /// model never completes it) and it comes back idle.
    fn power_loss(&mut self, now_ns: u64);
    /// A one-line description, for reports.
    fn describe(&self) -> String;
    /// What the model did, as named counters (e.g. a disk's seeks and time spent
    /// rotating), for reports. None by default.
    fn counters(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }
}

/// The null device's timing: every request completes after a latency drawn from a
/// seeded distribution, independently of the others (null_blk with `irqmode=2`,
/// timer completions).
#[derive(Debug)]
pub struct NullModel {
    mean_ns: u64,
    dist: LatencyDist,
    rng: ChaCha8Rng,
    seq: u64,
    pending: BinaryHeap<Reverse<(u64, u64, ReqBox)>>,
}

/// A request ordered only by the heap key before it.
#[derive(Debug, Clone, Copy)]
struct ReqBox(Request);
impl PartialEq for ReqBox {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for ReqBox {}
impl PartialOrd for ReqBox {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ReqBox {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl NullModel {
    /// A null model with mean latency `mean_ns`, drawn as `dist`, seeded by `seed`.
    pub fn new(mean_ns: u64, dist: LatencyDist, seed: u64) -> NullModel {
        NullModel { mean_ns, dist, rng: ChaCha8Rng::seed_from_u64(seed), seq: 0, pending: BinaryHeap::new() }
    }

    fn latency(&mut self) -> u64 {
        match self.dist {
            LatencyDist::Fixed => self.mean_ns,
            LatencyDist::Uniform => self.rng.random_range(0..=2 * self.mean_ns),
            LatencyDist::Exp => {
                let u: f64 = self.rng.random_range(f64::MIN_POSITIVE..1.0);
                (-(u.ln()) * self.mean_ns as f64) as u64
            }
        }
    }
}

impl DeviceModel for NullModel {
    fn submit(&mut self, now_ns: u64, req: &Request) {
        let at = now_ns + self.latency();
        self.seq += 1;
        self.pending.push(Reverse((at, self.seq, ReqBox(*req))));
    }

    fn next_event_ns(&self) -> Option<u64> {
        self.pending.peek().map(|Reverse((t, _, _))| *t)
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Request>) {
        while let Some(Reverse((t, _, _))) = self.pending.peek() {
            if *t > now_ns {
                break;
            }
            let Reverse((_, _, r)) = self.pending.pop().expect("peeked");
            done.push(r.0);
        }
    }

    fn power_loss(&mut self, _now_ns: u64) {
        self.pending.clear();
    }

    fn describe(&self) -> String {
        let dist = match self.dist {
            LatencyDist::Fixed => "fixed",
            LatencyDist::Uniform => "uniform",
            LatencyDist::Exp => "exponential",
        };
        format!("null device, {dist} completion latency, mean {} ns", self.mean_ns)
    }
}
