//! fio job descriptions: `rw`, `bs`, `iodepth`, `numjobs`, `offset`, `size`,
//! `io_size`, `runtime`, `zonemode`, `max_open_zones`, `fua`, `end_fsync`, with fio's
//! meaning, checked against the device they will run on; and the result of a job as
//! fio reports it.

use crate::stats::DirSummary;
use zblk_core::bio::Status;
use zblk_core::geometry::Geometry;
use zblk_core::units::{SECTOR_SHIFT, Sector, format_bytes_exact};

/// fio's `rw`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
}

impl Rw {
    /// fio's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
        }
    }

    /// Parses fio's name.
    pub fn parse(name: &str) -> Option<Rw> {
        [Rw::Read, Rw::Write, Rw::RandRead, Rw::RandWrite].into_iter().find(|r| r.name() == name)
    }

    /// Whether the job writes.
    pub fn is_write(self) -> bool {
        matches!(self, Rw::Write | Rw::RandWrite)
    }

    /// Whether offsets are random.
    pub fn is_random(self) -> bool {
        matches!(self, Rw::RandRead | Rw::RandWrite)
    }
}

/// fio's `zonemode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ZoneMode {
    /// Offsets as generated (`zonemode=none`).
    None,
    /// Writes at zone write pointers (`zonemode=zbd`).
    Zbd,
}

/// One fio job description.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobSpec {
    /// Job name.
    pub name: String,
    /// `rw`.
    pub rw: Rw,
    /// `bs`, bytes.
    pub bs_bytes: u64,
    /// `iodepth`.
    pub iodepth: u32,
    /// `numjobs`: copies of this job.
    pub numjobs: u32,
    /// `offset`, bytes: start of the region.
    pub offset_bytes: u64,
    /// `offset_increment`, bytes: copy `n` of the job (`numjobs`) starts at
    /// `offset + n * offset_increment`, its region `size` long from there (fio's
    /// streams: each job in its own part of the device). 0: every copy at `offset`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub offset_increment_bytes: u64,
    /// `size`, bytes: length of the region; `None`: to the end of the device.
    pub size_bytes: Option<u64>,
    /// `io_size`, bytes per job; `None`: `size`.
    pub io_size_bytes: Option<u64>,
    /// `runtime` with `time_based`, nanoseconds: stop after this long instead.
    pub runtime_ns: Option<u64>,
    /// `zonemode`.
    pub zonemode: ZoneMode,
    /// `max_open_zones`: zones written at once by all jobs; 0: the device's limit
    /// (as fio), no limit if the device has none.
    pub max_open_zones: u32,
    /// `fua`: writes with forced unit access.
    pub fua: bool,
    /// `end_fsync`: when its I/O is done, the job flushes the device cache and its
    /// runtime ends when the flush completes (the rate is then sustained, not cached).
    pub end_fsync: bool,
}

impl Default for JobSpec {
    fn default() -> Self {
        JobSpec {
            name: "job".to_string(),
            rw: Rw::Write,
            bs_bytes: 4096,
            iodepth: 1,
            numjobs: 1,
            offset_bytes: 0,
            offset_increment_bytes: 0,
            size_bytes: None,
            io_size_bytes: None,
            runtime_ns: None,
            zonemode: ZoneMode::Zbd,
            max_open_zones: 0,
            fua: false,
            end_fsync: false,
        }
    }
}

/// A refused job option, named as fio names it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{option}: {message}")]
pub struct JobError {
    /// fio's option name.
    pub option: &'static str,
    /// What is wrong.
    pub message: String,
}

/// The most copies of a job ([`JobSpec::numjobs`]) a job may ask for, simulated or
/// real: each keeps its own latency histograms (about half a MiB), and on a real
/// device a thread and its buffers.
pub const MAX_NUMJOBS: u32 = 256;

fn job_err(option: &'static str, message: String) -> JobError {
    JobError { option, message }
}

impl JobSpec {
    /// Checks the job against the device it will run on.
    pub fn validate(&self, geo: &Geometry) -> Result<(), JobError> {
        let lbs = u64::from(geo.lbs_bytes());
        let dev_bytes = geo.nr_sectors() << SECTOR_SHIFT;
        if self.bs_bytes == 0 || self.bs_bytes % lbs != 0 {
            return Err(job_err(
                "bs",
                format!("must be a non-zero multiple of the block size ({lbs}), got {}", self.bs_bytes),
            ));
        }
        if self.bs_bytes > u64::from(u32::MAX) << SECTOR_SHIFT {
            return Err(job_err("bs", format!("{} is too large", self.bs_bytes)));
        }
        if self.iodepth == 0 {
            return Err(job_err("iodepth", "must be at least 1".to_string()));
        }
        if self.numjobs == 0 {
            return Err(job_err("numjobs", "must be at least 1".to_string()));
        }
        if self.numjobs > MAX_NUMJOBS {
            return Err(job_err("numjobs", format!("is at most {MAX_NUMJOBS}, got {}", self.numjobs)));
        }
        if self.offset_bytes % lbs != 0 || self.offset_bytes >= dev_bytes {
            return Err(job_err(
                "offset",
                format!(
                    "must be block aligned and inside the device ({}), got {}",
                    format_bytes_exact(dev_bytes),
                    self.offset_bytes
                ),
            ));
        }
        if self.offset_increment_bytes % lbs != 0 {
            return Err(job_err(
                "offset_increment",
                format!("must be block aligned, got {}", self.offset_increment_bytes),
            ));
        }
        let last = self.job_offset_bytes(self.numjobs - 1);
        if last.is_none_or(|o| o >= dev_bytes) {
            return Err(job_err(
                "offset_increment",
                format!(
                    "job {} would start at offset {} + {} x {}, outside the device ({})",
                    self.numjobs - 1,
                    self.offset_bytes,
                    self.numjobs - 1,
                    self.offset_increment_bytes,
                    format_bytes_exact(dev_bytes)
                ),
            ));
        }
        let size = self.region_bytes(geo);
        let (last_start, last_size) = self.copy_region(geo, self.numjobs - 1);
        if size == 0 || size % lbs != 0 || last_start.checked_add(last_size).is_none_or(|end| end > dev_bytes) {
            return Err(job_err(
                "size",
                format!(
                    "offset + size must stay inside the device ({}) and be block aligned",
                    format_bytes_exact(dev_bytes)
                ),
            ));
        }
        if size < self.bs_bytes {
            return Err(job_err("size", format!("{size} bytes is smaller than bs {}", self.bs_bytes)));
        }
        if self.io_size_bytes == Some(0) {
            return Err(job_err("io_size", "must be non-zero".to_string()));
        }
        if self.runtime_ns == Some(0) {
            return Err(job_err("runtime", "must be non-zero".to_string()));
        }
        if self.zonemode == ZoneMode::Zbd {
            self.validate_zbd(geo)?;
        }
        Ok(())
    }

    fn validate_zbd(&self, geo: &Geometry) -> Result<(), JobError> {
        if !geo.is_zoned() {
            return Err(job_err("zonemode", "zbd needs a zoned device (zoned=1)".to_string()));
        }
        let zone_bytes = geo.zone_sectors() << SECTOR_SHIFT;
        if self.offset_bytes % zone_bytes != 0 {
            return Err(job_err(
                "offset",
                format!("must be a multiple of the zone size ({}) with zonemode=zbd", format_bytes_exact(zone_bytes)),
            ));
        }
        if self.offset_increment_bytes % zone_bytes != 0 {
            return Err(job_err(
                "offset_increment",
                format!("must be a multiple of the zone size ({}) with zonemode=zbd", format_bytes_exact(zone_bytes)),
            ));
        }
        let end = self.offset_bytes + self.region_bytes(geo);
        if end % zone_bytes != 0 && end != geo.nr_sectors() << SECTOR_SHIFT {
            return Err(job_err(
                "size",
                format!("must end on a zone boundary ({}) with zonemode=zbd", format_bytes_exact(zone_bytes)),
            ));
        }
        if self.rw.is_write() && self.bs_bytes > geo.zone_cap_sectors() << SECTOR_SHIFT {
            return Err(job_err("bs", "larger than the zone capacity".to_string()));
        }
        let first = geo.zone_no(Sector(self.offset_bytes >> SECTOR_SHIFT));
        let last = geo.zone_no(Sector((end >> SECTOR_SHIFT) - 1));
        if self.rw.is_write() && geo.zone_is_conv(last) {
            return Err(job_err(
                "offset",
                format!("zones {first}..={last} are conventional; zbd writes need sequential zones"),
            ));
        }
        Ok(())
    }

    /// The region's length in bytes (the first copy's, see [`JobSpec::copy_region`]).
    pub fn region_bytes(&self, geo: &Geometry) -> u64 {
        self.copy_region(geo, 0).1
    }

    /// The bytes each copy of the job moves: `io_size`, or its region (the first copy's).
    pub fn io_bytes(&self, geo: &Geometry) -> u64 {
        self.io_size_bytes.unwrap_or(self.region_bytes(geo))
    }

    /// Where copy `n` of the job starts: `offset + n * offset_increment` (`None` past
    /// what a byte offset holds).
    pub fn job_offset_bytes(&self, n: u32) -> Option<u64> {
        self.offset_increment_bytes.checked_mul(u64::from(n)).and_then(|d| d.checked_add(self.offset_bytes))
    }

    /// Copy `n`'s region: its start and its length in bytes (`size`, or to the end of
    /// the device from its start).
    pub fn copy_region(&self, geo: &Geometry, n: u32) -> (u64, u64) {
        let start = self.job_offset_bytes(n).unwrap_or(u64::MAX);
        (start, self.size_bytes.unwrap_or((geo.nr_sectors() << SECTOR_SHIFT).saturating_sub(start)))
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The result of one job (or of a group of jobs), as fio reports it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct JobResult {
    /// Job name.
    pub name: String,
    /// Jobs merged into this result (1 unless grouped).
    pub jobs: u32,
    /// Reads.
    pub read: DirSummary,
    /// Writes.
    pub write: DirSummary,
    /// I/Os that failed.
    pub errors: u64,
    /// The first failure's status.
    pub first_error: Option<Status>,
    /// Zone resets the job issued (zbd mode).
    pub zone_resets: u64,
    /// From start to the last completion.
    pub runtime_ns: u64,
}
