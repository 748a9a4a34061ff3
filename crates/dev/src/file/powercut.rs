//! A power-loss model for testing crash safety: media that remember what an
//! `fdatasync` made durable, and can produce the file as a power cut at this instant
//! could leave it.
//!
//! The model: what the last `sync_data` covered survives; each write, hole punch or
//! zeroing since may be lost, kept, or (a write or a zeroing) torn, keeping an
//! arbitrary subset of its 512-byte sectors, independently of the others and in any
//! order. A zeroing is modelled as a write of zeroes whatever its method: a fallocate
//! that changed extents is no more durable before `fdatasync` than written data. This is what a
//! file system with a volatile write cache below it may leave.
//!
//! The live table (a shared mapping, which only the `fdatasync` of a commit is sure
//! to write back) is tracked by its versions: the kernel may write a dirty page back
//! at any moment, so after a cut each 512-byte sector of it may hold what it held at
//! the last sync or at any moment since. The model takes its content at every
//! operation on the media as one such moment. So a cut between the parts of a
//! commit leaves every mix the disk may keep: the live header's announcement of the
//! commit without its table, the table without the announcement, the table without
//! the superblocks' or the live table's witness of it, and so on.
//! [`PowerCut::outcomes`] lists them all, [`PowerCut::cut`] draws one.
//!
//! Only tests use it: it is built with the crate's `testing` feature, which its
//! users enable for their tests alone, so that a normal build does not carry `rand`.

use super::media::Media;
use super::zeroing::FileZeroing;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::io;
use std::sync::{Arc, Mutex};
use zblk_core::units::SECTOR_SIZE;

#[derive(Debug)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    Punch { offset: u64, len: u64 },
    Zero { offset: u64, len: u64 },
}

/// A region written through a shared mapping, and the contents it had since the
/// last sync (each may have been written back).
#[derive(Debug)]
struct Mapped {
    offset: u64,
    len: u64,
    /// Contents seen since the last sync, oldest first, each unlike the one before.
    versions: Vec<Vec<u8>>,
}

#[derive(Debug)]
struct State {
    durable: Vec<u8>,
    pending: Vec<Pending>,
    syncs: u64,
    /// Operations on the media so far (reads aside).
    ops: u64,
    /// The power goes once `ops` reaches it.
    off_at: Option<u64>,
    /// The power is off: every further operation fails without touching the file.
    off: bool,
    mapped: Vec<Mapped>,
}

/// Media that pass everything to `inner` and keep the model of what is durable.
/// Clone it to keep a handle after handing it to the device.
#[derive(Debug, Clone)]
pub struct PowerCut {
    inner: Arc<dyn Media>,
    state: Arc<Mutex<State>>,
}

/// One way the disk may have kept what was not yet durable at the cut: a file as
/// [`PowerCut::outcomes`] lists it.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What was kept, in words (for a failure message).
    pub what: String,
    /// The file.
    pub bytes: Vec<u8>,
}

/// What may differ between two outcomes: an operation kept or lost, or the version
/// a sector of a mapped region holds.
#[derive(Debug)]
enum Part {
    Op(usize),
    Sector { region: usize, at: u64, versions: Vec<usize> },
}

impl PowerCut {
    /// Wraps `inner`, whose current content (`len` bytes, read now) is taken as durable.
    pub fn new(inner: Arc<dyn Media>, len: u64) -> io::Result<PowerCut> {
        let mut durable = vec![0u8; len as usize];
        inner.read_at(&mut durable, 0)?;
        Ok(PowerCut {
            inner,
            state: Arc::new(Mutex::new(State {
                durable,
                pending: Vec::new(),
                syncs: 0,
                ops: 0,
                off_at: None,
                off: false,
                mapped: Vec::new(),
            })),
        })
    }

    /// The model's state. Poisoning propagates: a thread that panicked half way
    /// through recording a write or a sync leaves the model's durable bytes out of
    /// step with what the media was told, and a crash test would judge the image
    /// against that.
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|_| panic!("the power-loss model's lock is poisoned: a thread panicked under it"))
    }

    /// Declares `[offset, offset + len)` written through a shared mapping (the live
    /// table): `fdatasync` writes such pages back too, so each sync takes the region's
    /// current content from the file as durable; between syncs, each content the
    /// region is seen to hold may have been written back.
    pub fn track_mapped(&self, offset: u64, len: u64) {
        self.lock().mapped.push(Mapped { offset, len, versions: Vec::new() });
    }

    /// Cuts the power: every later operation fails with EIO and reaches nothing.
    /// Operations already under way finish and count as done (or not) as the model
    /// allows.
    pub fn power_off(&self) {
        self.lock().off = true;
    }

    /// Cuts the power once `n` more operations (writes, syncs, hole punches,
    /// zeroings; reads aside) have started: the `n`-th and every later one fail with
    /// EIO and reach nothing. A cut between two chosen parts of a commit.
    pub fn power_off_after(&self, n: u64) {
        let mut st = self.lock();
        st.off_at = Some(st.ops + n);
    }

    /// Operations started so far (writes, syncs, hole punches, zeroings).
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Whether the power is off.
    pub fn is_off(&self) -> bool {
        self.lock().off
    }

    /// Counts an operation about to start: fails with EIO when the power is off (or
    /// goes now); otherwise takes the mapped regions' content as a version that may
    /// be written back.
    fn start_op(&self) -> io::Result<()> {
        let mut st = self.lock();
        if !st.off && st.off_at.is_some_and(|at| st.ops >= at) {
            st.off = true;
        }
        if st.off {
            return Err(io::Error::from_raw_os_error(5));
        }
        st.ops += 1;
        for m in &mut st.mapped {
            let mut now = vec![0u8; m.len as usize];
            self.inner.read_at(&mut now, m.offset)?;
            if m.versions.last() != Some(&now) {
                m.versions.push(now);
            }
        }
        Ok(())
    }

    fn check_on(&self) -> io::Result<()> {
        if self.lock().off { Err(io::Error::from_raw_os_error(5)) } else { Ok(()) }
    }

    /// Number of `sync_data` calls so far.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    /// The file as a power cut now could leave it, drawn from `seed`.
    pub fn cut(&self, seed: u64) -> Vec<u8> {
        let st = self.lock();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut img = st.durable.clone();
        for op in &st.pending {
            match (op, rng.random_range(0..3u32)) {
                (_, 0) => {}
                (Pending::Write { offset, data }, 1) => apply_write(&mut img, *offset, data),
                (Pending::Write { offset, data }, _) => {
                    for (i, sector) in data.chunks(SECTOR_SIZE as usize).enumerate() {
                        if rng.random_bool(0.5) {
                            apply_write(&mut img, offset + i as u64 * SECTOR_SIZE, sector);
                        }
                    }
                }
                (Pending::Zero { offset, len }, 2) => {
                    for s in (0..*len).step_by(SECTOR_SIZE as usize) {
                        if rng.random_bool(0.5) {
                            apply_punch(&mut img, offset + s, SECTOR_SIZE.min(len - s));
                        }
                    }
                }
                (op, _) => apply(&mut img, op),
            }
        }
        // Each sector of a mapped region: as the last sync left it (a third of the
        // time), or any version seen since.
        for m in &st.mapped {
            for at in (0..m.len).step_by(SECTOR_SIZE as usize) {
                if m.versions.is_empty() || rng.random_range(0..3u32) == 0 {
                    continue;
                }
                let v = &m.versions[rng.random_range(0..m.versions.len())];
                let (a, n) = (at as usize, SECTOR_SIZE.min(m.len - at) as usize);
                apply_write(&mut img, m.offset + at, &v[a..a + n]);
            }
        }
        img
    }

    /// Every file a power cut now could leave, up to `limit` of them: each operation
    /// since the last sync kept whole or lost (in any order, so any subset), and each
    /// sector of a mapped region as the last sync left it or as any version seen
    /// since. Torn operations are left to [`PowerCut::cut`]. When there are more
    /// than `limit`, the first `limit` in the order of the parts (the later parts
    /// varying first) are listed; the count of all is returned beside them.
    pub fn outcomes(&self, limit: usize) -> (Vec<Outcome>, u128) {
        let st = self.lock();
        let parts = st.parts();
        let choices: Vec<usize> = parts
            .iter()
            .map(|p| match p {
                Part::Op(_) => 2,
                Part::Sector { versions, .. } => 1 + versions.len(),
            })
            .collect();
        let total = choices.iter().fold(1u128, |n, &c| n.saturating_mul(c as u128));
        let mut out = Vec::new();
        let mut pick = vec![0usize; parts.len()];
        loop {
            out.push(st.outcome(&parts, &pick));
            if out.len() >= limit || !next_pick(&mut pick, &choices) {
                return (out, total);
            }
        }
    }
}

impl State {
    /// What may differ between the outcomes of a cut now.
    fn parts(&self) -> Vec<Part> {
        let mut parts: Vec<Part> = (0..self.pending.len()).map(Part::Op).collect();
        for (r, m) in self.mapped.iter().enumerate() {
            for at in (0..m.len).step_by(SECTOR_SIZE as usize) {
                let (a, n) = (at as usize, SECTOR_SIZE.min(m.len - at) as usize);
                let synced = &self.durable[(m.offset + at) as usize..][..n];
                // The distinct versions of the sector, other than the synced one.
                let mut seen: Vec<&[u8]> = vec![synced];
                let mut versions = Vec::new();
                for (i, v) in m.versions.iter().enumerate() {
                    if !seen.contains(&&v[a..a + n]) {
                        seen.push(&v[a..a + n]);
                        versions.push(i);
                    }
                }
                if !versions.is_empty() {
                    parts.push(Part::Sector { region: r, at, versions });
                }
            }
        }
        parts
    }

    /// The outcome where part `i` takes choice `pick[i]` (0: lost or as synced).
    fn outcome(&self, parts: &[Part], pick: &[usize]) -> Outcome {
        let mut bytes = self.durable.clone();
        let mut what = Vec::new();
        for (p, &c) in parts.iter().zip(pick) {
            match p {
                Part::Op(i) => {
                    if c == 1 {
                        apply(&mut bytes, &self.pending[*i]);
                    }
                    what.push(format!("{} {}", if c == 1 { "kept" } else { "lost" }, self.pending[*i].describe()));
                }
                Part::Sector { region, at, versions } => {
                    let m = &self.mapped[*region];
                    if c > 0 {
                        let (a, n) = (*at as usize, SECTOR_SIZE.min(m.len - at) as usize);
                        apply_write(&mut bytes, m.offset + at, &m.versions[versions[c - 1]][a..a + n]);
                    }
                    let v = if c == 0 { "as synced".to_string() } else { format!("version {}", versions[c - 1]) };
                    what.push(format!("mapped {:#x} {v}", m.offset + at));
                }
            }
        }
        Outcome { what: what.join(", "), bytes }
    }
}

impl Pending {
    fn describe(&self) -> String {
        match self {
            Pending::Write { offset, data } => format!("write {offset:#x}+{:#x}", data.len()),
            Pending::Punch { offset, len } => format!("punch {offset:#x}+{len:#x}"),
            Pending::Zero { offset, len } => format!("zeroing {offset:#x}+{len:#x}"),
        }
    }
}

/// Steps `pick` to the next combination (the last part varying first); false after
/// the last.
fn next_pick(pick: &mut [usize], choices: &[usize]) -> bool {
    for i in (0..pick.len()).rev() {
        pick[i] += 1;
        if pick[i] < choices[i] {
            return true;
        }
        pick[i] = 0;
    }
    false
}

fn apply(img: &mut [u8], op: &Pending) {
    match op {
        Pending::Write { offset, data } => apply_write(img, *offset, data),
        Pending::Punch { offset, len } | Pending::Zero { offset, len } => apply_punch(img, *offset, *len),
    }
}

fn apply_write(img: &mut [u8], offset: u64, data: &[u8]) {
    let o = offset as usize;
    img[o..o + data.len()].copy_from_slice(data);
}

fn apply_punch(img: &mut [u8], offset: u64, len: u64) {
    let o = offset as usize;
    img[o..o + len as usize].fill(0);
}

impl Media for PowerCut {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.check_on()?;
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        // Recorded once done: a sync that starts later covers it; a write still in
        // progress at the cut is lost, one of the outcomes the model allows.
        self.start_op()?;
        self.inner.write_at(buf, offset)?;
        self.lock().pending.push(Pending::Write { offset, data: buf.to_vec() });
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        // What completed before the sync starts is durable when it returns.
        self.start_op()?;
        let covered = self.lock().pending.len();
        self.inner.sync_data()?;
        let mut st = self.lock();
        if st.off {
            // The power went while syncing: nothing is known to be durable.
            return Err(io::Error::from_raw_os_error(5));
        }
        let done: Vec<Pending> = st.pending.drain(..covered).collect();
        for op in &done {
            apply(&mut st.durable, op);
        }
        let regions: Vec<(u64, u64)> = st.mapped.iter().map(|m| (m.offset, m.len)).collect();
        for (offset, len) in regions {
            let (o, n) = (offset as usize, len as usize);
            self.inner.read_at(&mut st.durable[o..o + n], offset)?;
        }
        for m in &mut st.mapped {
            m.versions.clear();
        }
        st.syncs += 1;
        Ok(())
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.start_op()?;
        self.inner.punch_hole(offset, len)?;
        self.lock().pending.push(Pending::Punch { offset, len });
        Ok(())
    }

    fn zero_range(&self, how: FileZeroing, offset: u64, len: u64) -> io::Result<()> {
        self.start_op()?;
        self.inner.zero_range(how, offset, len)?;
        self.lock().pending.push(Pending::Zero { offset, len });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file in memory.
    #[derive(Debug)]
    struct Mem(Mutex<Vec<u8>>);

    impl Media for Mem {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            let m = self.0.lock().unwrap();
            buf.copy_from_slice(&m[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            apply_write(&mut self.0.lock().unwrap(), offset, buf);
            Ok(())
        }
        fn sync_data(&self) -> io::Result<()> {
            Ok(())
        }
        fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
            apply_punch(&mut self.0.lock().unwrap(), offset, len);
            Ok(())
        }
        fn zero_range(&self, _how: FileZeroing, offset: u64, len: u64) -> io::Result<()> {
            self.punch_hole(offset, len)
        }
    }

    const MAPPED: u64 = 1024;

    /// A commit's shape: a store into the mapped region (sector 0 of it, at 1024),
    /// then a write elsewhere (at 0), the power cut before the sync.
    fn announced_then_written() -> (Arc<Mem>, PowerCut) {
        let mem = Arc::new(Mem(Mutex::new(vec![0u8; 2048])));
        let pc = PowerCut::new(mem.clone(), 2048).unwrap();
        pc.track_mapped(MAPPED, 1024);
        mem.write_at(&[1u8; 8], MAPPED).unwrap();
        pc.write_at(&[2u8; 512], 0).unwrap();
        pc.power_off_after(0);
        assert!(pc.sync_data().is_err());
        assert!(pc.is_off());
        (mem, pc)
    }

    #[test]
    fn a_cut_leaves_the_announcement_and_the_write_in_every_mix() {
        let (_, pc) = announced_then_written();
        let (outcomes, total) = pc.outcomes(100);
        assert_eq!(total, 4, "the write kept or lost, the mapped sector as synced or as stored");
        let mixes: Vec<(u8, u8)> = outcomes.iter().map(|o| (o.bytes[0], o.bytes[MAPPED as usize])).collect();
        for mix in [(0, 0), (0, 1), (2, 0), (2, 1)] {
            assert!(mixes.contains(&mix), "{mix:?} missing from {mixes:?}");
        }
        // The random cut draws each of them too.
        let drawn: std::collections::HashSet<(u8, u8)> =
            (0..64).map(|seed| pc.cut(seed)).map(|b| (b[0], b[MAPPED as usize])).collect();
        assert_eq!(drawn.len(), 4, "{drawn:?}");
    }

    #[test]
    fn a_sync_makes_the_mapped_region_durable_and_forgets_its_versions() {
        let mem = Arc::new(Mem(Mutex::new(vec![0u8; 2048])));
        let pc = PowerCut::new(mem.clone(), 2048).unwrap();
        pc.track_mapped(MAPPED, 1024);
        mem.write_at(&[1u8; 8], MAPPED).unwrap();
        pc.write_at(&[2u8; 512], 0).unwrap();
        pc.sync_data().unwrap();
        pc.power_off();
        let (outcomes, total) = pc.outcomes(100);
        assert_eq!(total, 1);
        assert_eq!((outcomes[0].bytes[0], outcomes[0].bytes[MAPPED as usize]), (2, 1));
        assert_eq!(pc.write_at(&[3u8; 512], 0).unwrap_err().raw_os_error(), Some(5));
    }

    #[test]
    fn the_outcomes_stop_at_the_limit() {
        let (_, pc) = announced_then_written();
        let (outcomes, total) = pc.outcomes(3);
        assert_eq!((outcomes.len(), total), (3, 4));
    }
}
