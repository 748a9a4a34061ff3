//! The blocking calls of a [`Runtime`]: a BIO on the caller's borrowed buffer, and a
//! wait on a condition variable until it completes (the buffer cannot be touched by
//! a request afterwards, since the call returns only then).

use crate::callback::{Done, Waiter};
use crate::runtime::Runtime;
use crate::shared::RawBuf;
use std::sync::Arc;
use zblk_core::bio::{Bio, BioFlags, Op, Status};
use zblk_core::units::{SECTOR_SHIFT, SECTOR_SIZE, Sector};

impl Runtime {
    /// Submits a BIO on a borrowed buffer and waits for it.
    pub(crate) fn wait_bio(
        &self,
        op: Op,
        sector: Sector,
        flags: BioFlags,
        buf: Option<RawBuf>,
        nr: u32,
    ) -> Result<Sector, Status> {
        let w = Arc::new(Waiter::default());
        let bio = Bio { op, sector, nr_sectors: nr, flags, user_data: 0 };
        // The caller's buffer is borrowed for this call, and the call returns only
        // once the BIO has completed: no request can use it afterwards.
        self.sh().submit_bio(bio, buf, Done::Wake(w.clone()));
        // Recovered: the slot holds one result, assigned whole (`Done::run`).
        let mut g = w.result.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            g = w.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn sectors_of(len: usize) -> Result<u32, Status> {
        let len = len as u64;
        if len == 0 || len % SECTOR_SIZE != 0 {
            return Err(Status::Invalid);
        }
        u32::try_from(len >> SECTOR_SHIFT).map_err(|_| Status::Invalid)
    }

    /// Writes `data` at `sector` and waits.
    pub fn write_at(&self, sector: Sector, data: &[u8]) -> Result<(), Status> {
        self.write_at_flags(sector, data, BioFlags::NONE)
    }

    /// Writes `data` at `sector` with `flags` (FUA: durable when it returns) and waits.
    pub fn write_at_flags(&self, sector: Sector, data: &[u8], flags: BioFlags) -> Result<(), Status> {
        let nr = Runtime::sectors_of(data.len())?;
        // Lent read-only: the write path reads the caller's bytes, never writes them.
        self.wait_bio(Op::Write, sector, flags, Some(RawBuf::reading(data)), nr).map(|_| ())
    }

    /// Appends `data` to the zone starting at `zone_start`, waits, and returns the
    /// sector where the data was written.
    pub fn append(&self, zone_start: Sector, data: &[u8]) -> Result<Sector, Status> {
        self.append_flags(zone_start, data, BioFlags::NONE)
    }

    /// [`Runtime::append`] with flags.
    pub fn append_flags(&self, zone_start: Sector, data: &[u8], flags: BioFlags) -> Result<Sector, Status> {
        let nr = Runtime::sectors_of(data.len())?;
        self.wait_bio(Op::ZoneAppend, zone_start, flags, Some(RawBuf::reading(data)), nr)
    }

    /// Reads `buf.len()` bytes at `sector` and waits.
    pub fn read_at(&self, sector: Sector, buf: &mut [u8]) -> Result<(), Status> {
        let nr = Runtime::sectors_of(buf.len())?;
        self.wait_bio(Op::Read, sector, BioFlags::NONE, Some(RawBuf::filling(buf)), nr).map(|_| ())
    }

    /// A zone management operation (RESET, OPEN, CLOSE, FINISH on the zone starting
    /// at `zone_start`; RESET_ALL) through the engine, and waits.
    pub fn zone_op(&self, op: Op, zone_start: Sector) -> Result<(), Status> {
        if !op.is_zone_mgmt() {
            return Err(Status::Invalid);
        }
        self.wait_bio(op, zone_start, BioFlags::NONE, None, 0).map(|_| ())
    }

    /// Makes every completed write durable, with its write pointer, and waits.
    pub fn flush(&self) -> Result<(), Status> {
        self.wait_bio(Op::Flush, Sector::ZERO, BioFlags::NONE, None, 0).map(|_| ())
    }
}
