//! Durability: where an acknowledged write's data landed on each disk, which
//! acknowledged writes a FLUSH (or FUA) made durable, and the power loss that must
//! keep them while the host restarts its engines from a zone report.

use super::{BioRec, Extent, Sim};
use std::collections::BTreeMap;
use std::io::Write as _;
use zblk_core::bio::BioFlags;
use zblk_core::stack::DevId;
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::ZoneCond;

impl Sim {
    /// The power fails and comes back: the disks keep what is durable and what
    /// their caches destaged by then (drawn from the seed; see docs/vopr.md),
    /// and the host restarts: each disk's engine is built anew from a zone report,
    /// as at start-up, and the host model re-reads every write pointer. Every
    /// write made durable must still be there.
    ///
    /// BIOs may be in flight: they die with the host and never complete. A request
    /// a disk had not executed yet is lost; on a disk that keeps zone order, what
    /// arrived executed then, into its cache if it has one, and survives as the
    /// cache's rule says. Returns the tokens of the BIOs that will never complete:
    /// their submitter must forget them.
    pub fn power_loss(&mut self) -> Vec<u64> {
        self.power_loss_with(None)
    }

    /// A power loss (see [`Sim::power_loss`]) at the worst moment: the caches had
    /// destaged nothing since their last durable point.
    pub fn power_loss_losing_the_caches(&mut self) -> Vec<u64> {
        self.power_loss_with(Some(0))
    }

    pub(super) fn power_loss_with(&mut self, destaged: Option<usize>) -> Vec<u64> {
        self.pump();
        if self.tracing.debug {
            let _ = writeln!(std::io::stderr(), "{:>12} power loss", self.clock.now_ns);
        }
        self.durability.power_losses += 1;
        let lost = self.cut_in_flight();
        // The host restarts: its timers and what it waited for go with it.
        self.clock.timers.clear();
        self.durability.acked.clear();
        for d in &mut self.disks {
            d.power_loss(destaged, &mut self.buf);
        }
        let (disks, disk_of) = (&self.disks, &self.disk_of);
        self.stack.restart(&mut |dev| {
            let d = &disks[disk_of[dev.idx()].expect("a disk")];
            d.mem.zones().map_or_else(Vec::new, |z| z.zones().to_vec())
        });
        self.engines_touched = true;
        if let Some(mut host) = self.checking.host.take() {
            host.restart(&mut |z| self.top_zone_wp(z));
            self.checking.host = Some(host);
        }
        self.pump();
        self.check();
        lost
    }

    /// The host dies with BIOs in flight: they never complete. Forgets them
    /// everywhere the simulation tracks them (their records, the completions on
    /// their way to the workload, the completions the driver's timeout would fail,
    /// the requests the plug work had yet to issue, the requests the disks' models
    /// hold and the results of those a disk that keeps zone order executed at
    /// arrival) and returns their tokens.
    fn cut_in_flight(&mut self) -> Vec<u64> {
        let mut tokens: Vec<u64> = self.completions.drain(..).map(|c| c.token).collect();
        tokens.extend(self.clock.delayed.drain(..).map(|(_, c)| c.token));
        tokens.extend(self.bios.drain().map(|r| r.token));
        self.clock.late.clear();
        // Requests the plug work had yet to hand a disk die with the host.
        self.clock.unplugged.clear();
        self.clock.after_completions = false;
        self.tracing.held.clear();
        let pipelined = self.disks.iter().any(|d| {
            let mut per_zone: BTreeMap<ZoneNo, u32> = BTreeMap::new();
            d.arrived.values().filter_map(|a| a.pipelined_zone).for_each(|z| *per_zone.entry(z).or_insert(0) += 1);
            per_zone.values().any(|&n| n >= 2)
        });
        for d in &mut self.disks {
            d.model.power_loss(self.clock.now_ns);
            d.arrived.clear();
        }
        if !tokens.is_empty() {
            self.stats.cuts_in_flight += 1;
        }
        if pipelined {
            self.stats.cuts_pipelined += 1;
        }
        tokens
    }

    /// Zone `z` of the top device's write pointer offset as the host model reads it
    /// back (after an error, or a restart): `None` for a zone that takes no more
    /// writes (READONLY, OFFLINE) or cannot be reported.
    pub(super) fn top_zone_wp(&self, z: ZoneNo) -> Option<u64> {
        let info = self.report_zone(self.stack.top(), z).ok()?;
        match info.cond {
            ZoneCond::ReadOnly | ZoneCond::Offline => None,
            ZoneCond::Full => Some(info.capacity),
            _ => Some(info.wp.since(info.start).min(info.capacity)),
        }
    }

    /// The disk extents of `[sector, sector + nr_sectors)` of stacked device `dev`,
    /// in BIO order; none for a range outside the device.
    pub(super) fn extents(&self, dev: DevId, sector: Sector, nr_sectors: u32) -> Vec<Extent> {
        let end = sector.0.checked_add(u64::from(nr_sectors));
        if end.is_none_or(|e| e > self.stack.info(dev).geometry.nr_sectors()) {
            return Vec::new();
        }
        let mut out: Vec<Extent> = Vec::new();
        for k in 0..nr_sectors {
            let (d, s) = self.stack.map_to_disk(dev, sector + u64::from(k));
            let i = self.disk_index(d);
            match out.last_mut() {
                Some((li, ls, ln, _)) if *li == i && *ls + u64::from(*ln) == s => *ln += 1,
                _ => out.push((i, s, 1, k)),
            }
        }
        out
    }

    /// The sum of the disks' reset epochs over `[sector, sector + nr_sectors)` of
    /// device `dev`: unchanged between a write's submission and its completion when
    /// nothing threw its data away.
    pub(super) fn epoch(&self, dev: DevId, sector: Sector, nr_sectors: u32) -> u64 {
        match self.disk_of[dev.idx()] {
            Some(i) => self.epoch_sum(&[(i, sector, nr_sectors, 0)]),
            None => self.epoch_sum(&self.extents(dev, sector, nr_sectors)),
        }
    }

    pub(super) fn epoch_sum(&self, extents: &[Extent]) -> u64 {
        extents.iter().map(|&(i, s, n, _)| self.disks[i].checker.as_ref().map_or(0, |c| c.epoch_of(s, n))).sum()
    }

    /// A write or append BIO completed at `at` of the top device: each disk it
    /// landed on must hold its data, unless a reset or overwrite raced with it.
    pub(super) fn check_written(&mut self, rec: &BioRec, at: Sector) {
        let top = self.stack.top();
        let extents = match self.disk_of[top.idx()] {
            Some(i) => vec![(i, at, rec.nr_sectors, 0)],
            None => self.extents(top, at, rec.nr_sectors),
        };
        if extents.iter().any(|&(i, ..)| !self.disks[i].mem.memory_backed()) || self.epoch_sum(&extents) != rec.epoch {
            return;
        }
        let mut sectors = Vec::with_capacity(extents.len());
        for (i, s, n, k) in extents {
            if let Some(c) = &mut self.disks[i].checker {
                c.check_written(rec.op, s, n, rec.stamp, k);
                sectors.push((i, c.acked(s, n, rec.stamp, k)));
            }
        }
        self.durability.acks += 1;
        if rec.flags.contains(BioFlags::FUA) {
            for (i, list) in sectors {
                if let Some(c) = &mut self.disks[i].checker {
                    c.make_durable(&list);
                }
            }
        } else {
            self.durability.acked.push_back((self.durability.acks - 1, sectors));
        }
    }

    /// A FLUSH submitted when `flush_mark` writes had been acknowledged succeeded:
    /// every write acknowledged before it is durable.
    pub(super) fn flushed(&mut self, flush_mark: u64) {
        while self.durability.acked.front().is_some_and(|(n, _)| *n < flush_mark) {
            let (_, sectors) = self.durability.acked.pop_front().expect("an acknowledged write");
            for (i, list) in sectors {
                if let Some(c) = &mut self.disks[i].checker {
                    c.make_durable(&list);
                }
            }
        }
    }
}
