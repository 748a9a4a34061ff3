//! A server that recovers a device whose server died acknowledges the write the
//! kernel gives again when the image already holds it (`Replay`): the zone's first
//! write, ending at the write pointer the image had at the start, with the same bytes.
//! Any other write behind the write pointer fails as ever.

use std::sync::mpsc::channel;
use zblk_core::bio::{BioFlags, Op};
use zblk_core::engine::EngineConfig;
use zblk_core::units::Sector;
use zblk_dev::buf::AlignedBuf;
use zblk_dev::file::{CreateOptions, FileImage, ImageOptions};
use zblk_runtime::{Runtime, RuntimeConfig};
use zblk_serve::{Done, Replay, Reply, ReplyTo, Req, RuntimeServed, Served};

const ZONE: u64 = 2048;

fn call(s: &dyn Served, req: Req) -> Reply {
    let (tx, rx) = channel();
    s.submit(req, ReplyTo::call(move |r| tx.send(r).unwrap()));
    rx.recv().unwrap()
}

fn write(sector: u64, byte: u8, len: usize) -> Req {
    let nr_sectors = (len / 512) as u32;
    Req::Io {
        op: Op::Write,
        sector: Sector(sector),
        nr_sectors,
        flags: BioFlags::NONE,
        buf: AlignedBuf::from_slice(&vec![byte; len]),
    }
}

fn runtime(path: &std::path::Path) -> Runtime {
    let img = FileImage::open(path, &ImageOptions::default()).unwrap();
    Runtime::start(img, RuntimeConfig { engine: EngineConfig::default(), ..RuntimeConfig::default() }).unwrap()
}

#[test]
fn the_write_in_flight_at_the_death_is_acknowledged_again_only_when_the_image_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("img");
    let geometry = zblk_core::geometry::GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        nr_conv: 1,
        ..Default::default()
    };
    FileImage::create(&path, &CreateOptions { geometry, rotational: false, force: false, preallocate: false }).unwrap();
    // The first server: zone 1 takes two writes (the second, say, completed but never
    // acknowledged to the kernel), zone 2 one.
    let rt = runtime(&path);
    let first = RuntimeServed::new(rt.submitter(), rt.geometry().clone(), None);
    for (sector, byte) in [(ZONE, 1u8), (ZONE + 8, 2), (2 * ZONE, 3), (4 * ZONE, 5)] {
        assert_eq!(call(&first, write(sector, byte, 4096)).result, Ok(Done::Bytes(4096)));
    }
    drop(first);
    rt.close().unwrap();

    let rt = runtime(&path);
    let zones = rt.report_zones().unwrap();
    let served = RuntimeServed::new(rt.submitter(), rt.geometry().clone(), None).recovering(Replay::new(&zones));
    // Zone 1's last write given again: in the image, acknowledged without writing.
    assert_eq!(call(&served, write(ZONE + 8, 2, 4096)).result, Ok(Done::Bytes(4096)));
    // Once: the same write again is a write behind the write pointer.
    assert_eq!(call(&served, write(ZONE + 8, 2, 4096)).result, Err(libc::EIO));
    // Zone 2: other bytes than the image holds fail; the window is then spent.
    assert_eq!(call(&served, write(2 * ZONE, 9, 4096)).result, Err(libc::EIO));
    assert_eq!(call(&served, write(2 * ZONE, 3, 4096)).result, Err(libc::EIO));
    // A write that does not end at the write pointer is no replay.
    let zones3 = call(&served, write(3 * ZONE, 4, 8192));
    assert_eq!(zones3.result, Ok(Done::Bytes(8192)));
    // Zone 4: a read given again before the write changes nothing, and spends no
    // window (the kernel gives every request that was in flight again, in any order).
    let read = Req::Io {
        op: Op::Read,
        sector: Sector(4 * ZONE),
        nr_sectors: 8,
        flags: BioFlags::NONE,
        buf: AlignedBuf::zeroed(4096),
    };
    assert_eq!(call(&served, read).result, Ok(Done::Bytes(4096)));
    assert_eq!(call(&served, write(4 * ZONE, 5, 4096)).result, Ok(Done::Bytes(4096)));
    // The write pointers moved only by the new write.
    let wps: Vec<u64> = rt.report_zones().unwrap().iter().map(|z| z.wp.0).collect();
    assert_eq!(&wps[1..5], &[ZONE + 16, 2 * ZONE + 8, 3 * ZONE + 16, 4 * ZONE + 8]);
    drop(served);
    rt.close().unwrap();
}
