//! Durability: where an acknowledged write's data landed on each disk, which
//! acknowledged writes a FLUSH (or FUA) made durable, and the power loss that must
//! keep them while the host restarts its engines from a zone report.

use super::{BioRec, Extent, Sim};
use std::io::Write as _;
use zblk_core::bio::BioFlags;
use zblk_core::engine::Engine;
use zblk_core::stack::DevId;
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::ZoneCond;

impl Sim {
    /// The power fails and comes back: the disks keep what is durable and what
    /// their caches destaged by then (drawn from the seed; see docs/vopr.md),
    /// and the host restarts: each disk's engine is built anew from a zone report,
    /// as at start-up, and the host model re-reads every write pointer. Every
    /// write made durable must still be there. Nothing may be in flight.
    pub fn power_loss(&mut self) {
        self.power_loss_with(None);
    }

    /// A power loss (see [`Sim::power_loss`]) at the worst moment: the caches had
    /// destaged nothing since their last durable point.
    pub fn power_loss_losing_the_caches(&mut self) {
        self.power_loss_with(Some(0));
    }

    pub(super) fn power_loss_with(&mut self, destaged: Option<usize>) {
        self.pump();
        assert_eq!(self.stack.bios_in_flight(), 0, "seed {}: a power loss with BIOs in flight", self.seed);
        assert!(self.completions.is_empty() && self.clock.delayed.is_empty() && self.clock.late.is_empty());
        if self.tracing.debug {
            let _ = writeln!(std::io::stderr(), "{:>12} power loss", self.clock.now_ns);
        }
        self.durability.power_losses += 1;
        // The host restarts: its timers and what it waited for go with it.
        self.clock.timers.clear();
        self.durability.acked.clear();
        for i in 0..self.disks.len() {
            let d = &mut self.disks[i];
            d.power_loss(destaged, &mut self.buf);
            let zones = d.mem.zones().map_or_else(Vec::new, |z| z.zones().to_vec());
            let engine = self.stack.engine_mut(d.dev);
            let (geo, cfg) = (engine.geometry().clone(), *engine.config());
            *engine = Engine::new(&geo, cfg, &zones);
            engine.set_self_check(self.checking.checks.engine_invariants);
        }
        self.engines_touched = true;
        if let Some(mut host) = self.checking.host.take() {
            host.restart(&mut |z| self.top_zone_wp(z));
            self.checking.host = Some(host);
        }
        self.pump();
        self.check();
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
