//! BIOs entering the top device: their record (the host oracle's prediction, the
//! reset epochs they cover), and the zone reports a user makes to the engines.

use super::{BioRec, Sim};
use crate::oracle::HostBio;
use std::io::Write as _;
use zblk_core::bio::{Bio, Op};
use zblk_core::units::Sector;
use zblk_dev::BlockDevice;

impl Sim {
    /// Submits `bio` to the top device now. `token` comes back in its
    /// [`SimCompletion`](super::SimCompletion); a write's data is the pattern of `stamp` (see
    /// [`zblk_workload::pattern`]), sector `k` of the BIO holding `(stamp, k)`
    /// wherever the stack puts it.
    pub fn submit(&mut self, bio: Bio, token: u64, stamp: u64) {
        self.submit_by(0, bio, token, stamp);
    }

    /// As [`Sim::submit`], for `submitter` (a number naming the submitting
    /// context, in traces and completions).
    pub fn submit_by(&mut self, submitter: u32, mut bio: Bio, token: u64, stamp: u64) {
        if self.checking.host.is_some() && matches!(bio.op, Op::ZoneReset | Op::ZoneFinish | Op::ZoneResetAll) {
            // Carry out what the engines decided so far: the oracle must see which
            // writes are on their way to the device and which wait in a plug.
            self.pump();
        }
        self.stats.bios += 1;
        let top = self.stack.top();
        let epoch = if self.checking.on { self.epoch(top, bio.sector, bio.nr_sectors) } else { 0 };
        let host = match &mut self.checking.host {
            Some(h) => {
                // Every zone write in flight and not issued waits in its plug (so that
                // a reset or finish must abort it) when a single disk's engine has a
                // free tag: none waits for one.
                let plugs_exact = self.disk_of[top.idx()].is_some() && {
                    let e = self.stack.engine(top).expect("a disk's engine");
                    // A frozen queue (zoned_qd1_writes being written) holds BIOs at
                    // its door, before their plugs: they enter in order afterwards,
                    // a write ahead of a reset goes before it.
                    e.config().policy.plugs() && e.inflight() < e.config().queue_depth && !e.frozen()
                };
                h.on_submit(&bio, self.bios.iter_mut().map(|(_, r)| &mut r.host), plugs_exact)
            }
            None => HostBio::default(),
        };
        let key = self.bios.insert(BioRec {
            token,
            submitter,
            submit_ns: self.clock.now_ns,
            op: bio.op,
            sector: bio.sector,
            nr_sectors: bio.nr_sectors,
            stamp,
            epoch,
            host,
            flags: bio.flags,
            flush_mark: self.durability.acks,
        });
        bio.user_data = key as u64;
        if self.tracing.debug {
            let r = &self.bios[key].host;
            let _ =
                writeln!(std::io::stderr(), "{:>12} submit {bio:?} (oracle: {:?})", self.clock.now_ns, r.prediction());
        }
        self.stack.submit(top, bio, submitter);
    }

    /// Has the user report the zone holding `sector` of the top device to the
    /// engines of the disks it lies on (what a file system does after a write
    /// error, and what the kernel's recovery waits for).
    pub fn report_zone_to_engine(&mut self, sector: Sector) {
        let top = self.stack.top();
        let geo = &self.stack.info(top).geometry;
        if !geo.is_zoned() || sector.0 >= geo.nr_sectors() {
            return;
        }
        let z = geo.zone_no(sector);
        if let Some(h) = &mut self.checking.host {
            h.on_user_report(z);
        }
        let mut parts = Vec::new();
        let (disks, disk_of) = (&self.disks, &self.disk_of);
        let _ = self.stack.report_zone(top, z, &mut |d, s| {
            let info = disks[disk_of[d.idx()].expect("a disk")].mem.report_zone(s);
            if let Ok(i) = info {
                parts.push((d, i));
            }
            info
        });
        for (d, info) in parts {
            self.stats.reports += 1;
            self.stack.zone_report(d, &info);
        }
    }
}
