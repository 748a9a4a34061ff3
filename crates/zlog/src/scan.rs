//! Recovery: every record of a zone found by reading the zone from its start to its
//! write pointer. The write pointer bounds the scan (past it a zone holds nothing the
//! device promises); below it a frame that does not check (a record torn by a crash,
//! on a device that moved its write pointer before all of the data was stable, or
//! corrupted on the medium) is skipped a block at a time, since every frame starts
//! on a logical block, and the bytes skipped are reported ([`Damaged`]).

use crate::frame;
use crate::{Damaged, LogError, Record};
use zblk::{Handle, Zone};

/// Bytes read at once while scanning a zone (a frame longer than this is read whole).
const CHUNK: u64 = 1 << 20;

/// What scanning one zone found besides its records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ZoneScan {
    /// The newest record's sequence number.
    pub max_seq: Option<u64>,
    /// Records found.
    pub records: u64,
    /// Bytes below the write pointer that held no record that checks and were not
    /// zeroes.
    pub skipped: u64,
    /// Those bytes, as ranges.
    pub damaged: Vec<Damaged>,
}

impl ZoneScan {
    /// The block at `off` held no record that checks and was not zeroes; `claimed`
    /// is the sequence number of a frame header there whose frame does not check.
    fn skip(&mut self, off: u64, block: u64, claimed: Option<u64>) {
        self.skipped += block;
        match self.damaged.last_mut() {
            Some(d) if d.offset + d.len == off => d.len += block,
            _ => self.damaged.push(Damaged { offset: off, len: block, claimed_seq: claimed }),
        }
    }
}

/// The zone's bytes, read a chunk at a time.
struct Reader<'a> {
    h: &'a Handle,
    /// The zone's write pointer: nothing is read past it.
    end: u64,
    /// `buf` holds the bytes from `at`.
    at: u64,
    buf: Vec<u8>,
}

impl Reader<'_> {
    /// `len` bytes at `off` (`off + len` at most `end`, both on blocks).
    fn get(&mut self, off: u64, len: u64) -> Result<&[u8], zblk::Error> {
        if off < self.at || off + len > self.at + self.buf.len() as u64 {
            let n = len.max(CHUNK).min(self.end - off);
            self.buf.resize(n as usize, 0);
            self.h.read_at(off, &mut self.buf)?;
            self.at = off;
        }
        let s = (off - self.at) as usize;
        Ok(&self.buf[s..s + len as usize])
    }
}

/// Scans `zone` from its start to its write pointer, handing each record that checks
/// to `visit` in the order they lie in the zone.
pub(crate) fn scan_zone(h: &Handle, zone: &Zone, visit: &mut dyn FnMut(Record)) -> Result<ZoneScan, LogError> {
    let block = h.block_size();
    let mut r = Reader { h, end: zone.wp, at: 0, buf: Vec::new() };
    let mut found = ZoneScan::default();
    let mut off = zone.start;
    while off < zone.wp {
        match record_at(&mut r, zone, off, block)? {
            Ok((rec, len)) => {
                found.max_seq = found.max_seq.max(Some(rec.seq));
                found.records += 1;
                visit(rec);
                off += len;
            }
            Err(claimed) => {
                // Zeroes are a finished zone's end (FINISH moved the write pointer
                // over room no record took); anything else is a torn or corrupt
                // record.
                if r.get(off, block)?.iter().any(|&b| b != 0) {
                    found.skip(off, block, claimed);
                }
                off += block;
            }
        }
    }
    Ok(found)
}

/// A record found, and its frame's length; or none, with the sequence number a
/// frame header there claims (a frame that does not check, or passes the write
/// pointer).
type At = Result<(Record, u64), Option<u64>>;

/// The record whose frame starts at `off` and its frame's length, if one that checks
/// does and ends at or below the write pointer.
fn record_at(r: &mut Reader<'_>, zone: &Zone, off: u64, block: u64) -> Result<At, LogError> {
    let Some(hd) = frame::header(r.get(off, block)?, zone.start) else { return Ok(Err(None)) };
    let len = frame::frame_len(hd.len, block);
    if off + len > zone.wp {
        return Ok(Err(Some(hd.seq)));
    }
    let bytes = r.get(off, len)?;
    if crate::planted::on(crate::planted::Bug::TornFrameKept) {
        // Planted: the checksum is not checked.
        let payload = bytes[frame::HEADER as usize..(frame::HEADER + hd.len) as usize].to_vec();
        return Ok(Ok((Record { seq: hd.seq, offset: off, payload }, len)));
    }
    Ok(frame::payload(bytes, &hd)
        .map(|p| (Record { seq: hd.seq, offset: off, payload: p.to_vec() }, len))
        .ok_or(Some(hd.seq)))
}
