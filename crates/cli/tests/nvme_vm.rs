//! zblk on an NVMe ZNS namespace through the kernel's NVMe passthrough (the generic
//! device `/dev/ng0n1` of QEMU's emulated ZNS drive), in a Linux VM (6.12 or 7.3)
//! (`scripts/kernel-vm.sh --zns`): what Identify says against the block device's
//! sysfs, the zone report equal to `blkzone report` of `/dev/nvme0n1`, the zone
//! commands, data written and appended natively and read back, the errors with the
//! kernel's errnos (a write off the write pointer, an append past the zone capacity,
//! too many open zones), and appends from four threads into one zone returning
//! distinct, contiguous sectors whose data reads back (this test binary runs again
//! in the guest for that: `four_threads_append_into_one_zone`); and seeded random
//! operations through the runtime against a model of the zones
//! (`random_operations_against_a_model`, three seeds); and random reads at QD 16
//! whose commands reach the kernel several to a system call. Built with `mutations`
//! (as `scripts/test` builds), the four threads' test runs once more with a planted
//! bug (an append's sector taken from the request, not from its completion) and must
//! fail.
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it.
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;
use std::path::Path;
use std::sync::Arc;
use zblk_core::bio::Op;
use zblk_core::units::{Sector, ZoneNo};
use zblk_dev::Device;
use zblk_dev::nvme::NvmeZns;
use zblk_runtime::{Runtime, RuntimeConfig};

/// The guest's commands: `r NAME CMD...` leaves NAME.out, NAME.err and NAME.rc in
/// the share. Zones are 16 MiB (0x8000 sectors), 12 MiB writable; 4 KiB blocks; at
/// most 4 open zones.
const GUEST: &str = r#"
r() { n=$1; shift; "$@" > $S/$n.out 2> $S/$n.err; echo $? > $S/$n.rc; }
D=/dev/ng0n1; B=/dev/nvme0n1
for a in logical_block_size chunk_sectors nr_zones max_open_zones max_active_zones zone_append_max_bytes max_segments; do
  echo "$a $(cat /sys/block/nvme0n1/queue/$a)" >> $S/sysfs.txt
done
r info $X info --json $D
r reset_all $X reset $D
r write $X write $D -o 0 -l 64k -p 0x11
r append $X append $D -o 0 -l 8k -p 0x22 --json
r read $X read $D -o 0 -l 72k -O $S/read.bin
r off_wp $X write $D -o 1M -l 4k -p 0x44
r open $X open $D -o 0x8000 -c 1
r close $X close $D -o 0x8000 -c 1
r finish $X finish $D -o 0x10000 -c 1
r append_full $X append $D -o 32M -l 4k -p 0x55
r fill $X write $D -o 48M -l 12284k -p 0x66
r append_past $X append $D -o 48M -l 8k -p 0x77
r report $X report $D
blkzone report $B > $S/blkzone.txt
r reset_all2 $X reset $D
r open4 $X open $D -o 0x20000 -c 4
r too_many $X write $D -o 0 -l 4k -p 0x88
r report_open $X report $D
blkzone report $B > $S/blkzone_open.txt
r reset_all3 $X reset $D
ZBLK_NVME_DEV=$D r appends $T --exact four_threads_append_into_one_zone --ignored --nocapture
ZBLK_NVME_DEV=$D ZBLK_NVME_MUTATION=1 r appends_mutated $T --exact four_threads_append_into_one_zone --ignored --nocapture
for seed in 1 2 3; do
  ZBLK_NVME_DEV=$D ZBLK_NVME_SEED=$seed r random$seed $T --exact random_operations_against_a_model --ignored --nocapture
done
r reset_all4 $X reset $D
r fill_rr $X write $D -o 0 -l 8M -p 0x99
r bench_rr $X bench --image $D --name rr --rw randread --bs 4k --iodepth 16 --size 16M --io_size 16M --json
r report_end $X report $D
blkzone report $B > $S/blkzone_end.txt
"#;

fn read(share: &Path, name: &str) -> String {
    std::fs::read_to_string(share.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A guest command's status, standard output and standard error.
fn cmd(share: &Path, name: &str) -> (i32, String, String) {
    let rc = read(share, &format!("{name}.rc")).trim().parse().unwrap();
    (rc, read(share, &format!("{name}.out")), read(share, &format!("{name}.err")))
}

/// A command that must succeed: its standard output.
fn ok(share: &Path, name: &str) -> String {
    let (rc, out, err) = cmd(share, name);
    assert_eq!(rc, 0, "{name} failed: {err}{out}");
    out
}

/// A command that must fail with `errno` named: its standard error.
fn fails(share: &Path, name: &str, errno: &str) -> String {
    let (rc, out, err) = cmd(share, name);
    assert_ne!(rc, 0, "{name} succeeded: {out}");
    assert!(err.contains(errno), "{name}: expected {errno}: {err}");
    err
}

#[test]
fn nvme_passthrough_in_the_vm() {
    let script = match vm::ready() {
        Ok(s) => s,
        Err(why) => return vm::skipped("nvme_passthrough_in_the_vm", &why),
    };
    let dir = tempfile::Builder::new().prefix("zblk-nvme-vm").tempdir_in("/var/tmp").unwrap();
    let share = dir.path();
    let zblk = vm::stage(share, env!("CARGO_BIN_EXE_zblk"));
    let me = vm::stage(share, &std::env::current_exe().unwrap().display().to_string());
    let guest = format!("S={}; cp {zblk} /tmp/zblk; X=/tmp/zblk; T={me}\n{GUEST}", share.display());
    let log = vm::run_guest(&script, share, "zoned=1 gb=1", &["--zns"], &guest);
    let sysfs = read(share, "sysfs.txt");
    let attr = |k: &str| -> u64 {
        let line = sysfs.lines().find(|l| l.starts_with(&format!("{k} "))).unwrap_or_else(|| panic!("{k}: {sysfs}"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    // Identify against the block device's sysfs.
    let info: serde_json::Value = serde_json::from_str(&ok(share, "info")).unwrap();
    assert_eq!(info["identify"]["lba_bytes"], attr("logical_block_size"), "{info}");
    assert_eq!(info["zone_size_sectors"], attr("chunk_sectors"), "{info}");
    assert_eq!(info["nr_seq_zones"], attr("nr_zones"), "{info}");
    assert_eq!(info["identify"]["max_open"], attr("max_open_zones"), "{info}");
    assert_eq!(info["identify"]["max_active"], attr("max_active_zones"), "{info}");
    // The append limit is the kernel's, but for a buffer not on a page boundary: it
    // spans a page more than its length, and the kernel maps a passthrough buffer a
    // page a segment (crates/dev/src/nvme.rs, `kernel_max_bytes`).
    let pages = (attr("max_segments") - 1) * 4096;
    assert_eq!(info["zblk"]["max_append_sectors"].as_u64().unwrap() * 512, attr("zone_append_max_bytes").min(pages));
    assert_eq!(info["zone_append"], "native");
    // Data written, appended natively after it, read back.
    ok(share, "write");
    let append: serde_json::Value = serde_json::from_str(&ok(share, "append")).unwrap();
    assert_eq!(append["sector"], 128, "{append}");
    let data = std::fs::read(share.join("read.bin")).unwrap();
    assert!(data[..64 << 10].iter().all(|&b| b == 0x11) && data[64 << 10..].iter().all(|&b| b == 0x22));
    // Errors, with the kernel's errnos and the drive's status named.
    fails(share, "off_wp", "EIO");
    ok(share, "open");
    ok(share, "close");
    ok(share, "finish");
    fails(share, "append_full", "EIO");
    ok(share, "fill");
    let past = fails(share, "append_past", "EIO");
    assert!(past.contains("NVMe status") || past.contains("capacity"), "{past}");
    let many = fails(share, "too_many", "ETOOMANYREFS");
    assert!(many.contains("Too Many Open Zones"), "{many}");
    // The reports equal blkzone's of the block device, whatever state the zones are in.
    assert_eq!(ok(share, "report"), read(share, "blkzone.txt"));
    assert_eq!(ok(share, "report_open"), read(share, "blkzone_open.txt"));
    assert_eq!(ok(share, "report_end"), read(share, "blkzone_end.txt"));
    let appends = ok(share, "appends");
    assert!(appends.contains("APPENDS OK 256"), "{appends}\n{log}");
    // With the planted bug (built with `mutations`: scripts/test's build), the
    // appends' sectors are their zone's start and the check fails.
    let (rc, out, err) = cmd(share, "appends_mutated");
    if cfg!(feature = "mutations") {
        assert_ne!(rc, 0, "the planted bug went unnoticed: {out}");
        let said = format!("{out}{err}");
        assert!(said.contains("not contiguous") || said.contains("reads back other data"), "{said}");
    } else {
        assert_eq!(rc, 0, "{out}{err}");
    }
    for seed in 1..=3 {
        let out = ok(share, &format!("random{seed}"));
        assert!(out.contains(&format!("RANDOM OK seed {seed}")), "{out}");
    }
    // Random reads at QD 16: the completion thread hands the commands its callbacks
    // queue to the kernel several at a time (a quarter of the depth), not one system
    // call and one doorbell write each.
    ok(share, "fill_rr");
    let bench: serde_json::Value = serde_json::from_str(&ok(share, "bench_rr")).unwrap();
    assert_eq!(bench["jobs"][0]["read"]["total_ios"], 4096, "{bench}");
    let ring = &bench["zblk"]["ring"];
    let (entries, calls) = (ring["entries"].as_u64().unwrap(), ring["submissions"].as_u64().unwrap());
    assert!(entries >= 4096 && entries as f64 >= 2.5 * calls as f64, "{entries} entries in {calls} calls: {bench}");
}

/// Inside the VM (run by `nvme_passthrough_in_the_vm` with `ZBLK_NVME_DEV`): four
/// threads append into one zone through the runtime; every append lands at its own
/// sector, together they fill the zone from its start without a gap, and each
/// reads back.
#[test]
#[ignore = "runs inside the VM, from nvme_passthrough_in_the_vm"]
fn four_threads_append_into_one_zone() {
    let Ok(path) = std::env::var("ZBLK_NVME_DEV") else { return };
    #[cfg(feature = "mutations")]
    zblk_dev::nvme::planted::set_append_lba_from_request(std::env::var("ZBLK_NVME_MUTATION").is_ok());
    let dev = NvmeZns::open(Path::new(&path), false).unwrap();
    let geo = dev.geometry().clone();
    assert!(!geo.emulates_zone_append());
    let rt = Arc::new(Runtime::start(dev, RuntimeConfig::default()).unwrap());
    assert!(rt.backend().contains("passthrough"), "{}", rt.backend());
    let zone = geo.zone_start(ZoneNo(3));
    rt.zone_op(Op::ZoneReset, zone).unwrap();
    const PER_THREAD: usize = 64;
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let rt = rt.clone();
            std::thread::spawn(move || {
                (0..PER_THREAD)
                    .map(|i| {
                        // Lengths of 4 to 16 KiB, each append's bytes its own.
                        let data = vec![t * 64 + i as u8; 4096 * (1 + (i + usize::from(t)) % 4)];
                        (rt.append(zone, &data).unwrap(), data)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut landed: Vec<(Sector, Vec<u8>)> = threads.into_iter().flat_map(|h| h.join().unwrap()).collect();
    landed.sort_by_key(|(s, _)| *s);
    let mut next = zone;
    for (s, data) in &landed {
        assert_eq!(*s, next, "appends are not contiguous (or not distinct) at sector {}", s.0);
        let mut back = vec![0u8; data.len()];
        rt.read_at(*s, &mut back).unwrap();
        assert!(back == *data, "the append at sector {} reads back other data", s.0);
        next = Sector(s.0 + data.len() as u64 / 512);
    }
    let z = rt.report_zone(zone).unwrap();
    assert_eq!(z.wp, next, "the zone's write pointer is past the appends");
    println!("APPENDS OK {} sectors {}..{}", landed.len(), zone.0, next.0);
    Arc::try_unwrap(rt).expect("the threads are done").close().unwrap();
}

/// A small seeded generator (xorshift64*): the randomized test's operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the randomized test expects of a zone: its write pointer (sectors from the
/// start), the bytes written below it, whether it was finished.
#[derive(Clone, Default)]
struct ZoneModel {
    wp: u64,
    data: Vec<u8>,
    full: bool,
}

/// Inside the VM (run by `nvme_passthrough_in_the_vm` with `ZBLK_NVME_DEV` and
/// `ZBLK_NVME_SEED`): seeded random writes, appends (alone and from several threads
/// at once), reads, resets, finishes, opens and closes on four zones through the
/// runtime, every result against a model of the zones, the zone report against the
/// model after every step. Prints `RANDOM OK` and the seed.
#[test]
#[ignore = "runs inside the VM, from nvme_passthrough_in_the_vm"]
fn random_operations_against_a_model() {
    let Ok(path) = std::env::var("ZBLK_NVME_DEV") else { return };
    let seed: u64 = std::env::var("ZBLK_NVME_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let dev = NvmeZns::open(Path::new(&path), false).unwrap();
    let geo = dev.geometry().clone();
    let rt = Arc::new(Runtime::start(dev, RuntimeConfig::default()).unwrap());
    let zones: Vec<ZoneNo> = (8..12).map(ZoneNo).collect();
    let cap = geo.zone_capacity(zones[0]);
    for &z in &zones {
        rt.zone_op(Op::ZoneReset, geo.zone_start(z)).unwrap();
    }
    let mut model = vec![ZoneModel::default(); zones.len()];
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    for step in 0..400 {
        let i = rng.below(zones.len() as u64) as usize;
        let start = geo.zone_start(zones[i]);
        let m = &mut model[i];
        let len = 8 * (1 + rng.below(32)) as usize; // 4 to 128 KiB in sectors
        let fill = |rng: &mut Rng| vec![(rng.next() | 1) as u8; len * 512];
        let fits = !m.full && m.wp + len as u64 <= cap;
        let ctx = format!("seed {seed} step {step} zone {} wp {} len {len}", zones[i].0, m.wp);
        match rng.below(8) {
            0 | 1 => {
                let data = fill(&mut rng);
                let r = rt.write_at(Sector(start.0 + m.wp), &data);
                assert_eq!(r.is_ok(), fits, "write: {ctx}: {r:?}");
                if fits {
                    m.wp += len as u64;
                    m.data.extend_from_slice(&data);
                }
            }
            2 | 3 => {
                let data = fill(&mut rng);
                let r = rt.append(start, &data);
                assert_eq!(r.is_ok(), fits, "append: {ctx}: {r:?}");
                if let Ok(at) = r {
                    assert_eq!(at.0, start.0 + m.wp, "append landed elsewhere: {ctx}");
                    m.wp += len as u64;
                    m.data.extend_from_slice(&data);
                }
            }
            4 => concurrent_appends(&rt, start, m, cap, &mut rng, &ctx),
            5 if m.wp > 0 => {
                let off = rng.below(m.wp);
                let n = (1 + rng.below((m.wp - off).min(256))) as usize;
                let (off, n) = (off & !7, (n + 7) & !7);
                let n = n.min((m.wp - off) as usize);
                if n > 0 {
                    let mut back = vec![0u8; n * 512];
                    rt.read_at(Sector(start.0 + off), &mut back).unwrap();
                    let want = &m.data[(off * 512) as usize..][..n * 512];
                    assert!(back == want, "read back other data: {ctx} at {off} for {n}");
                }
            }
            6 => {
                rt.zone_op(Op::ZoneReset, start).unwrap();
                *m = ZoneModel::default();
            }
            7 if rng.below(4) == 0 => {
                rt.zone_op(Op::ZoneFinish, start).unwrap();
                m.full = true;
            }
            _ => {
                // Open or close: the write pointer stays (a close of an empty zone
                // may be refused by the drive; what it leaves is checked below).
                let op = if rng.below(2) == 0 { Op::ZoneOpen } else { Op::ZoneClose };
                let _ = rt.zone_op(op, start);
            }
        }
        let z = rt.report_zone(start).unwrap();
        // A zone written to its capacity is FULL, its write pointer its end (as the kernel reports).
        let want = if m.full || m.wp == cap { start.0 + geo.zone_len(zones[i]) } else { start.0 + m.wp };
        assert_eq!(z.wp.0, want, "zone report: {ctx} after the step: {z:?}");
    }
    println!("RANDOM OK seed {seed}");
    Arc::try_unwrap(rt).expect("no other holder").close().unwrap();
}

/// 2 to 4 threads append at once into the zone at `start`: where they fit, they land
/// contiguously at the write pointer, in some order; the model follows the order they
/// landed in.
fn concurrent_appends(rt: &Arc<Runtime>, start: Sector, m: &mut ZoneModel, cap: u64, rng: &mut Rng, ctx: &str) {
    let k = 2 + rng.below(3) as usize;
    let bufs: Vec<Vec<u8>> = (0..k).map(|_| vec![(rng.next() | 1) as u8; 8 * 512]).collect();
    let fits = !m.full && m.wp + 8 * k as u64 <= cap;
    if !fits {
        return;
    }
    let hs: Vec<_> = bufs
        .into_iter()
        .map(|b| {
            let rt = rt.clone();
            std::thread::spawn(move || (rt.append(start, &b), b))
        })
        .collect();
    let mut landed: Vec<(Sector, Vec<u8>)> = hs
        .into_iter()
        .map(|h| h.join().unwrap())
        .map(|(r, b)| (r.unwrap_or_else(|e| panic!("{ctx}: {e}")), b))
        .collect();
    landed.sort_by_key(|(s, _)| *s);
    for (s, b) in landed {
        assert_eq!(s.0, start.0 + m.wp, "concurrent appends not contiguous: {ctx}");
        m.wp += 8;
        m.data.extend_from_slice(&b);
    }
}
