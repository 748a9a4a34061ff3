//! Zeroing a range as the kernel's `blkdev_issue_zeroout()` does: WRITE_ZEROES BIOs
//! (unmapped where the device can and the caller allows), or ordinary writes of zero
//! buffers on a device without WRITE_ZEROES; and the zeroing queue attributes
//! (`write_zeroes_unmap_max_bytes`).

use crate::runtime::Runtime;
use zblk_core::bio::{BioFlags, Op, Status};
use zblk_core::engine::{AttrError, MAX_ZEROOUT_BIO_SECTORS, ZeroingMethod};
use zblk_core::units::{SECTOR_SIZE, Sector};
use zblk_dev::DeviceZeroing;
use zblk_dev::buf::AlignedBuf;

/// How [`Runtime::write_zeroes`] may zero a range (the kernel's `BLKDEV_ZERO_*`
/// flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZeroingFlags {
    /// Never deallocate: the device must write the zeroes (`BLKDEV_ZERO_NOUNMAP`,
    /// REQ_NOUNMAP on every request).
    pub nounmap: bool,
    /// On a device without WRITE_ZEROES, fail with EOPNOTSUPP instead of writing
    /// buffers of zeroes (`BLKDEV_ZERO_NOFALLBACK`).
    pub no_fallback: bool,
}

/// What [`Runtime::write_zeroes`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ZeroingReport {
    /// How the range was zeroed, as the block layer sees it: `unmap`,
    /// `write-zeroes` (the device wrote zeroes) or `zero-buffers` (no WRITE_ZEROES:
    /// ordinary writes of zeroes).
    pub method: ZeroingMethod,
    /// How the device carried out the WRITE_ZEROES requests; `None` for zero buffers.
    pub device_method: Option<DeviceZeroing>,
    /// Bytes zeroed.
    pub bytes: u64,
}

/// Bytes per write when zeroes are written as ordinary writes.
const ZERO_BUFFER_BYTES: usize = 4 << 20;

impl Runtime {
    /// Makes `nr_sectors` at `sector` read as zeroes and waits, as the kernel's
    /// `blkdev_issue_zeroout()`: WRITE_ZEROES BIOs (the engine splits them at
    /// `write_zeroes_max_bytes` and zone boundaries; on a sequential zone the range
    /// must start at the write pointer and moves it, as a write), unmapped where the
    /// device can and `flags.nounmap` allows; on a device without WRITE_ZEROES,
    /// ordinary writes of zero buffers, unless `flags.no_fallback` (then EOPNOTSUPP).
    /// A range not aligned to the logical block size, empty or past the end fails
    /// with EINVAL.
    pub fn write_zeroes(&self, sector: Sector, nr_sectors: u64, flags: ZeroingFlags) -> Result<ZeroingReport, Status> {
        let bytes = nr_sectors.checked_mul(SECTOR_SIZE).ok_or(Status::Invalid)?;
        if nr_sectors == 0 || sector.0.checked_add(nr_sectors).is_none_or(|end| end > self.geometry().nr_sectors()) {
            return Err(Status::Invalid);
        }
        let method = self.zeroing_method(flags.nounmap);
        if method != ZeroingMethod::ZeroBuffers {
            let bio_flags = if flags.nounmap { BioFlags::NOUNMAP } else { BioFlags::NONE };
            let mut done = 0;
            while done < nr_sectors {
                let n = (nr_sectors - done).min(MAX_ZEROOUT_BIO_SECTORS) as u32;
                match self.wait_bio(Op::WriteZeroes, sector + done, bio_flags, None, n) {
                    Ok(_) => done += u64::from(n),
                    // The device lost WRITE_ZEROES between the check and the
                    // submission (it never does today): fall back for the rest.
                    Err(e) if e == Status::NotSupported && !flags.no_fallback => {
                        return self.write_zero_buffers(sector + done, nr_sectors - done).map(|_| ZeroingReport {
                            method: ZeroingMethod::ZeroBuffers,
                            device_method: None,
                            bytes,
                        });
                    }
                    Err(e) => return Err(e),
                }
            }
            let device_method = self.device().zeroing(method == ZeroingMethod::WriteZeroes);
            return Ok(ZeroingReport { method, device_method, bytes });
        }
        if flags.no_fallback {
            return Err(Status::NotSupported);
        }
        self.write_zero_buffers(sector, nr_sectors)?;
        Ok(ZeroingReport { method, device_method: None, bytes })
    }

    /// Writes zeroes as data, in large buffers, one after the other (on a sequential
    /// zone each must land at the write pointer the previous one left).
    fn write_zero_buffers(&self, sector: Sector, nr_sectors: u64) -> Result<(), Status> {
        let zeroes = AlignedBuf::zeroed(ZERO_BUFFER_BYTES.min((nr_sectors * SECTOR_SIZE) as usize));
        let per = zeroes.len() as u64 / SECTOR_SIZE;
        let mut done = 0;
        while done < nr_sectors {
            let n = (nr_sectors - done).min(per);
            self.write_at(sector + done, &zeroes[..(n * SECTOR_SIZE) as usize])?;
            done += n;
        }
        Ok(())
    }

    /// The queue attribute `write_zeroes_unmap_max_bytes` (see
    /// [`Engine::write_zeroes_unmap_max_bytes`](zblk_core::engine::Engine::write_zeroes_unmap_max_bytes)).
    pub fn write_zeroes_unmap_max_bytes(&self) -> u64 {
        self.sh().lock_core().engine.write_zeroes_unmap_max_bytes()
    }

    /// Writes `write_zeroes_unmap_max_bytes`: 0 disables unmap (the device then
    /// writes zeroes), the hardware value enables it; anything else is refused with
    /// the engine's reason. Applies to WRITE_ZEROES submitted from now on.
    pub fn set_write_zeroes_unmap_max_bytes(&self, bytes: u64) -> Result<(), AttrError> {
        self.sh().lock_core().engine.set_write_zeroes_unmap_max_bytes(bytes)
    }

    /// How [`Runtime::write_zeroes`] would zero now, as the block layer sees it.
    pub fn zeroing_method(&self, nounmap: bool) -> ZeroingMethod {
        self.sh().lock_core().engine.zeroing_method(nounmap)
    }

    /// How the device would carry out [`Runtime::write_zeroes`] now (for an image:
    /// its fallocate method for unmap, `pwrite-zeroes` for write zeroes); `None` for
    /// zero buffers (ordinary writes).
    pub fn device_zeroing(&self, nounmap: bool) -> Option<DeviceZeroing> {
        match self.zeroing_method(nounmap) {
            ZeroingMethod::Unmap => self.device().zeroing(false),
            ZeroingMethod::WriteZeroes => self.device().zeroing(true),
            ZeroingMethod::ZeroBuffers => None,
        }
    }
}
