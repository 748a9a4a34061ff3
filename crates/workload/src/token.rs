//! The bits of a BIO's token that say what kind of completion it is, allocated here
//! once for every workload. A workload keeps its own numbers in the low bits and
//! sets one of these above them; workloads that share one simulation (fio-like jobs
//! beside a zeroer, `zblk sweep zeroes`) must not read each other's completions as
//! their own, so no two workloads that run together share a bit.

/// fio-like jobs (`FioGen`): a zone reset, the job's number below.
pub const FIO_RESET: u64 = 1 << 63;
/// fio-like jobs (`FioGen`): an end-of-job flush, the job's number below.
pub const FIO_FLUSH: u64 = 1 << 62;
/// The zeroer of `zblk sweep zeroes` (zblk-lab), which runs beside fio-like jobs.
pub const ZEROER: u64 = 1 << 61;
/// The simulator's random operations (zblk-sim's `random`): a request built to be
/// refused. They never run beside fio-like jobs, so the bit is FIO_FLUSH's.
pub const RANDOM_INVALID: u64 = 1 << 62;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_that_run_together_have_bits_of_their_own() {
        // fio-like jobs and the zeroer share a simulation in `zblk sweep zeroes`.
        let together = [FIO_RESET, FIO_FLUSH, ZEROER];
        for (i, a) in together.iter().enumerate() {
            assert_eq!(a.count_ones(), 1);
            for b in &together[i + 1..] {
                assert_eq!(a & b, 0, "{a:#x} and {b:#x} share a bit");
            }
        }
    }
}
