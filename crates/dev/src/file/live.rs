//! The live zone table as the device updates it: one 8-byte entry per zone, stored
//! as each write completes (a shared mapping of the file, which the page cache keeps
//! when the process dies), a header naming the state and the last commit it saw, and
//! a witness of the last commit completed in its last bytes.

use super::error::{ImageError, io_err};
use super::format::{self, Entry, ImageId, Layout, LiveHeader, LiveState};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use zblk_core::units::ZoneNo;

/// The live table region of the file, as the device updates it, with the identity
/// of the image it belongs to (mixed into every check value it stores).
#[derive(Debug)]
pub(super) struct LiveTable {
    id: ImageId,
    region: Region,
}

/// Where the live table region is changed.
#[derive(Debug)]
enum Region {
    /// A shared mapping: an update is a store, which the page cache keeps when the
    /// process dies.
    Map(memmap2::MmapMut),
    /// Where the file system does not allow shared writable mappings (9p, some FUSE
    /// file systems): a copy in memory, each update written with `pwrite`.
    Pwrite { file: File, offset: u64, copy: Vec<u8> },
}

impl LiveTable {
    /// The live table region of `file` (image `id`), mapped shared; where the file
    /// system does not allow that, a copy read now and written back with `pwrite`.
    pub(super) fn open(path: &Path, file: &File, layout: &Layout, id: ImageId) -> Result<LiveTable, ImageError> {
        // SAFETY: the mapping covers the live table region inside the file, whose
        // length was checked by the open; the file is locked against other zblk
        // processes, and the mapping lives in the device's state for the image's
        // lifetime.
        let map = unsafe {
            memmap2::MmapOptions::new().offset(layout.live_offset).len(layout.table_bytes as usize).map_mut(file)
        };
        let region = match map {
            Ok(m) => Region::Map(m),
            Err(_) => {
                let mut copy = vec![0u8; layout.table_bytes as usize];
                file.read_exact_at(&mut copy, layout.live_offset).map_err(io_err(path, "read live table"))?;
                let file = file.try_clone().map_err(io_err(path, "dup"))?;
                Region::Pwrite { file, offset: layout.live_offset, copy }
            }
        };
        Ok(LiveTable { id, region })
    }

    pub(super) fn bytes(&mut self) -> &mut [u8] {
        match &mut self.region {
            Region::Map(m) => m,
            Region::Pwrite { copy, .. } => copy,
        }
    }

    /// Makes `[at, at + len)` of the region, changed through `bytes()`, visible in the
    /// file.
    pub(super) fn publish(&mut self, at: usize, len: usize) -> io::Result<()> {
        match &mut self.region {
            Region::Map(_) => Ok(()),
            Region::Pwrite { file, offset, copy } => file.write_all_at(&copy[at..at + len], *offset + at as u64),
        }
    }

    /// Stores zone `z`'s entry.
    pub(super) fn store(&mut self, z: ZoneNo, e: Entry) -> io::Result<()> {
        let (at, word) = (format::entry_offset(z), e.pack(z, self.id));
        // One aligned 8-byte store: a process killed at any instruction leaves either
        // the old entry or the new one.
        self.bytes()[at..at + 8].copy_from_slice(&word.to_le_bytes());
        self.publish(at, 8)
    }

    /// Writes the header's magic and boot id (see [`LiveHeader::put_identity`]).
    pub(super) fn put_boot(&mut self, boot: &[u8; 36]) {
        let id = self.id;
        LiveHeader::put_identity(self.bytes(), boot, id);
    }

    /// Stores the digest of the entries as commit `commit` leaves them, which a
    /// clean close stores before it marks the table clean.
    pub(super) fn set_digest(&mut self, commit: u64, nr_zones: u32) -> io::Result<()> {
        let id = self.id;
        LiveHeader::put_digest(self.bytes(), commit, nr_zones, id);
        self.publish(0, format::TABLE_HEADER_BYTES as usize)
    }

    /// Changes the witness at the end of the region (see [`format::LiveWitness`]).
    pub(super) fn update_witness(&mut self, change: impl FnOnce(&mut format::LiveWitness)) -> io::Result<()> {
        let id = self.id;
        let bytes = self.bytes();
        let mut w = format::live_witness(bytes, id).unwrap_or_default();
        change(&mut w);
        format::put_live_witness(bytes, w, id);
        let at = bytes.len() - format::LIVE_WITNESS_BYTES;
        self.publish(at, format::LIVE_WITNESS_BYTES)
    }

    /// Stores the header's state and commit word (one aligned 8-byte store), after
    /// the witness of the commit announced: a process killed in between leaves the
    /// witness one commit ahead of the header, never behind it.
    pub(super) fn set_state(&mut self, state: LiveState, commit: u64) -> io::Result<()> {
        self.update_witness(|w| w.announced = commit)?;
        let id = self.id;
        LiveHeader::put_state(self.bytes(), state, commit, id);
        self.publish(0, format::TABLE_HEADER_BYTES as usize)
    }

    pub(super) fn flush(&mut self) -> io::Result<()> {
        match &mut self.region {
            Region::Map(m) => m.flush(),
            Region::Pwrite { .. } => Ok(()),
        }
    }
}

/// A whole live table region of image `id`: `entries` in `state` at `commit`,
/// written in `boot`.
pub(super) fn live_region(
    entries: &[Entry],
    table_bytes: u64,
    (state, commit): (LiveState, u64),
    boot: &[u8; 36],
    id: ImageId,
) -> Vec<u8> {
    let mut buf = vec![0u8; table_bytes as usize];
    LiveHeader::put_identity(&mut buf, boot, id);
    LiveHeader::put_state(&mut buf, state, commit, id);
    for (z, e) in entries.iter().enumerate() {
        let at = format::entry_offset(ZoneNo(z as u32));
        buf[at..at + 8].copy_from_slice(&e.pack(ZoneNo(z as u32), id).to_le_bytes());
    }
    LiveHeader::put_digest(&mut buf, commit, entries.len() as u32, id);
    format::put_live_witness(&mut buf, format::LiveWitness { completed: commit, announced: commit }, id);
    buf
}
