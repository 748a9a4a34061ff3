//! fio's zone locks and open zones (`zbd.c`'s `zone_lock`, `zbd_open_zone`,
//! `zbd_convert_to_open_zone`, `zbd_end_zone_io`): which job holds a zone, when it
//! lets it go, who takes it next (the jobs' turns), and where a write goes when its
//! zone is taken or full.

use super::*;

/// Linux's default zone write plug pool size (`BLK_ZONE_WPLUG_DEFAULT_POOL_SIZE`).
const LINUX_WPLUG_POOL: u32 = 128;

/// The `max_open_zones` Linux reports for `geo` (fio reads it from sysfs): the device's
/// limit, 0 when that covers every sequential zone; with neither an open nor an active
/// limit, 128 (the zone write plug pool) when the device has more sequential zones.
pub fn linux_max_open(geo: &Geometry) -> u32 {
    let seq = geo.nr_zones() - geo.nr_conv();
    match geo.max_open() {
        0 if geo.max_active() == 0 && seq > LINUX_WPLUG_POOL => LINUX_WPLUG_POOL,
        m if m >= seq => 0,
        m => m,
    }
}

/// fio's idea of a zone's write pointer from its descriptor: the zone capacity when
/// it has none (FULL, READONLY, OFFLINE), as fio treats such zones as full.
pub(super) fn fio_wp(info: &ZoneInfo) -> u64 {
    info.wp_offset().unwrap_or(info.capacity).min(info.capacity)
}

impl FioGen {
    /// Takes zone `z`'s lock for job `j`, or makes the job wait for it as fio does:
    /// quiesce its own I/O first, then block. Returns whether `j` holds the lock.
    pub(super) fn acquire(&mut self, j: usize, z: ZoneNo) -> bool {
        let zbd = self.zbd.as_mut().expect("zbd");
        let lock = &mut zbd.locks[z.idx()];
        match lock.owner {
            None => {
                lock.owner = Some(j);
                true
            }
            Some(o) if o == j => true,
            Some(_) => {
                let job = &mut self.jobs[j];
                if job.inflight > 0 {
                    job.state = JobState::Quiescing(z, Then::Lock);
                } else {
                    job.state = JobState::Blocked(z);
                    lock.waiters.push_back(j);
                }
                false
            }
        }
    }

    /// Releases zone `z`'s lock if its owner holds it for nothing any more, and wakes
    /// the first job waiting for it, which tries to take it at its turn
    /// ([`FioGen::take_turns`]): fio's zone locks are glibc mutexes, free once
    /// unlocked, not handed to a waiter.
    pub(super) fn maybe_release(&mut self, z: ZoneNo) {
        let zbd = self.zbd.as_mut().expect("zbd");
        let lock = &mut zbd.locks[z.idx()];
        if lock.count > 0 || lock.pinned || lock.reporting {
            return;
        }
        lock.owner = None;
        if let Some(w) = lock.waiters.pop_front() {
            self.woken.push((w, z));
        }
    }

    /// Jobs that can run now take turns, one submission a turn, as fio's job threads
    /// share the host's CPUs: the job whose event it is first, then each job woken
    /// by a lock it waited for, in the order of their waking. A woken job tries the
    /// lock again at its turn: a job that ran before it may have taken it (a glibc
    /// mutex is not handed over: unlocking wakes one waiter, and a thread already
    /// running takes the lock if it gets there first), and then it waits again,
    /// behind the other waiters.
    pub(super) fn take_turns(&mut self, first: impl IntoIterator<Item = usize>, now_ns: u64) {
        if self.host.timed() {
            return self.book_turns(first, now_ns);
        }
        // The queue is kept between calls: no allocation per completion.
        let mut run = std::mem::take(&mut self.turns);
        run.extend(first.into_iter().map(|j| (j, None)));
        loop {
            run.extend(self.woken.drain(..).map(|(w, z)| (w, Some(z))));
            let Some((j, retry)) = run.pop_front() else { break };
            if self.turn(j, retry, now_ns) {
                run.push_back((j, None));
            }
        }
        self.turns = run;
    }

    /// Job `j`'s turn at `now_ns`: a job woken by zone `retry`'s lock tries it first
    /// (and waits again, behind the other waiters, if a job that ran before it took
    /// it); then one submission. Returns whether the job has more to submit.
    pub(super) fn turn(&mut self, j: usize, retry: Option<ZoneNo>, now_ns: u64) -> bool {
        if let Some(z) = retry {
            if self.jobs[j].state != JobState::Blocked(z) {
                return false;
            }
            let lock = &mut self.zbd.as_mut().expect("zbd").locks[z.idx()];
            if lock.owner.is_some() {
                lock.waiters.push_back(j);
                return false;
            }
            if self.jobs[j].stopped {
                // Out of time while it waited: it leaves the lock to the next
                // waiter, and its turn is for its final flush, if any.
                self.jobs[j].state = JobState::Running;
                self.maybe_release(z);
            } else {
                lock.owner = Some(j);
                lock.pinned = true;
                self.jobs[j].state = JobState::Granted(z);
            }
        }
        self.turn_left = Some(1);
        self.fill(j, now_ns);
        let more = self.turn_left == Some(0);
        self.turn_left = None;
        more
    }

    pub(super) fn unpin(&mut self, z: ZoneNo) {
        self.zbd.as_mut().expect("zbd").locks[z.idx()].pinned = false;
        self.maybe_release(z);
    }

    /// An I/O of job `j` to zone `z` (zbd mode): lock the zone, reset it if full
    /// (after quiescing), else issue at its write pointer. Returns whether the job
    /// can go on submitting.
    pub(super) fn zone_io(&mut self, j: usize, z: ZoneNo) -> bool {
        self.zone_io_from(j, z, true)
    }

    /// [`FioGen::zone_io`]; `redirect`: whether a zone full of the job's own writes in
    /// flight may send the write to another open zone (not again once it did).
    pub(super) fn zone_io_from(&mut self, j: usize, z: ZoneNo, redirect: bool) -> bool {
        if !self.acquire(j, z) {
            return false;
        }
        let write = self.spec(j).rw.is_write();
        let bs = (self.spec(j).bs_bytes >> SECTOR_SHIFT) as u32;
        let lbs = self.geo.lbs_sectors();
        let cap = self.geo.zone_capacity(z);
        let wp = self.zbd.as_ref().expect("zbd").wp[z.idx()];
        if write && redirect && wp + u64::from(lbs) > cap {
            if let Some(c) = self.open_zone_instead(j, z) {
                return self.zone_io_from(j, c, false);
            }
        }
        if write && wp + u64::from(lbs) > cap {
            // A full zone: fio waits for its own writes, then resets it synchronously.
            self.zbd.as_mut().expect("zbd").locks[z.idx()].pinned = true;
            if self.jobs[j].inflight > 0 {
                self.jobs[j].state = JobState::Quiescing(z, Then::Reset);
            } else {
                self.submit_reset(j, z);
            }
            return false;
        }
        let granted = self.jobs[j].state == JobState::Granted(z);
        self.jobs[j].state = JobState::Running;
        let start = self.geo.zone_start(z);
        let (op, at, len) = if write {
            let len = (u64::from(bs).min(cap - wp) as u32) / lbs * lbs;
            if !self.spec(j).rw.is_random() {
                self.jobs[j].next_seq = start.0 + wp + u64::from(len);
            }
            (Op::Write, start + wp, len)
        } else {
            match self.read_offset(j, z, bs, wp) {
                Some((at, len)) => (Op::Read, at, len),
                None => {
                    // Nothing to read there (it was just reset): try elsewhere.
                    if granted {
                        self.unpin(z);
                    }
                    self.maybe_release(z);
                    return true;
                }
            }
        };
        let zbd = self.zbd.as_mut().expect("zbd");
        zbd.locks[z.idx()].count += 1;
        if granted {
            zbd.locks[z.idx()].pinned = false;
        }
        self.submit_io(j, op, at, len);
        true
    }

    /// With an open zone limit, fio's `zbd_open_zone()` handles an open zone that the
    /// writes in flight will fill as full ("If the zone is going to be completely filled
    /// by writes already in-flight, handle it as a full zone instead of an open zone"),
    /// and `zbd_convert_to_open_zone()` takes the open zone at index
    /// `(offset - file_offset) * num_open_zones / io_size` of the open zone list
    /// (`pick_random_zone_idx()`, `offset` the job's random offset in zone `z`). Such
    /// a zone is open only while its filling write is out, so only the job holding
    /// it (with I/O to it in flight) gets here. Returns that zone if it is not `z`;
    /// `None` (the zone waits for its writes, then is reset, as without a limit) when
    /// it is `z` itself or there is no limit.
    pub(super) fn open_zone_instead(&mut self, j: usize, z: ZoneNo) -> Option<ZoneNo> {
        if self.max_open(j) == 0 || !self.spec(j).rw.is_random() {
            return None;
        }
        let (first, last) = self.zone_range(j);
        let zbd = self.zbd.as_ref().expect("zbd");
        if zbd.locks[z.idx()].count == 0 || !zbd.open.contains(&z.0) || z.0 < first {
            return None;
        }
        // The random offset's place in the job's range, in 1/2^32 of a zone.
        let frac = u128::from(self.jobs[j].rng.random_range(0..1u64 << 32));
        let at = (u128::from(z.0 - first) << 32) + frac;
        let span = u128::from(last - first + 1) << 32;
        let n = zbd.open.len();
        let idx = ((at * n as u128 / span) as usize).min(n - 1);
        let c = ZoneNo(zbd.open[idx]);
        (c != z).then_some(c)
    }
}
