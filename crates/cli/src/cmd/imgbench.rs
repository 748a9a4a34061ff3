//! `zblk bench --image IMG|DEV`: the fio-like jobs of `zblk bench`, run for real on a
//! zoned image or a Linux zoned block device through the threaded runtime, in
//! wall-clock time.

use crate::jobargs::{BenchArgs, MAX_NUMJOBS, OutputFormat, choose_policy, engine_config, job_spec};
use crate::out::{self, errln, out, outln};
use crate::{CliError, fio_out, image};
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;
use zblk_core::engine::EngineConfig;
use zblk_runtime::bench::{MAX_BUFFER_BYTES, MAX_IODEPTH, RealReport, run_jobs_watched};
use zblk_runtime::{Backend, RuntimeConfig};

/// Progress on stderr while a real bench runs, only on a terminal: the run's time (or
/// its bytes, when it is not time based) and the bandwidth since the last update.
struct Watch {
    bar: Option<indicatif::ProgressBar>,
    time_based: bool,
    last: (std::time::Duration, u64),
}

impl Watch {
    fn start(job: &zblk_workload::job::JobSpec, geo: &zblk_core::geometry::Geometry) -> Watch {
        let (len, template) = match job.runtime_ns {
            Some(ns) => (ns / 1_000_000, "{bar:40} {pos}/{len} ms ({elapsed}, eta {eta}) {msg}"),
            None => (
                job.io_bytes(geo).saturating_mul(u64::from(job.numjobs)),
                "{bar:40} {bytes}/{total_bytes} ({elapsed}, eta {eta}) {msg}",
            ),
        };
        let bar = crate::out::progress_bar(len.max(1), template);
        Watch { bar, time_based: job.runtime_ns.is_some(), last: Default::default() }
    }

    fn update(&mut self, elapsed: std::time::Duration, bytes: u64) {
        let Some(bar) = &self.bar else { return };
        let secs = (elapsed - self.last.0).as_secs_f64();
        if secs > 0.0 {
            let rate = (bytes - self.last.1) as f64 / secs;
            bar.set_message(format!("{:.1} MiB/s", rate / f64::from(1 << 20)));
        }
        self.last = (elapsed, bytes);
        bar.set_position(if self.time_based { elapsed.as_millis() as u64 } else { bytes });
    }

    fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Refuses the options of a simulated device's run.
fn refuse_simulated_only(a: &BenchArgs) -> Result<(), CliError> {
    if a.check || a.write_error_ppm > 0 || a.trace.is_some() {
        return Err(CliError::msg("--check, --write-error-ppm and --trace are for simulated devices, not --image"));
    }
    let host = a.host_cpus > 0 || a.host_times_given();
    if a.host_latency.is_some() || a.plug_work.is_some() || host {
        return Err(CliError::msg(
            "--host-latency, --plug-work and --host-cpus (with its --host-* times) model a host in virtual time: they are for simulated \
             devices, not --image (which runs on this host)",
        ));
    }
    Ok(())
}

/// Runs the jobs `a` describes on the image at `path`.
pub fn run(a: &BenchArgs, path: &Path) -> Result<(), CliError> {
    refuse_simulated_only(a)?;
    // Limits on what a real run allocates (a buffer per I/O in flight, a thread per job).
    // The runtime's bench checks them too (check_limits); here they are said before
    // the image is opened, in the options' words.
    if a.iodepth > MAX_IODEPTH || a.numjobs > MAX_NUMJOBS {
        return Err(CliError(format!(
            "--iodepth is at most {MAX_IODEPTH} and --numjobs at most {MAX_NUMJOBS} with --image"
        )));
    }
    let buffers = a.bs.saturating_mul(u64::from(a.iodepth)).saturating_mul(u64::from(a.numjobs));
    if buffers > MAX_BUFFER_BYTES {
        return Err(CliError::msg("--bs x --iodepth x --numjobs is more than 4 GiB of buffers"));
    }
    let img = image::Target::open(path, false, a.lock)?;
    let geo = img.geo().clone();
    let job = job_spec(a, geo.is_zoned());
    let policy = choose_policy(a.policy, a.zoned_qd1_writes, geo.is_zoned(), img.rotational(), img.keeps_zone_order())?;
    crate::jobargs::check_pipeline_depth(a, policy)?;
    let backend = match a.ioengine.as_deref() {
        None => Backend::Auto,
        Some("io_uring") => Backend::IoUring,
        Some("psync") => Backend::Threads,
        Some(other) => return Err(CliError(format!("--ioengine: '{other}' is not io_uring or psync"))),
    };
    let qd = job.iodepth.saturating_mul(job.numjobs).clamp(1, 1024);
    let engine = EngineConfig { queue_depth: qd, ..engine_config(a, policy) };
    let poll = std::time::Duration::from_micros(a.poll);
    let rt = img.start_with(RuntimeConfig { engine, backend, poll, ..RuntimeConfig::default() })?;
    errln!("zblk: {}: I/O with {}", path.display(), rt.backend());
    let name = path.display().to_string();
    let mut watch = Watch::start(&job, &geo);
    let report = run_jobs_watched(
        &rt,
        &name,
        std::slice::from_ref(&job),
        a.seed,
        a.group_reporting,
        a.zone_append,
        &mut |t, b| watch.update(t, b),
    )
    .map_err(|e| CliError(format!("{e}")));
    watch.finish();
    // What an EIO stood for under an image (ENOSPC, EFBIG, ...), the report's words
    // being the request's status.
    let fs_cause = rt.device().last_error();
    if a.poll > 0 {
        let (found, waited) = rt.completion_batches();
        match rt.uses_io_uring() {
            true => errln!("zblk: {name}: batches of completions: {found} found while polling, {waited} after a wait"),
            false => errln!("zblk: {name}: --poll: no io_uring completion thread to poll with ({})", rt.backend()),
        }
    }
    rt.close().map_err(CliError::msg)?;
    let report = report?;
    let written: u64 = report.jobs.iter().map(|j| j.write.io_bytes).sum();
    if written > 0 {
        out::done(format!("the benchmark wrote {written} bytes to {name}"));
    }
    if a.json || a.output_format == Some(OutputFormat::Json) {
        outln!("{}", json_report(&report, &geo));
    } else {
        out!("{}", text(&report, &geo));
    }
    // As fio: a run where I/Os failed is a failed run, whatever was measured.
    let failed: u64 = report.jobs.iter().map(|j| j.errors).sum();
    if failed > 0 {
        let cause = fs_cause.map_or(String::new(), |c| format!("; the file system under the image said {c}"));
        return Err(CliError(format!("{failed} I/Os failed (the report above names the first){cause}")));
    }
    Ok(())
}

fn text(r: &RealReport, geo: &zblk_core::geometry::Geometry) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "zblk bench [image {}: {} zones of {}; {}; policy {}; seed {}; {:.3}s wall-clock]",
        r.image,
        geo.nr_zones(),
        zblk_core::units::format_bytes_exact(geo.zone_sectors() << 9),
        r.backend,
        r.policy,
        r.seed,
        r.elapsed_ns as f64 / 1e9
    );
    for j in &r.jobs {
        fio_out::job_text(&mut out, j, &format!("pid={}", std::process::id()));
    }
    let e = &r.engine;
    let _ = writeln!(
        out,
        "engine: {} BIOs, {} requests, {} split, {} plugged, {} refused before the device, {} aborted, {} zone reports",
        e.bios, e.requests, e.splits, e.plugged, e.refused, e.aborted, e.reports
    );
    if let Some(ring) = r.ring.filter(|r| r.submissions > 0) {
        let _ = writeln!(
            out,
            "io_uring: {} entries handed to the kernel in {} system calls ({:.1} a call); {} calls in all, waits included; \
             {} transfers with registered buffers",
            ring.entries,
            ring.submissions,
            ring.entries as f64 / ring.submissions as f64,
            ring.calls,
            ring.fixed
        );
    }
    let (c, wall) = (&r.cpu, r.elapsed_ns.max(1) as f64);
    let per_io = cpu_ns_per_io(r).map_or(String::new(), |ns| format!(", {:.2} us of CPU per I/O", ns / 1e3));
    let _ = writeln!(
        out,
        "cpu (the whole process, every thread): usr={:.2}%, sys={:.2}% of one CPU, ctx={}{per_io}",
        c.user_ns as f64 * 100.0 / wall,
        c.sys_ns as f64 * 100.0 / wall,
        c.context_switches
    );
    out
}

/// The process's CPU time over the run per I/O done (reads and writes), or
/// `None` when none was.
fn cpu_ns_per_io(r: &RealReport) -> Option<f64> {
    let ios: u64 = r.jobs.iter().map(|j| j.read.ios + j.write.ios).sum();
    (ios > 0).then(|| (r.cpu.user_ns + r.cpu.sys_ns) as f64 / ios as f64)
}

fn json_report(r: &RealReport, geo: &zblk_core::geometry::Geometry) -> String {
    let jobs = fio_out::jobs_json(&r.jobs);
    let doc = json!({
        "fio version": format!("zblk-{}", env!("CARGO_PKG_VERSION")),
        "zblk": {
            "simulated": false,
            "image": r.image,
            "backend": r.backend,
            "policy": r.policy,
            "seed": r.seed,
            "elapsed_ns": r.elapsed_ns,
            "nr_zones": geo.nr_zones(),
            "zone_sectors": geo.zone_sectors(),
            "engine": r.engine,
            "ring": r.ring,
            "cpu": r.cpu,
            "cpu_ns_per_io": cpu_ns_per_io(r),
        },
        "jobs": jobs,
    });
    serde_json::to_string_pretty(&doc).expect("JSON of plain values")
}
