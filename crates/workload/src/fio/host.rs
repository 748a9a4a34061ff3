//! The host's CPUs in time (optional, [`HostCpus`]): fio's jobs are threads that
//! run on a few CPUs, and what a job does after an event (a completion, a zone lock
//! let go) costs it CPU time and, for a job woken from a lock, a wake-up first. A
//! job that is running (its completion's turn) gets on with its submissions while a
//! job it woke is still waking up, where jobs beyond the CPUs wait for one and take
//! turns. Without it, the jobs that can run at one instant take turns one
//! submission each at that instant ([`FioGen::take_turns`]).
//!
//! Measured on a host (a guest's ftrace of fio's futex and io_submit calls,
//! `scripts/fio-host-timing`), a waiter's wake-up has a long tail (a median of
//! 12-25 us, a 90th percentile of 37-136 us, where a submission takes 9-21 us): so a
//! wake-up can be drawn, log-normal, from its median and 90th percentile. And a job's
//! start scan of its zones sits inside its file open (`td_io_open_file()`), whose
//! cache invalidation and fadvise calls come before its first I/O: a step of its own.

use super::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The host fio's jobs run on, in time. The default (no CPUs) takes no time: the jobs
/// that can run at an instant take turns, one submission each, at that instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCpus {
    /// CPUs the jobs share (0: the jobs' steps take no time).
    pub cpus: u32,
    /// CPU time of one submission: fio's preparation of the I/O (its zone's lock
    /// taken) and the system call, ns.
    pub submit_ns: u64,
    /// A job woken by a zone lock let go runs this long after it was let go, ns.
    pub wake_ns: u64,
    /// The jobs start one after another, this far apart (fio sets each job up in
    /// turn: its process, its file, its zone report), ns.
    pub start_ns: u64,
    /// The wake-ups' 90th percentile, ns: 0 (or `wake_ns` or less), every wake-up
    /// takes `wake_ns`; longer, each is drawn log-normal with median `wake_ns` and this
    /// 90th percentile (seeded with the run), clipped at 1 s.
    pub wake_p90_ns: u64,
    /// The rest of a job's file open after its start scan (the cache invalidation
    /// ioctl, fadvise), ns: its first submission is a step of its own this long after
    /// the scan, so that a job woken by the scan's unlocks may run first. 0: the scan
    /// and the first submission are one step.
    pub open_ns: u64,
}

/// z such that a standard normal variable is below z with probability 0.9.
const Z90: f64 = 1.281_551_565_5;

/// A step of a job: one submission (and, for a job woken by zone `retry`'s lock, its
/// try for the lock first) at a time, in the order they were booked.
type Step = Reverse<(u64, u64, usize, Option<u32>)>;

/// The CPUs' bookings and the steps booked on them.
#[derive(Debug, Default)]
pub(super) struct Host {
    pub(super) cpus: HostCpus,
    /// When each CPU is free.
    free: Vec<u64>,
    /// Steps booked and not run, earliest first.
    steps: BinaryHeap<Step>,
    /// Whether each job has a step booked (a running job is on one CPU at a time).
    booked: Vec<bool>,
    seq: u64,
    /// Draws the wake-ups when they spread ([`HostCpus::wake_p90_ns`]).
    rng: Option<ChaCha8Rng>,
}

impl Host {
    pub(super) fn new(cpus: HostCpus, jobs: usize, seed: u64) -> Host {
        let rng = (cpus.wake_p90_ns > cpus.wake_ns).then(|| ChaCha8Rng::seed_from_u64(seed ^ 0x0005_7a7e_c0de));
        Host { cpus, free: vec![0; cpus.cpus as usize], booked: vec![false; jobs], rng, ..Host::default() }
    }

    /// A woken job's wake-up: `wake_ns`, or drawn log-normal with median `wake_ns` and
    /// 90th percentile `wake_p90_ns` (Box-Muller: one standard normal from two uniforms).
    pub(super) fn wake_up(&mut self) -> u64 {
        let Some(rng) = &mut self.rng else { return self.cpus.wake_ns };
        let sigma = (self.cpus.wake_p90_ns as f64 / self.cpus.wake_ns.max(1) as f64).ln() / Z90;
        let u1: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
        let u2: f64 = rng.random_range(0.0..1.0);
        let normal = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        // A draw far in the tail is clipped at a second, the longest wake-up one may give.
        (self.cpus.wake_ns.max(1) as f64 * (sigma * normal).exp()).min(1e9) as u64
    }

    /// Whether the jobs' steps take time.
    pub(super) fn timed(&self) -> bool {
        self.cpus.cpus > 0
    }

    /// When the next step is due.
    pub(super) fn due(&self) -> Option<u64> {
        self.steps.peek().map(|s| s.0.0)
    }

    /// Nothing is booked.
    pub(super) fn idle(&self) -> bool {
        self.steps.is_empty()
    }

    /// Job `j` can run from time `t` (a woken one: tries zone `retry`'s lock first):
    /// it takes the CPU free first, and its step ends a submission's time later.
    fn book(&mut self, j: usize, retry: Option<ZoneNo>, t: u64) {
        if retry.is_none() && self.booked[j] {
            return; // already running: its step will see what this event brought
        }
        let (cpu, free) = self.free.iter().copied().enumerate().min_by_key(|&(_, f)| f).expect("a CPU");
        let end = t.max(free) + self.cpus.submit_ns;
        self.free[cpu] = end;
        self.booked[j] = true;
        self.seq += 1;
        self.steps.push(Reverse((end, self.seq, j, retry.map(|z| z.0))));
    }

    /// The next step due by `now`, taken off the bookings.
    fn take_due(&mut self, now: u64) -> Option<(u64, usize, Option<ZoneNo>)> {
        let &Reverse((t, _, j, retry)) = self.steps.peek()?;
        if t > now {
            return None;
        }
        self.steps.pop();
        self.booked[j] = false;
        Some((t, j, retry.map(ZoneNo)))
    }
}

impl FioGen {
    /// The jobs' start on the host in time: job `j` runs first `j` start intervals
    /// after the run's start.
    pub(super) fn book_start(&mut self) {
        for j in 0..self.jobs.len() {
            self.host.book(j, None, j as u64 * self.host.cpus.start_ns);
        }
    }

    /// [`FioGen::take_turns`] with the host in time: the jobs of the event are booked
    /// on the CPUs now, the jobs it woke after their wake-up.
    pub(super) fn book_turns(&mut self, first: impl IntoIterator<Item = usize>, now_ns: u64) {
        for j in first {
            self.host.book(j, None, now_ns);
        }
        self.book_woken(now_ns);
    }

    fn book_woken(&mut self, at: u64) {
        // Drained in place, as the turns do: no allocation per completion.
        for (w, z) in self.woken.drain(..) {
            let wake = self.host.wake_up();
            self.host.book(w, Some(z), at + wake);
        }
    }

    /// Runs one step due by `now_ns`; returns whether there was one.
    pub(super) fn run_step(&mut self, now_ns: u64) -> bool {
        let Some((t, j, retry)) = self.host.take_due(now_ns) else { return false };
        if self.turn(j, retry, t) {
            // More to submit: the job books its CPU again, behind jobs already waiting
            // (after the rest of its file open, if its start scan just ended).
            let open = if self.opened.take() == Some(j) { self.host.cpus.open_ns } else { 0 };
            self.host.book(j, None, t + open);
        }
        self.book_woken(t);
        true
    }
}
