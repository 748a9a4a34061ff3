//! The options of `zblk bench` (fio's job options, the engine's settings, the
//! output format) and what they make: a [`JobSpec`], an issue policy. Shared by the
//! simulated run (`cmd/bench.rs`) and the real one (`cmd/imgbench.rs`), so that
//! neither command imports the other.

use crate::{CliError, devspec, parse};
use clap::{Args, ValueEnum};
use zblk_core::engine::{EngineConfig, IssuePolicy, WpRecovery, ZoneWrites};
use zblk_workload::job::{JobSpec, Rw, ZoneMode};

/// The most copies of a job (the workload's limit, checked by the library too);
/// `--numjobs`'s help says the number.
pub use zblk_workload::job::MAX_NUMJOBS;

/// Job options use fio's names (`--rw`, `--bs`, `--iodepth`, `--numjobs`, `--size`,
/// `--io_size`, `--runtime`, `--offset`, `--zonemode`, `--max_open_zones`).
/// With `--image IMG` the jobs run for real on a zoned image (wall-clock time), from
/// buffers registered with the io_uring ring where the image takes `O_DIRECT` (as
/// fio's `--fixedbufs`; the report counts the transfers that used them; an image in
/// tmpfs moves through the page cache and gets plain buffers); otherwise on a
/// simulated device (virtual time, labelled as such).
#[derive(Args, Debug)]
#[command(after_help = devspec_help())]
pub struct BenchArgs {
    /// Run on this zoned image (see `zblk create`), Linux zoned block device (e.g.
    /// /dev/nullb0) or NVMe ZNS generic device (/dev/ng0n1) instead of a simulated
    /// device.
    #[arg(long, value_name = "IMG")]
    pub image: Option<std::path::PathBuf>,
    /// With --image: waiting for an image another process holds.
    #[command(flatten)]
    pub lock: crate::image::WaitArg,
    /// With --image: io_uring (the default, falling back to psync where io_uring is
    /// not available) or psync (a thread pool doing pread/pwrite).
    #[arg(long)]
    pub ioengine: Option<String>,
    /// Simulated device: a preset, then null_blk-style parameters overriding it,
    /// e.g. `nullb:zone_size=64,zone_append_max_sectors=0,completion_dist=uniform`
    /// or `smr-30tb:write_cache=0`.
    #[arg(long, default_value = "nullb", value_name = "SPEC")]
    pub dev: String,
    /// Job name.
    #[arg(long, default_value = "job")]
    pub name: String,
    /// I/O pattern.
    #[arg(long, value_enum, default_value = "write")]
    pub rw: RwArg,
    /// Block size (bytes, or with a suffix: 4k, 1M).
    #[arg(long, default_value = "4k", value_parser = parse::size)]
    pub bs: u64,
    /// I/Os in flight per job.
    #[arg(long, default_value_t = 1)]
    pub iodepth: u32,
    /// Number of copies of the job (at most 256).
    #[arg(long, default_value_t = 1)]
    pub numjobs: u32,
    /// Start of the region the job works on.
    #[arg(long, default_value = "0", value_parser = parse::size)]
    pub offset: u64,
    /// Copy N of the job (--numjobs) starts at --offset + N x this, its region --size
    /// long from there: N streams, each in its own zones (fio's offset_increment).
    #[arg(long = "offset_increment", default_value = "0", value_parser = parse::size)]
    pub offset_increment: u64,
    /// Length of the region (default: to the end of the device).
    #[arg(long, value_parser = parse::size)]
    pub size: Option<u64>,
    /// Bytes each job transfers (default: the region size).
    #[arg(long = "io_size", value_parser = parse::size)]
    pub io_size: Option<u64>,
    /// Run for this long (e.g. 10s, 500ms; virtual time on a simulated device) instead
    /// of a byte count.
    #[arg(long, value_parser = parse::duration_ns)]
    pub runtime: Option<u64>,
    /// `zbd`: writes go to zone write pointers, full zones are reset (as fio's
    /// zonemode=zbd). Default: zbd on a zoned device, none otherwise.
    #[arg(long, value_enum)]
    pub zonemode: Option<ZoneModeArg>,
    /// With zonemode=zbd: zones written at once by all jobs (0: the device's open zone
    /// limit, none if it has none, as fio).
    #[arg(long = "max_open_zones", default_value_t = 0)]
    pub max_open_zones: u32,
    /// Write with forced unit access.
    #[arg(long)]
    pub fua: bool,
    /// When a job's I/O is done, flush the device's write cache; the job's time
    /// includes the flush, so the rate is what the media sustains.
    #[arg(long = "end_fsync", value_parser = clap::value_parser!(u8).range(0..=1), default_value_t = 0)]
    pub end_fsync: u8,
    /// Host turnaround between a completion and the next submission (e.g. 18us).
    /// Default: the fitted value for the disk presets (docs/calibration.md), 0 otherwise.
    /// At most 1s.
    #[arg(long = "host-latency", value_parser = parse::host_delay_ns)]
    pub host_latency: Option<u64>,
    /// The kernel's plug work (e.g. 40us): a zone write a completion releases from
    /// its plug reaches the device this long after the completion, as the block
    /// layer's work item issues it. Default 0 (at the completion). Longer than
    /// --host-latency, a job's submission to an idle zone can overtake it. At most 1s.
    #[arg(long = "plug-work", value_parser = parse::host_delay_ns)]
    pub plug_work: Option<u64>,
    /// Run fio's jobs on this many host CPUs, in time (e.g. 2): a job's submission
    /// takes --host-submit of a CPU, a job woken by a zone lock let go runs
    /// --host-wake later, and jobs beyond the CPUs wait for one, taking turns. The
    /// default, 0: the jobs that can run at an instant take turns at that instant,
    /// one submission each, in no time.
    #[arg(long = "host-cpus", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub host_cpus: u32,
    /// With --host-cpus: the CPU time of one submission (e.g. 10us). At most 1s.
    #[arg(long = "host-submit", value_parser = parse::host_delay_ns)]
    pub host_submit: Option<u64>,
    /// With --host-cpus: a woken job's wake-up (e.g. 30us), or with --host-wake-p90
    /// the wake-ups' median. At most 1s.
    #[arg(long = "host-wake", value_parser = parse::host_delay_ns)]
    pub host_wake: Option<u64>,
    /// With --host-cpus and --host-wake: the wake-ups spread, log-normal, with this
    /// 90th percentile (e.g. 80us; at least --host-wake; each clipped at 1s), drawn
    /// from the run's seed, as a host's futex wake-ups have a long tail
    /// (scripts/fio-host-timing measures them). At most 1s.
    #[arg(long = "host-wake-p90", value_parser = parse::host_delay_ns)]
    pub host_wake_p90: Option<u64>,
    /// With --host-cpus: the rest of a job's file open after its start scan of its
    /// zones (fio's cache invalidation and fadvise calls, e.g. 20us): its first
    /// submission is a step of its own that much later, and jobs the scan's unlocks
    /// woke may run first. Default: one step. At most 1s.
    #[arg(long = "host-open", value_parser = parse::host_delay_ns)]
    pub host_open: Option<u64>,
    /// With --host-cpus: the jobs start one after another, this far apart (e.g.
    /// 20ms; fio sets each job up in turn). At most 1s.
    #[arg(long = "host-start", value_parser = parse::host_delay_ns)]
    pub host_start: Option<u64>,
    /// Report one result per job description instead of per job.
    #[arg(long = "group_reporting")]
    pub group_reporting: bool,
    /// Write every event of the simulated device to FILE as `zblk trace` prints it
    /// (blkparse-style, virtual time), as `zblk serve --trace` writes a served one.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// With --image: writes go as zone appends to their zone's start (native on an
    /// NVMe generic device, emulated by zblk elsewhere), as fio's zone_append write
    /// mode; fio's zone rules still choose the zones.
    #[arg(long = "zone_append")]
    pub zone_append: bool,
    /// Zone write issue policy (the help lists every policy with its summary, and
    /// the default rule).
    #[arg(long, value_parser = policy_parser(), help = policy_help())]
    pub policy: Option<IssuePolicy>,
    /// batch policy: how many times a waiting zone may be passed over by deeper or
    /// nearer zones before it goes first.
    #[arg(long = "batch-max-bypass", default_value_t = EngineConfig::default().batch_max_bypass)]
    pub batch_max_bypass: u32,
    /// batch policy: after draining a zone while others wait, keep the device for
    /// the zone's next write this long (e.g. 40us; 0: never).
    #[arg(long = "batch-anticipate", value_parser = parse::duration_or_zero_ns, default_value = "50us")]
    pub batch_anticipate: u64,
    /// pipeline policy: writes of one zone on the device at once (0: the queue
    /// depth, iodepth x numjobs).
    #[arg(long = "pipeline-depth", default_value_t = EngineConfig::default().pipeline_depth)]
    pub pipeline_depth: u32,
    /// With --image: after a batch of completions, the runtime's io_uring
    /// completion thread keeps looking for the next for this many microseconds
    /// before it sleeps (0: it sleeps at once). While completions come closer than
    /// that, none waits for the thread to be woken; meanwhile it keeps a CPU busy.
    #[arg(long, value_name = "MICROSECONDS", default_value_t = 0,
          value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub poll: u64,
    /// The queue attribute: 1 selects the single issuer (qd1), 0 per-zone plugging.
    #[arg(long = "zoned_qd1_writes", value_parser = clap::value_parser!(u8).range(0..=1))]
    pub zoned_qd1_writes: Option<u8>,
    /// After a write error: report (zblk re-reads the zone and resumes) or kernel
    /// (writes fail until the zone is reported).
    #[arg(long = "wp-recovery", value_enum, default_value = "report")]
    pub wp_recovery: RecoveryArg,
    /// Seed of every random choice; the same seed gives the same run.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Check every step of the simulation (ordering, data, plugs); slower.
    #[arg(long)]
    pub check: bool,
    /// Inject write errors (parts per million of writes).
    #[arg(long = "write-error-ppm", default_value_t = 0)]
    pub write_error_ppm: u32,
    /// Print fio's JSON output format.
    #[arg(long)]
    pub json: bool,
    /// fio's output format option: `normal` or `json`.
    #[arg(long = "output-format", value_enum)]
    pub output_format: Option<OutputFormat>,
}

impl BenchArgs {
    /// Whether any of the host CPUs' times (`--host-submit`, `--host-wake`,
    /// `--host-wake-p90`, `--host-start`, `--host-open`) was given.
    pub fn host_times_given(&self) -> bool {
        [self.host_submit, self.host_wake, self.host_wake_p90, self.host_start, self.host_open]
            .iter()
            .any(Option::is_some)
    }
}

fn devspec_help() -> String {
    devspec::help()
}

/// fio's `rw` values.
#[derive(Clone, Copy, Debug, ValueEnum)]
#[allow(missing_docs)]
pub enum RwArg {
    Read,
    Write,
    Randread,
    Randwrite,
}

/// fio's `zonemode` values.
#[derive(Clone, Copy, Debug, ValueEnum)]
#[allow(missing_docs)]
pub enum ZoneModeArg {
    None,
    Zbd,
}

/// Write pointer recovery.
#[derive(Clone, Copy, Debug, ValueEnum)]
#[allow(missing_docs)]
pub enum RecoveryArg {
    Report,
    Kernel,
}

/// Output formats.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum OutputFormat {
    Normal,
    Json,
}

/// `--policy`: every name [`IssuePolicy::parse`] knows, so that a new policy is on
/// the command line as soon as it is in `IssuePolicy::ALL`.
pub(crate) fn policy_parser() -> impl clap::builder::TypedValueParser<Value = IssuePolicy> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(IssuePolicy::ALL.map(IssuePolicy::name))
        .map(|name: String| IssuePolicy::parse(&name).expect("a possible value is a policy name"))
}

/// `--policy`'s help: every policy with its summary, and the default (the kernel's
/// `zoned_qd1_writes` default).
fn policy_help() -> String {
    let policies: Vec<String> =
        zblk_core::engine::POLICIES.iter().map(|p| format!("{} ({})", p.name, p.summary)).collect();
    format!(
        "Zone write issue policy: {}. Default: {} on a rotational zoned device (the kernel's zoned_qd1_writes \
         default), {} on another zoned image, {} otherwise",
        policies.join(", "),
        IssuePolicy::default_for(true, true, false).name(),
        IssuePolicy::default_for(true, false, true).name(),
        IssuePolicy::default_for(true, false, false).name()
    )
}

/// The names of `policies`, joined by `sep` (`zwp, qd1, ...`).
pub(crate) fn policy_names(policies: &[IssuePolicy], sep: &str) -> String {
    policies.iter().map(|p| p.name()).collect::<Vec<_>>().join(sep)
}

/// The issue policy from `--policy` and `--zoned_qd1_writes`, or the device default
/// ([`IssuePolicy::default_for`]).
pub fn choose_policy(
    policy: Option<IssuePolicy>,
    qd1: Option<u8>,
    zoned: bool,
    rotational: bool,
    keeps_zone_order: bool,
) -> Result<IssuePolicy, CliError> {
    if qd1.is_some() && !zoned {
        return Err(CliError::msg("--zoned_qd1_writes: the device is not zoned (the attribute is always 0)"));
    }
    match (policy, qd1) {
        (Some(p), Some(q)) if p.single_issuer() != (q == 1) => {
            Err(CliError::msg(format!("--policy {} contradicts --zoned_qd1_writes {q}", p.name())))
        }
        (Some(p), _) => Ok(p),
        (None, Some(q)) => Ok(IssuePolicy::selected_by_zoned_qd1_writes(q == 1)),
        (None, None) => Ok(IssuePolicy::default_for(zoned, rotational, keeps_zone_order)),
    }
}

/// Refuses `--pipeline-depth` under a policy that does not pipeline (it would be
/// silently ignored).
pub fn check_pipeline_depth(a: &BenchArgs, policy: IssuePolicy) -> Result<(), CliError> {
    match (a.pipeline_depth, policy) {
        (0, _) => Ok(()),
        (_, p) if p.zone_writes() == ZoneWrites::Pipelined => Ok(()),
        (d, p) => Err(CliError(format!(
            "--pipeline-depth {d}: the policy is {}, which keeps one write per zone on the device (--policy pipeline)",
            p.name()
        ))),
    }
}

/// Refuses a policy that needs a device keeping a zone's writes in order
/// (pipelining) on a simulated device: a simulated disk's queue may reorder what it
/// is sent, as a real zoned disk's may.
pub fn refuse_on_simulated(policy: IssuePolicy) -> Result<(), CliError> {
    match policy.refusal_on(false) {
        Some(why) => Err(CliError(format!("--policy {}: a simulated device: {why}", policy.name()))),
        None => Ok(()),
    }
}

/// The job `a` describes, on a device that is zoned or not (`zonemode` defaults to
/// zbd on a zoned device, as fio on a zoned block device).
pub fn job_spec(a: &BenchArgs, zoned: bool) -> JobSpec {
    let zonemode = match a.zonemode {
        Some(ZoneModeArg::Zbd) => ZoneMode::Zbd,
        Some(ZoneModeArg::None) => ZoneMode::None,
        None if zoned => ZoneMode::Zbd,
        None => ZoneMode::None,
    };
    let rw = match a.rw {
        RwArg::Read => Rw::Read,
        RwArg::Write => Rw::Write,
        RwArg::Randread => Rw::RandRead,
        RwArg::Randwrite => Rw::RandWrite,
    };
    JobSpec {
        name: a.name.clone(),
        rw,
        bs_bytes: a.bs,
        iodepth: a.iodepth,
        numjobs: a.numjobs,
        offset_bytes: a.offset,
        offset_increment_bytes: a.offset_increment,
        size_bytes: a.size,
        io_size_bytes: a.io_size,
        runtime_ns: a.runtime,
        zonemode,
        max_open_zones: a.max_open_zones,
        fua: a.fua,
        end_fsync: a.end_fsync == 1,
    }
}

/// The engine settings the options give, under `policy` (the device's queue depth
/// and limits are the caller's).
pub fn engine_config(a: &BenchArgs, policy: IssuePolicy) -> EngineConfig {
    EngineConfig {
        policy,
        wp_recovery: match a.wp_recovery {
            RecoveryArg::Report => WpRecovery::Report,
            RecoveryArg::Kernel => WpRecovery::Kernel,
        },
        batch_max_bypass: a.batch_max_bypass,
        batch_anticipate_ns: a.batch_anticipate,
        pipeline_depth: a.pipeline_depth,
        ..EngineConfig::default()
    }
}
