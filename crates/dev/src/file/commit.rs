//! Commits: making completed writes durable with their write pointers (`fdatasync`,
//! then the older durable zone table, then `fdatasync` again), the witnesses of each
//! commit, and the clean close that marks the live table clean.

use super::FileImage;
use super::error::{ImageError, io_err};
use super::format::{self, Entry, LiveState, Table};
use std::io;
use zblk_core::units::ZoneNo;

#[derive(Debug)]
pub(super) struct Durable {
    pub(super) seq: u64,
    /// The slot holding `seq`; the next commit writes the other.
    pub(super) slot: usize,
    pub(super) entries: Vec<Entry>,
    /// A table write failed: the other slot may hold it, newer than `seq`, and may
    /// surface after a power loss. The next commit must write, whatever it holds.
    pub(super) unsure: bool,
    /// The witnesses of `seq` (the superblocks, the live table's) were stored since
    /// the last `fdatasync`.
    pub(super) witness_unsynced: bool,
}

impl Durable {
    /// The newest durable table an open found (or rebuilt): commit `seq` in `slot`.
    pub(super) fn new(seq: u64, slot: usize, entries: Vec<Entry>) -> Durable {
        Durable { seq, slot, entries, unsure: false, witness_unsynced: false }
    }
}

impl FileImage {
    /// Commits and marks the live table clean. Dropping the image does the same,
    /// ignoring errors; call this to see them.
    pub fn close(self) -> Result<(), ImageError> {
        let r = self.close_inner();
        r.map_err(io_err(&self.path, "close"))
    }

    /// Closes once: later requests fail (a write after the live table is marked clean
    /// would be lost by the next open).
    pub(super) fn close_inner(&self) -> io::Result<()> {
        if self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) || self.read_only {
            return Ok(());
        }
        self.commit_io()?;
        {
            // The witnesses of the last commit are made durable before the live
            // table says the close was clean.
            let mut d = self.lock_durable();
            if d.witness_unsynced {
                self.media.sync_data()?;
                d.witness_unsynced = false;
            }
        }
        let commit = self.durable_seq();
        let nr_zones = self.geo.nr_zones();
        let mut st = self.lock_state();
        // The entries are what commit `commit` holds (the commit above synced them);
        // their digest ties them to the header that says so.
        st.live.as_mut().expect("read-write image has a live table").set_digest(commit, nr_zones)?;
        st.set_live(LiveState::Clean, commit)?;
        st.live.as_mut().expect("read-write image has a live table").flush()
    }

    /// Makes every completed write durable, with its write pointer: `fdatasync`, then
    /// the completed write pointers into the older durable table, then `fdatasync`.
    pub(super) fn commit_io(&self) -> io::Result<()> {
        let mut d = self.lock_durable();
        // The snapshot is taken before the data sync: every write it counts completed
        // before the sync began, so the sync makes its data durable.
        let snap = self.lock_state().done.clone();
        self.media.sync_data()?;
        d.witness_unsynced = false;
        if snap != d.entries || d.unsure {
            self.write_table(&mut d, snap)?;
        }
        Ok(())
    }

    /// Commits a zone management operation: the newest durable table with `changes`,
    /// without syncing data (no write pointer in it moves up).
    pub(super) fn commit_zones(&self, changes: &[(ZoneNo, Entry)]) -> io::Result<()> {
        let mut d = self.lock_durable();
        let mut entries = d.entries.clone();
        for &(z, e) in changes {
            entries[z.idx()] = e;
        }
        if entries != d.entries || d.unsure { self.write_table(&mut d, entries) } else { Ok(()) }
    }

    pub(super) fn write_table(&self, d: &mut Durable, entries: Vec<Entry>) -> io::Result<()> {
        let layout = &self.sb.layout;
        if d.seq >= format::MAX_COMMIT {
            return Err(io::Error::other(format!(
                "commit numbers exhausted: the image holds commit {}, the format's limit is {}",
                d.seq,
                format::MAX_COMMIT
            )));
        }
        let t = Table { seq: d.seq + 1, entries };
        {
            // The live table announces the commit before its table is written: the
            // table's sync carries the announcement, so that an open that finds this
            // table damaged knows a commit is missing; and in the same boot the live
            // table (updated before any commit) is then known to have seen it. Lock
            // order: durable, then state.
            let mut st = self.lock_state();
            let state = st.live_hdr.0;
            st.set_live(state, t.seq)?;
        }
        let slot = 1 - d.slot;
        let written = self
            .media
            .write_at(&t.encode(layout.table_bytes, self.sb.id), layout.table_offset[slot])
            .and_then(|()| self.media.sync_data());
        d.unsure = written.is_err();
        written?;
        d.seq = t.seq;
        d.slot = slot;
        d.entries = t.entries;
        // Now that the table is durable, both superblocks and the live table witness
        // its commit: a later open that finds no table of it (the table copied back
        // from an older image, or lost by the disk) knows a commit is missing. Made
        // durable by the next sync (every commit starts with one, and a close makes
        // one); until then a power cut leaves an older witness, which proves less.
        let enc = self.sb.encode(d.seq);
        for at in format::SUPERBLOCK_OFFSETS {
            self.media.write_at(&enc, at)?;
        }
        if let Some(live) = self.lock_state().live.as_mut() {
            let seq = d.seq;
            live.update_witness(|w| w.completed = seq)?;
        }
        d.witness_unsynced = true;
        Ok(())
    }
}
