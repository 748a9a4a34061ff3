//! Zeroing a range on a simulated device, the three ways a host can: unmapped
//! WRITE_ZEROES (the device deallocates), WRITE_ZEROES with NOUNMAP (the device
//! writes zeroes), and writing buffers of zeroes (what `dd if=/dev/zero` does, and
//! the fallback for a device without WRITE_ZEROES). Also a sequential writer's
//! bandwidth while another region is zeroed in the background. Every number is a
//! simulator number.

use zblk_core::bio::{Bio, BioFlags, Op};
use zblk_core::engine::{MAX_ZEROOUT_BIO_SECTORS, ZeroingMethod};
use zblk_core::params::ParamError;
use zblk_core::units::{SECTOR_SHIFT, Sector};
use zblk_sim::presets::DeviceSpec;
use zblk_sim::{FioJobs, Sim, SimCompletion, SimConfig, Workload};
use zblk_workload::job::{JobError, JobSpec, Rw, ZoneMode};

/// Zeroing completions carry this bit in their token (allocated beside fio-like
/// jobs' bits).
const ZERO_FLAG: u64 = zblk_workload::token::ZEROER;
/// Zero buffers go as 1 MiB writes, 32 in flight (dd through the page cache and its
/// writeback keeps many in flight).
const BUF_SECTORS: u32 = 2048;
const BUF_DEPTH: usize = 32;

/// A refused zeroing set-up.
#[derive(Debug, thiserror::Error)]
pub enum ZeroingError {
    /// The device.
    #[error("device: {0}")]
    Device(#[from] ParamError),
    /// The writer job.
    #[error("writer: {0}")]
    Job(#[from] JobError),
    /// The range or the method.
    #[error("{0}")]
    Bad(String),
    /// An I/O failed (a bug in the set-up: nothing is injected).
    #[error("zeroing failed at sector {0}: {1}")]
    Failed(u64, zblk_core::bio::Status),
}

/// Zeroes `[offset, offset + bytes)` with `method`, then FLUSH.
#[derive(Debug)]
struct Zeroer {
    method: ZeroingMethod,
    next: u64,
    end: u64,
    inflight: usize,
    flushed: bool,
    flush_sent: bool,
    done_ns: u64,
    error: Option<ZeroingError>,
}

impl Zeroer {
    fn new(method: ZeroingMethod, offset: u64, bytes: u64) -> Zeroer {
        Zeroer {
            method,
            next: offset >> SECTOR_SHIFT,
            end: (offset + bytes) >> SECTOR_SHIFT,
            inflight: 0,
            flushed: false,
            flush_sent: false,
            done_ns: 0,
            error: None,
        }
    }

    fn fill(&mut self, sim: &mut Sim) {
        while self.next < self.end && self.error.is_none() {
            let (op, n, flags, depth) = match self.method {
                ZeroingMethod::Unmap => (Op::WriteZeroes, MAX_ZEROOUT_BIO_SECTORS, BioFlags::NONE, 1),
                ZeroingMethod::WriteZeroes => (Op::WriteZeroes, MAX_ZEROOUT_BIO_SECTORS, BioFlags::NOUNMAP, 1),
                ZeroingMethod::ZeroBuffers => (Op::Write, u64::from(BUF_SECTORS), BioFlags::NONE, BUF_DEPTH),
            };
            if self.inflight >= depth {
                return;
            }
            let n = n.min(self.end - self.next) as u32;
            let bio = Bio { op, sector: Sector(self.next), nr_sectors: n, flags, user_data: 0 };
            sim.submit(bio, ZERO_FLAG, zblk_workload::pattern::ZEROES);
            self.next += u64::from(n);
            self.inflight += 1;
        }
        if self.next >= self.end && self.inflight == 0 && !self.flush_sent && self.error.is_none() {
            self.flush_sent = true;
            self.inflight += 1;
            sim.submit(Bio::flush(0), ZERO_FLAG, zblk_workload::pattern::ZEROES);
        }
    }

    fn on_complete(&mut self, sim: &mut Sim, c: SimCompletion) {
        self.inflight -= 1;
        if let Err(s) = c.result {
            self.error.get_or_insert(ZeroingError::Failed(c.sector.0, s));
        }
        if c.op == Op::Flush {
            self.flushed = true;
            self.done_ns = sim.now_ns();
        }
        self.fill(sim);
    }

    fn is_done(&self) -> bool {
        (self.flushed || self.error.is_some()) && self.inflight == 0
    }
}

/// A zeroer, and optionally fio-like jobs beside it.
struct Both {
    zero: Option<Zeroer>,
    fio: Option<FioJobs>,
}

impl Workload for Both {
    fn start(&mut self, sim: &mut Sim) {
        if let Some(f) = &mut self.fio {
            f.start(sim);
        }
        if let Some(z) = &mut self.zero {
            z.fill(sim);
        }
    }

    fn on_complete(&mut self, sim: &mut Sim, c: SimCompletion) {
        if c.token & ZERO_FLAG != 0 {
            self.zero.as_mut().expect("zeroing completion").on_complete(sim, c);
        } else {
            self.fio.as_mut().expect("job completion").on_complete(sim, c);
        }
    }

    fn on_idle(&mut self, sim: &mut Sim) -> bool {
        self.fio.as_mut().is_some_and(|f| f.on_idle(sim))
    }

    fn is_done(&self) -> bool {
        self.zero.as_ref().is_none_or(Zeroer::is_done) && self.fio.as_ref().is_none_or(FioJobs::is_done)
    }
}

/// How long zeroing took.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ZeroTiming {
    /// The simulated device.
    pub device: String,
    /// `unmap`, `write-zeroes` or `zero-buffers`.
    pub method: &'static str,
    /// Bytes zeroed.
    pub bytes: u64,
    /// Virtual seconds from the first submission to the FLUSH's completion.
    pub seconds: f64,
}

fn check_range(spec: &DeviceSpec, offset: u64, bytes: u64) -> Result<(), ZeroingError> {
    let cap = spec.params.geometry.capacity_bytes;
    let lbs = u64::from(spec.params.geometry.lbs_bytes);
    if bytes == 0 || offset % lbs != 0 || bytes % lbs != 0 || offset.checked_add(bytes).is_none_or(|e| e > cap) {
        return Err(ZeroingError::Bad(format!(
            "range {offset}+{bytes}: must be non-empty, block aligned ({lbs} bytes) and within the device ({cap} bytes)"
        )));
    }
    if spec.params.geometry.zoned {
        return Err(ZeroingError::Bad("zeroing runs on a regular (not zoned) device".to_string()));
    }
    Ok(())
}

fn method_available(sim: &Sim, method: ZeroingMethod) -> Result<(), ZeroingError> {
    let geo = sim.device_geometry();
    let ok = match method {
        ZeroingMethod::Unmap => geo.max_hw_wzeroes_unmap_sectors() != 0,
        ZeroingMethod::WriteZeroes => geo.max_write_zeroes_sectors() != 0,
        ZeroingMethod::ZeroBuffers => true,
    };
    if ok { Ok(()) } else { Err(ZeroingError::Bad(format!("the device cannot zero with {}", method.name()))) }
}

/// Zeroes `[offset, offset + bytes)` of `sim`'s device with `method`, then FLUSH;
/// returns the virtual time it took.
pub fn zero_range(sim: &mut Sim, method: ZeroingMethod, offset: u64, bytes: u64) -> Result<u64, ZeroingError> {
    method_available(sim, method)?;
    let start = sim.now_ns();
    let mut w = Both { zero: Some(Zeroer::new(method, offset, bytes)), fio: None };
    sim.run(&mut w);
    let z = w.zero.expect("zeroer");
    match z.error {
        Some(e) => Err(e),
        None => Ok(z.done_ns - start),
    }
}

/// Zeroes `bytes` from offset 0 of a fresh simulated `spec` device with `method`.
pub fn time_zeroing(
    spec: &DeviceSpec,
    bytes: u64,
    method: ZeroingMethod,
    seed: u64,
) -> Result<ZeroTiming, ZeroingError> {
    check_range(spec, 0, bytes)?;
    let mut sim = spec.sim(&SimConfig::new(spec.params.clone(), seed))?;
    let ns = zero_range(&mut sim, method, 0, bytes)?;
    Ok(ZeroTiming { device: sim.model_description(), method: method.name(), bytes, seconds: ns as f64 / 1e9 })
}

/// A sequential writer's bandwidth, with or without zeroing in the background.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct WriterUnderZeroing {
    /// The simulated device.
    pub device: String,
    /// `none`, or the method zeroing the other region.
    pub background_zeroing: &'static str,
    /// Bytes zeroed in the background.
    pub zero_bytes: u64,
    /// The writer's bandwidth, MB/s of virtual time.
    pub writer_mb_s: f64,
}

/// A sequential 1 MiB writer at QD 8 writes `writer_bytes` from offset 0 while, if
/// `background` is given, `zero_bytes` after the writer's region are zeroed with it,
/// starting at the same time.
pub fn writer_with_background_zeroing(
    spec: &DeviceSpec,
    writer_bytes: u64,
    zero_bytes: u64,
    background: Option<ZeroingMethod>,
    seed: u64,
) -> Result<WriterUnderZeroing, ZeroingError> {
    check_range(spec, 0, writer_bytes)?;
    if background.is_some() {
        check_range(spec, writer_bytes, zero_bytes)?;
    }
    let mut sim = spec.sim(&SimConfig::new(spec.params.clone(), seed))?;
    if let Some(m) = background {
        method_available(&sim, m)?;
    }
    let job = JobSpec {
        name: "writer".to_string(),
        rw: Rw::Write,
        bs_bytes: 1 << 20,
        iodepth: 8,
        size_bytes: Some(writer_bytes),
        zonemode: ZoneMode::None,
        ..JobSpec::default()
    };
    let fio = FioJobs::new(&[job], &sim.device_geometry(), seed)?;
    let zero = background.map(|m| Zeroer::new(m, writer_bytes, zero_bytes));
    let mut w = Both { zero, fio: Some(fio) };
    sim.run(&mut w);
    if let Some(e) = w.zero.and_then(|z| z.error) {
        return Err(e);
    }
    let r = &w.fio.expect("writer").results(true)[0];
    if r.errors > 0 {
        return Err(ZeroingError::Bad(format!("the writer's I/O failed: {:?}", r.first_error)));
    }
    Ok(WriterUnderZeroing {
        device: sim.model_description(),
        background_zeroing: background.map_or("none", ZeroingMethod::name),
        zero_bytes: if background.is_some() { zero_bytes } else { 0 },
        writer_mb_s: r.write.bw_bytes / 1e6,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ssd() -> DeviceSpec {
        DeviceSpec::parse("ssd").unwrap()
    }

    #[test]
    fn unmap_is_far_faster_than_writing_zeroes_on_the_ssd_model() {
        let gib = 1u64 << 30;
        let unmap = time_zeroing(&ssd(), gib, ZeroingMethod::Unmap, 1).unwrap();
        let wz = time_zeroing(&ssd(), gib, ZeroingMethod::WriteZeroes, 1).unwrap();
        let buf = time_zeroing(&ssd(), gib, ZeroingMethod::ZeroBuffers, 1).unwrap();
        // Writing zeroes moves 1 GiB through the 2 GB/s write path: about 0.54 s.
        assert!((wz.seconds - 0.537).abs() < 0.02, "{wz:?}");
        assert!(buf.seconds >= wz.seconds * 0.99, "{buf:?}");
        assert!(unmap.seconds * 10.0 < wz.seconds, "{unmap:?} vs {wz:?}");
    }

    #[test]
    fn background_unmap_barely_slows_a_writer_and_writing_zeroes_does() {
        let gib = 1u64 << 30;
        let none = writer_with_background_zeroing(&ssd(), gib, 0, None, 1).unwrap();
        let unmap = writer_with_background_zeroing(&ssd(), gib, 4 * gib, Some(ZeroingMethod::Unmap), 1).unwrap();
        let wz = writer_with_background_zeroing(&ssd(), gib, 4 * gib, Some(ZeroingMethod::WriteZeroes), 1).unwrap();
        assert!(unmap.writer_mb_s > 0.95 * none.writer_mb_s, "{unmap:?} vs {none:?}");
        assert!(wz.writer_mb_s < 0.8 * none.writer_mb_s, "{wz:?} vs {none:?}");
    }

    #[test]
    fn zeroed_ranges_read_back_as_zeroes_and_bad_set_ups_are_refused() {
        // A memory-backed null device, the checker on: write 8 MiB of data, zero
        // [3 sectors, 3 sectors + 5 MiB) (not page aligned at either end), read.
        let spec = DeviceSpec::parse("nullb:size=64,zoned=0,memory_backed=1").unwrap();
        for m in [ZeroingMethod::Unmap, ZeroingMethod::WriteZeroes, ZeroingMethod::ZeroBuffers] {
            let cfg = SimConfig { check: true, ..SimConfig::new(spec.params.clone(), 3) };
            let mut sim = spec.sim(&cfg).unwrap();
            let fill = JobSpec {
                bs_bytes: 1 << 20,
                iodepth: 4,
                size_bytes: Some(8 << 20),
                zonemode: ZoneMode::None,
                ..JobSpec::default()
            };
            let mut w = FioJobs::new(&[fill], &sim.device_geometry(), 3).unwrap();
            sim.run(&mut w);
            let (off, len) = (3 * 512, 5 << 20);
            assert!(zero_range(&mut sim, m, off, len).unwrap() > 0);
            let mut out = vec![0u8; 8 << 20];
            sim.device().peek(Sector(0), &mut out);
            for (i, sector) in out.chunks(512).enumerate() {
                let b = (i * 512) as u64;
                let zero = sector.iter().all(|&x| x == 0);
                assert_eq!(zero, b >= off && b < off + len, "{} sector {i}", m.name());
            }
        }
        let e = time_zeroing(&ssd(), 1000, ZeroingMethod::Unmap, 1).unwrap_err();
        assert!(e.to_string().contains("block aligned"), "{e}");
        let e = time_zeroing(&DeviceSpec::parse("zns").unwrap(), 1 << 20, ZeroingMethod::Unmap, 1).unwrap_err();
        assert!(e.to_string().contains("regular"), "{e}");
        let no_unmap = DeviceSpec::parse("ssd:write_zeroes_unmap_max_hw_bytes=0").unwrap();
        let e = time_zeroing(&no_unmap, 1 << 20, ZeroingMethod::Unmap, 1).unwrap_err();
        assert!(e.to_string().contains("cannot zero with unmap"), "{e}");
    }
}
