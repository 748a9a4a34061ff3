//! The zone-append log (crates/zlog) runs unchanged on the kernel's zoned devices, in
//! the Linux VM (`scripts/kernel-vm.sh --zns --ublk`; either guest kernel), one boot:
//! the kernel's zoned null_blk (`/dev/nullb0`, a Linux zoned block device with native
//! zone append), QEMU's NVMe ZNS drive through its generic device (`/dev/ngXnY`,
//! io_uring passthrough), and a zblk memory device served through ublk
//! (`/dev/ublkbN`, the kernel's zone append emulation in front of zblk).
//!
//! On each, this test program itself runs in the guest ([`guest_phase`]): four threads
//! append 150 records each (8 bytes to 3 KiB, each naming its thread and number),
//! flushing every tenth and at the end, and write down where each landed; the log is
//! closed, opened again (recovering by a scan of its zones) and every record checked:
//! each one appended found at its place with its bytes, none found that was not
//! appended. Then a writer appending and flushing is killed with SIGKILL and the log
//! opened again: every record whose flush returned is found.
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it.
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;
use std::collections::HashMap;
use std::io::Write;
use zblk_log::{Log, LogOptions};

const THREADS: u32 = 4;
const RECORDS: u32 = 150;

/// Record `i` of thread `t`: its names, then bytes drawn from both.
fn payload(t: u32, i: u32) -> Vec<u8> {
    let len = 8 + ((t as usize * 7919 + i as usize * 104_729) % 3065);
    let mut p: Vec<u8> = (0..len).map(|k| (k as u32 ^ t.wrapping_mul(31) ^ i.wrapping_mul(17)) as u8).collect();
    p[..4].copy_from_slice(&t.to_le_bytes());
    p[4..8].copy_from_slice(&i.to_le_bytes());
    p
}

/// A record's names, if its bytes are a record [`payload`] makes.
fn names(p: &[u8]) -> Option<(u32, u32)> {
    let t = u32::from_le_bytes(p.get(..4)?.try_into().ok()?);
    let i = u32::from_le_bytes(p.get(4..8)?.try_into().ok()?);
    (payload(t, i) == p).then_some((t, i))
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set (this test runs in the guest)"))
}

/// One phase of the guest's work on `ZLOG_VM_TARGET`, its findings in files named
/// `ZLOG_VM_OUT.*`: `write` (threads append, flush, close; `.locs` says where each
/// record landed), `verify` (open again, check against `.locs`), `kill` (append and
/// flush until killed, `.durable` naming the records whose flush returned),
/// `recover` (open again, check against `.durable`).
#[test]
#[ignore = "run in the guest by the test below, with its environment"]
fn guest_phase() {
    let (phase, target, out) = (env("ZLOG_VM_PHASE"), env("ZLOG_VM_TARGET"), env("ZLOG_VM_OUT"));
    let h = zblk::Handle::open(&target).unwrap_or_else(|e| panic!("{target}: {e}"));
    let log = Log::open(h, LogOptions::new()).unwrap_or_else(|e| panic!("{target}: opening the log: {e}"));
    let found = || -> HashMap<(u32, u32), (u64, u64)> {
        let mut m = HashMap::new();
        for r in log.records().expect("the log's records") {
            let n = names(&r.payload).unwrap_or_else(|| panic!("record {} at {} was never appended", r.seq, r.offset));
            assert!(m.insert(n, (r.seq, r.offset)).is_none(), "record {n:?} found twice");
        }
        m
    };
    match phase.as_str() {
        "write" => {
            let locs: Vec<String> = std::thread::scope(|s| {
                let workers: Vec<_> = (0..THREADS)
                    .map(|t| {
                        let log = log.clone();
                        s.spawn(move || {
                            let mut lines = Vec::new();
                            for i in 0..RECORDS {
                                let at = log.append(&payload(t, i)).expect("append");
                                lines.push(format!("{t} {i} {} {}", at.seq, at.offset));
                                if i % 10 == 9 {
                                    log.flush().expect("flush");
                                }
                            }
                            log.flush().expect("flush");
                            lines
                        })
                    })
                    .collect();
                workers.into_iter().flat_map(|w| w.join().expect("a writer")).collect()
            });
            std::fs::write(format!("{out}.locs"), locs.join("\n")).unwrap();
        }
        "verify" => {
            let m = found();
            let locs = std::fs::read_to_string(format!("{out}.locs")).unwrap();
            let mut n = 0;
            for line in locs.lines() {
                let v: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
                let key = (v[0] as u32, v[1] as u32);
                assert_eq!(m.get(&key), Some(&(v[2], v[3])), "record {key:?} not found where it landed");
                n += 1;
            }
            assert_eq!(n, (THREADS * RECORDS) as usize, "every record was written down");
            assert_eq!(m.len(), n, "records found that were not appended");
            std::fs::write(format!("{out}.result"), format!("ok {n}\n")).unwrap();
        }
        "kill" => {
            let mut durable = std::fs::File::create(format!("{out}.durable")).unwrap();
            for i in 0.. {
                log.append(&payload(9, i)).expect("append");
                if i % 8 == 7 {
                    log.flush().expect("flush");
                    // Written after the flush returned: what a kill leaves here is
                    // durable (the file is the share, the host's page cache).
                    writeln!(durable, "{i}").unwrap();
                }
            }
        }
        "recover" => {
            let m = found();
            let said = std::fs::read_to_string(format!("{out}.durable")).unwrap();
            let last: u32 =
                said.lines().filter_map(|l| l.parse().ok()).max().expect("a flush returned before the kill");
            let missing: Vec<u32> = (0..=last).filter(|i| !m.contains_key(&(9, *i))).collect();
            assert!(missing.is_empty(), "durable records lost after SIGKILL: {missing:?} (last durable {last})");
            std::fs::write(format!("{out}.result"), format!("ok {} durable, {} found\n", last + 1, m.len())).unwrap();
        }
        other => panic!("no phase {other}"),
    }
    log.close().expect("closing the log");
}

#[test]
fn zlog_runs_unchanged_on_null_blk_an_nvme_zns_drive_and_a_served_device() {
    let test = "zlog_runs_unchanged_on_null_blk_an_nvme_zns_drive_and_a_served_device";
    let Some(script) = vm::ready_for_serve(test) else {
        return;
    };
    let (_dir, share) = vm::share("zblk-zlog-vm");
    let me = std::env::current_exe().unwrap().display().to_string();
    let t = vm::stage(&share, &me);
    let x = vm::stage(&share, env!("CARGO_BIN_EXE_zblk"));
    let s = share.display();
    let guest = format!(
        r#"S={s}; T={t}; X={x}; mount -t tmpfs tmpfs /run
ph() {{ ZLOG_VM_PHASE=$2 ZLOG_VM_TARGET=$3 ZLOG_VM_OUT=$S/$1 $T --ignored --exact guest_phase --nocapture > $S/$1.$2.log 2>&1; echo $? > $S/$1.$2.rc; }}
kl() {{ ZLOG_VM_PHASE=kill ZLOG_VM_TARGET=$2 ZLOG_VM_OUT=$S/$1k $T --ignored --exact guest_phase > $S/$1k.kill.log 2>&1 & K=$!
  i=0; while [ $(wc -l < $S/$1k.durable 2>/dev/null || echo 0) -lt 20 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL $K; wait $K; echo $? > $S/$1k.kill.rc; ph $1k recover $2; }}
both() {{ ph $1 write $2; ph $1 verify $2; }}
both nullb /dev/nullb0
blkzone reset /dev/nullb0; kl nullb /dev/nullb0
NG=$(ls /dev/ng*n1 | head -1); both zns $NG
blkzone reset /dev/nvme0n1; kl zns $NG
$X serve --dev nullb:zone_size=8,size=256,completion_nsec=0 > $S/serve.out 2> $S/serve.err & P=$!
i=0; while ! [ -s $S/serve.out ] && kill -0 $P 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
D=$(head -1 $S/serve.out); both served $D; blkzone reset $D; kl served $D
kill -TERM $P; wait $P; echo $? > $S/serve.rc
"#
    );
    let log = vm::run_guest(
        &script,
        &share,
        "zoned=1 zone_size=8 gb=1 memory_backed=1 zone_max_open=4",
        &["--zns", "--ublk"],
        &guest,
    );
    let file = |n: &str| std::fs::read_to_string(share.join(n)).unwrap_or_default();
    for dev in ["nullb", "zns", "served"] {
        for (name, phase) in [
            (dev.to_string(), "write"),
            (dev.to_string(), "verify"),
            (format!("{dev}k"), "kill"),
            (format!("{dev}k"), "recover"),
        ] {
            let rc = file(&format!("{name}.{phase}.rc"));
            let want = if phase == "kill" { "137" } else { "0" };
            assert_eq!(
                rc.trim(),
                want,
                "{dev} {phase}: {}\n--- serve.err\n{}\n--- VM\n{log}",
                file(&format!("{name}.{phase}.log")),
                file("serve.err")
            );
        }
        let ok = file(&format!("{dev}.result"));
        assert_eq!(ok.trim(), format!("ok {}", THREADS * RECORDS), "{dev}");
        let rec = file(&format!("{dev}k.result"));
        assert!(rec.starts_with("ok "), "{dev} after SIGKILL: {rec}");
        eprintln!("{dev}: {} records checked after a reopen; after SIGKILL: {}", THREADS * RECORDS, rec.trim());
    }
    assert_eq!(file("serve.rc").trim(), "0", "{}", file("serve.err"));
}
