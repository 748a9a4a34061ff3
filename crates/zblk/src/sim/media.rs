//! The medium's own faults, which the simulation adds to the simulator's
//! (`zblk_sim::faults`, whose disks do not model them): a write torn by a power loss,
//! and silent corruption. Drawn from a random stream of their own, so that turning
//! them on or off changes no other draw of a seed.
//!
//! - A torn write: when the power goes, the write the device was putting on the
//!   medium may have reached it in part, a prefix of its whole logical blocks (1 to
//!   all but one of them, as likely each), and the zone's write pointer after the
//!   power comes back is where that prefix ends. With a write cache that is the
//!   oldest cached write the power loss threw away (its destaging had begun);
//!   without one, a write that executed and had not completed, if nothing reached its
//!   zone after it. Half the power losses that find such a write tear it.
//! - Silent corruption: a read that succeeds finds a byte of one of the sectors it
//!   reads, below the write pointer, changed (XOR with a value from 1 to 255): the
//!   medium's bits flipped, found by this read, there for every later read, reported
//!   by no error. A byte changed is a burst of at most 8 bits, which a CRC-32 always
//!   detects.

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use zblk_core::bio::{Op, Request};
use zblk_core::units::{SECTOR_SIZE, Sector};
use zblk_core::zone::{ZoneCond, ZoneInfo, ZoneSet, ZoneType};
use zblk_dev::MemDevice;

/// Which of the medium's faults a simulation injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MediaConfig {
    /// A power loss may tear the write in progress.
    pub torn_writes: bool,
    /// Reads that find a byte changed, in parts per million of the reads that
    /// succeed.
    pub corrupt_read_ppm: u32,
}

/// The medium's faults, seeded.
pub(crate) struct Media {
    pub cfg: MediaConfig,
    rng: ChaCha8Rng,
}

/// A byte changed by silent corruption: its sector, its place in it, the XOR.
pub(crate) type Flip = (Sector, usize, u8);

impl Media {
    pub fn new(cfg: MediaConfig, seed: u64) -> Media {
        Media { cfg, rng: ChaCha8Rng::seed_from_u64(seed ^ 0x70e2_c022) }
    }

    /// How many of the `blocks` whole logical blocks of a write in progress at a
    /// power loss reached the medium, if the power loss tears it (1 to
    /// `blocks - 1`).
    fn torn_blocks(&mut self, blocks: u32) -> Option<u32> {
        if !self.cfg.torn_writes || blocks < 2 || !self.rng.random_bool(0.5) {
            return None;
        }
        Some(self.rng.random_range(1..blocks))
    }

    /// The part of a cached write that reached the medium when the power went
    /// during its destaging: the request cut to its first whole blocks, and their
    /// data. `None` when nothing of it did (or it is not a write).
    pub fn torn_cached(&mut self, entry: Option<&(Request, Vec<u8>)>, lbs: u32) -> Option<(Request, Vec<u8>)> {
        let (req, data) = entry?;
        if !matches!(req.op, Op::Write | Op::ZoneAppend) || data.is_empty() {
            return None;
        }
        let kept = self.torn_blocks(req.nr_sectors / lbs)? * lbs;
        let bytes = (u64::from(kept) * SECTOR_SIZE) as usize;
        Some((Request { nr_sectors: kept, ..*req }, data[..bytes].to_vec()))
    }

    /// Tears writes in flight on a device without a write cache (`in_flight`: each
    /// write's request and where it landed): the last write to reach its zone may
    /// keep a prefix of its blocks, the zone's write pointer moved back to where the
    /// prefix ends (its data past it reads as zeroes), the zone CLOSED. Returns the
    /// writes torn, as (zone start, the write pointer now).
    pub fn tear_in_flight(&mut self, mem: &mut MemDevice, in_flight: &[(Request, Sector)]) -> Vec<(Sector, Sector)> {
        let Some(zones) = mem.zones() else { return Vec::new() };
        let geo = zones.geometry().clone();
        let mut infos: Vec<ZoneInfo> = zones.zones().to_vec();
        let mut torn = Vec::new();
        for (req, at) in in_flight {
            let z = &mut infos[geo.zone_no(*at).idx()];
            let landed_last = z.ztype != ZoneType::Conventional
                && z.wp == *at + u64::from(req.nr_sectors)
                && !matches!(z.cond, ZoneCond::ReadOnly | ZoneCond::Offline);
            if !matches!(req.op, Op::Write | Op::ZoneAppend) || !landed_last {
                continue;
            }
            let Some(kept) = self.torn_blocks(req.nr_sectors / geo.lbs_sectors()) else { continue };
            z.wp = *at + u64::from(kept * geo.lbs_sectors());
            z.cond = ZoneCond::Closed;
            torn.push((z.start, z.wp));
        }
        if !torn.is_empty() {
            let set = ZoneSet::from_zones(&geo, &infos).expect("a torn write leaves a CLOSED zone below its capacity");
            *mem.zones_mut().expect("zoned") = set;
        }
        torn
    }

    /// Whether a read of `nr_sectors` at `sector` that succeeded finds a byte
    /// changed, and which: one of the sectors it read that hold data on `mem`.
    pub fn corruption(&mut self, mem: &MemDevice, sector: Sector, nr_sectors: u32) -> Option<Flip> {
        let ppm = self.cfg.corrupt_read_ppm;
        if ppm == 0 || self.rng.random_range(0..1_000_000) >= ppm {
            return None;
        }
        let written = written_end(mem, sector, nr_sectors).0 - sector.0;
        if written == 0 {
            return None;
        }
        let s = sector + self.rng.random_range(0..written);
        Some((s, self.rng.random_range(0..SECTOR_SIZE as usize), self.rng.random_range(1..=255u8)))
    }
}

/// Changes the byte `flip` names on `mem`'s medium, if the sector holds data there
/// (below its zone's write pointer).
pub(crate) fn flip_on(mem: &mut MemDevice, flip: Flip) {
    let (s, i, x) = flip;
    if written_end(mem, s, 1) > s {
        let mut sector = [0u8; SECTOR_SIZE as usize];
        mem.peek(s, &mut sector);
        sector[i] ^= x;
        mem.poke(s, &sector);
    }
}

/// Where the data `mem` holds ends within the `nr_sectors` from `sector` (at most
/// their end): a zone's sectors past its write pointer read as zeroes, whatever the
/// medium holds.
fn written_end(mem: &MemDevice, sector: Sector, nr_sectors: u32) -> Sector {
    let end = sector + u64::from(nr_sectors);
    match mem.zones() {
        Some(zs) => {
            let z = zs.zone(zs.geometry().zone_no(sector));
            if z.ztype == ZoneType::Conventional { end } else { Sector(z.wp.0.clamp(sector.0, end.0)) }
        }
        None => end,
    }
}
