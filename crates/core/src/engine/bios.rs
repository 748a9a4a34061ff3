//! BIO bookkeeping: the BIOs inside the engine, the fragments (future requests) they
//! are cut into, and the typed ids that name both.
//!
//! A BIO stays in the [`BioTable`] until its last fragment ends; a fragment stays in
//! the [`FragTable`] from the split until its request completes (or it is refused or
//! aborted without reaching the device). A fragment's slot carries a generation, so
//! that the [`ReqId`] a driver hands back is checked against the fragment it names:
//! completing a request twice, or one the engine never issued, is a driver bug and
//! panics instead of ending an unrelated BIO.

use super::plugs::PlugId;
use crate::bio::{BioAccount, BioFlags, Op, ReqId, Status};
use crate::units::Sector;
use slab::Slab;

/// A BIO inside the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BioId(usize);

impl BioId {
    /// The slot number, for tables indexed by BIO.
    pub fn idx(self) -> usize {
        self.0
    }
}

/// A fragment of a BIO: what becomes one request. Ordered by slot (the default is
/// the lowest, slot 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct FragId(u32);

impl FragId {
    /// The slot number, for tables indexed by fragment.
    pub fn idx(self) -> usize {
        self.0 as usize
    }
}

/// Where a fragment is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FragState {
    /// Waiting in a zone write plug.
    Plugged,
    /// Held behind a RESET_ALL barrier.
    Held,
    /// In the issue policy's own scheduler (zone write locking), or waiting for one
    /// of its tags.
    Sched,
    /// Released, waiting for a device tag.
    WaitTag,
    /// On the device.
    InFlight,
    /// A pipelined zone write the device completed, whose acknowledgement waits for
    /// the writes before it in its zone (`Frag::held` is the device's result).
    Completed,
}

/// What a fragment is to the plugs: it decides where it waits and what its
/// completion changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Not ordered by any plug: reads, flushes, discards, opens, closes, writes to
    /// conventional zones, everything under a policy without plugs.
    Free,
    /// WRITE, WRITE_ZEROES or emulated ZONE_APPEND to a sequential zone: checked
    /// against (or placed at) `wp_offset`, one at a time per plug.
    ZoneWrite,
    /// RESET or FINISH of a zone: ordered in the plug like a write, because the
    /// device must see it after the writes before it and before the writes after it.
    WpOp,
    /// Native ZONE_APPEND: needs no write pointer, but must not overtake a write or
    /// a reset of its zone, nor be overtaken by one.
    NativeAppend,
    /// RESET_ALL: a barrier for every zone write of the device.
    ResetAll,
    /// Taken by the issue policy's own scheduler (zone write locking's
    /// mq-deadline-like elevator), which dispatches it when it sees fit.
    Sched,
}

/// A piece of a BIO: what becomes one request.
#[derive(Debug)]
pub(crate) struct Frag {
    pub bio: BioId,
    pub op: Op,
    pub kind: Kind,
    pub sector: Sector,
    pub nr_sectors: u32,
    pub bio_offset: u32,
    pub flags: BioFlags,
    pub state: FragState,
    /// The plug that orders this fragment (ZoneWrite, WpOp, NativeAppend).
    pub plug: Option<PlugId>,
    /// The BIO is a zone append: its completion reports the sector written.
    pub append: bool,
    /// RESET_ALLs submitted before this fragment's BIO: it goes to the device after
    /// every one of them, and before every later one.
    pub ra_epoch: u64,
    /// A pipelined zone write: released while other writes of its zone were out,
    /// acknowledged in zone order (`engine/pipe.rs`).
    pub piped: bool,
    /// A pipelined write after a failed one of its zone: it fails, whatever the
    /// device says.
    pub doomed: bool,
    /// The device's result of a pipelined write, kept until its turn to be
    /// acknowledged.
    pub held: Option<Result<Sector, Status>>,
    /// Generation of the slot, checked when the request completes.
    generation: u32,
}

/// The BIOs inside the engine.
#[derive(Debug, Default)]
pub(crate) struct BioTable {
    slots: Slab<BioAccount>,
}

impl BioTable {
    /// A BIO enters: one reference is held while it is being split.
    pub fn insert(&mut self, user_data: u64, sector: Sector) -> BioId {
        BioId(self.slots.insert(BioAccount::new(user_data, sector)))
    }

    /// BIOs inside the engine.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no BIO is inside the engine.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Every BIO and its pieces outstanding, for checks.
    pub fn iter(&self) -> impl Iterator<Item = (BioId, u32)> + '_ {
        self.slots.iter().map(|(i, b)| (BioId(i), b.remaining()))
    }

    /// The submitter's token of BIO `b`.
    pub fn user_data(&self, b: BioId) -> u64 {
        self.slots[b.0].user_data
    }

    /// One more piece of BIO `b` is outstanding.
    pub fn get(&mut self, b: BioId) {
        self.slots[b.0].add_piece();
    }

    /// A piece of BIO `b` ended with `result`; for a zone append, `at` is where the
    /// data landed. Returns the BIO's completion when it was the last piece.
    pub fn put(&mut self, b: BioId, result: Result<(), Status>, at: Option<Sector>) -> Option<crate::bio::Completion> {
        let slot = &mut self.slots[b.0];
        if let Some(at) = at {
            slot.set_result(at);
        }
        if slot.end_piece(result) { Some(self.slots.remove(b.0).completion()) } else { None }
    }
}

/// The fragments inside the engine.
#[derive(Debug, Default)]
pub(crate) struct FragTable {
    slots: Slab<Frag>,
    next_gen: u32,
}

impl FragTable {
    /// Whether no fragment is in the engine (a look at the slab's count, not a walk
    /// of its slots).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// A new fragment of BIO `bio`, waiting for a tag until told otherwise.
    #[allow(clippy::too_many_arguments)]
    pub fn insert(
        &mut self,
        bio: BioId,
        op: Op,
        kind: Kind,
        sector: Sector,
        nr_sectors: u32,
        bio_offset: u32,
        flags: BioFlags,
    ) -> FragId {
        self.next_gen = self.next_gen.wrapping_add(1);
        let idx = self.slots.insert(Frag {
            bio,
            op,
            kind,
            sector,
            nr_sectors,
            bio_offset,
            flags,
            state: FragState::WaitTag,
            plug: None,
            append: op == Op::ZoneAppend,
            ra_epoch: 0,
            piped: false,
            doomed: false,
            held: None,
            generation: self.next_gen,
        });
        FragId(u32::try_from(idx).expect("more than 2^32 fragments in the engine"))
    }

    /// Takes fragment `f` out.
    pub fn remove(&mut self, f: FragId) -> Frag {
        self.slots.remove(f.idx())
    }

    /// The request id of fragment `f`: its slot and generation.
    pub fn req_id(&self, f: FragId) -> ReqId {
        ReqId::pack(self.slots[f.idx()].generation, f.0)
    }

    /// The fragment a request id names, if it is still the one that was issued.
    pub fn lookup(&self, id: ReqId) -> Option<FragId> {
        let (generation, idx) = id.unpack();
        self.slots.get(idx as usize).filter(|fr| fr.generation == generation).map(|_| FragId(idx))
    }

    /// Every fragment, for checks.
    pub fn iter(&self) -> impl Iterator<Item = (FragId, &Frag)> {
        self.slots.iter().map(|(i, fr)| (FragId(i as u32), fr))
    }
}

impl std::ops::Index<FragId> for FragTable {
    type Output = Frag;
    fn index(&self, f: FragId) -> &Frag {
        &self.slots[f.idx()]
    }
}

impl std::ops::IndexMut<FragId> for FragTable {
    fn index_mut(&mut self, f: FragId) -> &mut Frag {
        &mut self.slots[f.idx()]
    }
}
