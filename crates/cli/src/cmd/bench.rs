//! `zblk bench`: fio-like jobs on a simulated device.

use crate::jobargs::{BenchArgs, MAX_NUMJOBS, OutputFormat, choose_policy, engine_config, job_spec};
use crate::out::{out, outln};
use crate::{CliError, devspec, fio_out};
use zblk_sim::{FaultConfig, HostCpus, SimConfig};

/// Runs `zblk bench` on a simulated device (`zblk bench --image` is `imgbench`).
pub fn run(a: &BenchArgs) -> Result<(), CliError> {
    if a.ioengine.is_some() {
        return Err(CliError::msg("--ioengine is for --image"));
    }
    if a.zone_append {
        return Err(CliError::msg("--zone_append is for --image"));
    }
    if a.poll > 0 {
        return Err(CliError::msg(
            "--poll is for --image (a simulated device runs in virtual time: nothing waits to be woken)",
        ));
    }
    // Each job keeps its own latency histograms (about half a MiB): fio caps its jobs
    // too. The same cap as with --image.
    if a.numjobs > MAX_NUMJOBS {
        return Err(CliError(format!("--numjobs is at most {MAX_NUMJOBS} (got {})", a.numjobs)));
    }
    let spec = devspec::parse(&a.dev)?;
    let device = spec.params.clone();
    let geo = device.validate().map_err(CliError::msg)?;
    // A simulated disk may reorder a zone's writes: never pipelined by default.
    let policy = choose_policy(a.policy, a.zoned_qd1_writes, geo.is_zoned(), spec.rotational(), false)?;
    crate::jobargs::refuse_on_simulated(policy)?;
    crate::jobargs::check_pipeline_depth(a, policy)?;
    let job = job_spec(a, geo.is_zoned());
    let cfg = SimConfig {
        device: device.clone(),
        engine: engine_config(a, policy),
        seed: a.seed,
        check: a.check,
        faults: FaultConfig { write_error_ppm: a.write_error_ppm, ..FaultConfig::default() },
        host_latency_ns: a.host_latency.unwrap_or(spec.host_latency_ns()),
        plug_work_ns: a.plug_work.unwrap_or(0),
        keeps_zone_order: false,
    };
    let host = host_cpus(a)?;
    let progress = crate::fio_out::Progress::start(&job, &geo);
    let report = progress.run(&spec, &cfg, host, &[job], a.group_reporting, a.trace.as_deref())?;
    let json = a.json || a.output_format == Some(OutputFormat::Json);
    if json {
        outln!("{}", fio_out::json(&report, &device));
    } else {
        out!("{}", fio_out::text(&report, &device));
    }
    // As fio: failed I/Os fail the run, unless they were injected on purpose.
    let failed: u64 = report.jobs.iter().map(|j| j.errors).sum();
    if failed > 0 && a.write_error_ppm == 0 {
        return Err(CliError(format!("{failed} I/Os failed (the report above names the first)")));
    }
    Ok(())
}

/// The host in time from `--host-*` ([`HostCpus`]), or why those options do not fit.
fn host_cpus(a: &BenchArgs) -> Result<HostCpus, CliError> {
    if a.host_cpus == 0 && a.host_times_given() {
        return Err(CliError::msg(
            "--host-submit, --host-wake, --host-wake-p90, --host-start and --host-open are the host CPUs' times: \
             give --host-cpus too",
        ));
    }
    let wake_ns = a.host_wake.unwrap_or(0);
    if let Some(p90) = a.host_wake_p90 {
        if a.host_wake.is_none_or(|w| w == 0 || p90 < w) {
            return Err(CliError(format!(
                "--host-wake-p90 {p90}ns spreads the wake-ups around --host-wake, their median: give --host-wake \
                 too, above 0 and at most the 90th percentile"
            )));
        }
    }
    Ok(HostCpus {
        cpus: a.host_cpus,
        submit_ns: a.host_submit.unwrap_or(0),
        wake_ns,
        start_ns: a.host_start.unwrap_or(0),
        wake_p90_ns: a.host_wake_p90.unwrap_or(0),
        open_ns: a.host_open.unwrap_or(0),
    })
}
