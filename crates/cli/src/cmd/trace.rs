//! `zblk trace`: sequential jobs on a simulated stack of devices, every event on
//! every device printed as blkparse prints a blktrace, and per-device seek
//! histograms.

use crate::out::{self, out, outln};
use crate::stacksim::parse_stack;
use crate::{CliError, devspec, parse};
use clap::{Args, ValueEnum};
use zblk_core::bio::Op;
use zblk_core::stack::{DevKind, SplitOrder, Stack, TraceEvent, TraceWriter};
use zblk_core::units::{SECTOR_SHIFT, Sector, format_bytes_exact};
use zblk_sim::{SeqJob, SeqJobs, Sim, StackSimConfig, null_model};

/// Every event of a run on a simulated stack, blkparse-style: `Q` queued on a
/// device, `X` split, `A` remapped to a member, `D` issued to a disk, `C`
/// completed. Times are virtual (simulated).
#[derive(Args, Debug)]
#[command(after_help = stack_help())]
pub struct TraceArgs {
    /// The stack of devices (see below), e.g.
    /// `striped:chunk=64k[8*nullb:size=1024,zoned=0,max_sectors=2048]`.
    #[arg(long, value_name = "SPEC")]
    pub stack: String,
    /// Sequential reads or writes.
    #[arg(long, value_enum, default_value = "read")]
    pub rw: TraceRw,
    /// BIO size (bytes, or with a suffix: 4480k, 1M).
    #[arg(long, default_value = "1M", value_parser = parse::size)]
    pub bs: u64,
    /// Largest BIO: sizes are drawn between --bs and this, in whole blocks.
    #[arg(long = "bs_max", value_parser = parse::size)]
    pub bs_max: Option<u64>,
    /// BIOs in flight per job.
    #[arg(long, default_value_t = 1)]
    pub iodepth: u32,
    /// Jobs, each a sequential stream of its own region (one after the other).
    #[arg(long, default_value_t = 1)]
    pub numjobs: u32,
    /// Bytes each job transfers.
    #[arg(long, default_value = "16M", value_parser = parse::size)]
    pub size: u64,
    /// Where the first job's region starts.
    #[arg(long, default_value = "0", value_parser = parse::size)]
    pub offset: u64,
    /// Where split remainders go on the per-context BIO list: head (ascending order
    /// on the members) or tail (the historical order).
    #[arg(long = "split_order", value_enum, default_value = "head")]
    pub split_order: SplitOrderArg,
    /// Print each device's histogram of seek distances after the trace.
    #[arg(long = "seek-hist")]
    pub seek_hist: bool,
    /// Do not print the events (only the summary and histograms).
    #[arg(short, long)]
    pub quiet: bool,
    /// Which actions to print, by blktrace letter.
    #[arg(long, default_value = "QXADC")]
    pub actions: String,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Check every step (ordering, data, plugs, on every disk); slower.
    #[arg(long)]
    pub check: bool,
    /// Zone write issue policy of every disk's engine (zwp, qd1, batch, zwl,
    /// passthrough). Default: each disk's own (qd1 on a rotational zoned disk, zwp on
    /// others), as `zblk bench` chooses.
    #[arg(long, value_parser = crate::jobargs::policy_parser())]
    pub policy: Option<zblk_core::engine::IssuePolicy>,
}

/// `--rw` values.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum TraceRw {
    Read,
    Write,
}

/// `--split_order` values.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum SplitOrderArg {
    Head,
    Tail,
}

impl SplitOrderArg {
    /// The library's value.
    pub fn order(self) -> SplitOrder {
        match self {
            SplitOrderArg::Head => SplitOrder::Head,
            SplitOrderArg::Tail => SplitOrder::Tail,
        }
    }
}

fn stack_help() -> String {
    let mut s = String::from(
        "Stacks:\n  \
         striped:chunk=SIZE[MEMBER; MEMBER; ...]      RAID0 over the members, one chunk each in turn\n  \
         linear[MEMBER; MEMBER; ...]                  concatenation of the members (dm-linear)\n  \
         both take max_sectors=N after ':' (striped:chunk=64k,max_sectors=1024[...], linear:max_sectors=1024[...]);\n  \
         a MEMBER is SPEC or COUNT*SPEC (COUNT copies); a linear member SPEC@OFFSET or SPEC@OFFSET+LENGTH\n  \
         maps only that byte range of it;\n  \
         a disk is a device spec as --dev takes it, e.g. nullb:size=1024,zoned=0,max_sectors=2048\n\
         Example: striped:chunk=512k[linear[2*nullb:size=256,zoned=0]; linear[2*nullb:size=256,zoned=0]]\n\n\
         Output lines (blkparse's default shape): device (major,minor), cpu, sequence, time (s, simulated),\n\
         pid (job number), action, RWBS, then 'sector + length [comm]' (Q, D), 'sector + length [errno]' (C),\n\
         'sector / split sector' (X), 'sector + length <- (major,minor) sector' (A).\n\n",
    );
    s.push_str(&devspec::help());
    s
}

/// One line per device: number, name, kind, size, limits, members.
pub fn describe_devices(stack: &Stack) -> Vec<String> {
    stack
        .devices()
        .map(|(_, i)| {
            let g = &i.geometry;
            let kind = match i.kind {
                DevKind::Disk => "disk",
                DevKind::Linear => "linear",
                DevKind::Striped => "striped",
            };
            let zoned = if g.is_zoned() {
                format!(", zoned: {} zones of {}", g.nr_zones(), format_bytes_exact(g.zone_sectors() << SECTOR_SHIFT))
            } else {
                String::new()
            };
            let members: Vec<&str> = i.members.iter().map(|&m| stack.info(m).name.as_str()).collect();
            format!(
                "{:>3},{:<3} {:<6} {:<7} {}{zoned}, max_sectors {}, chunk_sectors {}{}",
                i.devno.0,
                i.devno.1,
                i.name,
                kind,
                format_bytes_exact(g.nr_sectors() << SECTOR_SHIFT),
                i.limits.max_sectors,
                i.limits.chunk_sectors,
                if members.is_empty() { String::new() } else { format!(", members {}", members.join(" ")) }
            )
        })
        .collect()
}

/// The jobs of `a` on `stack`'s top device, checked against it.
fn jobs(a: &TraceArgs, stack: &Stack) -> Result<Vec<SeqJob>, CliError> {
    let geo = &stack.info(stack.top()).geometry;
    let lbs = u64::from(geo.lbs_bytes());
    let dev_bytes = geo.nr_sectors() << SECTOR_SHIFT;
    let bs_max = a.bs_max.unwrap_or(a.bs);
    for (name, v) in [("--bs", a.bs), ("--bs_max", bs_max), ("--size", a.size), ("--offset", a.offset)] {
        if v % lbs != 0 || (v == 0 && name != "--offset") {
            return Err(CliError(format!("{name}: {v} is not a non-zero multiple of the block size ({lbs})")));
        }
    }
    if bs_max < a.bs || bs_max > u64::from(u32::MAX >> 1) << SECTOR_SHIFT {
        return Err(CliError(format!("--bs_max: {bs_max} must be at least --bs ({}) and below 1 TiB", a.bs)));
    }
    if a.iodepth == 0 || a.numjobs == 0 || a.numjobs > 1024 {
        return Err(CliError::msg("--iodepth must be at least 1, --numjobs 1 to 1024"));
    }
    let end = u64::from(a.numjobs).checked_mul(a.size).and_then(|t| t.checked_add(a.offset));
    if end.is_none_or(|e| e > dev_bytes) {
        return Err(CliError(format!(
            "--offset + --numjobs x --size runs past the end of {} ({})",
            stack.info(stack.top()).name,
            format_bytes_exact(dev_bytes)
        )));
    }
    let op = if a.rw == TraceRw::Read { Op::Read } else { Op::Write };
    Ok((0..u64::from(a.numjobs))
        .map(|j| SeqJob {
            op,
            offset: Sector((a.offset + j * a.size) >> SECTOR_SHIFT),
            len_sectors: a.size >> SECTOR_SHIFT,
            bs_min_sectors: (a.bs >> SECTOR_SHIFT) as u32,
            bs_max_sectors: (bs_max >> SECTOR_SHIFT) as u32,
            iodepth: a.iodepth,
        })
        .collect())
}

/// Runs `zblk trace`.
pub fn run(a: &TraceArgs) -> Result<(), CliError> {
    let spec = parse_stack(&a.stack)?;
    if let Some(c) = a.actions.chars().find(|c| !"QXADC".contains(*c)) {
        return Err(CliError(format!("--actions: '{c}' is not one of Q X A D C")));
    }
    if let Some(p) = a.policy {
        crate::jobargs::refuse_on_simulated(p)?;
    }
    let run = StackSimConfig { check: a.check, trace: true, ..StackSimConfig::new(a.seed) };
    let mut sim = zblk::spec::stack_sim(&spec, a.split_order.order(), a.policy, run, true, &mut null_model)
        .map_err(|e| CliError(format!("--stack: {e}")))?;
    let jobs = jobs(a, sim.stack())?;
    outln!(
        "# zblk trace: simulated devices, virtual time (seed {}, split_order={})",
        a.seed,
        a.split_order.order().name()
    );
    for line in describe_devices(sim.stack()) {
        outln!("# {line}");
    }
    for (d, model) in sim.model_descriptions() {
        outln!("# {}: {model}", sim.stack().info(d).name);
    }
    if !a.quiet {
        let mut writer = TraceWriter::new(sim.stack());
        let actions = a.actions.clone();
        let mut buf = out::Buffered::new();
        sim.set_trace_sink(Box::new(move |e: &TraceEvent| {
            let line = writer.line(e);
            if actions.contains(e.action.letter()) {
                buf.line(format_args!("{line}"));
            }
        }));
    }
    let lbs = sim.stack().info(sim.stack().top()).geometry.lbs_sectors();
    let mut w = SeqJobs::new(&jobs, lbs, a.seed);
    sim.run(&mut w);
    // Drops the sink, flushing its buffer, before the summary.
    sim.clear_trace_sink();
    out!("{}", summary(&sim, &w, a.seek_hist));
    Ok(())
}

/// The summary after a trace: throughput, errors, and with `hist` every device's
/// seek histogram.
fn summary(sim: &Sim, w: &SeqJobs, hist: bool) -> String {
    let t = w.total();
    let mut s = format!(
        "# {} BIOs, {} in {:.3} ms of virtual time: {:.1} MB/s (simulated); {} failed ({} unaligned writes){}\n",
        t.ios,
        format_bytes_exact(t.bytes),
        sim.now_ns() as f64 / 1e6,
        t.mb_s(),
        t.errors,
        t.unaligned,
        t.first_error.map_or(String::new(), |e| format!(", first: {e} ({})", e.errno_name())),
    );
    let st = sim.stack().stats();
    s.push_str(&format!(
        "# stack: {} splits, {} remaps, {} disk BIOs ({} failed as unaligned writes), {} requests\n",
        st.splits, st.remaps, st.disk_bios, st.unaligned, st.requests
    ));
    if hist {
        let seeks = sim.seeks().expect("tracing on");
        for (d, info) in sim.stack().devices() {
            let h = seeks.hist(d);
            let what = if info.kind == DevKind::Disk { "requests issued" } else { "BIOs arriving" };
            s.push_str(&format!(
                "\n## {} ({},{}): seek distances between {what} (simulated)\n",
                info.name, info.devno.0, info.devno.1
            ));
            s.push_str(&h.render());
        }
    }
    s
}
