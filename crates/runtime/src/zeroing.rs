//! Timing zeroing on a real image, for `zblk sweep zeroes`: how long zeroing takes
//! with unmap (the image's fallocate method) and by writing zeroes, and how much a
//! concurrent sequential writer loses when zeroing runs beside it.
//!
//! Each function creates a fresh regular (not zoned) image at the path it is given,
//! runs through the [`Runtime`] (the engine, its splitting, the I/O driver) and
//! removes the image, also on failure. Sizes are parameters: a run writes at most
//! the sizes given (plus an optional untimed prefill and read-back).

use super::bench::run_jobs;
use super::{AlignedBuf, Backend, Runtime, RuntimeConfig, RuntimeError, ZeroingFlags};
use std::path::{Path, PathBuf};
use std::time::Instant;
use zblk_core::bio::Status;
use zblk_core::engine::ZeroingMethod;
use zblk_core::geometry::GeometryParams;
use zblk_core::units::{SECTOR_SIZE, Sector};
use zblk_dev::file::zeroing::FileZeroing;
use zblk_dev::file::{CreateOptions, FileImage, ImageError, ImageOptions};
use zblk_dev::{DeviceError, DeviceZeroing};
use zblk_workload::job::{JobSpec, Rw, ZoneMode};

/// The zeroing method a timing asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ZeroMethodChoice {
    /// WRITE_ZEROES with unmap allowed: the image's fallocate method.
    Unmap,
    /// WRITE_ZEROES with NOUNMAP: the image writes the zeroes as data.
    WriteZeroes,
}

impl ZeroMethodChoice {
    /// `unmap` or `write-zeroes` (the names of [`ZeroingMethod`]).
    pub fn name(self) -> &'static str {
        self.method().name()
    }

    /// The block-layer method this choice asks for.
    pub fn method(self) -> ZeroingMethod {
        match self {
            ZeroMethodChoice::Unmap => ZeroingMethod::Unmap,
            ZeroMethodChoice::WriteZeroes => ZeroingMethod::WriteZeroes,
        }
    }

    /// The choice named `name`.
    pub fn from_name(name: &str) -> Option<ZeroMethodChoice> {
        [ZeroMethodChoice::Unmap, ZeroMethodChoice::WriteZeroes].into_iter().find(|c| c.name() == name)
    }
}

/// How the timing runs.
#[derive(Clone, Copy, Debug)]
pub struct ZeroingBenchOptions {
    /// Write a pattern over the range to be zeroed first (not timed, flushed), so
    /// that zeroing replaces data instead of holes.
    pub prefill: bool,
    /// After the timing, read the zeroed range back and fail unless it is all
    /// zeroes (not timed).
    pub verify: bool,
    /// The I/O driver.
    pub backend: Backend,
}

impl Default for ZeroingBenchOptions {
    fn default() -> Self {
        ZeroingBenchOptions { prefill: false, verify: false, backend: Backend::Auto }
    }
}

/// A zeroing timed by [`time_zeroing`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct ZeroingTiming {
    /// The method asked for and used: `unmap` or `write-zeroes`.
    pub method: ZeroingMethod,
    /// How the image carried it out (`fallocate-write-zeroes`,
    /// `fallocate-zero-range`, `pwrite-zeroes`).
    pub file_method: FileZeroing,
    /// What the open's probe found, in words.
    pub probe: String,
    /// Bytes zeroed.
    pub bytes: u64,
    /// Zeroing plus the flush that makes it durable: the figure to compare.
    pub seconds: f64,
    /// The zeroing alone (until every WRITE_ZEROES completed).
    pub zeroing_seconds: f64,
    /// The flush after it.
    pub flush_seconds: f64,
    /// The I/O driver, in words.
    pub backend: String,
    /// The range held data before (see [`ZeroingBenchOptions::prefill`]).
    pub prefilled: bool,
    /// The range was read back as zeroes afterwards.
    pub verified: bool,
}

/// A writer timed by [`time_writer_with_background_zeroing`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct WriterTiming {
    /// The zeroing running beside the writer, if any.
    pub background_zeroing: Option<ZeroMethodChoice>,
    /// Bytes the writer wrote (1 MiB writes, 8 in flight, sequential).
    pub writer_bytes: u64,
    /// From the writer's first submission to its last completion.
    pub writer_seconds: f64,
    /// The writer's bandwidth, MB/s (10^6 bytes per second).
    pub writer_mb_s: f64,
    /// Bytes zeroed in the background (0 without background zeroing).
    pub zero_bytes: u64,
    /// From the start of the background zeroing to its end (`None` without).
    pub zero_seconds: Option<f64>,
    /// How the image carried the background zeroing out.
    pub zero_file_method: Option<FileZeroing>,
    /// The I/O driver, in words.
    pub backend: String,
}

/// Why a timing could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ZeroBenchError {
    /// A size is refused.
    #[error("{0}")]
    Invalid(String),
    /// The image could not be created or opened (it names the file).
    #[error(transparent)]
    Image(#[from] ImageError),
    /// The runtime did not start.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The image did not close cleanly (it names the file).
    #[error(transparent)]
    Close(#[from] DeviceError),
    /// The method asked for is not available on this file system.
    #[error("{0}")]
    Unavailable(String),
    /// An I/O failed.
    #[error("{what}: {}: {status}", status.errno_name())]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        status: Status,
    },
    /// The zeroed range did not read back as zeroes.
    #[error("verification failed: {0}")]
    Verify(String),
    /// The writer job failed.
    #[error("writer: {0}")]
    Writer(String),
}

fn io(what: &'static str) -> impl FnOnce(Status) -> ZeroBenchError {
    move |status| ZeroBenchError::Io { what, status }
}

/// Removes the image when the timing ends, however it ends.
struct Remove(PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A fresh image with a runtime on it.
struct Fresh {
    rt: Runtime,
    /// What the image's open probed about zeroing.
    probe: String,
    /// Removes the file.
    _remove: Remove,
}

/// Creates a regular image of `bytes` at `path` (which must not exist), opens it and
/// starts a runtime.
fn fresh(path: &Path, bytes: u64, backend: Backend) -> Result<Fresh, ZeroBenchError> {
    let geometry = GeometryParams { zoned: false, capacity_bytes: bytes, ..GeometryParams::default() };
    FileImage::create(path, &CreateOptions { geometry, rotational: false, force: false, preallocate: false })?;
    let remove = Remove(path.to_path_buf());
    let img = FileImage::open(path, &ImageOptions::default())?;
    let probe = img.zeroing_probe().detail.clone();
    let rt = Runtime::start(img, RuntimeConfig { backend, ..RuntimeConfig::default() })?;
    Ok(Fresh { rt, probe, _remove: remove })
}

fn check_size(what: &str, bytes: u64, unit: u64) -> Result<(), ZeroBenchError> {
    if bytes == 0 || bytes % unit != 0 {
        return Err(ZeroBenchError::Invalid(format!("{what}: {bytes} bytes is not a non-zero multiple of {unit}")));
    }
    Ok(())
}

const CHUNK: usize = 4 << 20;

/// Writes a non-zero pattern over `[offset, offset + bytes)` and flushes.
fn prefill(rt: &Runtime, offset: u64, bytes: u64) -> Result<(), ZeroBenchError> {
    let mut buf = AlignedBuf::zeroed(CHUNK.min(bytes as usize));
    buf.fill(0xa5);
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(buf.len() as u64) as usize;
        rt.write_at(Sector((offset + at) / SECTOR_SIZE), &buf[..n]).map_err(io("prefill"))?;
        at += n as u64;
    }
    rt.flush().map_err(io("prefill flush"))
}

/// Reads `[offset, offset + bytes)` back; fails at the first non-zero byte.
fn verify_zeroes(rt: &Runtime, offset: u64, bytes: u64) -> Result<(), ZeroBenchError> {
    let mut buf = AlignedBuf::zeroed(CHUNK.min(bytes as usize));
    let mut at = 0;
    while at < bytes {
        let n = (bytes - at).min(buf.len() as u64) as usize;
        rt.read_at(Sector((offset + at) / SECTOR_SIZE), &mut buf[..n]).map_err(io("verify read"))?;
        if let Some(i) = buf[..n].iter().position(|&b| b != 0) {
            return Err(ZeroBenchError::Verify(format!("byte {} holds {:#04x}", offset + at + i as u64, buf[i])));
        }
        at += n as u64;
    }
    Ok(())
}

/// Refuses a choice the image cannot honour (unmap on a file system without
/// fallocate zeroing), so that a timing never carries the wrong method's name.
fn check_available(f: &Fresh, choice: ZeroMethodChoice) -> Result<(), ZeroBenchError> {
    let got = f.rt.zeroing_method(choice == ZeroMethodChoice::WriteZeroes);
    if got != choice.method() {
        return Err(ZeroBenchError::Unavailable(format!(
            "{} is not available on this file system (the image would use {}; probe: {})",
            choice.name(),
            got.name(),
            f.probe
        )));
    }
    Ok(())
}

/// Creates a regular image of `bytes` at `path` (which must not exist), zeroes all of
/// it from offset 0 with `choice` through the runtime, flushes, and removes the
/// image. The time covers the WRITE_ZEROES (as the engine splits them) and the flush
/// that makes them durable, not the creation, the prefill or the read-back.
/// `bytes` must be a non-zero multiple of 4096.
pub fn time_zeroing(
    path: &Path,
    bytes: u64,
    choice: ZeroMethodChoice,
    opts: &ZeroingBenchOptions,
) -> Result<ZeroingTiming, ZeroBenchError> {
    check_size("bytes", bytes, 4096)?;
    let f = fresh(path, bytes, opts.backend)?;
    check_available(&f, choice)?;
    let rt = &f.rt;
    if opts.prefill {
        prefill(rt, 0, bytes)?;
    }
    let flags = ZeroingFlags { nounmap: choice == ZeroMethodChoice::WriteZeroes, no_fallback: true };
    let t0 = Instant::now();
    let report = rt.write_zeroes(Sector::ZERO, bytes / SECTOR_SIZE, flags).map_err(io("write zeroes"))?;
    let t1 = Instant::now();
    rt.flush().map_err(io("flush"))?;
    let t2 = Instant::now();
    if opts.verify {
        verify_zeroes(rt, 0, bytes)?;
    }
    let timing = ZeroingTiming {
        method: report.method,
        file_method: report.device_method.and_then(DeviceZeroing::file).unwrap_or(FileZeroing::PwriteZeroes),
        probe: f.probe.clone(),
        bytes,
        seconds: (t2 - t0).as_secs_f64(),
        zeroing_seconds: (t1 - t0).as_secs_f64(),
        flush_seconds: (t2 - t1).as_secs_f64(),
        backend: rt.backend().to_string(),
        prefilled: opts.prefill,
        verified: opts.verify,
    };
    f.rt.close()?;
    Ok(timing)
}

/// Creates a regular image of `writer_bytes + zero_bytes` at `path` (which must not
/// exist); a sequential writer (1 MiB writes, 8 in flight, as fio's
/// `rw=write bs=1M iodepth=8`) writes `[0, writer_bytes)` while, with `background`,
/// another thread zeroes `[writer_bytes, writer_bytes + zero_bytes)` with that method
/// (once, started with the writer); returns the writer's bandwidth. The image is
/// removed. Both sizes must be non-zero multiples of 1 MiB. With `opts.prefill` the
/// zeroed region holds data first; with `opts.verify` it is read back as zeroes.
pub fn time_writer_with_background_zeroing(
    path: &Path,
    writer_bytes: u64,
    zero_bytes: u64,
    background: Option<ZeroMethodChoice>,
    opts: &ZeroingBenchOptions,
) -> Result<WriterTiming, ZeroBenchError> {
    check_size("writer bytes", writer_bytes, 1 << 20)?;
    check_size("zero bytes", zero_bytes, 1 << 20)?;
    let total = writer_bytes.checked_add(zero_bytes).ok_or_else(|| ZeroBenchError::Invalid("too large".into()))?;
    let f = fresh(path, total, opts.backend)?;
    if let Some(choice) = background {
        check_available(&f, choice)?;
    }
    let rt = &f.rt;
    if opts.prefill {
        prefill(rt, writer_bytes, zero_bytes)?;
    }
    let spec = JobSpec {
        name: "writer".to_string(),
        rw: Rw::Write,
        bs_bytes: 1 << 20,
        iodepth: 8,
        offset_bytes: 0,
        size_bytes: Some(writer_bytes),
        zonemode: ZoneMode::None,
        ..JobSpec::default()
    };
    let (writer, zeroing) = std::thread::scope(|s| {
        let zeroer = background.map(|choice| {
            s.spawn(move || {
                let flags = ZeroingFlags { nounmap: choice == ZeroMethodChoice::WriteZeroes, no_fallback: true };
                let t = Instant::now();
                let r = rt.write_zeroes(Sector(writer_bytes / SECTOR_SIZE), zero_bytes / SECTOR_SIZE, flags);
                r.map(|rep| (t.elapsed().as_secs_f64(), rep.device_method.and_then(DeviceZeroing::file)))
            })
        });
        let writer = run_jobs(rt, &path.display().to_string(), &[spec], 1, false);
        let zeroing = zeroer.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        (writer, zeroing)
    });
    let report = writer.map_err(|e| ZeroBenchError::Writer(e.to_string()))?;
    let job = report.jobs.first().ok_or_else(|| ZeroBenchError::Writer("no result".into()))?;
    if let Some(status) = job.first_error {
        return Err(ZeroBenchError::Io { what: "writer", status });
    }
    let zeroing = zeroing.transpose().map_err(io("write zeroes"))?;
    if opts.verify && background.is_some() {
        verify_zeroes(rt, writer_bytes, zero_bytes)?;
    }
    let seconds = job.runtime_ns as f64 / 1e9;
    let timing = WriterTiming {
        background_zeroing: background,
        writer_bytes: job.write.io_bytes,
        writer_seconds: seconds,
        writer_mb_s: job.write.bw_bytes / 1e6,
        zero_bytes: if background.is_some() { zero_bytes } else { 0 },
        zero_seconds: zeroing.map(|(s, _)| s),
        zero_file_method: zeroing.and_then(|(_, m)| m),
        backend: rt.backend().to_string(),
    };
    f.rt.close()?;
    Ok(timing)
}
