//! How a handle is opened ([`Options`], a builder) and the bounds the library keeps
//! to protect its caller.

use crate::handle::Handle;
use crate::spec::{PathKind, Target};
use crate::stacked::StackDevice;
use crate::{Error, IssuePolicy};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use zblk_core::engine::EngineConfig;
use zblk_dev::file::{FileImage, ImageOptions};
use zblk_dev::linux::{LinuxOptions, LinuxZoned};
use zblk_dev::nvme::NvmeZns;
use zblk_dev::{Device, Locked, MemDevice};
use zblk_runtime::{Backend, Runtime, RuntimeConfig};

/// The deepest queue a handle takes: the runtime's bound on a real run's depth
/// (`zblk_runtime::bench::MAX_IODEPTH`, what `zblk bench --iodepth` takes).
pub const MAX_QUEUE_DEPTH: u32 = zblk_runtime::bench::MAX_IODEPTH;

/// The most bytes one request may carry: the runtime's bound on a real run's buffers
/// (`zblk_runtime::bench::MAX_BUFFER_BYTES`, 4 GiB).
pub const MAX_IO_BYTES: u64 = zblk_runtime::bench::MAX_BUFFER_BYTES;

/// How to open a handle: the issue policy, the queue depth, read-only, the I/O
/// driver, a wait for an image's lock, the largest request. Every setting has a
/// default; [`Options::open`] checks them before it opens anything.
///
/// ```
/// use zblk::{IssuePolicy, Options};
///
/// let h = Options::new().policy(IssuePolicy::Zwp).queue_depth(8).open("sim:nullb:zone_size=4,size=64")?;
/// assert_eq!(h.policy(), IssuePolicy::Zwp);
/// assert!(Options::new().queue_depth(0).open("sim:nullb").is_err());
/// # Ok::<(), zblk::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Options {
    policy: Option<IssuePolicy>,
    queue_depth: u32,
    read_only: bool,
    backend: Backend,
    lock_wait: Option<Duration>,
    max_io_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options::new()
    }
}

impl Options {
    /// The defaults: the device's own issue policy
    /// ([`IssuePolicy::default_for`]), the engine's queue depth (64), read and
    /// write, io_uring where the kernel allows it, no wait for an image's lock,
    /// requests up to [`MAX_IO_BYTES`].
    pub fn new() -> Options {
        Options {
            policy: None,
            queue_depth: EngineConfig::default().queue_depth,
            read_only: false,
            backend: Backend::Auto,
            lock_wait: None,
            max_io_bytes: MAX_IO_BYTES,
        }
    }

    /// The issue policy of zone writes (`zwp` per-zone plugging, `qd1` the single
    /// issuer, `pipeline`, ...); a policy the device cannot run is refused at open.
    pub fn policy(mut self, policy: IssuePolicy) -> Options {
        self.policy = Some(policy);
        self
    }

    /// Requests the device is given at once (its tags), 1 to [`MAX_QUEUE_DEPTH`];
    /// requests beyond wait in the engine.
    pub fn queue_depth(mut self, depth: u32) -> Options {
        self.queue_depth = depth;
        self
    }

    /// Open for reading only: writes, zone operations and flushes fail; an image is
    /// shared with other readers and not repaired. (A simulated preset or stack,
    /// which starts empty, is refused read-only: [`Error::Unsupported`].)
    pub fn read_only(mut self, read_only: bool) -> Options {
        self.read_only = read_only;
        self
    }

    /// The I/O driver: io_uring where allowed ([`Backend::Auto`]), io_uring or fail,
    /// or a pool of threads doing `pread`/`pwrite`.
    pub fn backend(mut self, backend: Backend) -> Options {
        self.backend = backend;
        self
    }

    /// When another process holds an image, wait this long for it to let go
    /// (`Duration::MAX`: as long as it takes) instead of failing at once.
    pub fn lock_wait(mut self, wait: Duration) -> Options {
        self.lock_wait = Some(wait);
        self
    }

    /// The most bytes one request may carry, 1 to [`MAX_IO_BYTES`]: a longer one
    /// fails with [`Error::Limit`] before it is submitted.
    pub fn max_io_bytes(mut self, bytes: u64) -> Options {
        self.max_io_bytes = bytes;
        self
    }

    /// Opens the target `spec` names ([`crate::spec`]) and starts the runtime on it.
    ///
    /// On `stack:SPEC` the runtime's engine (this handle's policy) drives the
    /// stack's top device, the stack splits and remaps each request to its disks,
    /// and every disk runs its own engine (under this policy too when one is asked
    /// for, else the disk's own), as the kernel stacks a device-mapper target on
    /// zoned disks; requests complete as soon as the simulation has carried them
    /// out (no timing model runs, as on `sim:`).
    ///
    /// ```
    /// let h = zblk::Handle::open("stack:linear[2*nullb:zone_size=4,size=64]")?;
    /// assert_eq!(h.capacity(), 128 << 20);
    /// let at = h.append(h.zone_size() * 20, &[3; 4096])?; // a zone of the second disk
    /// assert_eq!(at, h.zone_size() * 20);
    /// # Ok::<(), zblk::Error>(())
    /// ```
    pub fn open(&self, spec: &str) -> Result<Handle, Error> {
        self.check()?;
        match Target::parse(spec)? {
            Target::Sim(_) | Target::Stack(_) if self.read_only => Err(Error::Unsupported {
                spec: spec.into(),
                why: "a simulated device starts empty in memory: there is nothing to open read-only".into(),
            }),
            Target::Sim(d) => {
                let geo = d.params.validate().map_err(|e| Error::Spec { spec: spec.into(), why: e.to_string() })?;
                let dev = Locked::new(MemDevice::new(&geo, true), spec, d.params.rotational);
                self.start(Arc::new(dev), spec)
            }
            Target::Stack(s) => {
                // A stack that does not build (its disks' geometries, its limits) is
                // a bad spec, as a preset's bad geometry is.
                let dev =
                    StackDevice::start(*s, self.policy, spec).map_err(|why| Error::Spec { spec: spec.into(), why })?;
                self.start(dev, spec)
            }
            Target::Path(path) => self.open_path(&path, spec),
        }
    }

    fn open_path(&self, path: &Path, spec: &str) -> Result<Handle, Error> {
        match PathKind::of(path) {
            PathKind::Nvme => self.start(NvmeZns::open(path, self.read_only).map_err(Error::of_device)?, spec),
            PathKind::Linux => {
                let opts = LinuxOptions { read_only: self.read_only, ..LinuxOptions::default() };
                self.start(LinuxZoned::open(path, &opts).map_err(Error::of_device)?, spec)
            }
            PathKind::Image => {
                let opts =
                    ImageOptions { read_only: self.read_only, lock_wait: self.lock_wait, ..ImageOptions::default() };
                let img = FileImage::open(path, &opts).map_err(Error::of_image)?;
                let repairs = img.repairs().to_vec();
                self.start(img, spec).map(|h| h.with_repairs(repairs))
            }
        }
    }

    /// The settings within their bounds.
    fn check(&self) -> Result<(), Error> {
        if !(1..=MAX_QUEUE_DEPTH).contains(&self.queue_depth) {
            return Err(Error::Limit {
                what: "queue depth",
                value: self.queue_depth.into(),
                bounds: format!("1 to {MAX_QUEUE_DEPTH}"),
            });
        }
        if !(1..=MAX_IO_BYTES).contains(&self.max_io_bytes) {
            return Err(Error::Limit {
                what: "largest request",
                value: self.max_io_bytes,
                bounds: format!("1 to {MAX_IO_BYTES} bytes"),
            });
        }
        Ok(())
    }

    /// Starts the runtime on an opened device, with the device's own policy unless
    /// one was asked for.
    fn start<D: Device + 'static>(&self, dev: D, spec: &str) -> Result<Handle, Error> {
        let geo = dev.geometry().clone();
        let policy = self
            .policy
            .unwrap_or_else(|| IssuePolicy::default_for(geo.is_zoned(), dev.rotational(), dev.keeps_zone_order()));
        let engine = EngineConfig { policy, queue_depth: self.queue_depth, ..EngineConfig::default() };
        let rt = Runtime::start(dev, RuntimeConfig { engine, backend: self.backend, ..RuntimeConfig::default() })
            .map_err(|e| {
                let errno = match &e {
                    zblk_runtime::RuntimeError::ZoneReport { status, .. } => status.errno(),
                    zblk_runtime::RuntimeError::Policy { .. } => 22,
                    zblk_runtime::RuntimeError::IoUring(io) | zblk_runtime::RuntimeError::Thread(io) => {
                        io.raw_os_error().unwrap_or(5)
                    }
                };
                Error::Open { errno, source: Box::new(e) }
            })?;
        Ok(Handle::new(rt, spec, policy, self.max_io_bytes))
    }
}
