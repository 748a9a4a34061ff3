//! What the image commands share: opening an image (and saying what was repaired) or
//! a Linux zoned block device, starting the runtime on it, blkzone's argument
//! conventions and report line.

use crate::CliError;
use crate::out::{self, errln};
use clap::Args;
use std::path::Path;
use std::time::Duration;
use zblk::spec::PathKind;
use zblk_core::bio::Status;
use zblk_core::engine::{EngineConfig, IssuePolicy};
use zblk_core::geometry::Geometry;
use zblk_core::units::parse_size;
use zblk_core::zone::{ZoneCond, ZoneInfo, ZoneType};
use zblk_dev::Device;
use zblk_dev::file::{FileImage, ImageOptions};
use zblk_dev::linux::{LinuxOptions, LinuxZoned, RawZone};
use zblk_dev::nvme::NvmeZns;
use zblk_runtime::{Backend, Runtime, RuntimeConfig};

/// What the I/O commands (`write`, `append`, `read`, `bench`, `info`) run on: a zblk
/// image, or a Linux zoned block device driven through the same engine.
pub enum Target {
    /// A zoned image on a regular file.
    Image(Box<FileImage>),
    /// A Linux zoned block device (`O_DIRECT` data, the kernel's zone ioctls).
    Linux(Box<LinuxZoned>),
    /// An NVMe ZNS namespace's generic character device (`/dev/ngXnY`): NVMe
    /// commands through the kernel's passthrough, native zone append.
    Nvme(Box<NvmeZns>),
}

impl Target {
    /// Opens `path`: a block device as a Linux zoned block device (a regular block
    /// device is refused: zblk's engine is for zoned devices), anything else as an
    /// image (a file that is not one is refused by the image's checks); a character
    /// device as an NVMe generic device (anything else is refused saying what it is).
    /// (The rule is the library's, `zblk::spec::PathKind`.)
    pub fn open(path: &Path, read_only: bool, wait: WaitArg) -> Result<Target, CliError> {
        match PathKind::of(path) {
            PathKind::Nvme => NvmeZns::open(path, read_only).map(|d| Target::Nvme(Box::new(d))).map_err(CliError::msg),
            PathKind::Linux => {
                let opts = LinuxOptions { read_only, ..LinuxOptions::default() };
                LinuxZoned::open(path, &opts).map(|d| Target::Linux(Box::new(d))).map_err(CliError::msg)
            }
            PathKind::Image => open(path, read_only, wait).map(|i| Target::Image(Box::new(i))),
        }
    }

    /// [`Target::open`], with a wait for another holder of an image's lock that
    /// `stop` can call off: asked every [`LOCK_SLICE`] of the wait, its message
    /// (`Some`) ends the wait as the error. (A blocking `flock` is interrupted only by
    /// a signal handler, and a server takes its signals with sigwait, so that no
    /// handler runs in the middle of a request: the wait is made of short ones.)
    /// Only `zblk serve` waits so (the `ublk` feature).
    #[cfg(feature = "ublk")]
    pub fn open_unless(
        path: &Path,
        read_only: bool,
        wait: WaitArg,
        stop: &mut dyn FnMut() -> Option<String>,
    ) -> Result<Target, CliError> {
        use zblk_dev::file::ImageErrorKind;
        use zblk_dev::{DeviceErrorKind, Hold};
        let Some(total) = wait.wait else { return Target::open(path, read_only, wait) };
        if PathKind::of(path) != PathKind::Image {
            return Target::open(path, read_only, wait);
        }
        // (`None`: as long as it takes.)
        let until = std::time::Instant::now().checked_add(total);
        loop {
            let left = until.map(|u| u.saturating_duration_since(std::time::Instant::now()));
            let slice = left.map_or(LOCK_SLICE, |l| l.min(LOCK_SLICE));
            let opts = ImageOptions { read_only, lock_wait: Some(slice), ..ImageOptions::default() };
            match FileImage::open(path, &opts) {
                Err(e)
                    if matches!(e.kind, ImageErrorKind::Device(DeviceErrorKind::InUse(Hold::ImageLock)))
                        && left.is_none_or(|l| !l.is_zero()) =>
                {
                    if let Some(why) = stop() {
                        return Err(CliError(why));
                    }
                }
                r => return Ok(Target::Image(Box::new(said(path, read_only, r.map_err(CliError::msg)?)))),
            }
        }
    }

    /// The image, when it is one.
    pub fn image(&self) -> Option<&FileImage> {
        match self {
            Target::Image(i) => Some(i),
            Target::Linux(_) | Target::Nvme(_) => None,
        }
    }

    /// The geometry the engine validates against.
    pub fn geo(&self) -> &Geometry {
        match self {
            Target::Image(i) => i.geo(),
            Target::Linux(d) => d.geometry(),
            Target::Nvme(d) => d.geometry(),
        }
    }

    /// Whether the device is rotational (the single issuer's default).
    pub fn rotational(&self) -> bool {
        match self {
            Target::Image(i) => i.rotational(),
            Target::Linux(d) => Device::rotational(d.as_ref()),
            Target::Nvme(d) => Device::rotational(d.as_ref()),
        }
    }

    /// The default issue policy ([`IssuePolicy::default_for`]): the single issuer on a
    /// rotational zoned device, zone write pipelining on another zoned image,
    /// per-zone plugging on a Linux or NVMe zoned device.
    pub fn default_policy(&self) -> IssuePolicy {
        IssuePolicy::default_for(self.geo().is_zoned(), self.rotational(), self.keeps_zone_order())
    }

    /// Whether the device keeps a zone's writes in the order it is handed them (an
    /// image does; a Linux or NVMe zoned device may reorder).
    pub fn keeps_zone_order(&self) -> bool {
        matches!(self, Target::Image(_))
    }

    /// Starts the runtime on it.
    pub fn start(self, engine: EngineConfig, backend: Backend) -> Result<Runtime, CliError> {
        self.start_with(RuntimeConfig { engine, backend, ..RuntimeConfig::default() })
    }

    /// Starts the runtime on it with `cfg` (the completion thread's polling too).
    pub fn start_with(self, cfg: RuntimeConfig) -> Result<Runtime, CliError> {
        let path = match &self {
            Target::Image(i) => i.path().display().to_string(),
            Target::Linux(d) => d.path().display().to_string(),
            Target::Nvme(d) => d.path().display().to_string(),
        };
        let rt = match self {
            Target::Image(i) => Runtime::start(*i, cfg),
            Target::Linux(d) => Runtime::start(*d, cfg),
            Target::Nvme(d) => Runtime::start(*d, cfg),
        };
        rt.map_err(|e| CliError(format!("{path}: {e}")))
    }
}

/// `--wait[=SECONDS]`, for the commands that take an image's lock.
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct WaitArg {
    /// When another process holds the image, wait for it to let go (as `flock -w`):
    /// as long as it takes, or at most SECONDS (e.g. --wait=2.5). Without it, an
    /// image in use is refused at once.
    #[arg(
        long,
        value_name = "SECONDS",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "forever",
        value_parser = parse_wait
    )]
    pub wait: Option<Duration>,
}

/// `--wait`'s value: seconds (a decimal number, at least 0), or `forever`.
fn parse_wait(text: &str) -> Result<Duration, String> {
    if text == "forever" {
        return Ok(Duration::MAX);
    }
    let secs: f64 = text.trim().parse().map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("'{text}' is not a number of seconds (0 or more)"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("'{text}' seconds is too long a wait"))
}

/// Opens `path`; read-only opens take a shared lock and repair nothing; `wait` says
/// how long to wait for another holder. What opening found or repaired goes to
/// stderr, one line each.
pub fn open(path: &Path, read_only: bool, wait: WaitArg) -> Result<FileImage, CliError> {
    let opts = ImageOptions { read_only, lock_wait: wait.wait, ..ImageOptions::default() };
    Ok(said(path, read_only, FileImage::open(path, &opts).map_err(CliError::msg)?))
}

/// How often a wait for an image's lock that can be called off looks whether it was
/// ([`Target::open_unless`]).
#[cfg(feature = "ublk")]
const LOCK_SLICE: Duration = Duration::from_millis(50);

/// Says on standard error what opening `img` found or repaired, one line each.
fn said(path: &Path, read_only: bool, img: FileImage) -> FileImage {
    for r in img.repairs() {
        let what = if read_only { "found (read-only: not repaired)" } else { "repaired" };
        errln!("zblk: {}: {what}: {r}", path.display());
        if !read_only {
            out::done(format!("{}: repaired: {r}", path.display()));
        }
    }
    img
}

/// The issue policy an image runs with by default: the single issuer on a rotational
/// zoned image (the kernel's `zoned_qd1_writes` default), zone write pipelining on
/// another zoned image (a file keeps a zone's writes where their offsets say).
pub fn default_policy(img: &FileImage) -> IssuePolicy {
    IssuePolicy::default_for(img.geo().is_zoned(), img.rotational(), true)
}

/// Starts the runtime on an opened image with `engine` settings and `backend`.
pub fn start(img: FileImage, engine: EngineConfig, backend: Backend) -> Result<Runtime, CliError> {
    Target::Image(Box::new(img)).start(engine, backend)
}

/// A failed request's cause as the device knows it (the library's
/// `zblk::explain::device_cause`: the file system's errno under an image, the NVMe
/// status under an NVMe generic device).
pub fn fs_cause(rt: &Runtime, st: Status) -> Option<String> {
    zblk::explain::device_cause(rt, st)
}

/// A failed request's status in words: the file system's errno under an image
/// ([`fs_cause`]), else the status's errno and name.
pub fn status_words(rt: &Runtime, st: Status) -> String {
    fs_cause(rt, st).unwrap_or_else(|| format!("{}: {st}", st.errno_name()))
}

/// A sector count or position as blkzone takes it (util-linux `strtosize`): decimal
/// or `0x` hexadecimal, with an optional binary suffix (`K`, `M`, `G`, ...).
pub fn sectors(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).map_err(|_| format!("invalid number '{text}'"));
    }
    parse_size(t).map_err(|e| e.to_string())
}

/// blkzone's names of zone types (`type_text[]`).
const TYPE_TEXT: [&str; 4] = ["RESERVED", "CONVENTIONAL", "SEQ_WRITE_REQUIRED", "SEQ_WRITE_PREFERRED"];

/// A zone of an image in the kernel's terms (what `BLKREPORTZONE` gives).
pub fn raw(z: &ZoneInfo) -> RawZone {
    RawZone {
        start: z.start.0,
        len: z.len,
        capacity: z.capacity,
        wp: z.wp.0,
        ztype: z.ztype.code(),
        cond: z.cond.code(),
        reset: 0,
        non_seq: 0,
    }
}

fn wptr(z: &RawZone) -> u64 {
    // As blkzone: the write pointer as an offset, 0 for a conventional zone.
    if z.ztype == ZoneType::Conventional.code() { 0 } else { z.wp.saturating_sub(z.start) }
}

/// One zone as `blkzone report` prints it.
pub fn report_line(z: &RawZone) -> String {
    format!(
        "  start: 0x{:09x}, len 0x{:06x}, cap 0x{:06x}, wptr 0x{:06x} reset:{} non-seq:{}, zcond:{:2}({}) [type: {}({})]",
        z.start,
        z.len,
        z.capacity,
        wptr(z),
        z.reset,
        z.non_seq,
        z.cond,
        ZoneCond::short_name_of(z.cond),
        z.ztype,
        TYPE_TEXT.get(usize::from(z.ztype)).copied().unwrap_or("?")
    )
}

/// A zone as JSON, with blkzone's field names.
pub fn zone_json(z: &RawZone) -> serde_json::Value {
    serde_json::json!({
        "start": z.start,
        "len": z.len,
        "cap": z.capacity,
        "wptr": wptr(z),
        "reset": z.reset,
        "non_seq": z.non_seq,
        "cond": z.cond,
        "cond_name": ZoneCond::name_of(z.cond),
        "cond_short": ZoneCond::short_name_of(z.cond),
        "type": z.ztype,
        "type_name": TYPE_TEXT.get(usize::from(z.ztype)).copied().unwrap_or("?"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use zblk_core::units::Sector;

    #[test]
    fn blkzone_line_format() {
        let z = ZoneInfo {
            start: Sector(0x60000),
            len: 0x20000,
            capacity: 0x18000,
            wp: Sector(0x60018),
            ztype: ZoneType::SeqWriteRequired,
            cond: ZoneCond::ImpOpen,
        };
        assert_eq!(
            report_line(&raw(&z)),
            "  start: 0x000060000, len 0x020000, cap 0x018000, wptr 0x000018 reset:0 non-seq:0, zcond: 2(oi) [type: 2(SEQ_WRITE_REQUIRED)]"
        );
        let full = ZoneInfo { cond: ZoneCond::Full, wp: Sector(0x80000), ..z };
        assert!(report_line(&raw(&full)).contains("wptr 0x020000 reset:0 non-seq:0, zcond:14(fu)"));
    }

    #[test]
    fn wait_arguments() {
        assert_eq!(parse_wait("forever"), Ok(Duration::MAX));
        assert_eq!(parse_wait("2.5"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_wait("0"), Ok(Duration::ZERO));
        for bad in ["-1", "abc", "NaN", "inf", "1e300", "5s", ""] {
            assert!(parse_wait(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sector_arguments() {
        assert_eq!(sectors("0x40000"), Ok(0x40000));
        assert_eq!(sectors("131072"), Ok(131072));
        assert_eq!(sectors("1M"), Ok(1 << 20));
        assert!(sectors("0xzz").is_err());
        assert!(sectors("-1").is_err());
    }
}
