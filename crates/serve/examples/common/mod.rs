//! What the served-path examples share: a request served as a ublk queue hands it
//! over, its reply taken by tag.

use std::sync::{Arc, Mutex};
use zblk_core::bio::{BioFlags, Op};
use zblk_core::units::Sector;
use zblk_dev::buf::AlignedBuf;
use zblk_serve::served::{Replies, Reply, ReplyTo, Req, RuntimeServed, Served, Tagged};

/// Where the replies go, by tag, as a ublk queue's mailbox takes them: the one
/// request's buffer back, and whether it succeeded.
#[derive(Default)]
pub struct Slot(Mutex<Option<Reply>>);

impl Replies for Slot {
    fn reply(&self, _tag: u16, r: Reply) {
        *self.0.lock().expect("the slot's lock") = Some(r);
    }
}

/// Serves `op` at `sector` and waits for it (a memory device completes it inside the
/// submission); the buffer back.
pub fn serve(
    served: &RuntimeServed,
    slot: &Arc<Tagged<Slot>>,
    op: Op,
    sector: u64,
    nr_sectors: u32,
    buf: AlignedBuf,
) -> AlignedBuf {
    let req = Req::Io { op, sector: Sector(sector), nr_sectors, flags: BioFlags::NONE, buf };
    served.submit(req, ReplyTo::tag(slot, 0));
    loop {
        if let Some(r) = slot.0.lock().expect("the slot's lock").take() {
            assert!(r.result.is_ok(), "{op:?} at {sector}: {:?}", r.result);
            return r.buf;
        }
        std::hint::spin_loop();
    }
}
