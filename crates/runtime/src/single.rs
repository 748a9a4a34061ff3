//! Single I/Os of any length in constant memory on a running [`Runtime`], and what a
//! failed one left: the work behind `zblk write|append|read` and the range check of
//! `zblk fallocate`, kept here so that the command line only parses and prints.
//!
//! A write streams its input through one buffer of at most [`CHUNK`] bytes, in
//! chunks that never cross a zone, each at the write pointer the chunk before left,
//! as the kernel's pieces of a split BIO go. When one fails, the error carries the
//! facts a message needs: the status, the bytes that landed (from the refusal's rule,
//! or the zone's write pointer after a report), whether the write ran past a zone's
//! capacity, and the zone as the device reports it now. An append is one request,
//! never split: its data is read whole and refused over the zone append limit, as the
//! kernel refuses it. A read goes in chunks to a writer, with a CRC32 of the data.
//!
//! The errors are typed, with a [`Display`](std::fmt::Display) for developers; the
//! sentences users read are the caller's.

use crate::runtime::Runtime;
use std::io::{self, Read, Write};
use zblk_core::bio::{BioFlags, Status};
use zblk_core::geometry::Geometry;
use zblk_core::rule::Rule;
use zblk_core::units::{SECTOR_SIZE, Sector, ZoneNo};
use zblk_core::zone::{ZoneInfo, ZoneType};
use zblk_dev::buf::AlignedBuf;

/// The largest request a streamed read or write makes (the size of its one buffer).
pub const CHUNK: u64 = 4 << 20;

/// Why a request's range is refused before anything is submitted (the device's
/// EINVAL for the whole request, not a partial I/O).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// The length is 0.
    #[error("length 0")]
    LengthZero,
    /// The offset is not a multiple of 512 bytes.
    #[error("offset not a multiple of 512 bytes")]
    OffsetNotSector,
    /// The offset is not a multiple of the logical block size (`lbs` bytes).
    #[error("offset not a multiple of the {lbs}-byte logical block")]
    OffsetNotBlock {
        /// The logical block size, bytes.
        lbs: u64,
    },
    /// Offset + length is past the device end (`dev_bytes` bytes), or overflows.
    #[error("range beyond the device end ({dev_bytes} bytes)")]
    BeyondEnd {
        /// The device's size, bytes.
        dev_bytes: u64,
    },
    /// The length is not a multiple of the logical block size (`lbs` bytes).
    #[error("length not a multiple of the {lbs}-byte logical block")]
    LengthNotBlock {
        /// The logical block size, bytes.
        lbs: u64,
    },
}

/// What a request's arguments alone make invalid, before any device is opened: a
/// length of 0, an offset off the 512-byte sector.
pub fn check_request(offset: u64, length: Option<u64>) -> Result<(), RangeError> {
    if length == Some(0) {
        return Err(RangeError::LengthZero);
    }
    if offset % SECTOR_SIZE != 0 {
        return Err(RangeError::OffsetNotSector);
    }
    Ok(())
}

/// Whether `offset` is on the device's logical blocks; checked on its own for a
/// write whose length is known only once its input is open.
pub fn check_offset(geo: &Geometry, offset: u64) -> Result<(), RangeError> {
    let lbs = u64::from(geo.lbs_bytes());
    if offset % lbs != 0 {
        return Err(RangeError::OffsetNotBlock { lbs });
    }
    Ok(())
}

/// Whether `length` bytes from `offset` (on blocks, see [`check_offset`]) fit the
/// device: the end first, then the length's blocks, then an empty request.
pub fn check_length(geo: &Geometry, offset: u64, length: u64) -> Result<(), RangeError> {
    let dev_bytes = geo.nr_sectors() * SECTOR_SIZE;
    let lbs = u64::from(geo.lbs_bytes());
    if offset.checked_add(length).is_none_or(|end| end > dev_bytes) {
        return Err(RangeError::BeyondEnd { dev_bytes });
    }
    if length % lbs != 0 {
        return Err(RangeError::LengthNotBlock { lbs });
    }
    if length == 0 {
        return Err(RangeError::LengthZero);
    }
    Ok(())
}

/// A whole range checked at once, as a zeroing checks it: both ends on logical
/// blocks (the offset first), then within the device.
pub fn check_range(geo: &Geometry, offset: u64, length: u64) -> Result<(), RangeError> {
    let lbs = u64::from(geo.lbs_bytes());
    let dev_bytes = geo.nr_sectors() * SECTOR_SIZE;
    check_offset(geo, offset)?;
    if length % lbs != 0 {
        return Err(RangeError::LengthNotBlock { lbs });
    }
    if offset.checked_add(length).is_none_or(|end| end > dev_bytes) {
        return Err(RangeError::BeyondEnd { dev_bytes });
    }
    Ok(())
}

/// Where a write's or an append's data comes from.
pub enum Input<'a> {
    /// Every byte the same.
    Pattern(u8),
    /// A file, standard input or any reader, read as the data goes and no further.
    Reader(Box<dyn Read + 'a>),
}

impl Input<'_> {
    /// Fills `buf` from the input as far as it goes; returns the bytes read (short
    /// only at its end). A pattern leaves `buf` as it is: the caller filled it once.
    pub fn fill(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Input::Pattern(_) => Ok(buf.len()),
            Input::Reader(r) => {
                let mut got = 0;
                while got < buf.len() {
                    match r.read(&mut buf[got..]) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(got)
            }
        }
    }
}

/// A write that ran past its zone's capacity: which zone, and where its writable
/// part ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapacityEnd {
    /// The zone.
    pub zone: ZoneNo,
    /// Its capacity, bytes.
    pub capacity: u64,
    /// The byte offset where its writable part ends.
    pub end: u64,
}

/// What stopped a streamed write.
#[derive(Debug, thiserror::Error)]
pub enum WriteFailure {
    /// The input has no byte at all (nothing was written).
    #[error("the input is empty")]
    Empty,
    /// Reading the input failed.
    #[error("reading the input: {0}")]
    Input(io::Error),
    /// Reading the input at the device end, to learn whether it ends there, failed.
    #[error("reading the input at the device end: {0}")]
    InputAtEnd(io::Error),
    /// The input goes on past the device end.
    #[error("the input is longer than the device")]
    PastEnd,
    /// The input ended after `read` bytes, short of the length asked.
    #[error("the input ended after {read} bytes")]
    Short {
        /// The input's bytes, in all.
        read: u64,
    },
    /// The input's `read` bytes are not whole logical blocks of `lbs` bytes.
    #[error("the input's {read} bytes are not whole {lbs}-byte blocks")]
    NotBlock {
        /// The input's bytes, in all.
        read: u64,
        /// The logical block size, bytes.
        lbs: u64,
    },
    /// The device refused the chunk of `chunk` bytes at byte `pos`.
    #[error("the chunk of {chunk} bytes at byte {pos} failed: {status}")]
    Refused {
        /// The refusal (with the zone rule, when one refused it).
        status: Status,
        /// The chunk's byte offset.
        pos: u64,
        /// The chunk's length, bytes.
        chunk: u64,
        /// Set when the write ran past its zone's capacity: the rule says so, or
        /// the zone is one this write's earlier chunks filled.
        past_capacity: Option<CapacityEnd>,
    },
}

/// A streamed write that stopped, and what it left.
#[derive(Debug, thiserror::Error)]
#[error("{kind} ({done} bytes written)")]
pub struct WriteError {
    /// What stopped it.
    pub kind: WriteFailure,
    /// The bytes that landed on the device, the failed chunk's landed pieces
    /// included.
    pub done: u64,
    /// The zone where the write stopped as the device reports it now; `None` when
    /// it was not asked (nothing moved), on a device that is not zoned, or when the
    /// report failed.
    pub zone: Option<ZoneInfo>,
}

/// The zone holding byte `pos` as the device reports it now (`None` for a regular
/// device, or if the report fails).
fn zone_at(rt: &Runtime, pos: u64) -> Option<ZoneInfo> {
    if !rt.geometry().is_zoned() {
        return None;
    }
    rt.report_zone(Sector(pos / SECTOR_SIZE)).ok()
}

/// Writes `input` at byte `offset` with `flags`: `len` bytes, or to the input's end
/// when `None`, in chunks of at most [`CHUNK`] bytes that never cross a zone, each at
/// the write pointer the one before left. Returns the bytes written.
///
/// The range is expected checked ([`check_offset`], [`check_length`]). An input of
/// unknown length that goes on at the device end is refused once the device is full
/// (the bytes up to the end have landed).
pub fn write(
    rt: &Runtime,
    offset: u64,
    input: &mut Input<'_>,
    len: Option<u64>,
    flags: BioFlags,
) -> Result<u64, WriteError> {
    let geo = rt.geometry();
    let dev_bytes = geo.nr_sectors() * SECTOR_SIZE;
    let lbs = u64::from(geo.lbs_bytes());
    let first = len.unwrap_or(CHUNK).min(CHUNK) as usize;
    let mut buf = AlignedBuf::zeroed(first);
    if let Input::Pattern(b) = input {
        buf.fill(*b);
    }
    let (mut pos, mut done) = (offset, 0u64);
    let stop = |kind, done, zone| Err(WriteError { kind, done, zone });
    loop {
        let left = len.map_or(u64::MAX, |l| l - done);
        if left == 0 {
            return Ok(done);
        }
        if pos == dev_bytes {
            // Only an input of unknown length gets here: is there more of it?
            match input.fill(&mut buf[..1]) {
                Err(e) => return stop(WriteFailure::InputAtEnd(e), done, None),
                Ok(0) => return Ok(done),
                Ok(_) => return stop(WriteFailure::PastEnd, done, zone_at(rt, pos - 1)),
            }
        }
        let zone_end = if geo.is_zoned() {
            let z = geo.zone_no(Sector(pos / SECTOR_SIZE));
            (geo.zone_start(z).0 + geo.zone_len(z)) * SECTOR_SIZE
        } else {
            dev_bytes
        };
        let n = left.min(CHUNK).min(zone_end - pos) as usize;
        let got = match input.fill(&mut buf[..n]) {
            Ok(got) => got,
            Err(e) => return stop(WriteFailure::Input(e), done, None),
        };
        let read = done + got as u64;
        if got < n && len.is_some() {
            return stop(WriteFailure::Short { read }, done, zone_at(rt, pos.max(1) - 1));
        }
        if got == 0 {
            return if done == 0 { stop(WriteFailure::Empty, 0, None) } else { Ok(done) };
        }
        if got as u64 % lbs != 0 {
            return stop(WriteFailure::NotBlock { read, lbs }, done, zone_at(rt, pos.max(1) - 1));
        }
        if let Err(st) = rt.write_at_flags(Sector(pos / SECTOR_SIZE), &buf[..got], flags) {
            return Err(refused(rt, offset, st, pos, got as u64, done));
        }
        done += got as u64;
        pos += got as u64;
        if got < n {
            return Ok(done);
        }
    }
}

/// A chunk of `got` bytes at `pos` refused with `st`, after `done` bytes of the write
/// from `offset` landed: what of the chunk landed, and the zone now.
fn refused(rt: &Runtime, offset: u64, st: Status, pos: u64, got: u64, done: u64) -> WriteError {
    // What of this chunk landed: the pieces before the one refused. The rule says
    // where they ended when the write ran into the capacity; otherwise the write
    // pointer tells, unless the chunk was refused for not starting there.
    let part = match (st.rule(), zone_at(rt, pos)) {
        (Some(Rule::PastCapacity { wp }), _) => (wp.0 * SECTOR_SIZE).saturating_sub(pos),
        (Some(Rule::NotAtWp { .. } | Rule::ZoneFull), _) => 0,
        (_, Some(z)) if z.ztype != ZoneType::Conventional => {
            (z.wp.min(z.start + z.capacity).0 * SECTOR_SIZE).saturating_sub(pos)
        }
        _ => 0,
    }
    .min(got);
    let past_capacity = past_capacity(rt.geometry(), offset, st, pos);
    WriteError {
        kind: WriteFailure::Refused { status: st, pos, chunk: got, past_capacity },
        done: done + part,
        zone: zone_at(rt, pos),
    }
}

/// Whether a write from `offset` refused at `pos` ran past its zone's capacity: the
/// rule says so, or the zone is full and this write's earlier chunks are what
/// filled it (it started before `pos`, in this zone).
fn past_capacity(geo: &Geometry, offset: u64, st: Status, pos: u64) -> Option<CapacityEnd> {
    if !geo.is_zoned() {
        return None;
    }
    let zone = geo.zone_no(Sector(pos / SECTOR_SIZE));
    let zone_start = geo.zone_start(zone).0 * SECTOR_SIZE;
    let past = match st.rule() {
        Some(Rule::PastCapacity { .. }) => true,
        Some(Rule::ZoneFull) => offset < pos && zone_start < pos,
        _ => false,
    };
    let capacity = geo.zone_capacity(zone) * SECTOR_SIZE;
    past.then_some(CapacityEnd { zone, capacity, end: zone_start + capacity })
}

/// Why an append's data was refused before the append was submitted.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The device is not zoned: it has no zone append.
    #[error("zone append on a device that is not zoned")]
    NotZoned,
    /// The data is longer than the zone append limit (`limit` bytes): `length`
    /// bytes, or (`None`) an input of unknown length with more than `limit`.
    #[error("zone append over the limit ({limit} bytes)")]
    OverLimit {
        /// The data's length when known.
        length: Option<u64>,
        /// The device's zone append limit, bytes.
        limit: u64,
    },
    /// Reading the input failed.
    #[error("reading the input: {0}")]
    Input(io::Error),
    /// The input had `read` bytes, not the `length` asked.
    #[error("the input has {read} bytes, {length} asked")]
    Short {
        /// The input's bytes.
        read: u64,
        /// The length asked.
        length: u64,
    },
    /// The input is empty.
    #[error("the input is empty")]
    Empty,
}

/// An append's data, whole: `len` bytes, or the input to its end when `None`.
/// Refused as the kernel refuses an append longer than the device's zone append
/// limit, before anything is read past that limit.
pub fn append_data(geo: &Geometry, input: &mut Input<'_>, len: Option<u64>) -> Result<Vec<u8>, AppendError> {
    if !geo.is_zoned() {
        return Err(AppendError::NotZoned);
    }
    let limit = u64::from(geo.append_limit_sectors()) * SECTOR_SIZE;
    if let Some(l) = len.filter(|&l| l > limit) {
        return Err(AppendError::OverLimit { length: Some(l), limit });
    }
    // One byte over the limit when the length is unknown: enough to tell an input
    // that is too long.
    let mut data = vec![0u8; len.unwrap_or(limit + 1) as usize];
    if let Input::Pattern(b) = input {
        data.fill(*b);
        return Ok(data);
    }
    let got = input.fill(&mut data).map_err(AppendError::Input)? as u64;
    if got > limit {
        return Err(AppendError::OverLimit { length: None, limit });
    }
    if let Some(l) = len.filter(|&l| got != l) {
        return Err(AppendError::Short { read: got, length: l });
    }
    data.truncate(got as usize);
    if data.is_empty() {
        return Err(AppendError::Empty);
    }
    Ok(data)
}

/// One zone append of `data` (from [`append_data`]) to the zone starting at byte
/// `zone_start`, with `flags`, from an aligned copy of it; returns the sector it
/// landed at, or the device's refusal (with the zone rule that refused it: an
/// append moves nothing when it fails, so the status is all there is to tell).
pub fn append(rt: &Runtime, zone_start: u64, data: &[u8], flags: BioFlags) -> Result<Sector, Status> {
    let buf = AlignedBuf::from_slice(data);
    rt.append_flags(Sector(zone_start / SECTOR_SIZE), &buf, flags)
}

/// What a read delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadDone {
    /// Bytes read.
    pub bytes: u64,
    /// Their CRC32.
    pub crc32: u32,
}

/// Why a read stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The device refused the chunk of `chunk` bytes at byte `pos`, after `done`
    /// bytes were delivered.
    #[error("the chunk of {chunk} bytes at byte {pos} failed: {status}")]
    Refused {
        /// The refusal.
        status: Status,
        /// The chunk's byte offset.
        pos: u64,
        /// The chunk's length, bytes.
        chunk: u64,
        /// Bytes delivered before it.
        done: u64,
    },
    /// Writing to the output failed, after `done` bytes were delivered.
    #[error("writing the output: {error}")]
    Output {
        /// The output's error.
        error: io::Error,
        /// Bytes delivered before it.
        done: u64,
    },
    /// Flushing the output at the end failed.
    #[error("flushing the output: {0}")]
    Flush(io::Error),
}

/// Reads `len` bytes at byte `offset` in chunks of at most [`CHUNK`] bytes into
/// `out`, which is flushed at the end.
pub fn read(rt: &Runtime, offset: u64, len: u64, out: &mut dyn Write) -> Result<ReadDone, ReadError> {
    let mut buf = AlignedBuf::zeroed(len.min(CHUNK) as usize);
    let mut crc = crc32fast::Hasher::new();
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(CHUNK) as usize;
        let pos = offset + done;
        if let Err(status) = rt.read_at(Sector(pos / SECTOR_SIZE), &mut buf[..n]) {
            return Err(ReadError::Refused { status, pos, chunk: n as u64, done });
        }
        crc.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(|error| ReadError::Output { error, done })?;
        done += n as u64;
    }
    out.flush().map_err(ReadError::Flush)?;
    Ok(ReadDone { bytes: done, crc32: crc.finalize() })
}
