//! A flash SSD timing model, zoned (ZNS) or not, in virtual time: no seek, no
//! rotation; a fixed latency per command and bandwidth limits shared by all commands
//! of a direction, plus, on a ZNS drive, a per-zone write bandwidth limit (one zone
//! is written by a limited set of flash dies; several zones are needed to reach the
//! drive's full write bandwidth).
//!
//! WRITE_ZEROES is a full-bandwidth write of zeroes unless the drive can deallocate
//! (NVMe DEAC) and the command allows it (no NOUNMAP): then it is a metadata update
//! of the flash translation layer, costing `unmap_ns_per_gib` per GiB of the same
//! write path the writes use (so background deallocation does slow writers, by
//! that much).

use super::model::DeviceModel;
use std::collections::BinaryHeap;
use zblk_core::bio::{BioFlags, Op, Request};
use zblk_core::units::SECTOR_SIZE;

/// The parameters of an SSD. Values of the presets are typical of current drives,
/// not calibrated against a measurement.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SsdParams {
    /// Preset name.
    pub name: String,
    /// Capacity, bytes.
    pub capacity_bytes: u64,
    /// Read bandwidth of the whole drive, bytes/s.
    pub read_rate: f64,
    /// Write bandwidth of the whole drive, bytes/s.
    pub write_rate: f64,
    /// Write bandwidth of one zone, bytes/s (0: no per-zone limit).
    pub zone_write_rate: f64,
    /// Zone size, bytes (0: not zoned).
    pub zone_bytes: u64,
    /// Latency of a read, ns (added to its transfer).
    pub read_ns: f64,
    /// Latency of a write, ns.
    pub write_ns: f64,
    /// Latency of a zone management command, ns.
    pub zone_op_ns: f64,
    /// The drive deallocates on WRITE_ZEROES without NOUNMAP (NVMe DEAC).
    pub deallocate: bool,
    /// Cost of deallocating, ns per GiB, on the write path. Assumed (mapping-table
    /// updates of a current NVMe drive), not calibrated.
    pub unmap_ns_per_gib: f64,
}

impl SsdParams {
    /// A ZNS SSD of 2 TB with 2 GiB zones (about 1 GiB usable), 2 GB/s of write
    /// bandwidth of which one zone gets 400 MB/s, 3.2 GB/s of reads.
    pub fn zns() -> SsdParams {
        SsdParams {
            name: "ZNS SSD".to_string(),
            capacity_bytes: 2 << 40,
            read_rate: 3.2e9,
            write_rate: 2.0e9,
            zone_write_rate: 400e6,
            zone_bytes: 2 << 30,
            read_ns: 70e3,
            write_ns: 15e3,
            zone_op_ns: 500e3,
            deallocate: true,
            unmap_ns_per_gib: 5e6,
        }
    }

    /// A conventional (not zoned) NVMe SSD of 2 TB.
    pub fn ssd() -> SsdParams {
        SsdParams { name: "NVMe SSD".to_string(), zone_write_rate: 0.0, zone_bytes: 0, ..SsdParams::zns() }
    }
}

#[derive(Debug, Clone, Copy)]
struct Timed(f64, u64, Request);
impl PartialEq for Timed {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0 && self.1 == o.1
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Earliest first (BinaryHeap is a max-heap).
        o.0.total_cmp(&self.0).then(o.1.cmp(&self.1))
    }
}

/// The SSD model. Implements [`DeviceModel`].
#[derive(Debug)]
pub struct SsdModel {
    p: SsdParams,
    read_free: f64,
    write_free: f64,
    zone_free: rustc_hash::FxHashMap<u64, f64>,
    pending: BinaryHeap<Timed>,
    seq: u64,
}

impl SsdModel {
    /// A drive with parameters `p`, idle.
    pub fn new(p: SsdParams) -> SsdModel {
        assert!(p.read_rate > 0.0 && p.write_rate > 0.0, "SSD rates must be positive");
        SsdModel {
            p,
            read_free: 0.0,
            write_free: 0.0,
            zone_free: Default::default(),
            pending: BinaryHeap::new(),
            seq: 0,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &SsdParams {
        &self.p
    }

    fn write_time(&mut self, now: f64, req: &Request, bytes: f64) -> f64 {
        let dev_start = self.write_free.max(now);
        self.write_free = dev_start + bytes / self.p.write_rate * 1e9;
        let mut done = self.write_free;
        if self.p.zone_bytes != 0 && self.p.zone_write_rate > 0.0 {
            let z = req.sector.bytes() / self.p.zone_bytes;
            let free = self.zone_free.entry(z).or_insert(0.0);
            let start = free.max(now);
            *free = start + bytes / self.p.zone_write_rate * 1e9;
            done = done.max(*free);
        }
        done + self.p.write_ns
    }
}

impl DeviceModel for SsdModel {
    fn submit(&mut self, now_ns: u64, req: &Request) {
        let now = now_ns as f64;
        let bytes = (u64::from(req.nr_sectors) * SECTOR_SIZE) as f64;
        let at = match req.op {
            Op::Read => {
                let start = self.read_free.max(now);
                self.read_free = start + bytes / self.p.read_rate * 1e9;
                self.read_free + self.p.read_ns
            }
            Op::Write | Op::ZoneAppend => self.write_time(now, req, bytes),
            Op::WriteZeroes if self.p.deallocate && !req.flags.contains(BioFlags::NOUNMAP) => {
                let start = self.write_free.max(now);
                self.write_free = start + bytes / (1u64 << 30) as f64 * self.p.unmap_ns_per_gib;
                self.write_free + self.p.write_ns
            }
            Op::WriteZeroes => self.write_time(now, req, bytes),
            Op::Flush => self.write_free.max(now) + self.p.write_ns,
            Op::Discard => now + self.p.write_ns,
            _ => now + self.p.zone_op_ns,
        };
        self.seq += 1;
        self.pending.push(Timed(at, self.seq, *req));
    }

    fn next_event_ns(&self) -> Option<u64> {
        self.pending.peek().map(|t| t.0.ceil() as u64)
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Request>) {
        while let Some(t) = self.pending.peek() {
            if t.0 > now_ns as f64 {
                break;
            }
            done.push(self.pending.pop().expect("peeked").2);
        }
    }

    fn power_loss(&mut self, now_ns: u64) {
        let now = now_ns as f64;
        self.pending.clear();
        (self.read_free, self.write_free) = (now, now);
        self.zone_free.clear();
    }

    fn describe(&self) -> String {
        let zones = if self.p.zone_bytes != 0 {
            format!(
                ", {} zones, {:.0} MB/s per zone",
                zblk_core::units::format_bytes_exact(self.p.zone_bytes),
                self.p.zone_write_rate / 1e6
            )
        } else {
            String::new()
        };
        format!(
            "simulated {} ({:.0} TB, writes {:.0} MB/s, reads {:.0} MB/s{zones})",
            self.p.name,
            self.p.capacity_bytes as f64 / 1e12,
            self.p.write_rate / 1e6,
            self.p.read_rate / 1e6
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zblk_core::bio::ReqId;
    use zblk_core::units::Sector;

    fn w(id: u64, sector: u64, nr: u32) -> Request {
        Request {
            id: ReqId::unissued(id),
            op: Op::Write,
            sector: Sector(sector),
            nr_sectors: nr,
            flags: BioFlags::NONE,
            user_data: 0,
            bio_offset: 0,
        }
    }

    #[test]
    fn a_power_loss_drops_every_request() {
        let mut m = SsdModel::new(SsdParams::zns());
        m.submit(0, &w(1, 0, 2048));
        m.submit(0, &w(2, 2048, 2048));
        m.power_loss(10);
        assert_eq!(m.next_event_ns(), None);
        m.submit(20, &w(3, 4096, 8));
        let mut done = Vec::new();
        m.advance(u64::MAX, &mut done);
        assert_eq!(done.iter().map(|r| r.id).collect::<Vec<_>>(), [ReqId::unissued(3)]);
    }

    #[test]
    fn one_zone_is_slower_than_many() {
        let zone_sectors = (2u64 << 30) / 512;
        let mut one = SsdModel::new(SsdParams::zns());
        let mut many = SsdModel::new(SsdParams::zns());
        for i in 0..64u64 {
            one.submit(0, &w(i, i * 2048, 2048));
            many.submit(0, &w(i, (i % 8) * zone_sectors + (i / 8) * 2048, 2048));
        }
        let last = |m: &mut SsdModel| {
            let mut done = Vec::new();
            m.advance(u64::MAX, &mut done);
            assert_eq!(done.len(), 64);
            done.len()
        };
        let t_one = one.write_free.max(*one.zone_free.values().fold(&0.0, |a, b| if b > a { b } else { a }));
        let t_many = many.write_free.max(*many.zone_free.values().fold(&0.0, |a, b| if b > a { b } else { a }));
        last(&mut one);
        last(&mut many);
        // 64 MiB: one zone at 400 MB/s ≈ 168 ms; eight zones limited by 2 GB/s ≈ 34 ms.
        assert!(t_one > 4.0 * t_many, "one zone {t_one} ns, eight zones {t_many} ns");
    }

    #[test]
    fn unmapped_zeroes_cost_metadata_only() {
        let mut m = SsdModel::new(SsdParams::ssd());
        let gib = ((1u64 << 30) / 512) as u32;
        let z = Request { op: Op::WriteZeroes, ..w(1, 0, gib) };
        m.submit(0, &z);
        let unmap = m.next_event_ns().unwrap();
        let mut m = SsdModel::new(SsdParams::ssd());
        m.submit(0, &Request { flags: BioFlags::NOUNMAP, ..z });
        let written = m.next_event_ns().unwrap();
        assert!(written > 100 * unmap, "unmap {unmap} ns, written {written} ns");
    }
}
