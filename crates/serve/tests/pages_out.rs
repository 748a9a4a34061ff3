//! A served memory device's reads go to the kernel straight from the device's pages
//! (`RuntimeServed::reading_from`, `CopyOut::Pages`): the bytes handed out are the
//! bytes a read into a buffer returns, in vectored writes of at most 1,024 slices at
//! the right offsets; a failed read hands out nothing, a short write is an error.

use std::sync::Arc;
use std::sync::mpsc::channel;
use zblk_core::bio::{BioFlags, Op};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::Sector;
use zblk_dev::buf::AlignedBuf;
use zblk_dev::{Locked, MemDevice};
use zblk_runtime::{Runtime, RuntimeConfig};
use zblk_serve::{CopyOut, Done, Reply, Req, RuntimeServed, Served};

const ZONE: u64 = 16384; // sectors (8 MiB)

fn call(s: &dyn Served, req: Req) -> Reply {
    let (tx, rx) = channel();
    s.submit(req, Box::new(move |r| tx.send(r).unwrap()));
    rx.recv().unwrap()
}

fn io(op: Op, sector: u64, data: &[u8]) -> Req {
    let buf = AlignedBuf::from_slice(data);
    Req::Io { op, sector: Sector(sector), nr_sectors: (data.len() / 512) as u32, flags: BioFlags::NONE, buf }
}

/// What a reply's copy-out did: its result, the bytes it handed the kernel, and each
/// vectored write's offset and number of slices.
type HandedOut = (Result<(), i32>, Vec<u8>, Vec<(u64, usize)>);

/// What a reply's copy-out hands the kernel; `short` makes the second write take a
/// byte less.
fn handed_out(r: &Reply, short: bool) -> HandedOut {
    let CopyOut::Pages(p) = &r.copy_out else { panic!("not from the pages: {:?}", r.copy_out) };
    let (mut out, mut calls, mut iov) = (Vec::new(), Vec::new(), Vec::new());
    let res = p.write_out(&mut iov, |at, group| {
        calls.push((at, group.len()));
        assert_eq!(at as usize, out.len(), "each write starts where the last one ended");
        for v in group {
            // SAFETY: the iovecs point into the device's pages, locked meanwhile.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) });
        }
        let n: usize = group.iter().map(|v| v.iov_len).sum();
        Ok(if short && calls.len() == 2 { n - 1 } else { n })
    });
    assert!(iov.is_empty(), "no pointer into the pages is left behind");
    (res, out, calls)
}

#[test]
fn a_read_hands_out_the_devices_pages_as_a_read_into_a_buffer_returns_them() {
    let geo = Geometry::new(&GeometryParams {
        capacity_bytes: 64 << 20,
        zone_size_bytes: 8 << 20,
        nr_conv: 1,
        max_sectors: 16384,
        ..GeometryParams::default()
    })
    .unwrap();
    let dev = Arc::new(Locked::new(MemDevice::new(&geo, true), "memory", false));
    let rt = Runtime::start(dev.clone(), RuntimeConfig::default()).unwrap();
    let plain = RuntimeServed::new(rt.submitter(), geo.clone(), None);
    let served = RuntimeServed::new(rt.submitter(), geo.clone(), None).reading_from(dev.clone());
    // The conventional zone's 4 MiB written a page at a time from the last page to the
    // first: no two pages next to each other in memory, 1,024 slices and more.
    for page in (0..1024u64).rev() {
        let data: Vec<u8> = (0..4096).map(|i| (i as u64 * 7 + page) as u8).collect();
        assert_eq!(call(&plain, io(Op::Write, page * 8, &data)).result, Ok(Done::Bytes(4096)));
    }
    // A sequential zone: 12 KiB written, read 1 MiB from its start (zeroes past the
    // write pointer).
    assert_eq!(call(&plain, io(Op::Write, ZONE, &[9u8; 12288])).result, Ok(Done::Bytes(12288)));
    for (sector, len) in [(3u64, 4 << 20), (0, 4096), (ZONE, 1 << 20), (ZONE + 20, 512), (5000, 8 << 20)] {
        let want = call(&plain, io(Op::Read, sector, &vec![0u8; len]));
        let got = call(&served, io(Op::Read, sector, &vec![0u8; len]));
        assert_eq!(got.result, want.result, "{len} bytes at {sector}");
        if want.result.is_err() {
            assert!(matches!(got.copy_out, CopyOut::Nothing), "a failed read hands out nothing");
            continue;
        }
        let (res, out, calls) = handed_out(&got, false);
        assert_eq!(res, Ok(()));
        assert!(out == want.buf[..len], "{len} bytes at {sector}: the bytes of a read into a buffer");
        assert!(calls.iter().all(|&(_, n)| n <= 1024), "{calls:?}");
        if sector == 3 {
            assert_eq!(calls.len(), 2, "1,025 slices: two vectored writes");
            let (res, ..) = handed_out(&got, true);
            assert_eq!(res, Err(libc::EIO), "a short write is an error");
        }
    }
    // Past the device's end: the engine refuses the read, nothing is handed out.
    let r = call(&served, io(Op::Read, geo.nr_sectors() - 8, &[0u8; 8192]));
    assert_eq!(r.result, Err(libc::EINVAL));
    assert!(matches!(r.copy_out, CopyOut::Nothing));
    drop((plain, served));
    rt.close().unwrap();
}
