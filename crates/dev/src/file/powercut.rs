//! A power-loss model for testing crash safety: media that remember what an
//! `fdatasync` made durable, and can produce the file as a power cut at this instant
//! could leave it.
//!
//! The model: what the last `sync_data` covered survives; each write, hole punch or
//! zeroing since may be lost, kept, or (a write or a zeroing) torn, keeping an
//! arbitrary subset of its 512-byte sectors, independently of the others and in any
//! order. A zeroing is modelled as a write of zeroes whatever its method: a fallocate
//! that changed extents is no more durable before `fdatasync` than written data. This is what a
//! file system with a volatile write cache below it may leave; the live table (a
//! shared mapping, never synced) is not tracked at all: after a power loss it cannot
//! be trusted, which the boot id tells the device.
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

#[derive(Debug)]
struct State {
    durable: Vec<u8>,
    pending: Vec<Pending>,
    syncs: u64,
    /// The power is off: every further operation fails without touching the file.
    off: bool,
    /// Regions written through a shared mapping.
    mapped: Vec<(u64, u64)>,
}

/// Media that pass everything to `inner` and keep the model of what is durable.
/// Clone it to keep a handle after handing it to the device.
#[derive(Debug, Clone)]
pub struct PowerCut {
    inner: Arc<dyn Media>,
    state: Arc<Mutex<State>>,
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
                off: false,
                mapped: Vec::new(),
            })),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Declares `[offset, offset + len)` written through a shared mapping (the live
    /// table): `fdatasync` writes such pages back too, so each sync takes the region's
    /// current content from the file as durable.
    pub fn track_mapped(&self, offset: u64, len: u64) {
        self.lock().mapped.push((offset, len));
    }

    /// Cuts the power: every later operation fails with EIO and reaches nothing.
    /// Operations already under way finish and count as done (or not) as the model
    /// allows.
    pub fn power_off(&self) {
        self.lock().off = true;
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
                (Pending::Punch { offset, len }, _) => apply_punch(&mut img, *offset, *len),
                (Pending::Zero { offset, len }, 1) => apply_punch(&mut img, *offset, *len),
                (Pending::Zero { offset, len }, _) => {
                    for s in (0..*len).step_by(SECTOR_SIZE as usize) {
                        if rng.random_bool(0.5) {
                            apply_punch(&mut img, offset + s, SECTOR_SIZE.min(len - s));
                        }
                    }
                }
            }
        }
        img
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
        self.check_on()?;
        self.inner.write_at(buf, offset)?;
        self.lock().pending.push(Pending::Write { offset, data: buf.to_vec() });
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        // What completed before the sync starts is durable when it returns.
        self.check_on()?;
        let covered = self.lock().pending.len();
        self.inner.sync_data()?;
        let mut st = self.lock();
        if st.off {
            // The power went while syncing: nothing is known to be durable.
            return Err(io::Error::from_raw_os_error(5));
        }
        let done: Vec<Pending> = st.pending.drain(..covered).collect();
        for op in &done {
            match op {
                Pending::Write { offset, data } => apply_write(&mut st.durable, *offset, data),
                Pending::Punch { offset, len } | Pending::Zero { offset, len } => {
                    apply_punch(&mut st.durable, *offset, *len)
                }
            }
        }
        for (offset, len) in st.mapped.clone() {
            let (o, n) = (offset as usize, len as usize);
            self.inner.read_at(&mut st.durable[o..o + n], offset)?;
        }
        st.syncs += 1;
        Ok(())
    }

    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<()> {
        self.check_on()?;
        self.inner.punch_hole(offset, len)?;
        self.lock().pending.push(Pending::Punch { offset, len });
        Ok(())
    }

    fn zero_range(&self, how: FileZeroing, offset: u64, len: u64) -> io::Result<()> {
        self.check_on()?;
        self.inner.zero_range(how, offset, len)?;
        self.lock().pending.push(Pending::Zero { offset, len });
        Ok(())
    }
}
