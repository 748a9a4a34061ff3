//! The threaded runtime over the in-memory device (`Locked<MemDevice>`): a device
//! without descriptors that works in memory, whose every request runs on the thread
//! that submits it (no worker is started). The blocking, callback
//! and future APIs; emulated and native zone append; reads past the write pointer;
//! zone management; the errors of the device's zone state machine, which the engine
//! meets only when the device reports them.

mod common;

use common::block_on;
use std::sync::Arc;
use std::sync::mpsc::channel;
use zblk_core::bio::{BioFlags, Op, Status};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::ZoneCond;
use zblk_dev::{DeviceZeroing, Locked, MemDevice};
use zblk_runtime::{AlignedBuf, Backend, Io, Runtime, RuntimeConfig, RuntimeError, Submitter, ZeroingFlags};

const ZONE: u64 = 2048; // sectors (1 MiB)
/// Writable sectors of each sequential zone (768 KiB).
const CAP: u64 = 1536;

fn device(append: u32, max_open: u32, max_active: u32) -> Arc<Locked<MemDevice>> {
    let geo = Geometry::new(&GeometryParams {
        capacity_bytes: 16 << 20,
        zone_size_bytes: 1 << 20,
        zone_capacity_bytes: CAP * 512,
        nr_conv: 1,
        max_open,
        max_active,
        max_append_sectors: append,
        ..GeometryParams::default()
    })
    .unwrap();
    Arc::new(Locked::new(MemDevice::new(&geo, true), "memory", false))
}

fn start(dev: &Arc<Locked<MemDevice>>, backend: Backend) -> Runtime {
    Runtime::start(dev.clone(), RuntimeConfig { backend, ..RuntimeConfig::default() }).unwrap()
}

fn zone(n: u64) -> Sector {
    Sector(n * ZONE)
}

fn blocking_api(append: u32, backend: Backend) {
    let what = format!("append {append}, {backend:?}");
    let dev = device(append, 2, 0);
    let rt = start(&dev, backend);
    assert!(rt.backend().contains("inline on the submitting thread"), "{}", rt.backend());
    assert!(!rt.uses_io_uring());
    assert_eq!(rt.device().name(), "memory");
    // Writes, an append where the write pointer is, a write elsewhere refused.
    rt.write_at(zone(1), &[1u8; 4096]).unwrap();
    assert_eq!(rt.append(zone(1), &[2u8; 4096]), Ok(zone(1) + 8), "{what}");
    assert_eq!(rt.engine_stats().emulated_appends, u64::from(append == 0), "{what}");
    assert_eq!(rt.write_at(zone(1), &[3u8; 512]), Err(Status::Unaligned), "{what}");
    assert_eq!(rt.write_at(zone(1) + 16, &[3u8; 100]), Err(Status::Invalid), "{what}");
    // Reads: the data, then zeroes past the write pointer; past the end refused.
    let mut out = vec![0xeeu8; 24 * 512];
    rt.read_at(zone(1), &mut out).unwrap();
    assert!(out[..4096].iter().all(|&b| b == 1) && out[4096..8192].iter().all(|&b| b == 2), "{what}");
    assert!(out[8192..].iter().all(|&b| b == 0), "{what}: past the write pointer reads zeroes");
    assert_eq!(rt.read_at(Sector(16 * ZONE - 8), &mut [0u8; 8192]), Err(Status::Invalid), "{what}");
    // Past the zone capacity: refused whole; writes at the write pointer go on.
    let too_long = vec![4u8; ((CAP - 16 + 8) * 512) as usize];
    assert_eq!(rt.write_at(zone(1) + 16, &too_long), Err(Status::ZoneFull), "{what}");
    rt.write_at_flags(zone(1) + 16, &[5u8; 512], BioFlags::FUA).unwrap();
    rt.flush().unwrap();
    assert_eq!(rt.report_zone(zone(1)).unwrap().wp, zone(1) + 17, "{what}");
    // Zone management, and what it refuses.
    rt.zone_op(Op::ZoneFinish, zone(2)).unwrap();
    rt.zone_op(Op::ZoneOpen, zone(3)).unwrap();
    assert_eq!(rt.zone_op(Op::ZoneOpen, zone(3) + 8), Err(Status::Invalid), "{what}: not a zone start");
    assert_eq!(rt.zone_op(Op::Write, zone(3)), Err(Status::Invalid), "{what}: not zone management");
    let zones = rt.report_zones().unwrap();
    assert_eq!(zones.len(), 16);
    let conds: Vec<ZoneCond> = zones[..5].iter().map(|z| z.cond).collect();
    use ZoneCond::*;
    assert_eq!(conds, [NotWp, ImpOpen, Full, ExpOpen, Empty], "{what}");
    // The open limit (2): zone 1 closed, 3 and 4 explicitly open; a write to zone 5
    // would open a third zone and no implicitly open one can be closed.
    rt.zone_op(Op::ZoneClose, zone(1)).unwrap();
    rt.zone_op(Op::ZoneOpen, zone(4)).unwrap();
    assert_eq!(rt.write_at(zone(5), &[6u8; 4096]), Err(Status::ZoneOpenResource), "{what}");
    rt.zone_op(Op::ZoneClose, zone(4)).unwrap();
    rt.write_at(zone(5), &[6u8; 4096]).unwrap();
    // A zone the device turns read-only: the write fails, the engine learns why.
    dev.lock().zones_mut().unwrap().set_failed(ZoneNo(9), ZoneCond::ReadOnly);
    assert_eq!(rt.write_at(zone(9), &[7u8; 4096]), Err(Status::ZoneReadOnly), "{what}");
    assert_eq!(rt.append(zone(9), &[7u8; 4096]), Err(Status::ZoneReadOnly), "{what}");
    // Reset of one zone, then of all.
    rt.zone_op(Op::ZoneReset, zone(1)).unwrap();
    assert_eq!(rt.report_zone(zone(1)).unwrap().cond, Empty);
    rt.zone_op(Op::ZoneResetAll, Sector::ZERO).unwrap();
    let zones = rt.report_zones().unwrap();
    assert!(zones[1..9].iter().all(|z| z.cond == Empty), "{what}: {zones:?}");
    assert_eq!(zones[9].cond, ReadOnly, "{what}: a read-only zone stays read-only");
    // The conventional zone takes random writes; the device keeps what was written.
    rt.write_at(Sector(64), &[8u8; 1024]).unwrap();
    rt.write_at(Sector(8), &[9u8; 512]).unwrap();
    rt.close().unwrap();
    let mut got = [0u8; 1024];
    dev.lock().peek(Sector(64), &mut got);
    assert!(got.iter().all(|&b| b == 8), "{what}");
}

#[test]
fn blocking_api_emulated_append() {
    blocking_api(0, Backend::Auto);
    blocking_api(0, Backend::Threads);
}

#[test]
fn blocking_api_native_append() {
    blocking_api(256, Backend::Auto);
    blocking_api(256, Backend::Threads);
}

#[test]
fn the_active_limit_is_the_devices() {
    let dev = device(0, 0, 2);
    let rt = start(&dev, Backend::Auto);
    rt.write_at(zone(1), &[1u8; 4096]).unwrap();
    rt.write_at(zone(2), &[1u8; 4096]).unwrap();
    assert_eq!(rt.write_at(zone(3), &[1u8; 4096]), Err(Status::ZoneActiveResource));
    rt.zone_op(Op::ZoneFinish, zone(1)).unwrap();
    rt.write_at(zone(3), &[1u8; 4096]).unwrap();
    rt.close().unwrap();
}

/// Appends `left` more buffers to the zone at `zone_start`, each submitted from the
/// completion of the one before (as a benchmark job chains I/Os), then sends the
/// sectors they landed at.
fn chain(
    sub: Submitter,
    zone_start: Sector,
    left: u32,
    mut at: Vec<Sector>,
    done: std::sync::mpsc::Sender<Vec<Sector>>,
) {
    if left == 0 {
        done.send(at).unwrap();
        return;
    }
    let next = sub.clone();
    sub.submit(Io::append(zone_start, AlignedBuf::from_slice(&[left as u8; 4096])), move |d| {
        at.push(d.result.unwrap());
        chain(next, zone_start, left - 1, at, done);
    });
}

fn async_apis(append: u32) {
    let dev = device(append, 0, 0);
    let rt = start(&dev, Backend::Auto);
    // A callback: the buffer comes back with the result.
    let (tx, rx) = channel();
    rt.submit(Io::write(Sector(64), vec![1u8; 8192]), move |d| tx.send(d).unwrap());
    let d = rx.recv().unwrap();
    assert_eq!(d.result, Ok(Sector(64)));
    assert_eq!(d.buf.unwrap().as_slice().len(), 8192);
    // A future, on an aligned buffer: an append lands at the zone's write pointer.
    let d = block_on(rt.submit_async(Io::append(zone(2), AlignedBuf::from_slice(&[2u8; 8192]))));
    assert_eq!(d.result, Ok(zone(2)));
    // Appends chained from completion callbacks land one after the other.
    let (tx, rx) = channel();
    chain(rt.submitter(), zone(2), 16, Vec::new(), tx);
    let at = rx.recv().unwrap();
    let want: Vec<Sector> = (0..16).map(|i| zone(2) + 16 + 8 * i).collect();
    assert_eq!(at, want, "append {append}");
    let d = block_on(rt.submit_async(Io::read(zone(2), vec![0u8; 24 * 512])));
    assert_eq!(d.result, Ok(zone(2)));
    let buf = d.buf.unwrap();
    assert!(buf.as_slice()[..16 * 512].iter().all(|&b| b == 2));
    assert!(buf.as_slice()[16 * 512..].iter().all(|&b| b == 16), "the first chained append");
    // Refusals come back through the same paths.
    let d = block_on(rt.submit_async(Io::write(zone(3), vec![0u8; 100])));
    assert_eq!(d.result, Err(Status::Invalid), "not a whole number of sectors");
    let d = block_on(rt.submit_async(Io::write(zone(3) + 8, vec![0u8; 512])));
    assert_eq!(d.result, Err(Status::Unaligned));
    let d = block_on(rt.submit_async(Io::zone(Op::ZoneFinish, zone(4))));
    assert_eq!(d.result.map(|_| ()), Ok(()));
    assert_eq!(rt.submitter().zone_info(zone(4)).unwrap().cond, ZoneCond::Full);
    let d = block_on(rt.submit_async(Io::flush()));
    assert!(d.result.is_ok());
    rt.close().unwrap();
}

#[test]
fn a_submitter_fails_with_eio_once_the_runtime_closed() {
    let dev = device(0, 0, 0);
    let rt = start(&dev, Backend::Auto);
    let sub = rt.submitter();
    rt.close().unwrap();
    let (tx, rx) = channel();
    sub.submit(Io::write(zone(1), vec![0u8; 512]), move |d| tx.send(d.result).unwrap());
    assert_eq!(rx.recv().unwrap(), Err(Status::IoErr));
    assert_eq!(sub.zone_info(zone(1)), Err(Status::IoErr));
}

#[test]
fn callback_and_future_apis_emulated_append() {
    async_apis(0);
}

#[test]
fn callback_and_future_apis_native_append() {
    async_apis(256);
}

#[test]
fn write_zeroes_frees_or_fills_memory() {
    let dev = device(0, 0, 0);
    let rt = start(&dev, Backend::Auto);
    assert_eq!(rt.device_zeroing(false), Some(DeviceZeroing::Memory { unmap: true }));
    assert_eq!(rt.device_zeroing(true), Some(DeviceZeroing::Memory { unmap: false }));
    rt.write_at(zone(1), &[3u8; 16 * 512]).unwrap();
    for (nounmap, at) in [(false, 16), (true, 24)] {
        let r = rt.write_zeroes(zone(1) + at, 8, ZeroingFlags { nounmap, no_fallback: true }).unwrap();
        assert_eq!(r.device_method, Some(DeviceZeroing::Memory { unmap: !nounmap }));
        assert_eq!(r.device_method.unwrap().name(), if nounmap { "memory-zero-fill" } else { "memory-free-pages" });
    }
    assert_eq!(rt.report_zone(zone(1)).unwrap().wp, zone(1) + 32, "zeroes are writes");
    let mut out = vec![0xeeu8; 32 * 512];
    rt.read_at(zone(1), &mut out).unwrap();
    assert!(out[..16 * 512].iter().all(|&b| b == 3) && out[16 * 512..].iter().all(|&b| b == 0));
    rt.close().unwrap();
}

#[test]
fn io_uring_needs_a_descriptor() {
    let dev = device(0, 0, 0);
    let e = Runtime::start(dev, RuntimeConfig { backend: Backend::IoUring, ..RuntimeConfig::default() }).unwrap_err();
    assert!(matches!(e, RuntimeError::IoUring(_)), "{e}");
    assert_eq!(
        e.to_string(),
        "io_uring is not available: memory offers no descriptor for io_uring to move data through"
    );
}

/// Submits `left` more I/Os, each from the completion of the one before, each
/// refused by the engine inside its own submission (a write of 100 bytes: no whole
/// number of sectors); then sends how many were refused.
fn refused_chain(sub: Submitter, left: u32, refused: u32, done: std::sync::mpsc::Sender<u32>) {
    if left == 0 {
        done.send(refused).unwrap();
        return;
    }
    let next = sub.clone();
    sub.submit(Io::write(zone(1), vec![0u8; 100]), move |d| {
        let refused = refused + u32::from(d.result == Err(Status::Invalid));
        refused_chain(next, left - 1, refused, done);
    });
}

/// A chain of I/Os the engine refuses inline (each completion submits the next, and
/// that submission completes at once) must not nest one completion inside the other:
/// 200,000 of them on a thread with a 256 KiB stack. Run recursively, each level
/// costs a few hundred bytes of stack and the thread overflows it within a few
/// thousand levels (what `zblk bench --rw randwrite --zonemode none` once did on a
/// fresh image). Then the same after the runtime closed (every I/O fails with EIO
/// inside its submission).
#[test]
fn inline_refusals_chained_from_callbacks_do_not_nest() {
    const N: u32 = 200_000;
    let dev = device(0, 0, 0);
    let rt = start(&dev, Backend::Auto);
    let sub = rt.submitter();
    let (tx, rx) = channel();
    let t = std::thread::Builder::new().stack_size(256 << 10).spawn(move || refused_chain(sub, N, 0, tx)).unwrap();
    t.join().expect("the chain's thread");
    assert_eq!(rx.recv().unwrap(), N, "every I/O of the chain refused with EINVAL");
    // The completion of an I/O submitted from a callback runs once that callback
    // has returned, on the same thread.
    let (tx, rx) = channel();
    let sub = rt.submitter();
    rt.submit(Io::write(zone(1), vec![0u8; 100]), move |_| {
        let (tx2, rx2) = channel();
        sub.submit(Io::write(zone(1), vec![0u8; 100]), move |d| {
            let _ = tx2.send(d.result);
        });
        tx.send(rx2.try_recv().ok()).unwrap();
    });
    assert_eq!(rx.recv().unwrap(), None, "a nested completion runs after the callback that submitted it");
    let sub = rt.submitter();
    rt.close().unwrap();
    let (tx, rx) = channel();
    let t = std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(move || {
            let (tx2, rx2) = channel();
            refused_chain(sub, N, 0, tx2);
            tx.send(rx2.recv().unwrap()).unwrap();
        })
        .unwrap();
    t.join().expect("the chain's thread after close");
    assert_eq!(rx.recv().unwrap(), 0, "after close every I/O fails with EIO, none with EINVAL");
}

/// The memory device keeps a zone's writes in order: under pipelining, writes
/// submitted from several threads at once, many per zone in flight, all land, each
/// where it was submitted, and read back.
#[test]
fn pipelined_writes_from_several_threads_land_in_zone_order() {
    use zblk_core::engine::{EngineConfig, IssuePolicy};
    let dev = device(0, 0, 0);
    let engine = EngineConfig { policy: IssuePolicy::Pipeline, queue_depth: 32, ..EngineConfig::default() };
    let rt =
        Runtime::start(dev.clone(), RuntimeConfig { engine, backend: Backend::Threads, ..RuntimeConfig::default() })
            .unwrap();
    // Four threads, each writing its zone in 8-sector writes, all submitted at once.
    std::thread::scope(|s| {
        for t in 1..=4u64 {
            let rt = &rt;
            s.spawn(move || {
                let (tx, rx) = channel();
                for i in 0..CAP / 8 {
                    let tx = tx.clone();
                    let data = vec![(t * 31 + i) as u8; 8 * 512];
                    rt.submit(Io::write(zone(t) + 8 * i, data), move |d| tx.send(d.result).unwrap());
                }
                for _ in 0..CAP / 8 {
                    assert!(rx.recv().unwrap().is_ok(), "a pipelined write failed on zone {t}");
                }
            });
        }
    });
    for t in 1..=4u64 {
        let mut buf = vec![0u8; (CAP * 512) as usize];
        rt.read_at(zone(t), &mut buf).unwrap();
        for i in 0..CAP / 8 {
            let at = (i * 8 * 512) as usize;
            assert_eq!(buf[at], (t * 31 + i) as u8, "zone {t} write {i}");
        }
    }
    assert!(rt.engine_stats().plugged < CAP / 8 * 4, "writes went out several per zone");
    rt.close().unwrap();
}

/// A device that does not declare it keeps a zone's writes in order refuses
/// pipelining, with the reason.
#[test]
fn pipelining_is_refused_on_a_device_that_may_reorder() {
    use zblk_core::engine::{EngineConfig, IssuePolicy};
    struct Reordering(Arc<Locked<MemDevice>>);
    impl zblk_dev::Device for Reordering {
        fn geometry(&self) -> &Geometry {
            self.0.geometry()
        }
        fn rotational(&self) -> bool {
            false
        }
        fn name(&self) -> String {
            "reordering".into()
        }
        fn prepare(&self, req: &zblk_core::bio::Request) -> Result<zblk_dev::Plan, Status> {
            self.0.prepare(req)
        }
        fn perform(
            &self,
            req: &zblk_core::bio::Request,
            plan: zblk_dev::Plan,
            buf: zblk_dev::IoBuf<'_>,
        ) -> Result<Sector, Status> {
            self.0.perform(req, plan, buf)
        }
        fn finish(
            &self,
            req: &zblk_core::bio::Request,
            t: zblk_dev::device::Transfer,
            io: std::io::Result<()>,
        ) -> Result<Sector, Status> {
            self.0.finish(req, t, io)
        }
        fn report_zones(
            &self,
            from: Sector,
            max: usize,
            out: &mut Vec<zblk_core::zone::ZoneInfo>,
        ) -> Result<usize, Status> {
            self.0.report_zones(from, max, out)
        }
        fn zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
            self.0.zeroing(nounmap)
        }
        fn close(&self) -> Result<(), zblk_dev::error::DeviceError> {
            Ok(())
        }
    }
    let engine = EngineConfig { policy: IssuePolicy::Pipeline, ..EngineConfig::default() };
    let r = Runtime::start(Reordering(device(0, 0, 0)), RuntimeConfig { engine, ..RuntimeConfig::default() });
    match r {
        Err(e @ RuntimeError::Policy { .. }) => assert!(e.to_string().contains("keeps a zone's writes"), "{e}"),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("pipelining started on a device that may reorder"),
    }
}
