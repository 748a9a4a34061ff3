//! The log: appends reserve room in one zone at a time (the head) and are zone
//! appends there, so many threads append at once and each learns where its record
//! landed; a zone whose room is taken is sealed and finished; trimming resets the
//! sealed zones whose records all precede a sequence number.

use crate::scan::{self, ZoneScan};
use crate::{LogError, frame};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use zblk::{Handle, Zone, ZoneCond};

/// Where a record landed: its sequence number, the byte offset of its frame, the
/// frame's length (the payload, its header, zeroes to the next logical block).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// Its sequence number: records appended later get larger ones.
    pub seq: u64,
    /// The frame's first byte on the device.
    pub offset: u64,
    /// The frame's bytes.
    pub len: u64,
}

/// A record found by a scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Its sequence number.
    pub seq: u64,
    /// The frame's first byte on the device.
    pub offset: u64,
    /// What was appended.
    pub payload: Vec<u8>,
}

/// How to open a log: which zones of the device it uses.
#[derive(Clone, Debug, Default)]
pub struct LogOptions {
    zones: Option<Range<usize>>,
}

impl LogOptions {
    /// Every sequential zone of the device.
    pub fn new() -> LogOptions {
        LogOptions::default()
    }

    /// The sequential zones among zones `range` (zone numbers, as the report lists
    /// them) only: the other zones are left to other users of the device.
    pub fn zones(mut self, range: Range<usize>) -> LogOptions {
        self.zones = Some(range);
        self
    }
}

/// What opening the log found in its zones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// The log's zones.
    pub zones: usize,
    /// Those that held records.
    pub zones_with_records: usize,
    /// The records found.
    pub records: u64,
    /// Bytes below the write pointers that held no record that checks and were not
    /// zeroes (torn records, a frame cut by a crash, records corrupted on the
    /// medium).
    pub skipped_bytes: u64,
    /// Those bytes, as ranges in the order the scan met them: where a record may
    /// have been lost. A record the log held below a write pointer is found whole or
    /// starts in one of them (or its zone is gone OFFLINE); none is invented.
    pub damaged: Vec<Damaged>,
}

/// Bytes below a write pointer that held no record that checks and were not zeroes:
/// a record torn by a crash (never durable: its flush had not returned) or one
/// whose bytes changed on the medium (a durable record lost, which the log cannot
/// tell from a torn one; both fail the checksum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Damaged {
    /// The byte offset of the first block.
    pub offset: u64,
    /// Its length in bytes (whole blocks).
    pub len: u64,
    /// The sequence number the frame header at `offset` claims, if one is there
    /// (its checksum does not hold, so the number is not to be trusted either).
    pub claimed_seq: Option<u64>,
}

/// A zone-append log on a [`Handle`]. Cheap to clone: the clones share the log,
/// from any number of threads.
#[derive(Clone, Debug)]
pub struct Log {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    h: Handle,
    block: u64,
    max_payload: usize,
    /// The zone numbers the log was given (its zones are the sequential ones there).
    range: Range<usize>,
    closed: AtomicBool,
    recovery: Recovery,
    state: Mutex<State>,
    /// Signalled when a sealed zone's last append completes: an append waiting for
    /// the device's active zone limit may go on.
    sealed_done: Condvar,
}

#[derive(Debug)]
struct State {
    zones: Vec<LogZone>,
    /// The zone appends go to.
    head: Option<usize>,
    /// Where the search for the next head starts: the zones are used in a ring.
    cursor: usize,
    next_seq: u64,
    /// The device's active zone limit (0: none).
    max_active: u32,
}

#[derive(Clone, Copy, Debug)]
struct LogZone {
    start: u64,
    capacity: u64,
    /// Bytes reserved from the zone's start (at least its write pointer's offset).
    used: u64,
    /// Appends reserved in it and not yet completed.
    inflight: u32,
    /// No more appends go to it: it waits for its appends, then is finished.
    sealed: bool,
    /// Read-only or offline: never appended to or reset.
    dead: bool,
    /// Its newest record's sequence number.
    max_seq: Option<u64>,
}

impl LogZone {
    fn is_free(&self) -> bool {
        !self.sealed && !self.dead && self.used == 0 && self.inflight == 0
    }
}

impl Log {
    /// Opens the log on every sequential zone of `h` ([`LogOptions`] to choose), and
    /// recovers: each zone is scanned from its start to its write pointer, and the
    /// next sequence number follows the newest record found ([`Log::recovery`]).
    pub fn open(h: Handle, opts: LogOptions) -> Result<Log, LogError> {
        Log::open_with(h, opts, |_| {})
    }

    /// As [`Log::open`], handing every record the recovery finds to `visit`, zone by
    /// zone in the order they lie (sort by [`Record::seq`] for the order of appends).
    pub fn open_with(h: Handle, opts: LogOptions, mut visit: impl FnMut(Record)) -> Result<Log, LogError> {
        let report = h.report()?;
        let range = opts.zones.unwrap_or(0..report.len());
        let picked = log_zones(&report, &range);
        if picked.is_empty() {
            return Err(LogError::NoZones { target: h.name().into(), first: range.start, end: range.end });
        }
        let mut recovery = Recovery { zones: picked.len(), ..Recovery::default() };
        let mut zones = Vec::with_capacity(picked.len());
        for z in &picked {
            let (lz, found) = recover_zone(&h, z, &mut visit)?;
            recovery.zones_with_records += usize::from(found.records > 0);
            recovery.records += found.records;
            recovery.skipped_bytes += found.skipped;
            recovery.damaged.extend(found.damaged);
            zones.push(lz);
        }
        let newest = zones.iter().enumerate().filter_map(|(i, z)| Some((z.max_seq?, i))).max();
        // Saturating: a frame that checks may still carry any number (an image
        // written by something else), and an overflow is not to panic.
        let next_seq = newest.map_or(0, |(s, _)| s.saturating_add(1));
        let cursor = newest.map_or(0, |(_, i)| (i + 1) % zones.len());
        let max_payload = max_payload(&h, &picked);
        let max_active = h.geometry().max_active();
        let state = State { zones, head: None, cursor, next_seq, max_active };
        let inner = Inner {
            block: h.block_size(),
            h,
            max_payload,
            range,
            closed: AtomicBool::new(false),
            recovery,
            state: Mutex::new(state),
            sealed_done: Condvar::new(),
        };
        Ok(Log { inner: Arc::new(inner) })
    }

    /// What opening found.
    pub fn recovery(&self) -> &Recovery {
        &self.inner.recovery
    }

    /// The handle under the log.
    pub fn handle(&self) -> &Handle {
        &self.inner.h
    }

    /// The largest payload one record takes, in bytes.
    pub fn max_payload(&self) -> usize {
        self.inner.max_payload
    }

    /// The sequence number the next append gets.
    pub fn next_seq(&self) -> u64 {
        self.state().next_seq
    }

    /// Appends a record and waits: a zone append to the head zone, whose sequence
    /// number and place it returns. The record is durable once a [`Log::flush`]
    /// that began after this returned has returned.
    pub fn append(&self, payload: &[u8]) -> Result<Location, LogError> {
        let len = self.frame_len(payload)?;
        let (i, zone, seq) = self.reserve(len)?;
        let at = self.inner.h.append(zone, &frame::encode(seq, zone, payload, self.inner.block));
        Ok(Location { seq, offset: self.appended(i, at)?, len })
    }

    /// [`Log::append`] as a future: the zone append is the handle's asynchronous
    /// one, so that many tasks of one thread append at once (under any executor,
    /// and under [`zblk::sim`]'s). A new head waiting for the device's active zone
    /// limit yields to the executor and tries again; finishing a sealed zone is the
    /// handle's blocking call (rare: once per zone).
    pub async fn append_async(&self, payload: &[u8]) -> Result<Location, LogError> {
        let len = self.frame_len(payload)?;
        let (i, zone, seq) = loop {
            let reserved = self.state().reserve(len, &self.inner.h)?;
            match reserved {
                Some(r) => break r,
                None => YieldNow(false).await,
            }
        };
        let frame = frame::encode(seq, zone, payload, self.inner.block);
        let at = self.inner.h.append_async(zone, frame).await.map(|(at, _)| at);
        Ok(Location { seq, offset: self.appended(i, at)?, len })
    }

    /// The frame's length of a record of `payload`, if the log is open and it fits.
    fn frame_len(&self, payload: &[u8]) -> Result<u64, LogError> {
        self.check_open()?;
        if payload.len() > self.inner.max_payload {
            return Err(LogError::TooLarge { len: payload.len(), max: self.inner.max_payload });
        }
        Ok(frame::frame_len(payload.len() as u64, self.inner.block))
    }

    /// An append to zone `i` ended with `at`.
    fn appended(&self, i: usize, at: Result<u64, zblk::Error>) -> Result<u64, LogError> {
        if self.state().done(i, at.is_err(), &self.inner.h) {
            self.inner.sealed_done.notify_all();
        }
        Ok(at?)
    }

    /// Makes every record appended before it durable (a FLUSH: the data and the
    /// zones' write pointers).
    pub fn flush(&self) -> Result<(), LogError> {
        self.check_open()?;
        if crate::planted::on(crate::planted::Bug::FlushNotIssued) {
            return Ok(());
        }
        Ok(self.inner.h.flush()?)
    }

    /// [`Log::flush`] as a future.
    pub async fn flush_async(&self) -> Result<(), LogError> {
        self.check_open()?;
        if crate::planted::on(crate::planted::Bug::FlushNotIssued) {
            return Ok(());
        }
        let flush = self.inner.h.flush_async();
        if crate::planted::on(crate::planted::Bug::FlushNotAwaited) {
            // Planted: the FLUSH goes on in the device; nobody waits for it.
            drop(flush);
            return Ok(());
        }
        Ok(flush.await?)
    }

    /// Reads the record at `at` back, checking its frame.
    pub fn read(&self, at: &Location) -> Result<Vec<u8>, LogError> {
        self.check_open()?;
        let bad = |why| LogError::NotARecord { offset: at.offset, why };
        let h = &self.inner.h;
        let zone_size = h.zone_size();
        let zone = at.offset - at.offset % zone_size;
        if at.len == 0 || at.len > zone_size || at.offset % zone_size + at.len > zone_size {
            return Err(bad("the location is not within one zone"));
        }
        // No frame is longer than the largest record's: a location's length is not
        // trusted with an allocation past it.
        if at.len > frame::frame_len(self.inner.max_payload as u64, self.inner.block) {
            return Err(bad("the location is longer than any record's frame"));
        }
        let mut buf = vec![0u8; at.len as usize];
        h.read_at(at.offset, &mut buf)?;
        let hd = frame::header(&buf, zone).ok_or(bad("no frame of this zone starts there"))?;
        if hd.seq != at.seq || frame::frame_len(hd.len, self.inner.block) != at.len {
            return Err(bad("the frame there is another record's"));
        }
        frame::payload(&buf, &hd).map(<[u8]>::to_vec).ok_or(bad("the frame's checksum does not match"))
    }

    /// Every record in the log's zones now, in sequence order: each zone scanned from
    /// its start to its write pointer, as the recovery does. Appends in flight may
    /// be missing.
    pub fn records(&self) -> Result<Vec<Record>, LogError> {
        self.check_open()?;
        let report = self.inner.h.report()?;
        let mut out = Vec::new();
        for z in log_zones(&report, &self.inner.range) {
            if z.cond != ZoneCond::Offline && z.wp > z.start {
                scan::scan_zone(&self.inner.h, &z, &mut |r| out.push(r))?;
            }
        }
        out.sort_by_key(|r| r.seq);
        Ok(out)
    }

    /// Reclaims zones: resets every sealed zone whose records all precede `seq`
    /// (but the one holding the newest record, whose sequence number the next open
    /// continues from). Records before `seq` in a zone that also holds later ones
    /// stay. Returns how many zones were reset.
    ///
    /// ```
    /// use zblk_log::{Log, LogError, LogOptions};
    ///
    /// // 8 zones of 1 MiB: 9 records of 100 KiB fill one.
    /// let log = Log::open(zblk::Handle::open("sim:nullb:zone_size=1,size=8")?, LogOptions::new())?;
    /// let mut last = log.append(&[1; 100 << 10])?;
    /// while let Ok(at) = log.append(&[1; 100 << 10]) {
    ///     last = at;
    /// }
    /// assert!(matches!(log.append(&[1; 100 << 10]), Err(LogError::Full { zones: 8 })));
    /// // Every zone but the newest record's: its number goes on after a reopen.
    /// assert_eq!(log.trim_to(last.seq + 1)?, 7);
    /// log.append(&[2; 100 << 10])?;
    /// # Ok::<(), LogError>(())
    /// ```
    pub fn trim_to(&self, seq: u64) -> Result<usize, LogError> {
        self.check_open()?;
        let picked: Vec<(usize, u64, Option<u64>)> = {
            let mut st = self.state();
            let newest = st.next_seq.checked_sub(1);
            let mut picked = Vec::new();
            for (i, z) in st.zones.iter_mut().enumerate() {
                let old = z.max_seq.is_some_and(|m| m < seq && Some(m) != newest);
                if z.sealed && !z.dead && z.inflight == 0 && old {
                    // No longer a candidate for another trim; still sealed, so no
                    // append goes to it while it is reset.
                    picked.push((i, z.start, z.max_seq.take()));
                }
            }
            picked
        };
        let mut reset = 0;
        let mut failed = None;
        for (i, start, max_seq) in picked {
            let r = self.inner.h.reset_zone(start);
            let mut st = self.state();
            let z = &mut st.zones[i];
            match r {
                Ok(()) => {
                    (z.used, z.sealed) = (0, false);
                    reset += 1;
                }
                Err(e) => {
                    z.max_seq = max_seq;
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(reset), |e| Err(e.into()))
    }

    /// Flushes, then closes the handle (every clone of it): the log's calls after it
    /// fail with [`LogError::Closed`]. Closing again does nothing.
    pub fn close(&self) -> Result<(), LogError> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let flushed = self.inner.h.flush();
        let closed = self.inner.h.close();
        flushed?;
        Ok(closed?)
    }

    fn check_open(&self) -> Result<(), LogError> {
        if self.inner.closed.load(Ordering::Acquire) { Err(LogError::Closed) } else { Ok(()) }
    }

    /// Room for a frame of `len` bytes ([`State::reserve`]), waiting while a new head
    /// would pass the device's active zone limit.
    fn reserve(&self, len: u64) -> Result<(usize, u64, u64), LogError> {
        let mut st = self.state();
        loop {
            if let Some(r) = st.reserve(len, &self.inner.h)? {
                return Ok(r);
            }
            st = self.inner.sealed_done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    /// Room for a frame of `len` bytes in the head zone (a new head when it is
    /// full): the zone's index and start, and the record's sequence number. `None`
    /// when a new head must wait: the sealed zones whose appends are still in flight
    /// are active (open, not yet finished), and one more would pass the device's
    /// active zone limit (EOVERFLOW), however many threads raced past the last head.
    fn reserve(&mut self, len: u64, h: &Handle) -> Result<Option<(usize, u64, u64)>, LogError> {
        let i = match self.head {
            Some(i) if self.zones[i].used + len <= self.zones[i].capacity => i,
            _ => {
                if let Some(old) = self.head.take() {
                    self.zones[old].sealed = true;
                    self.finish_if_done(old, h);
                }
                let unfinished = || self.zones.iter().filter(|z| z.sealed && !z.dead && z.inflight > 0).count();
                if self.max_active > 0 && unfinished() >= self.max_active as usize {
                    return Ok(None);
                }
                let n = self.zones.len();
                let i = (0..n)
                    .map(|k| (self.cursor + k) % n)
                    .find(|&i| self.zones[i].is_free())
                    .ok_or(LogError::Full { zones: n })?;
                self.cursor = (i + 1) % n;
                self.head = Some(i);
                i
            }
        };
        let seq = self.next_seq;
        self.next_seq = seq.saturating_add(1);
        let z = &mut self.zones[i];
        z.used += len;
        z.inflight += 1;
        z.max_seq = Some(seq);
        Ok(Some((i, z.start, seq)))
    }

    /// An append to zone `i` completed, or `failed`. A failed append leaves its zone
    /// behind (sealed): whatever failed it (the zone gone read-only or offline,
    /// full by another writer's hand, a media error) the next append goes to a zone
    /// the log knows to be empty.
    /// Returns whether the zone was sealed and is done (an append may be waiting
    /// for it).
    fn done(&mut self, i: usize, failed: bool, h: &Handle) -> bool {
        self.zones[i].inflight -= 1;
        if failed {
            self.zones[i].sealed = true;
            if self.head == Some(i) {
                self.head = None;
            }
        }
        self.finish_if_done(i, h);
        self.zones[i].sealed && self.zones[i].inflight == 0
    }

    /// Finishes sealed zone `i` once its appends have completed, if room is left in
    /// it: an open zone with room counts against the device's open and active zone
    /// limits (a ZNS drive's, null_blk's) until it is finished. Done under the
    /// state's lock, so that a trim never resets a zone a finish then makes FULL; a
    /// finish that fails only leaves the zone active (the device's limits then say
    /// so on later appends), so its error is not the append's.
    fn finish_if_done(&mut self, i: usize, h: &Handle) {
        let z = &mut self.zones[i];
        if z.sealed && !z.dead && z.inflight == 0 && z.used < z.capacity {
            let _ = h.finish_zone(z.start);
            z.used = z.capacity;
        }
    }
}

/// Ready at its second poll: gives the executor's other tasks a turn.
struct YieldNow(bool);

impl std::future::Future for YieldNow {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// The sequential zones among zones `range` of `report`.
fn log_zones(report: &[Zone], range: &Range<usize>) -> Vec<Zone> {
    let end = range.end.min(report.len());
    report.get(range.start.min(end)..end).unwrap_or(&[]).iter().filter(|z| z.is_sequential()).copied().collect()
}

/// The largest payload: a frame within one zone append (the smallest zone's
/// capacity, the device's append limit, the handle's largest request).
fn max_payload(h: &Handle, zones: &[Zone]) -> usize {
    let block = h.block_size();
    let append = u64::from(h.geometry().append_limit_sectors()) * 512;
    let smallest = zones.iter().map(|z| z.capacity).min().unwrap_or(0);
    let frame = smallest.min(append).min(h.max_io_bytes()) / block * block;
    // The header's length field is 32 bits.
    let payload = frame.saturating_sub(frame::HEADER).min(u64::from(u32::MAX));
    usize::try_from(payload).unwrap_or(usize::MAX)
}

/// A zone's state after the scan that recovers it: an empty zone is free; a zone
/// with data is sealed and finished (best effort, as in [`State::finish_if_done`]:
/// a read-only handle cannot), a read-only or offline one is never used again.
fn recover_zone(h: &Handle, z: &Zone, visit: &mut dyn FnMut(Record)) -> Result<(LogZone, ZoneScan), LogError> {
    let dead = matches!(z.cond, ZoneCond::ReadOnly | ZoneCond::Offline);
    let mut lz = LogZone {
        start: z.start,
        capacity: z.capacity,
        used: z.wp.saturating_sub(z.start),
        inflight: 0,
        sealed: dead,
        dead,
        max_seq: None,
    };
    if z.cond == ZoneCond::Offline || z.wp <= z.start {
        return Ok((lz, ZoneScan::default()));
    }
    let found = scan::scan_zone(h, z, visit)?;
    lz.max_seq = found.max_seq;
    lz.sealed = true;
    if !dead && z.cond != ZoneCond::Full {
        let _ = h.finish_zone(z.start);
        lz.used = z.capacity;
    }
    Ok((lz, found))
}
