//! Requests named by their tag (`ReplyTo::Tag`), as a ublk queue hands them over: a
//! read, write or zone append goes to the runtime as one I/O named by a token and
//! comes back as the same reply a boxed callback gets, to the right tag; the other
//! requests, and every one after the runtime has closed, reach the tag too.

use std::sync::{Arc, Mutex};
use zblk_core::bio::{BioFlags, Op};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::Sector;
use zblk_dev::buf::AlignedBuf;
use zblk_dev::{Locked, MemDevice};
use zblk_runtime::{Runtime, RuntimeConfig};
use zblk_serve::{CopyOut, Done, Replies, Reply, ReplyTo, Req, RuntimeServed, Served, Tagged};

const ZONE: u64 = 16384; // sectors (8 MiB)

/// A queue's replies, by tag, in the order they came.
#[derive(Default)]
struct Queue(Mutex<Vec<(u16, Reply)>>);

impl Replies for Queue {
    fn reply(&self, tag: u16, r: Reply) {
        self.0.lock().unwrap().push((tag, r));
    }
}

impl Queue {
    /// Serves `req` as request `tag` and returns its reply (the memory device
    /// completes it within the submission).
    fn serve(this: &Arc<Tagged<Self>>, s: &dyn Served, tag: u16, req: Req) -> Reply {
        s.submit(req, ReplyTo::tag(this, tag));
        let this: &Queue = this;
        let mut got = this.0.lock().unwrap();
        assert_eq!(got.len(), 1, "one reply for request {tag}");
        let (t, r) = got.pop().unwrap();
        assert_eq!(t, tag, "the reply of request {tag} came to tag {t}");
        r
    }
}

fn io(op: Op, sector: u64, data: &[u8]) -> Req {
    let buf = AlignedBuf::from_slice(data);
    Req::Io { op, sector: Sector(sector), nr_sectors: (data.len() / 512) as u32, flags: BioFlags::NONE, buf }
}

fn runtime() -> (Runtime, Geometry) {
    let geo = Geometry::new(&GeometryParams {
        capacity_bytes: 4 * ZONE * 512,
        zoned: true,
        zone_size_bytes: ZONE * 512,
        ..GeometryParams::default()
    })
    .unwrap();
    let dev = Arc::new(Locked::new(MemDevice::new(&geo, true), "memory", false));
    let rt = Runtime::start(dev, RuntimeConfig::default()).unwrap();
    (rt, geo)
}

#[test]
fn a_tagged_request_gets_its_reply_at_its_tag() {
    let (rt, geo) = runtime();
    let s = RuntimeServed::new(rt.submitter(), geo, None);
    let q = Tagged::new(Queue::default());
    let data: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
    let w = Queue::serve(&q, &s, 3, io(Op::Write, 0, &data));
    assert_eq!(w.result, Ok(Done::Bytes(4096)));
    assert!(matches!(w.copy_out, CopyOut::Nothing), "a write copies nothing out");
    let a = Queue::serve(&q, &s, 5, io(Op::ZoneAppend, 0, &data));
    assert_eq!(a.result, Ok(Done::Appended(4096, 8)), "appended after the write");
    let r = Queue::serve(&q, &s, 7, io(Op::Read, 0, &[0u8; 8192]));
    assert_eq!(r.result, Ok(Done::Bytes(8192)));
    assert!(matches!(r.copy_out, CopyOut::Buf(8192)), "a read copies its data out: {:?}", r.copy_out);
    assert!(r.buf[..4096] == data[..] && r.buf[4096..8192] == data[..], "the read's data in its buffer");
    // A write behind the write pointer fails, at its tag.
    let bad = Queue::serve(&q, &s, 9, io(Op::Write, 0, &data));
    assert_eq!((bad.result, bad.buf.len()), (Err(libc::EIO), 4096), "failed, with its buffer back");
    // Requests that are not one data I/O (a flush, a zone reset) reach their tag too.
    let req = Req::Io {
        op: Op::Flush,
        sector: Sector(0),
        nr_sectors: 0,
        flags: BioFlags::NONE,
        buf: AlignedBuf::zeroed(512),
    };
    assert_eq!(Queue::serve(&q, &s, 11, req).result, Ok(Done::Bytes(0)));
    let req = Req::Io {
        op: Op::ZoneReset,
        sector: Sector(0),
        nr_sectors: 0,
        flags: BioFlags::NONE,
        buf: AlignedBuf::zeroed(512),
    };
    assert_eq!(Queue::serve(&q, &s, 12, req).result, Ok(Done::Bytes(0)));
    rt.close().unwrap();
    // After the runtime has closed, a tagged request ends with EIO, its buffer back.
    let late = Queue::serve(&q, &s, 13, io(Op::Write, ZONE, &data));
    assert_eq!((late.result, late.buf.len()), (Err(libc::EIO), 4096));
}
