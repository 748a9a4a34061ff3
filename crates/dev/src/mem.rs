//! The in-memory device, like null_blk: zoned or not, memory-backed (sparse pages,
//! reads past the write pointer return zeroes) or not (data dropped, as null_blk with
//! `memory_backed=0`, for benchmarks), with or without native zone append (the
//! geometry's `max_append_sectors`).

use super::{
    BlockDevice, DeviceZeroing, IoBuf, check_append, check_discard, check_range, check_span, check_write_zeroes,
};
use crate::pages::PageStore;
use zblk_core::bio::{BioFlags, Op, Request, Status};
use zblk_core::geometry::Geometry;
use zblk_core::rule::Rule;
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::{ZoneInfo, ZoneSet};

/// A null_blk-like device in memory.
#[derive(Debug, Clone)]
pub struct MemDevice {
    geo: Geometry,
    zones: Option<ZoneSet>,
    memory_backed: bool,
    /// The data, only pages written (sparse).
    pages: PageStore,
}

impl MemDevice {
    /// A fresh device: every sequential zone EMPTY, no data.
    pub fn new(geo: &Geometry, memory_backed: bool) -> MemDevice {
        let zones = geo.is_zoned().then(|| ZoneSet::new(geo));
        MemDevice { geo: geo.clone(), zones, memory_backed, pages: PageStore::new() }
    }

    /// The device-side zone state machine (None on a regular device).
    pub fn zones(&self) -> Option<&ZoneSet> {
        self.zones.as_ref()
    }

    /// Mutable access to the zone state machine, for fault injection (READONLY and
    /// OFFLINE zones).
    pub fn zones_mut(&mut self) -> Option<&mut ZoneSet> {
        self.zones.as_mut()
    }

    /// Whether data is stored.
    pub fn memory_backed(&self) -> bool {
        self.memory_backed
    }

    /// Bytes of memory holding data (whole pages).
    pub fn resident_bytes(&self) -> u64 {
        self.pages.resident_bytes()
    }

    /// Bytes of new pages a write of `len` bytes at `sector` would take (0 on a
    /// device that keeps no data): for a server that bounds its memory.
    pub fn new_bytes(&self, sector: Sector, len: usize) -> u64 {
        if self.memory_backed { self.pages.new_bytes(sector, len) } else { 0 }
    }

    /// The sectors the store holds pages for, in order (each page's first sector and
    /// its length in sectors): every sector outside reads as zeroes. For checkers.
    pub fn stored(&self) -> impl Iterator<Item = (Sector, u64)> + '_ {
        self.pages.stored()
    }

    /// Reads `buf.len()` bytes at `sector` straight from the store, ignoring write
    /// pointers (for checkers): unwritten bytes read as zeroes.
    pub fn peek(&self, sector: Sector, buf: &mut [u8]) {
        self.pages.read(sector, buf);
    }

    /// Writes `data` (whole sectors) at `sector` straight into the store, ignoring
    /// write pointers and zone state: for fault injection (bits flipped on the
    /// medium). Nothing on a device that keeps no data.
    pub fn poke(&mut self, sector: Sector, data: &[u8]) {
        if self.memory_backed {
            self.pages.write(sector, data);
        }
    }

    fn write(&mut self, req: &Request, buf: IoBuf<'_>, append: bool) -> Result<Sector, Status> {
        check_range(&self.geo, req)?;
        if append {
            check_append(&self.geo, req)?;
        }
        let at = match self.zones.as_mut() {
            Some(z) => z.write(req.sector, req.nr_sectors, append)?,
            None => req.sector,
        };
        if self.memory_backed {
            match buf {
                IoBuf::Write(data) => {
                    assert_eq!(data.len() as u64, u64::from(req.nr_sectors) * SECTOR_SIZE, "write buffer size");
                    self.pages.write(at, data);
                }
                // WRITE_ZEROES with NOUNMAP: zeroes are written, pages stay allocated.
                _ if req.op == Op::WriteZeroes && req.flags.contains(BioFlags::NOUNMAP) => {
                    self.pages.fill_zeroes(at, u64::from(req.nr_sectors))
                }
                // Unmapped WRITE_ZEROES (deallocate: pages go back to the allocator),
                // or a driver that carries no data.
                _ => self.pages.zero_range(at, u64::from(req.nr_sectors)),
            }
        }
        Ok(at)
    }

    /// The device's checks of a read of `nr_sectors` at `sector` (its range, the
    /// condition of the zones it crosses), without reading: for a server that hands
    /// the read's data out itself ([`MemDevice::read_slices`]). `Ok` holds how many
    /// of its sectors are before a write pointer (on a zoned device).
    pub fn check_read(&self, sector: Sector, nr_sectors: u32) -> Result<Option<u64>, Status> {
        check_span(&self.geo, sector, nr_sectors)?;
        match &self.zones {
            Some(z) => Ok(Some(z.read(sector, nr_sectors)?)),
            None => Ok(None),
        }
    }

    fn read(&mut self, req: &Request, buf: IoBuf<'_>) -> Result<Sector, Status> {
        let valid = self.check_read(req.sector, req.nr_sectors)?;
        if let IoBuf::Read(out) = buf {
            assert_eq!(out.len() as u64, u64::from(req.nr_sectors) * SECTOR_SIZE, "read buffer size");
            if self.memory_backed {
                self.pages.read(req.sector, out);
                // Past a write pointer, a sequential zone reads as zeroes even if
                // stale pages remain (they never do: reset drops them).
                if let (Some(zs), Some(valid)) = (&self.zones, valid) {
                    if valid < u64::from(req.nr_sectors) {
                        self.zero_past_wp(zs, req.sector, out);
                    }
                }
            } else {
                out.fill(0);
            }
        }
        Ok(req.sector)
    }

    /// Calls `f` with the `len` bytes a read at `sector` returns, in order, as slices
    /// of the stored pages and of zeroes (where nothing was written, past a
    /// sequential zone's write pointer, everywhere on a device that keeps no data):
    /// what [`BlockDevice::execute`] would copy into a read's buffer. For a server
    /// that hands a read's data on itself, instead of having it copied into a buffer
    /// first, once the read passed [`MemDevice::check_read`], whose checks this does
    /// not repeat.
    pub fn read_slices(&self, sector: Sector, len: usize, mut f: impl FnMut(&[u8])) {
        let bytes = |n: u64| (n * SECTOR_SIZE) as usize;
        let end = sector + len as u64 / SECTOR_SIZE;
        assert!(
            len as u64 % SECTOR_SIZE == 0 && end.0 <= self.geo.nr_sectors(),
            "a completed read's range: {len} bytes at sector {}",
            sector.0
        );
        let mut s = sector;
        while s < end {
            // The zone's part of the range, and where its data ends.
            let (data_end, zend) = match &self.zones {
                Some(zs) => {
                    let z = zs.zone(self.geo.zone_no(s));
                    let zend = (z.start + z.len).min(end);
                    let seq = z.ztype == zblk_core::zone::ZoneType::SeqWriteRequired;
                    (if seq { z.wp.clamp(s, zend) } else { zend }, zend)
                }
                None => (end, end),
            };
            if self.memory_backed {
                self.pages.slices(s, bytes(data_end.since(s)), &mut f);
            } else {
                crate::pages::zeroes(bytes(data_end.since(s)), &mut f);
            }
            crate::pages::zeroes(bytes(zend.since(data_end)), &mut f);
            s = zend;
        }
    }

    fn zero_past_wp(&self, zs: &ZoneSet, sector: Sector, out: &mut [u8]) {
        for (i, chunk) in out.chunks_mut(SECTOR_SIZE as usize).enumerate() {
            let s = sector + i as u64;
            let zone = zs.zone(self.geo.zone_no(s));
            if zone.ztype == zblk_core::zone::ZoneType::SeqWriteRequired && s >= zone.wp {
                chunk.fill(0);
            }
        }
    }

    fn zone_mgmt(&mut self, req: &Request) -> Result<Sector, Status> {
        let zones = self.zones.as_mut().ok_or(Status::NotSupported)?;
        // As null_blk with memory backing: a reset discards the zone's data.
        let reset: Vec<ZoneNo> = match req.op {
            Op::ZoneResetAll => zones.reset_all(),
            op => {
                zones.zone_mgmt(op, req.sector)?;
                if op == Op::ZoneReset { vec![self.geo.zone_no(req.sector)] } else { Vec::new() }
            }
        };
        if self.memory_backed {
            for z in reset {
                self.pages.zero_range(self.geo.zone_start(z), self.geo.zone_len(z));
            }
        }
        Ok(req.sector)
    }
}

impl BlockDevice for MemDevice {
    fn geometry(&self) -> &Geometry {
        &self.geo
    }

    fn execute(&mut self, req: &Request, buf: IoBuf<'_>) -> Result<Sector, Status> {
        if matches!(req.op, Op::Read | Op::Write) && req.nr_sectors > self.geo.max_sectors() {
            // As a real device refuses a command above its transfer limit (NVMe's
            // MDTS, SCSI's maximum transfer length): the host must split.
            return Err(Status::Invalid.because(Rule::OverMaxSectors));
        }
        match req.op {
            Op::Read => self.read(req, buf),
            Op::Write => self.write(req, buf, false),
            Op::ZoneAppend => self.write(req, buf, true),
            Op::WriteZeroes => {
                check_write_zeroes(&self.geo, req)?;
                self.write(req, IoBuf::None, false)
            }
            Op::Discard => {
                check_discard(&self.geo, req)?;
                if self.memory_backed {
                    self.pages.zero_range(req.sector, u64::from(req.nr_sectors));
                }
                Ok(req.sector)
            }
            Op::Flush => Ok(req.sector),
            _ => self.zone_mgmt(req),
        }
    }

    fn report_zones(&self, from: Sector, max: usize, out: &mut Vec<ZoneInfo>) -> Result<usize, Status> {
        match &self.zones {
            Some(z) => Ok(z.report(from, max, out)),
            None => Err(Status::NotSupported),
        }
    }

    fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        (self.geo.max_write_zeroes_sectors() > 0).then_some(DeviceZeroing::Memory { unmap: !nounmap })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zblk_core::bio::BioFlags;
    use zblk_core::geometry::GeometryParams;

    fn geo(append: u32) -> Geometry {
        Geometry::new(&GeometryParams {
            capacity_bytes: 4 << 20,
            zone_size_bytes: 1 << 20,
            nr_conv: 1,
            max_append_sectors: append,
            ..GeometryParams::default()
        })
        .unwrap()
    }

    fn req(op: Op, sector: u64, nr_sectors: u32) -> Request {
        Request::direct(op, Sector(sector), nr_sectors)
    }

    #[test]
    fn stores_sparse_data_and_reads_zeroes_past_wp() {
        let mut d = MemDevice::new(&geo(0), true);
        let data = vec![0xab; 4096];
        d.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&data)).unwrap();
        let mut out = vec![0xff; 8192];
        d.execute(&req(Op::Read, 2048, 16), IoBuf::Read(&mut out)).unwrap();
        assert!(out[..4096].iter().all(|&b| b == 0xab));
        assert!(out[4096..].iter().all(|&b| b == 0));
        assert_eq!(d.resident_bytes(), 4096);
        // reset drops the data
        d.execute(&req(Op::ZoneReset, 2048, 0), IoBuf::None).unwrap();
        assert_eq!(d.resident_bytes(), 0);
    }

    /// What `read_slices` gives for a read, joined.
    fn sliced(d: &MemDevice, sector: u64, nr: u32) -> Vec<u8> {
        let mut v = Vec::new();
        d.read_slices(Sector(sector), nr as usize * 512, |p| v.extend_from_slice(p));
        v
    }

    #[test]
    fn read_slices_give_what_a_read_copies() {
        // Random writes at write pointers and anywhere on the conventional zone,
        // resets, finishes, discards, zeroes; after each, random reads compared (seeded:
        // the seed is in every failure's message).
        let mut compared = 0;
        for seed in 1..=40u64 {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut rnd = move |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            for backed in [true, false] {
                let g = geo(0);
                let mut d = MemDevice::new(&g, backed);
                for step in 0..60 {
                    let z = rnd(4);
                    let start = z * 2048;
                    let wp = if z == 0 { start + rnd(2048) } else { d.zones().unwrap().zone(ZoneNo(z as u32)).wp.0 };
                    let nr = 1 + rnd(40) as u32;
                    let data: Vec<u8> = (0..nr * 512).map(|i| (i as u64 ^ seed ^ step) as u8).collect();
                    let _ = match rnd(8) {
                        0 if z > 0 => d.execute(&req(Op::ZoneReset, start, 0), IoBuf::None),
                        1 if z > 0 => d.execute(&req(Op::ZoneFinish, start, 0), IoBuf::None),
                        2 if z == 0 => d.execute(&req(Op::Discard, wp, nr.min(100)), IoBuf::None),
                        3 => d.execute(&req(Op::WriteZeroes, wp, nr), IoBuf::None),
                        _ => d.execute(&req(Op::Write, wp, nr), IoBuf::Write(&data)),
                    };
                    for _ in 0..4 {
                        let nr = 1 + rnd(3000) as u32;
                        let at = rnd(g.nr_sectors() - u64::from(nr));
                        let mut out = vec![0x5a; nr as usize * 512];
                        if d.execute(&req(Op::Read, at, nr), IoBuf::Read(&mut out)).is_ok() {
                            compared += 1;
                            assert!(
                                sliced(&d, at, nr) == out,
                                "seed {seed}, backed {backed}, step {step}: {nr} sectors at {at} differ"
                            );
                        }
                    }
                }
            }
        }
        assert!(compared > 10_000, "only {compared} reads compared");
    }

    #[test]
    fn a_read_or_write_above_max_sectors_is_refused_as_a_real_device_does() {
        let g = Geometry::new(&GeometryParams {
            capacity_bytes: 4 << 20,
            zone_size_bytes: 1 << 20,
            nr_conv: 1,
            max_sectors: 16,
            ..GeometryParams::default()
        })
        .unwrap();
        let mut d = MemDevice::new(&g, true);
        let data = vec![1; 17 * 512];
        let r = d.execute(&req(Op::Write, 2048, 17), IoBuf::Write(&data));
        assert_eq!(r, Err(Status::Invalid));
        assert_eq!(r.unwrap_err().rule(), Some(Rule::OverMaxSectors));
        let mut out = vec![0; 17 * 512];
        assert_eq!(d.execute(&req(Op::Read, 0, 17), IoBuf::Read(&mut out)), Err(Status::Invalid));
        assert_eq!(d.execute(&req(Op::Write, 2048, 16), IoBuf::Write(&data[..16 * 512])), Ok(Sector(2048)));
    }

    #[test]
    fn native_append_lands_at_wp_and_emulating_device_refuses_it() {
        let mut d = MemDevice::new(&geo(256), true);
        let data = vec![1; 4096];
        assert_eq!(d.execute(&req(Op::ZoneAppend, 2048, 8), IoBuf::Write(&data)), Ok(Sector(2048)));
        assert_eq!(d.execute(&req(Op::ZoneAppend, 2048, 8), IoBuf::Write(&data)), Ok(Sector(2056)));
        let mut d = MemDevice::new(&geo(0), true);
        assert_eq!(d.execute(&req(Op::ZoneAppend, 2048, 8), IoBuf::Write(&data)), Err(Status::NotSupported));
    }

    #[test]
    fn write_zeroes_unmaps_or_writes_as_asked() {
        let mut d = MemDevice::new(&geo(0), true);
        // Conventional zone 0: 64 KiB of data, then zero 3.5 KiB from sector 9 (not
        // page aligned at either edge) and 40 KiB from sector 24.
        d.execute(&req(Op::Write, 0, 128), IoBuf::Write(&[5u8; 65536])).unwrap();
        assert_eq!(d.resident_bytes(), 65536);
        d.execute(&Request { flags: BioFlags::NOUNMAP, ..req(Op::WriteZeroes, 9, 7) }, IoBuf::None).unwrap();
        assert_eq!(d.resident_bytes(), 65536, "NOUNMAP writes zeroes, memory stays");
        d.execute(&req(Op::WriteZeroes, 24, 80), IoBuf::None).unwrap();
        // Pages 3..=12 lie whole inside [24, 104): returned to the allocator.
        assert_eq!(d.resident_bytes(), 65536 - 10 * 4096, "unmap returns whole pages");
        let mut out = vec![0xffu8; 65536];
        d.execute(&req(Op::Read, 0, 128), IoBuf::Read(&mut out)).unwrap();
        for s in 0..128usize {
            let zero = (9..16).contains(&s) || (24..104).contains(&s);
            let want = if zero { 0 } else { 5 };
            assert!(out[s * 512..(s + 1) * 512].iter().all(|&b| b == want), "sector {s}");
        }
        // NOUNMAP on unwritten space allocates zero pages.
        d.execute(&Request { flags: BioFlags::NOUNMAP, ..req(Op::WriteZeroes, 1024, 16) }, IoBuf::None).unwrap();
        assert_eq!(d.resident_bytes(), 65536 - 10 * 4096 + 8192);
        // Beyond the device's limit, or on a device without WRITE_ZEROES.
        let big = d.geometry().max_write_zeroes_sectors() + 1;
        assert_eq!(d.execute(&req(Op::WriteZeroes, 0, big), IoBuf::None), Err(Status::Invalid));
        let none = Geometry::new(&GeometryParams {
            capacity_bytes: 4 << 20,
            zone_size_bytes: 1 << 20,
            nr_conv: 1,
            write_zeroes_max_bytes: 0,
            write_zeroes_unmap_max_hw_bytes: 0,
            ..GeometryParams::default()
        })
        .unwrap();
        let mut d = MemDevice::new(&none, true);
        assert_eq!(d.execute(&req(Op::WriteZeroes, 0, 8), IoBuf::None), Err(Status::NotSupported));
    }

    #[test]
    fn not_memory_backed_drops_data() {
        let mut d = MemDevice::new(&geo(0), false);
        d.execute(&req(Op::Write, 2048, 8), IoBuf::Write(&[9; 4096])).unwrap();
        let mut out = vec![1; 4096];
        d.execute(&req(Op::Read, 2048, 8), IoBuf::Read(&mut out)).unwrap();
        assert!(out.iter().all(|&b| b == 0));
        assert_eq!(d.resident_bytes(), 0);
    }
}
