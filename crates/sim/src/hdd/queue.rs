//! The command queue: NCQ tags and the backlog behind them, the link shared by all
//! transfers, the stages a command goes through, and the event loop that starts
//! transfers and media operations and hands back completions in time order.

use super::HddModel;
use super::cache::{Extent, Readahead};
use zblk_core::bio::{BioFlags, Op, Request};
use zblk_core::units::SECTOR_SIZE;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// Not started: waiting for cache room (cached write) or its turn.
    Waiting,
    /// Data moving over the link.
    Transferring,
    /// Needs the media: a read miss, or a write-through whose data is in the buffer.
    NeedMedia,
    /// Its media operation is in progress.
    OnMedia,
    /// Waits for the cache to be clean: FLUSH, or a FUA write already cached.
    FlushWait,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Cmd {
    pub(super) req: Request,
    pub(super) stage: Stage,
}

#[derive(Clone, Copy, Debug)]
pub(super) enum MediaOp {
    /// Destaging part of a dirty extent.
    Destage(Extent),
    /// A read or write-through for a command (index into `cmds` by request id).
    ForCmd(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Transfer {
    /// Write data into the cache; completes the command.
    IntoCache,
    /// Write data into the buffer for a write-through; then the media.
    IntoBuffer,
    /// Read data to the host; completes the command.
    ToHost,
}

impl HddModel {
    pub(super) fn cmd_index(&self, id: u64) -> Option<usize> {
        self.cmds.iter().position(|c| c.req.id.raw() == id)
    }

    pub(super) fn complete_at(&mut self, t: f64, req: Request) {
        self.pending.push((t, req));
    }

    pub(super) fn link_transfer(&mut self, bytes: u64, earliest: f64) -> f64 {
        let start = self.link_free_at.max(earliest);
        let end = start + self.p.cmd_overhead_ns + bytes as f64 / self.p.link_rate * 1e9;
        self.link_free_at = end;
        end
    }

    /// Starts whatever can start at `self.now`: link transfers for waiting commands,
    /// and a media operation if the media is idle.
    pub(super) fn schedule(&mut self) {
        loop {
            let before = (self.cmds.len(), self.backlog.len());
            self.admit_backlog();
            self.start_transfers();
            self.check_flushes();
            // A completed reset (non-queued) lets the commands held behind it in.
            if (self.cmds.len(), self.backlog.len()) == before {
                break;
            }
        }
        if self.media_op.is_none() {
            self.start_media();
        }
    }

    pub(super) fn admit_backlog(&mut self) {
        while (self.cmds.len() as u32) < self.p.ncq_depth {
            let Some(&req) = self.backlog.front() else { break };
            if self.p.reset_flushes {
                // Mechanism M1: a reset is a non-queued command. It waits for the
                // queue to drain, and nothing is queued behind it until it is done.
                let reset_out = self.cmds.iter().any(|c| Self::is_reset(&c.req));
                if reset_out || (Self::is_reset(&req) && !self.cmds.is_empty()) {
                    break;
                }
            }
            self.backlog.pop_front();
            self.accept(req);
        }
    }

    pub(super) fn is_reset(req: &Request) -> bool {
        matches!(req.op, Op::ZoneReset | Op::ZoneResetAll)
    }

    pub(super) fn accept(&mut self, req: Request) {
        let stage = if req.op == Op::Flush { Stage::FlushWait } else { Stage::Waiting };
        self.cmds.push(Cmd { req, stage });
    }

    pub(super) fn bytes(req: &Request) -> u64 {
        u64::from(req.nr_sectors) * SECTOR_SIZE
    }

    /// Waiting commands get the link in arrival order; a cached write first needs room
    /// in the dirty budget (and blocks the writes behind it: cache admission is FIFO).
    pub(super) fn start_transfers(&mut self) {
        let mut i = 0;
        let mut writes_blocked = false;
        while i < self.cmds.len() {
            let c = self.cmds[i];
            if c.stage != Stage::Waiting {
                i += 1;
                continue;
            }
            let id = c.req.id.raw();
            let bytes = Self::bytes(&c.req);
            let payload = if c.req.op == Op::WriteZeroes { 0 } else { bytes };
            match c.req.op {
                Op::Write | Op::ZoneAppend | Op::WriteZeroes if self.p.write_cache => {
                    if writes_blocked || !self.cache_room(bytes) {
                        writes_blocked = true;
                        i += 1;
                        continue;
                    }
                    self.reserved_segs += self.segments(bytes);
                    let end = self.link_transfer(payload, self.now);
                    self.cmds[i].stage = Stage::Transferring;
                    self.transfers.push((end, id, Transfer::IntoCache));
                }
                Op::Write | Op::ZoneAppend | Op::WriteZeroes => {
                    let end = self.link_transfer(payload, self.now);
                    self.cmds[i].stage = Stage::Transferring;
                    self.transfers.push((end, id, Transfer::IntoBuffer));
                }
                Op::Read if self.read_hit(&c.req) => {
                    self.stats.read_hits += 1;
                    let end = self.link_transfer(bytes, self.now);
                    self.cmds[i].stage = Stage::Transferring;
                    self.transfers.push((end, id, Transfer::ToHost));
                }
                Op::Read if self.media_op.is_none() && self.streaming_hit(&c.req).is_some() => {
                    // The read-ahead is streaming into this read: the media keeps
                    // going until it has all of it, with no seek and no rotation.
                    let ready = self.streaming_hit(&c.req).expect("checked");
                    self.stats.read_hits += 1;
                    self.cmds[i].stage = Stage::OnMedia;
                    self.media_op = Some(MediaOp::ForCmd(id));
                    self.media_free_at = ready.max(self.now);
                    self.head_byte = c.req.end().bytes();
                    self.head_time = self.media_free_at;
                }
                Op::Read => self.cmds[i].stage = Stage::NeedMedia,
                Op::ZoneReset | Op::ZoneResetAll if self.p.reset_flushes => {
                    // Mechanism M1: the cache is written back first (the drive keeps
                    // the zone's write pointer consistent with its media); the reset
                    // then completes as a flush does, in `check_flushes`.
                    self.stats.resets += 1;
                    self.cmds[i].stage = Stage::FlushWait;
                }
                op => {
                    // Zone operations, discard: command processing only. A reset
                    // erases the zone, so its dirty data is dropped, not written.
                    if matches!(op, Op::ZoneReset | Op::ZoneResetAll) {
                        self.stats.resets += 1;
                        self.drop_dirty_for(&c.req);
                    }
                    let end = self.link_transfer(0, self.now);
                    self.cmds.remove(i);
                    self.complete_at(end, c.req);
                    continue;
                }
            }
            i += 1;
        }
    }

    /// Picks the next media operation: commands that need the media (reads, write
    /// through) by shortest positioning time; else, or when writes wait for cache
    /// room, a destage step.
    pub(super) fn start_media(&mut self) {
        let t = self.now.max(self.media_free_at);
        let writes_blocked = self.p.write_cache
            && self
                .cmds
                .iter()
                .any(|c| c.stage == Stage::Waiting && matches!(c.req.op, Op::Write | Op::ZoneAppend | Op::WriteZeroes));
        let fg = (0..self.cmds.len()).filter(|&i| self.cmds[i].stage == Stage::NeedMedia);
        let best = fg.min_by(|&a, &b| {
            let pa = self.positioning_total(&self.cmds[a].req, t);
            let pb = self.positioning_total(&self.cmds[b].req, t);
            pa.total_cmp(&pb)
        });
        let destage_first = !self.dirty.is_empty() && (best.is_none() || writes_blocked);
        if destage_first {
            self.start_destage(t);
            return;
        }
        let Some(best) = best else { return };
        let req = self.cmds[best].req;
        self.cmds[best].stage = Stage::OnMedia;
        self.media_access(t, req.sector.bytes(), Self::bytes(&req), req.op != Op::Read, MediaOp::ForCmd(req.id.raw()));
    }

    /// The media operation in progress finished at `self.now`.
    pub(super) fn media_done(&mut self) {
        let op = self.media_op.take().expect("media op");
        match op {
            MediaOp::Destage(x) => {
                self.stats.destaged_bytes += x.len;
            }
            MediaOp::ForCmd(id) => {
                let i = self.cmd_index(id).expect("media op for a known command");
                let c = self.cmds[i];
                if c.req.op == Op::Read {
                    let end = c.req.end().bytes();
                    if self.readahead.is_some_and(|ra| ra.stopped_at.is_none() && ra.start <= end) {
                        // Streamed from the read-ahead: it keeps streaming on.
                    } else {
                        self.readahead =
                            Some(Readahead { start: end, t0: self.now, rate: self.rate(end), stopped_at: None });
                    }
                    let end = self.link_transfer(Self::bytes(&c.req), self.now);
                    self.transfers.push((end, id, Transfer::ToHost));
                } else {
                    self.cmds.remove(i);
                    self.complete_at(self.now, c.req);
                }
            }
        }
    }

    pub(super) fn transfer_done(&mut self, id: u64, kind: Transfer) {
        let i = self.cmd_index(id).expect("transfer for a known command");
        match kind {
            Transfer::IntoCache => {
                let req = self.cmds[i].req;
                let bytes = Self::bytes(&req);
                let segs = self.segments(bytes);
                self.reserved_segs -= segs;
                self.insert_dirty(Extent { start: req.sector.bytes(), len: bytes, segs });
                if req.flags.contains(BioFlags::FUA) {
                    // Forced unit access: complete once the data is on the media,
                    // after the zone's earlier data (the cache drains in order).
                    self.cmds[i].stage = Stage::FlushWait;
                } else {
                    self.cmds.remove(i);
                    self.complete_at(self.now, req);
                }
            }
            Transfer::IntoBuffer => {
                // Data in the buffer: the write-through now needs the media.
                self.cmds[i].stage = Stage::NeedMedia;
            }
            Transfer::ToHost => {
                let c = self.cmds.remove(i);
                self.complete_at(self.now, c.req);
            }
        }
    }

    /// Runs internal events up to `until`.
    pub(super) fn run_to(&mut self, until: f64, done: &mut Vec<Request>) {
        loop {
            let next_xfer = self.transfers.iter().map(|t| t.0).fold(f64::INFINITY, f64::min);
            let next_media = if self.media_op.is_some() { self.media_free_at } else { f64::INFINITY };
            let t = next_xfer.min(next_media);
            if t > until {
                break;
            }
            self.now = self.now.max(t);
            if next_media <= next_xfer {
                self.media_done();
            } else {
                let k = self.transfers.iter().position(|x| x.0 == next_xfer).expect("transfer");
                let (_, id, kind) = self.transfers.swap_remove(k);
                self.transfer_done(id, kind);
            }
            self.schedule();
        }
        self.now = self.now.max(until);
        let mut due: Vec<(f64, Request)> = Vec::new();
        self.pending.retain(|&(t, r)| {
            if t <= until {
                due.push((t, r));
                false
            } else {
                true
            }
        });
        due.sort_by(|a, b| a.0.total_cmp(&b.0));
        done.extend(due.into_iter().map(|(_, r)| r));
    }
}
