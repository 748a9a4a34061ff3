//! zblk's single issuer (`batch`): as `qd1`, one zone write of the device out at a
//! time, but the next plug to drain is the deepest (the largest batch per zone
//! visit, so the fewest head switches per byte), the nearest zone ahead of the last
//! one drained among equals (a C-SCAN sweep: short seeks, every zone reached within
//! one pass). A plug passed over `batch_max_bypass` times goes first.
//!
//! When a plug drains while others wait, the issuer *anticipates* the zone's next
//! write for `batch_anticipate_ns` (as the anticipatory I/O scheduler waited for a
//! process's next read): a submitter that writes the zone again right after its
//! completion extends the batch instead of costing a head switch. The engine has no
//! clock: the wait is an [`crate::engine::Action::Anticipate`] its driver times.
//!
//! An anticipation pays only when the write comes: one that expires left the disk
//! idle for the window. As the anticipatory scheduler stopped waiting for a process
//! whose next request kept coming too late, the issuer keeps a moving average of how
//! often its anticipations were met and stops anticipating while fewer than one in
//! `THRESHOLD_DIV` are, but for one chance in `EXPLORE`, which keeps the average
//! current. Writes scattered over many zones (one write, then another zone) rarely
//! bring a drained zone's next write in time; streams and a few hot zones do. The
//! break-even: a 50 µs window against a small random write's few hundred µs of
//! service is about one hit in eight. (The values were set from that estimate, not
//! tuned on the sweeps.)

use super::IssuePolicy;
use super::issuer::{Choice, Gate};
use super::{PolicyCtx, PolicyView};
use crate::engine::EngineConfig;
use crate::engine::plugs::PlugId;
use crate::units::ZoneNo;
use std::collections::VecDeque;

/// The batching choice and its anticipation.
#[derive(Debug)]
pub(crate) struct Batching {
    max_bypass: u32,
    anticipate_ns: u64,
    /// Per plug slot: how many times another plug, listed after it, was drained
    /// first since it was listed.
    bypassed: Vec<u32>,
    /// The zone visited last (where the sweep is).
    last_visited: u32,
    /// The issuer keeps the device for this zone until the token's anticipation
    /// expires or a write to the zone arrives.
    anticipating: Option<(ZoneNo, u64)>,
    /// How often anticipations were met lately: hits over outcomes, a moving
    /// average over about the last 32, in 1/1024ths.
    hit_rate: u32,
    /// Chances to anticipate passed over since the last one taken.
    passed: u32,
}

/// Anticipation goes on while at least one in `THRESHOLD_DIV` is met.
const THRESHOLD_DIV: u32 = 8;
/// `THRESHOLD_DIV` as a hit rate in 1/1024ths.
const MIN_HIT_RATE: u32 = 1024 / THRESHOLD_DIV;
/// Below the threshold, one chance in `EXPLORE` is still taken, to measure again.
const EXPLORE: u32 = 8;

impl Batching {
    pub fn new(cfg: &EngineConfig) -> Batching {
        Batching {
            max_bypass: cfg.batch_max_bypass,
            anticipate_ns: cfg.batch_anticipate_ns,
            bypassed: Vec::new(),
            last_visited: 0,
            anticipating: None,
            hit_rate: 1024,
            passed: 0,
        }
    }

    fn bypassed(&mut self, p: PlugId) -> &mut u32 {
        let i = p.idx();
        if self.bypassed.len() <= i {
            self.bypassed.resize(i + 1, 0);
        }
        &mut self.bypassed[i]
    }

    fn overdue(&self, list: &VecDeque<PlugId>) -> Option<usize> {
        list.iter().position(|&p| self.bypassed.get(p.idx()).copied().unwrap_or(0) >= self.max_bypass)
    }
}

impl Choice for Batching {
    fn kind(&self) -> IssuePolicy {
        IssuePolicy::Batch
    }

    fn listed(&mut self, p: PlugId) {
        *self.bypassed(p) = 0;
    }

    /// While anticipating, only the anticipated zone may go: it continues its visit,
    /// and every plug waiting is passed over once more.
    fn gate(&mut self, q: &mut PolicyCtx<'_>, list: &mut VecDeque<PlugId>) -> Gate {
        let Some((zone, _)) = self.anticipating else { return Gate::Open };
        let Some(i) = list.iter().position(|&p| q.zone(p) == zone) else { return Gate::Stop };
        self.anticipating = None;
        q.count_anticipation_hit();
        // The average moves 1/32 of the way to 1 (a hit).
        self.hit_rate = self.hit_rate - self.hit_rate / 32 + 1024 / 32;
        let p = list.remove(i).expect("index in range");
        for &w in list.iter() {
            *self.bypassed(w) += 1;
        }
        list.push_front(p);
        Gate::Continue
    }

    /// The deepest plug, the nearest zone ahead of the last visited among equals,
    /// unless the oldest overdue plug (passed over `batch_max_bypass` times) exists.
    fn choose(&mut self, q: &PolicyCtx<'_>, list: &mut VecDeque<PlugId>) {
        let best = match self.overdue(list) {
            Some(i) => i,
            None => {
                let nr_zones = u64::from(q.geo().nr_zones());
                let last = u64::from(self.last_visited);
                let key = |p: PlugId| -> (u64, std::cmp::Reverse<u64>) {
                    let ahead = (u64::from(q.zone(p).0) + nr_zones - last) % nr_zones;
                    (q.queued_sectors(p), std::cmp::Reverse(ahead))
                };
                // (max_by_key keeps the last of equal keys.)
                (0..list.len()).max_by_key(|&i| key(list[i])).expect("non-empty list")
            }
        };
        for &p in list.range(..best) {
            *self.bypassed(p) += 1;
        }
        if best != 0 {
            let p = list.remove(best).expect("index in range");
            list.push_front(p);
        }
        self.last_visited = q.zone(list[0]).0;
    }

    /// A plug drained by a completion while others wait: hold the device for the
    /// zone's next write a little. Never during a barrier or a freeze, which wait for
    /// the device to drain, not for new writes, and never once a waiting plug is
    /// overdue: a write that extends the visit passes every waiting plug over once
    /// more.
    fn drained(&mut self, q: &mut PolicyCtx<'_>, list: &VecDeque<PlugId>, zone: ZoneNo) {
        if self.anticipate_ns == 0
            || list.is_empty()
            || q.barrier_active()
            || q.freezing()
            || self.overdue(list).is_some()
        {
            return;
        }
        if self.hit_rate < MIN_HIT_RATE && self.passed + 1 < EXPLORE {
            self.passed += 1;
            return;
        }
        self.passed = 0;
        let token = q.anticipate(self.anticipate_ns);
        self.anticipating = Some((zone, token));
    }

    fn expired(&mut self, token: u64) -> bool {
        if self.anticipating.is_some_and(|(_, t)| t == token) {
            self.anticipating = None;
            // ... or to 0 (a miss).
            self.hit_rate -= self.hit_rate / 32;
            return true;
        }
        false
    }

    fn check(&self, q: &PolicyView<'_>) {
        // The wait is for the zone's next write, never beside one out.
        assert!(self.anticipating.is_none() || q.zone_ops_out() == 0, "anticipating with a zone write out");
        assert!(
            self.hit_rate <= 1024 && self.passed < EXPLORE,
            "hit rate {} / 1024, {} passed",
            self.hit_rate,
            self.passed
        );
    }
}
