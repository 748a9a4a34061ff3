//! `zblk serve IMG | --dev SPEC | --stack SPEC`: a zblk device exposed to the kernel
//! as a zoned ublk block device (`/dev/ublkbN`), every request going through zblk's
//! engine. This command builds the device from its arguments, prints the ready line
//! and waits for a signal; the serving itself is `zblk_serve`'s.
//!
//! The ublk part needs the `ublk` feature (`cargo build --release --features
//! zblk-cli/ublk`): the ublk library generates its bindings at build time with
//! libclang, which the rest of zblk does not need. Without it, `zblk serve` says how
//! to get it.

use crate::CliError;
use clap::Args;
use std::path::{Path, PathBuf};

/// The policy of a simulated device served without `--policy`: per-zone plugging,
/// the kernel's own, so that the model sees the order the kernel sends.
const SIMULATED_POLICY: zblk_core::engine::IssuePolicy = zblk_core::engine::IssuePolicy::Zwp;

/// `--policy`'s help: every policy, and the defaults of an image and of a simulated
/// device.
fn policy_help() -> String {
    use zblk_core::engine::IssuePolicy;
    format!(
        "Zone write issue policy of zblk's engine under the kernel ({}). Default: {} on a rotational device; \
         else {} on an image or the memory device (the kernel sends one write per zone at a time anyway), {} on a \
         Linux zoned device; {} for simulated devices, so that the model sees the kernel's own order",
        crate::jobargs::policy_names(&IssuePolicy::ALL, ", "),
        IssuePolicy::default_for(true, true, true).name(),
        IssuePolicy::default_for(true, false, true).name(),
        IssuePolicy::default_for(true, false, false).name(),
        SIMULATED_POLICY.name()
    )
}

/// Where the ublk driver's control device is (`ublk_drv`).
const UBLK_CONTROL: &str = "/dev/ublk-control";

/// Serve a zblk device to the kernel as a zoned ublk block device.
///
/// Prints the block device's path (`/dev/ublkbN`) as its first line once the device
/// is ready, then serves until SIGINT or SIGTERM: it then removes the device, persists
/// every acknowledged write (an image is closed cleanly) and exits 0. Needs the ublk
/// driver (`modprobe ublk_drv`, Linux 6.6+ for zoned devices) and the rights to open
/// /dev/ublk-control (root). The kernel sees a host-managed zoned disk with the
/// device's zone size, conventional zones, open/active limits and a volatile write
/// cache with FUA: its flushes reach the image's durable state before they complete.
///
/// Data moves by user copy (pread/pwrite on /dev/ublkcN), the path every driver
/// gives a zoned device; requests come many to a batched command where the driver
/// offers them (Linux 7.3), else one io_uring command each (`--transport`).
/// Standard error says which once the device is ready, with the newer paths the
/// driver also offers (Linux 7.3's: automatic buffer registration, zero copy), which
/// zblk does not take yet (docs/serve.md, "The driver's paths").
///
/// `--dev nullb:...,completion_nsec=0` is zblk's memory device (null_blk without a
/// latency: nothing to pace), served from memory. Any other simulated device (`--dev
/// smr-30tb`) or stack (`--stack ...`) is paced to wall-clock time: each request
/// enters the simulation when it arrives and completes when wall time reaches the
/// time the device's timing model completes it, every time of the model stretched
/// `--time-scale` times. Their data is kept in memory, only what is written, up to
/// `--data-limit` (further writes fail with ENOSPC); with `--no-data` nothing is kept
/// and every read returns zeroes.
#[derive(Args, Debug)]
#[command(after_help = serve_help())]
pub struct ServeArgs {
    /// The image to serve (persistent).
    #[arg(required_unless_present_any = ["dev", "stack"], conflicts_with_all = ["dev", "stack"])]
    pub image: Option<PathBuf>,
    /// Serve a simulated device: a preset with null_blk parameters, as `zblk bench
    /// --dev` takes it (`smr-30tb`, `nullb:zone_size=64,size=1024`; its data is lost
    /// when the server stops). `nullb` with `completion_nsec=0` is the memory device,
    /// served from memory; the others are paced to wall-clock time.
    #[arg(long, conflicts_with = "stack")]
    pub dev: Option<String>,
    /// Waiting for an image another process holds.
    #[command(flatten)]
    pub lock: crate::image::WaitArg,
    /// Serve a simulated stack paced to wall-clock time (`striped:chunk=64k[2*nullb:...]`,
    /// as `zblk trace --stack` takes it; its disks timed by their `completion_nsec`).
    #[arg(long)]
    pub stack: Option<String>,
    /// Simulated devices: memory for written data (`1G`, `512M`); writes beyond it
    /// fail with ENOSPC.
    #[arg(long, default_value = "1G", value_parser = parse_limit, conflicts_with = "image")]
    pub data_limit: u64,
    /// Simulated devices: keep no data; every read returns zeroes (timing only). An
    /// image always keeps its data: refused with one.
    #[arg(long, conflicts_with = "image")]
    pub no_data: bool,
    /// Paced devices: every time of the timing model stretched N times (a request the
    /// model takes 8 ms for takes 8N ms), so that the host's own cost per request (the
    /// kernel's, a VM's) becomes small beside the model's. What the kernel measures is
    /// then N times slower than the model: scale its figures back by N. 1: real time.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000),
          conflicts_with = "image")]
    pub time_scale: u32,
    /// Zone write issue policy of zblk's engine under the kernel (the help lists
    /// them). Default: the device's ([`zblk_core::engine::IssuePolicy::default_for`]); [`SIMULATED_POLICY`]
    /// for simulated devices.
    #[arg(long, value_parser = crate::jobargs::policy_parser(), help = policy_help())]
    pub policy: Option<zblk_core::engine::IssuePolicy>,
    /// Hardware queues of the ublk device (one serving thread each).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub queues: u16,
    /// Requests in flight per queue the kernel may send.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub depth: u16,
    /// After a request, keep looking for the next one for this many microseconds
    /// before the queue's thread sleeps (0: sleep at once). While requests come
    /// closer than that, none waits for the thread to be woken, which is most of a
    /// small request's turnaround at QD 1; meanwhile the thread keeps its CPU busy.
    #[arg(long, value_name = "MICROSECONDS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub poll: u64,
    /// How the kernel's requests reach the queues' threads: `auto` (the default),
    /// batched commands when the driver offers them, else a command per request;
    /// `command`, one io_uring command per request (every driver since Linux 6.6);
    /// `batch`, batched commands (many requests fetched, and many results
    /// committed, by one command: drivers with UBLK_F_BATCH_IO, Linux 7.3; refused by
    /// others). Data moves by user copy either way. A recovered device (--recover)
    /// keeps the one it was added with.
    #[arg(long, value_enum, default_value_t = TransportArg::Auto)]
    pub transport: TransportArg,
    /// Print the ready line as a JSON object ({"device": "/dev/ublkbN", "data": ...}).
    #[arg(long)]
    pub json: bool,
    /// Add the device recoverable (images and Linux devices): if this server dies
    /// (SIGKILL, a crash) the kernel keeps /dev/ublkbN, holds the I/O sent to it, and
    /// gives what was in flight again to the server `zblk serve --recover N` starts.
    #[arg(long, conflicts_with_all = ["dev", "stack", "recover"])]
    pub recoverable: bool,
    /// Serve recoverable device N (/dev/ublkbN), whose server died, from the same
    /// image: the I/O the kernel held goes on. Its queues and depth are the device's.
    #[arg(long, value_name = "N", conflicts_with_all = ["dev", "stack"], requires = "image")]
    pub recover: Option<u32>,
    /// Paced devices: write every I/O of the simulated device (and of each member of a
    /// stack) to FILE as `zblk trace` prints it, blkparse-style, stamped with the
    /// model's time. Its `D` lines are the order in which the device receives writes,
    /// after zblk's issue policy: to compare a policy's order with the kernel's.
    #[arg(long, value_name = "FILE", conflicts_with = "image")]
    pub trace: Option<PathBuf>,
}

/// `--transport`: how requests travel between the ublk driver and zblk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TransportArg {
    /// Batched commands if the driver offers them, else a command per request.
    Auto,
    /// One io_uring command per request.
    Command,
    /// Batched commands (Linux 7.3's driver); an error on a driver without them.
    Batch,
}

fn parse_limit(text: &str) -> Result<u64, String> {
    zblk_core::units::parse_size(text).map_err(|e| e.to_string())
}

fn serve_help() -> String {
    format!(
        "Simulated devices keep their written data in memory (4 KiB pages, only what is written) up to \
         --data-limit; --no-data keeps none (reads return zeroes; the JSON ready line says \
         \"data\": \"none: reads return zeroes\").\n\n\
         A time scale (--time-scale N) slows the timing model down N times, wall-clock time against model \
         time: the device serves N times fewer requests per second than the model would, and a \
         measurement of it (fio's bandwidth, IOPS) multiplied by N (latencies divided by N) is the model's \
         under the kernel. It exists so that a slow host (an emulated VM) does not add its own cost to the \
         model's: pick N so that the host's cost per request is small beside the model's time for it. The \
         ready line's JSON says \"time_scale\".\n\n{}",
        crate::devspec::help()
    )
}

/// The ublk driver's state on this machine, checked before anything is opened, so the
/// message says what to do.
fn check_driver(control: &Path) -> Result<(), CliError> {
    if !control.exists() {
        return Err(CliError(format!(
            "{}: no such device: the ublk driver is not loaded (run `modprobe ublk_drv` as root; \
             zoned ublk devices need Linux 6.6 or later built with CONFIG_BLK_DEV_UBLK)",
            control.display()
        )));
    }
    match std::fs::OpenOptions::new().read(true).write(true).open(control) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(CliError(format!(
            "{}: permission denied: serving a ublk device needs root (or CAP_SYS_ADMIN)",
            control.display()
        ))),
        Err(e) => Err(CliError(format!("{}: {e}", control.display()))),
    }
}

/// Runs the command.
pub fn run(a: &ServeArgs) -> Result<(), CliError> {
    check_driver(Path::new(UBLK_CONTROL))?;
    #[cfg(feature = "ublk")]
    return with_ublk::run(a);
    #[cfg(not(feature = "ublk"))]
    {
        let _ = a;
        Err(CliError::msg(
            "this zblk was built without ublk: build it with `cargo build --release --features zblk-cli/ublk` \
             (needs libclang: apt-get install libclang-dev)",
        ))
    }
}

#[cfg(feature = "ublk")]
mod with_ublk {
    use super::ServeArgs;
    use crate::out::{self, errln};
    use crate::{CliError, devspec, image, stacksim};
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use zblk_core::engine::{EngineConfig, IssuePolicy};
    use zblk_core::stack::SplitOrder;
    use zblk_dev::{Locked, MemDevice};
    use zblk_runtime::{Backend, Runtime, RuntimeConfig};
    use zblk_serve::ublk::{Ready, Recovery, ServeConfig, Transport, poll_summary, served_summary};
    use zblk_serve::{
        DataLimit, DataStore, PacedSim, Replay, RuntimeServed, Served, ServedRecord, SimBuilder, check_geometry,
    };
    use zblk_sim::presets::ModelParams;
    use zblk_sim::{SimConfig, StackSimConfig, null_model};

    /// What must be stopped once the queues have ended.
    enum Owner {
        /// The runtime: closing it persists every acknowledged write.
        Runtime(Runtime),
        /// The pacing thread, which ends once the queues' handles are dropped.
        Paced(JoinHandle<()>),
    }

    /// The device to serve and what the ready line says of it.
    struct Device {
        served: Arc<dyn Served>,
        owner: Owner,
        /// The image's path, or the simulated device's spec.
        name: String,
        /// Whether the data survives the server (an image).
        persistent: bool,
        /// The kernel sees a rotational disk.
        rotational: bool,
        /// What the ready line's JSON adds: `data`, `policy`, `models`, ...
        extra: serde_json::Map<String, serde_json::Value>,
        /// What the device records of what it serves, for a recovery to check.
        record: ServedRecord,
    }

    /// Fail-stop for a build that unwinds (the release build aborts at a panic
    /// anyway): a panic on any thread of the server (the runtime's, a queue's, the
    /// pacing thread's) ends the process once its message is out. A server that went
    /// on without that thread would leave the kernel's requests waiting on it, or
    /// fail every one of them, with the device still up; ended, the device is the
    /// kernel's to fail or, recoverable, to hold for `zblk serve --recover`.
    fn stop_on_panic() {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            report(info);
            std::process::abort();
        }));
    }

    fn serve_error(e: zblk_serve::ServeError) -> CliError {
        CliError(e.0)
    }

    /// Serves the device (the driver is there: [`super::check_driver`] said so).
    pub(super) fn run(a: &ServeArgs) -> Result<(), CliError> {
        // SIGINT and SIGTERM are blocked in every thread (the runtime's, the pacing
        // thread's and the queues' inherit the mask from here) and taken synchronously
        // by the thread that waits for them, which then stops the device: no handler
        // runs in the middle of a request.
        let signals = Arc::new(block_signals());
        stop_on_panic();
        let dev = start_device(a, &signals)?;
        let Device { served, owner, name, persistent, rotational, extra, record } = dev;
        let recovery = match (a.recoverable, a.recover) {
            (_, Some(n)) => Recovery::Recover(n),
            (true, None) => Recovery::Recoverable,
            (false, None) => Recovery::None,
        };
        let poll = std::time::Duration::from_micros(a.poll);
        let transport = match a.transport {
            super::TransportArg::Auto => Transport::Auto,
            super::TransportArg::Command => Transport::Command,
            super::TransportArg::Batch => Transport::Batch,
        };
        let cfg = ServeConfig { queues: a.queues, depth: a.depth, rotational, recovery, poll, record, transport };
        let json = a.json;
        let shown = name.clone();
        // A signal that came while the device was being made (the lock taken, the
        // kernel revalidating its zones) stops it before its ready line is printed.
        let early = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let early_seen = Arc::clone(&early);
        let outcome = zblk_serve::ublk::serve(&cfg, served, move |ready: &Ready| {
            if let Some(sig) = pending_signal(&signals) {
                early_seen.store(sig, std::sync::atomic::Ordering::Relaxed);
                errln!("zblk: signal {sig}: stopping the device before it was ready");
                return;
            }
            print_ready(ready, json, &shown, extra);
            let sig = wait_signal(&signals);
            errln!("zblk: signal {sig}: stopping the device");
        })
        .map_err(serve_error);
        // The queue threads have ended and dropped their handles to the device.
        let closed = match owner {
            Owner::Runtime(rt) => rt.close().map_err(|e| CliError(format!("{name}: closing: {e}"))),
            Owner::Paced(t) => t.join().map_err(|_| CliError(format!("{name}: the simulation's thread panicked"))),
        };
        // What the kernel sent, by operation: shows which of the block layer's
        // operations (zone append, RESET_ALL, FLUSH) a file system or a tool issued.
        errln!("zblk: {name}: requests served: {}", served_summary());
        if a.poll > 0 {
            errln!("zblk: {name}: batches of requests and completions: {}", poll_summary());
        }
        outcome?;
        closed?;
        if persistent {
            errln!("zblk: {name}: stopped, every acknowledged write persisted");
        }
        match early.load(std::sync::atomic::Ordering::Relaxed) {
            0 => Ok(()),
            sig => Err(CliError(format!("{name}: signal {sig} before the device was ready: not served"))),
        }
    }

    /// The ready line: the device's path, or with `--json` an object.
    fn print_ready(ready: &Ready, json: bool, name: &str, extra: serde_json::Map<String, serde_json::Value>) {
        let line = if json {
            let mut obj = serde_json::Map::new();
            obj.insert("device".into(), ready.device.clone().into());
            obj.insert("id".into(), ready.id.into());
            obj.insert("serving".into(), name.into());
            obj.insert("path".into(), ready.path.used().into());
            obj.insert("driver_offers".into(), ready.path.offered().into());
            obj.extend(extra);
            serde_json::Value::Object(obj).to_string()
        } else {
            ready.device.clone()
        };
        // The device serves whether or not its ready line could be written (a closed
        // or full standard output): its path is then said on standard error now, and
        // the exit status says at the end that output was lost.
        if !out::stdout(format_args!("{line}\n")) {
            errln!("zblk: standard output could not be written: serving {}", ready.device);
        }
        errln!("zblk: {}: {}", ready.device, ready.path.describe());
        out::done(format!("served {}", ready.device));
    }

    fn start_device(a: &ServeArgs, signals: &Signals) -> Result<Device, CliError> {
        if let Some(text) = &a.dev {
            let spec = devspec::parse(text)?;
            if matches!(spec.model, ModelParams::Null) && spec.params.completion_nsec == 0 {
                return start_memory(a, text, spec.params.clone());
            }
        }
        if a.dev.is_some() || a.stack.is_some() {
            return start_paced(a);
        }
        let path = a.image.as_ref().ok_or_else(|| CliError::msg("give an image, --dev or --stack"))?;
        // SIGINT or SIGTERM ends a wait for another holder's lock: nothing is served.
        let mut stop = || {
            pending_signal(signals)
                .map(|sig| format!("{}: signal {sig} while waiting for its lock: not served", path.display()))
        };
        let target = image::Target::open_unless(path, false, a.lock, &mut stop)?;
        check_geometry(target.geo()).map_err(serve_error)?;
        // An image is recorded by its identity (and file), so that a recovery takes
        // no other image of the same geometry; a Linux device by its path.
        let image = match target.image() {
            Some(img) => Some((img.identity(), img.file_id().map_err(|e| CliError(e.to_string()))?)),
            None => None,
        };
        let record = ServedRecord { name: path.display().to_string(), image };
        let rotational = target.rotational();
        let policy = a.policy.unwrap_or_else(|| target.default_policy());
        let rt = target.start(EngineConfig { policy, ..EngineConfig::default() }, Backend::Auto)?;
        let mut served = RuntimeServed::new(rt.submitter(), rt.geometry().clone(), None);
        if a.recover.is_some() {
            let zones = rt.report_zones().map_err(|s| CliError(format!("{}: zone report: {s}", path.display())))?;
            served = served.recovering(Replay::new(&zones));
        }
        let served: Arc<dyn Served> = Arc::new(served);
        let mut extra = serde_json::Map::new();
        extra.insert("data".into(), "image".into());
        extra.insert("policy".into(), policy.name().into());
        extra.insert("recoverable".into(), (a.recoverable || a.recover.is_some()).into());
        Ok(Device {
            served,
            owner: Owner::Runtime(rt),
            name: path.display().to_string(),
            persistent: true,
            rotational,
            extra,
            record,
        })
    }

    /// What a device served from memory (the memory device, a paced simulation) says
    /// of its data and policy in `--json`; with `--no-data`, the notice that nothing
    /// is kept.
    fn data_fields(a: &ServeArgs, policy: IssuePolicy) -> serde_json::Map<String, serde_json::Value> {
        let mut extra = serde_json::Map::new();
        extra.insert("data".into(), if a.no_data { "none: reads return zeroes" } else { "memory" }.into());
        if a.no_data {
            errln!("zblk: --no-data: written data is not kept, every read returns zeroes");
        } else {
            extra.insert("data_limit".into(), a.data_limit.into());
        }
        extra.insert("policy".into(), policy.name().into());
        extra
    }

    /// The memory device (null_blk with no latency): served from memory through the
    /// runtime, each request completed on the queue's thread.
    fn start_memory(a: &ServeArgs, text: &str, params: zblk_core::params::DeviceParams) -> Result<Device, CliError> {
        if a.trace.is_some() {
            return Err(CliError::msg(
                "--trace: the memory device (completion_nsec=0) is not simulated: only paced devices are traced",
            ));
        }
        if a.time_scale != 1 {
            return Err(CliError::msg(
                "--time-scale: the memory device (completion_nsec=0) has no timing model to stretch",
            ));
        }
        let geo = params.validate().map_err(|e| CliError(format!("--dev: {e}")))?;
        check_geometry(&geo).map_err(serve_error)?;
        let policy = a.policy.unwrap_or(IssuePolicy::default_for(true, params.rotational, true));
        let dev = Arc::new(Locked::new(MemDevice::new(&geo, !a.no_data), "memory", params.rotational));
        let engine = EngineConfig { policy, ..EngineConfig::default() };
        let rt = Runtime::start(dev.clone(), RuntimeConfig { engine, ..RuntimeConfig::default() })
            .map_err(|e| CliError(format!("--dev: {e}")))?;
        let limit = (!a.no_data).then(|| DataLimit::new(dev.clone(), a.data_limit));
        // Reads go to the kernel from the device's pages, not through a buffer.
        let served: Arc<dyn Served> = Arc::new(RuntimeServed::new(rt.submitter(), geo, limit).reading_from(dev));
        let mut extra = data_fields(a, policy);
        extra.insert("paced".into(), "none: the memory device (completion_nsec=0)".into());
        Ok(Device {
            served,
            owner: Owner::Runtime(rt),
            name: text.to_string(),
            persistent: false,
            rotational: params.rotational,
            extra,
            record: ServedRecord { name: text.to_string(), image: None },
        })
    }

    /// A simulated device or stack, paced to wall-clock time.
    fn start_paced(a: &ServeArgs) -> Result<Device, CliError> {
        let limit = if a.no_data { None } else { Some(a.data_limit) };
        let policy = a.policy.unwrap_or(super::SIMULATED_POLICY);
        crate::jobargs::refuse_on_simulated(policy)?;
        let (build, name, rotational): (SimBuilder, String, bool) = if let Some(text) = &a.dev {
            let spec = devspec::parse(text)?;
            let geo = spec.params.validate().map_err(|e| CliError(format!("--dev: {e}")))?;
            check_geometry(&geo).map_err(serve_error)?;
            let rotational = spec.rotational();
            let build: SimBuilder = Box::new(move || {
                let mut cfg = SimConfig::new(spec.params.clone(), 1);
                cfg.engine = EngineConfig { policy, ..EngineConfig::default() };
                // The simulator keeps no data: the server does (DataStore).
                cfg.device.memory_backed = false;
                spec.sim(&cfg).map_err(|e| zblk_serve::ServeError(format!("--dev: {e}")))
            });
            (build, text.clone(), rotational)
        } else {
            let text = a.stack.clone().expect("--stack");
            let spec = stacksim::parse_stack(&text)?;
            let build: SimBuilder = Box::new(move || {
                // The simulator keeps no data: the server does (DataStore).
                let run = StackSimConfig::new(1);
                zblk::spec::stack_sim(&spec, SplitOrder::Head, Some(policy), run, false, &mut null_model)
                    .map_err(|e| zblk_serve::ServeError(format!("--stack: {e}")))
            });
            (build, text, false)
        };
        let build = match &a.trace {
            Some(path) => traced(build, path, a.time_scale)?,
            None => build,
        };
        let (served, info, thread) =
            PacedSim::start(build, DataStore::new(limit), a.time_scale).map_err(serve_error)?;
        check_geometry(&info.geo).map_err(serve_error)?;
        let mut extra = data_fields(a, policy);
        extra.insert("paced".into(), "wall-clock".into());
        extra.insert("time_scale".into(), a.time_scale.into());
        extra.insert("models".into(), info.models.clone().into());
        let scaled = match a.time_scale {
            1 => String::new(),
            n => format!(", every time stretched {n} times"),
        };
        for m in &info.models {
            errln!("zblk: {m} (paced to wall-clock time{scaled})");
        }
        let served: Arc<dyn Served> = served;
        let record = ServedRecord { name: name.clone(), image: None };
        Ok(Device { served, owner: Owner::Paced(thread), name, persistent: false, rotational, extra, record })
    }

    /// `build`, whose simulation then writes every event to `path` (`--trace`), a line
    /// at a time so that the trace is whole however the server ends. The file is
    /// created now, so that a path that cannot be written is refused before the
    /// device exists.
    fn traced(build: SimBuilder, path: &std::path::Path, scale: u32) -> Result<SimBuilder, CliError> {
        use std::io::Write;
        let file = std::fs::File::create(path).map_err(|e| CliError(format!("--trace {}: {e}", path.display())))?;
        let shown = path.display().to_string();
        Ok(Box::new(move || {
            let mut sim = build()?;
            sim.start_tracing();
            let mut out = std::io::LineWriter::new(file);
            let mut head = vec![format!("# zblk serve: simulated devices, model time (time scale {scale})")];
            head.extend(crate::cmd::trace::describe_devices(sim.stack()).into_iter().map(|l| format!("# {l}")));
            let mut failed = head.iter().try_for_each(|l| writeln!(out, "{l}")).err();
            let mut writer = zblk_core::stack::TraceWriter::new(sim.stack());
            let mut said = false;
            sim.set_trace_sink(Box::new(move |e| {
                let line = writer.line(e);
                if failed.is_none() {
                    failed = writeln!(out, "{line}").err();
                }
                if let (Some(err), false) = (&failed, said) {
                    said = true;
                    errln!("zblk: --trace {shown}: {err}: the trace stops here, the device goes on");
                }
            }));
            Ok(sim)
        }))
    }

    /// The signal set the waiting thread takes.
    struct Signals(libc::sigset_t);

    // SAFETY: a sigset_t is plain data.
    unsafe impl Send for Signals {}
    // SAFETY: as above; sigwait only reads it.
    unsafe impl Sync for Signals {}

    fn block_signals() -> Signals {
        // SAFETY: sigset_t is plain data initialised by sigemptyset; pthread_sigmask
        // only changes this thread's mask (threads started later inherit it).
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Signals(set)
        }
    }

    fn wait_signal(s: &Signals) -> i32 {
        let mut sig = 0;
        // SAFETY: the set is initialised; sigwait writes the signal number. (It
        // returns 0 or an error number; an interrupted wait, after SIGSTOP and
        // SIGCONT, waits again.)
        while unsafe { libc::sigwait(&s.0, &mut sig) } != 0 {}
        sig
    }

    /// SIGINT or SIGTERM, if one is pending, taken (it is not delivered again).
    fn pending_signal(s: &Signals) -> Option<i32> {
        let now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: the set is initialised; sigtimedwait with a zero timeout only looks
        // at and takes a pending signal (no info is asked for).
        let sig = unsafe { libc::sigtimedwait(&s.0, std::ptr::null_mut(), &now) };
        (sig > 0).then_some(sig)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_control_device_says_to_load_the_driver() {
        let e = check_driver(Path::new("/nonexistent/ublk-control")).unwrap_err();
        assert!(e.0.contains("modprobe ublk_drv"), "{}", e.0);
    }
}
