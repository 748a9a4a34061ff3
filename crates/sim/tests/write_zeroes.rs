//! WRITE_ZEROES through the engine: limits, splitting, the unmap attribute, zone
//! write plugging, and reads of zeroes afterwards on the in-memory device.

use zblk_core::engine::{AttrError, EngineConfig, ZeroingMethod};
use zblk_core::geometry::Geometry;
use zblk_core::testing::{Harness, ScriptedDevice, geometry};
use zblk_core::{Bio, BioFlags, Op, Request, Sector, Status, ZoneInfo, ZoneNo};
use zblk_dev::{BlockDevice, IoBuf, MemDevice};

const Z1: u64 = 2048; // 1 MiB zones of 512-byte sectors

/// The in-memory device with data, as the core's harness drives it: zeroes written
/// are read back.
struct Mem(MemDevice);

impl ScriptedDevice for Mem {
    fn execute(&mut self, _geo: &Geometry, r: &Request) -> Result<Sector, Status> {
        self.0.execute(r, IoBuf::None)
    }

    fn zone(&self, z: ZoneNo) -> ZoneInfo {
        *self.0.zones().expect("a zoned device").zone(z)
    }
}

fn harness(f: impl FnOnce(&mut zblk_core::geometry::GeometryParams)) -> Harness<Mem> {
    let geo = geometry(f);
    let cfg = EngineConfig { queue_depth: 64, ..Default::default() };
    Harness::with_device(&geo, cfg, Mem(MemDevice::new(&geo, true)))
}

fn zeroes(sector: u64, nr: u32, token: u64) -> Bio {
    Bio { op: Op::WriteZeroes, sector: Sector(sector), nr_sectors: nr, flags: BioFlags::NONE, user_data: token }
}

#[test]
fn write_zeroes_splits_at_its_own_limit_not_max_sectors() {
    // max_sectors 64 (32 KiB), write_zeroes_max_bytes 256 KiB.
    let mut h = harness(|p| {
        p.write_zeroes_max_bytes = 256 << 10;
        p.write_zeroes_unmap_max_hw_bytes = 256 << 10;
    });
    h.submit(zeroes(0, 1200, 1)); // conventional zone 0, 600 KiB
    let sizes: Vec<u32> = h.issued.iter().map(|r| r.nr_sectors).collect();
    assert_eq!(sizes, vec![512, 512, 176]);
    assert!(h.issued.iter().all(|r| r.op == Op::WriteZeroes && !r.flags.contains(BioFlags::NOUNMAP)));
    h.run_all();
    assert_eq!(h.result(1), Some(Ok(Sector(0))));
    // A write of the same size splits at max_sectors.
    h.submit(Bio::write(Sector(0), 128, 2));
    assert_eq!(h.issued.len(), 2);
}

#[test]
fn unmap_attribute_switches_the_method_and_refuses_bad_values() {
    let mut h = harness(|_| {});
    let hw = h.engine.geometry().max_hw_wzeroes_unmap_sectors() as u64 * 512;
    assert_eq!(hw, 32 << 20);
    assert_eq!(h.engine.write_zeroes_unmap_max_bytes(), hw);
    assert_eq!(h.engine.zeroing_method(false), ZeroingMethod::Unmap);
    assert_eq!(h.engine.zeroing_method(true), ZeroingMethod::WriteZeroes);
    let e = h.engine.set_write_zeroes_unmap_max_bytes(hw + 512).unwrap_err();
    assert_eq!(e, AttrError::AboveHardware { value: hw + 512, hw });
    assert!(e.to_string().contains("above the hardware limit"), "{e}");
    let e = h.engine.set_write_zeroes_unmap_max_bytes(4096).unwrap_err();
    assert!(matches!(e, AttrError::BadUnmapLimit { .. }), "{e}");
    assert_eq!(h.engine.write_zeroes_unmap_max_bytes(), hw, "a refused value changes nothing");
    h.engine.set_write_zeroes_unmap_max_bytes(0).unwrap();
    assert_eq!(h.engine.zeroing_method(false), ZeroingMethod::WriteZeroes);
    h.submit(zeroes(0, 16, 1));
    assert!(h.issued[0].flags.contains(BioFlags::NOUNMAP), "unmap disabled: the device must write zeroes");
    h.run_all();
    h.engine.set_write_zeroes_unmap_max_bytes(hw).unwrap();
    h.submit(zeroes(0, 16, 2));
    assert!(!h.issued[0].flags.contains(BioFlags::NOUNMAP));
    h.run_all();
}

#[test]
fn devices_without_write_zeroes_or_without_unmap() {
    let mut h = harness(|p| {
        p.write_zeroes_max_bytes = 0;
        p.write_zeroes_unmap_max_hw_bytes = 0;
    });
    assert_eq!(h.engine.zeroing_method(false), ZeroingMethod::ZeroBuffers);
    h.submit(zeroes(0, 8, 1));
    assert_eq!(h.result(1), Some(Err(Status::NotSupported)));
    assert!(h.history.is_empty(), "refused before the device");

    let mut h = harness(|p| p.write_zeroes_unmap_max_hw_bytes = 0);
    assert_eq!(h.engine.write_zeroes_unmap_max_bytes(), 0);
    assert_eq!(h.engine.zeroing_method(false), ZeroingMethod::WriteZeroes);
    assert_eq!(h.engine.set_write_zeroes_unmap_max_bytes(0), Ok(()));
    assert!(h.engine.set_write_zeroes_unmap_max_bytes(512).is_err());
    h.submit(zeroes(0, 8, 1));
    assert!(h.issued[0].flags.contains(BioFlags::NOUNMAP));
}

#[test]
fn write_zeroes_on_a_sequential_zone_is_a_plugged_write_at_the_wp() {
    let mut h = harness(|_| {});
    h.submit(Bio::write(Sector(Z1), 8, 0));
    h.submit(zeroes(Z1 + 8, 24, 1)); // queued behind the write, at the WP
    h.submit(zeroes(Z1, 8, 2)); // not at the WP: refused in the plug
    assert_eq!(h.issued.len(), 1, "one write in flight per zone");
    h.run_all();
    assert_eq!(h.result(0), Some(Ok(Sector(Z1))));
    assert_eq!(h.result(1), Some(Ok(Sector(Z1 + 8))));
    assert_eq!(h.result(2), Some(Err(Status::Unaligned)));
    assert!(h.history.iter().all(|r| r.sector != Sector(Z1) || r.op == Op::Write), "refused before the device");
    assert_eq!(h.engine.plug(zblk_core::ZoneNo(1)).unwrap().wp_offset, 32);
}

#[test]
fn reads_after_zeroing_return_zeroes_with_unaligned_edges() {
    for nounmap in [false, true] {
        let mut h = harness(|_| {});
        let data = vec![0x5au8; 32 * 512];
        let w = Bio::write(Sector(0), 32, 0);
        h.engine.submit(w);
        while let Some(a) = h.engine.poll_action() {
            if let zblk_core::engine::Action::Issue(r) = a {
                h.dev.0.execute(&r, IoBuf::Write(&data[..r.nr_sectors as usize * 512])).unwrap();
                h.engine.complete(r.id, Ok(r.sector));
            }
        }
        // Zero sectors 3..21: not 4 KiB aligned at either end.
        let mut z = zeroes(3, 18, 1);
        if nounmap {
            z.flags = BioFlags::NOUNMAP;
        }
        h.submit(z);
        h.run_all();
        assert_eq!(h.result(1), Some(Ok(Sector(3))));
        let mut out = vec![0xffu8; 32 * 512];
        h.dev.0.peek(Sector(0), &mut out);
        for s in 0..32usize {
            let want = if (3..21).contains(&s) { 0 } else { 0x5a };
            assert!(out[s * 512..(s + 1) * 512].iter().all(|&b| b == want), "nounmap {nounmap} sector {s}");
        }
    }
    // 4 KiB blocks: a range not aligned to the block is refused, not rounded.
    let mut h = harness(|p| p.lbs_bytes = 4096);
    h.submit(zeroes(8, 4, 1));
    assert_eq!(h.result(1), Some(Err(Status::Invalid)));
}
