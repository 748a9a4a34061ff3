//! `zblk_runtime::single` on a memory device: the range checks and their order, a
//! streamed write that runs past a zone's capacity or the device end and what it
//! says landed, an append's data refused over the limit, a chunked read's CRC32.

use std::sync::Arc;
use zblk_core::bio::BioFlags;
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::ZoneCond;
use zblk_dev::{Locked, MemDevice};
use zblk_runtime::single::{self, AppendError, CapacityEnd, Input, RangeError, WriteFailure};
use zblk_runtime::{Backend, Runtime, RuntimeConfig};

const MIB: u64 = 1 << 20;

/// 32 MiB in zones of 8 MiB writable to 6 MiB, the first conventional; or, with
/// `whole`, 8 MiB in zones of 1 MiB writable to their end.
fn params(whole: bool) -> GeometryParams {
    let (capacity, zone, cap) = if whole { (8 * MIB, MIB, MIB) } else { (32 * MIB, 8 * MIB, 6 * MIB) };
    GeometryParams {
        capacity_bytes: capacity,
        zone_size_bytes: zone,
        zone_capacity_bytes: cap,
        nr_conv: 1,
        max_append_sectors: 256,
        ..GeometryParams::default()
    }
}

fn start(whole: bool) -> Runtime {
    let geo = Geometry::new(&params(whole)).unwrap();
    let dev = Arc::new(Locked::new(MemDevice::new(&geo, true), "memory", false));
    Runtime::start(dev, RuntimeConfig { backend: Backend::Threads, ..RuntimeConfig::default() }).unwrap()
}

#[test]
fn range_checks_name_each_case_in_order() {
    let geo = Geometry::new(&params(false)).unwrap();
    let dev_bytes = 32 * MIB;
    assert_eq!(single::check_request(0, Some(0)), Err(RangeError::LengthZero));
    assert_eq!(single::check_request(1000, Some(512)), Err(RangeError::OffsetNotSector));
    assert_eq!(single::check_request(512, None), Ok(()));
    let lbs4k = Geometry::new(&GeometryParams { lbs_bytes: 4096, ..params(false) }).unwrap();
    assert_eq!(single::check_offset(&lbs4k, 512), Err(RangeError::OffsetNotBlock { lbs: 4096 }));
    assert_eq!(single::check_offset(&geo, 512), Ok(()));
    // A write's length: the end first, then the blocks, then an empty one.
    assert_eq!(single::check_length(&geo, 31 * MIB, 2 * MIB + 1), Err(RangeError::BeyondEnd { dev_bytes }));
    assert_eq!(single::check_length(&geo, u64::MAX - 511, 1024), Err(RangeError::BeyondEnd { dev_bytes }));
    assert_eq!(single::check_length(&geo, 0, 1000), Err(RangeError::LengthNotBlock { lbs: 512 }));
    assert_eq!(single::check_length(&geo, 0, 0), Err(RangeError::LengthZero));
    // A whole range: the blocks of both ends first, then the end.
    assert_eq!(single::check_range(&geo, 31 * MIB, 2 * MIB + 1), Err(RangeError::LengthNotBlock { lbs: 512 }));
    assert_eq!(single::check_range(&lbs4k, 512, 4096), Err(RangeError::OffsetNotBlock { lbs: 4096 }));
    assert_eq!(single::check_range(&geo, 31 * MIB, 2 * MIB), Err(RangeError::BeyondEnd { dev_bytes }));
    assert_eq!(single::check_range(&geo, 8 * MIB, MIB), Ok(()));
}

#[test]
fn a_write_past_a_zones_capacity_says_what_landed() {
    let rt = start(false);
    let e = single::write(&rt, 8 * MIB, &mut Input::Pattern(4), Some(7 * MIB), BioFlags::NONE).unwrap_err();
    let cap = CapacityEnd { zone: ZoneNo(1), capacity: 6 * MIB, end: 14 * MIB };
    assert!(matches!(e.kind, WriteFailure::Refused { pos, past_capacity: Some(c), .. } if pos == 12 * MIB && c == cap));
    let z = e.zone.expect("the zone as reported after the failure");
    assert!(e.done > 4 * MIB && e.done <= 6 * MIB, "{e}");
    assert_eq!(z.wp, Sector((8 * MIB + e.done) / 512));
    // A zone the write's first chunk filled: the next chunk finds it full, which is
    // running past its capacity too.
    single::write(&rt, 16 * MIB, &mut Input::Pattern(5), Some(2 * MIB), BioFlags::NONE).unwrap();
    let e = single::write(&rt, 18 * MIB, &mut Input::Pattern(5), Some(5 * MIB), BioFlags::NONE).unwrap_err();
    assert!(
        matches!(e.kind, WriteFailure::Refused { pos, past_capacity: Some(c), .. } if pos == 22 * MIB && c.zone == ZoneNo(2))
    );
    assert_eq!(e.done, 4 * MIB);
    assert_eq!(e.zone.map(|z| z.cond), Some(ZoneCond::Full));
    // Not at the write pointer: nothing landed, and it is not about the capacity.
    let e = single::write(&rt, 24 * MIB + 4096, &mut Input::Pattern(6), Some(4096), BioFlags::NONE).unwrap_err();
    assert!(matches!(e.kind, WriteFailure::Refused { past_capacity: None, .. }), "{e}");
    assert_eq!(e.done, 0);
    rt.close().unwrap();
}

#[test]
fn inputs_that_end_early_or_go_on_past_the_device_end() {
    let rt = start(true);
    let data = vec![7u8; 2 * MIB as usize];
    let mut past_end = Input::Reader(Box::new(&data[..]));
    let e = single::write(&rt, 7 * MIB, &mut past_end, None, BioFlags::NONE).unwrap_err();
    assert!(matches!(e.kind, WriteFailure::PastEnd), "{e}");
    assert_eq!(e.done, MIB);
    assert_eq!(e.zone.map(|z| z.cond), Some(ZoneCond::Full));
    let mut short = Input::Reader(Box::new(&data[..4096]));
    let e = single::write(&rt, MIB, &mut short, Some(8192), BioFlags::NONE).unwrap_err();
    assert!(matches!(e.kind, WriteFailure::Short { read: 4096 }), "{e}");
    let mut odd = Input::Reader(Box::new(&data[..1000]));
    let e = single::write(&rt, MIB, &mut odd, None, BioFlags::NONE).unwrap_err();
    assert!(matches!(e.kind, WriteFailure::NotBlock { read: 1000, lbs: 512 }), "{e}");
    let mut empty = Input::Reader(Box::new(&data[..0]));
    let e = single::write(&rt, MIB, &mut empty, None, BioFlags::NONE).unwrap_err();
    assert!(matches!(e.kind, WriteFailure::Empty) && e.done == 0 && e.zone.is_none(), "{e}");
    rt.close().unwrap();
}

#[test]
fn appends_and_reads() {
    let rt = start(false);
    let geo = rt.geometry().clone();
    let limit = 256 * 512;
    let over =
        |r: Result<Vec<u8>, AppendError>| matches!(r, Err(AppendError::OverLimit { limit: l, .. }) if l == limit);
    assert!(over(single::append_data(&geo, &mut Input::Pattern(1), Some(limit + 512))));
    let long = vec![1u8; limit as usize + 512];
    assert!(over(single::append_data(&geo, &mut Input::Reader(Box::new(&long[..])), None)));
    let short = single::append_data(&geo, &mut Input::Reader(Box::new(&long[..512])), Some(1024));
    assert!(matches!(short, Err(AppendError::Short { read: 512, length: 1024 })));
    let empty = single::append_data(&geo, &mut Input::Reader(Box::new(&long[..0])), None);
    assert!(matches!(empty, Err(AppendError::Empty)));
    let data = single::append_data(&geo, &mut Input::Reader(Box::new(&long[..4096])), None).unwrap();
    assert_eq!(single::append(&rt, 8 * MIB, &data, BioFlags::NONE), Ok(Sector(8 * MIB / 512)));
    // A read of 5 MiB from the conventional zone goes in two chunks.
    let pattern: Vec<u8> = (0..5 * MIB).map(|i| (i / 4096) as u8).collect();
    single::write(&rt, 0, &mut Input::Reader(Box::new(&pattern[..])), None, BioFlags::NONE).unwrap();
    let mut out = Vec::new();
    let r = single::read(&rt, 0, 5 * MIB, &mut out).unwrap();
    assert_eq!(out, pattern);
    assert_eq!((r.bytes, r.crc32), (5 * MIB, crc32fast::hash(&pattern)));
    rt.close().unwrap();
}
