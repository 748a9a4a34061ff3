//! The handle on a simulated stack (`stack:SPEC`): writes, appends, reads, the zone
//! report and the zone operations through a linear and a striped device, appends
//! from threads, a write off the write pointer and a refused zone transition as
//! typed errors with the kernel's errno, and what is refused: a read-only open, a
//! stack under `zblk::sim`, a stack that does not build.

use std::collections::BTreeSet;
use zblk::{Error, Handle, Options, ZoneCond};
use zblk_core::rule::Rule;
use zblk_core::units::Sector;

const EIO: i32 = 5;
const EINVAL: i32 = 22;
const EOPNOTSUPP: i32 = 95;

/// Two disks of 16 zones of 4 MiB end to end: 32 zones.
const LINEAR: &str = "stack:linear[nullb:zone_size=4,size=64; nullb:zone_size=4,size=64]";
/// Two disks of 4 MiB zones striped in 64 KiB chunks: 16 zones of 8 MiB, no native
/// zone append (the handle's engine emulates it).
const STRIPED: &str = "stack:striped:chunk=64k[2*nullb:zone_size=4,size=64]";

/// `len` bytes that say where they were written (each 512-byte sector its own).
fn data(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| tag ^ (i / 512) as u8 ^ (i % 251) as u8).collect()
}

/// Write, append, read back, report, reset on the zone at `zone`.
fn round_trip(h: &Handle, zone: u64, len: usize) {
    let first = data(1, len);
    h.write_at(zone, &first).unwrap();
    let at = h.append(zone, &data(2, len)).unwrap();
    assert_eq!(at, zone + len as u64, "the append lands at the write pointer");
    let mut back = vec![0u8; 2 * len];
    h.read_at(zone, &mut back).unwrap();
    assert_eq!(&back[..len], &first[..], "the write reads back");
    assert_eq!(&back[len..], &data(2, len)[..], "the append reads back");
    let z = h.zone(zone).unwrap();
    assert_eq!((z.start, z.wp, z.cond), (zone, zone + 2 * len as u64, ZoneCond::ImpOpen));
    let report = h.report().unwrap();
    assert_eq!(report.iter().find(|r| r.start == zone), Some(&z), "the report says the same");
    h.reset_zone(zone).unwrap();
    let z = h.zone(zone).unwrap();
    assert_eq!((z.wp, z.cond), (zone, ZoneCond::Empty));
    h.read_at(zone, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0), "a reset zone reads as zeroes");
    assert_eq!(h.append(zone, &first).unwrap(), zone, "the plug learned of the reset");
}

/// A write past the write pointer: refused by the handle's engine with EIO and the
/// rule, naming the pointer; a CLOSE of an empty zone: refused by the disk's zones
/// below the stack with EIO and the transition's rule. The handle works on after both.
fn refusals(h: &Handle, zone: u64) {
    h.write_at(zone, &[1; 4096]).unwrap();
    let e = h.write_at(zone + 8192, &[1; 4096]).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    assert_eq!((e.errno(), e.rule()), (EIO, Some(Rule::NotAtWp { wp: Sector((zone + 4096) / 512) })), "{e}");
    assert!(e.to_string().starts_with("EIO: write at sector"), "{e}");
    let empty = zone + h.zone_size();
    let e = h.close_zone(empty).unwrap_err();
    assert_eq!((e.errno(), e.rule()), (EIO, Some(Rule::Transition { cond: ZoneCond::Empty })), "{e}");
    assert_eq!(h.append(zone, &[2; 4096]).unwrap(), zone + 4096);
}

/// Four threads append 50 records each to one zone: every record at a place of its
/// own, each reading back.
fn threads_append(h: &Handle, zone: u64) {
    let landed: Vec<(u64, Vec<u8>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4u8)
            .map(|t| {
                let h = h.clone();
                s.spawn(move || {
                    (0..50u8)
                        .map(|n| (h.append(zone, &data(t * 64 + n, 8192)).unwrap(), data(t * 64 + n, 8192)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap()).collect()
    });
    let places: BTreeSet<u64> = landed.iter().map(|(at, _)| *at).collect();
    assert_eq!(places.len(), 200, "every record at a place of its own");
    assert_eq!(h.zone(zone).unwrap().wp, zone + 200 * 8192);
    for (at, r) in &landed {
        let mut back = vec![0u8; r.len()];
        h.read_at(*at, &mut back).unwrap();
        assert_eq!(&back, r, "the record at {at}");
    }
}

#[test]
fn a_linear_stack_writes_appends_reads_and_resets() {
    let h = Handle::open(LINEAR).unwrap();
    assert_eq!((h.capacity(), h.zone_size(), h.report().unwrap().len()), (128 << 20, 4 << 20, 32));
    // A zone on each disk, a request of several of the disks' largest.
    round_trip(&h, 3 * h.zone_size(), 256 << 10);
    round_trip(&h, 20 * h.zone_size(), 256 << 10);
    refusals(&h, 21 * h.zone_size());
    threads_append(&h, 25 * h.zone_size());
    h.flush().unwrap();
    h.close().unwrap();
}

#[test]
fn a_striped_stack_writes_appends_reads_and_resets() {
    let h = Handle::open(STRIPED).unwrap();
    assert_eq!((h.capacity(), h.zone_size(), h.report().unwrap().len()), (128 << 20, 8 << 20, 16));
    // Across many chunks of both members, and within one.
    round_trip(&h, 2 * h.zone_size(), 1 << 20);
    round_trip(&h, 5 * h.zone_size(), 4096);
    refusals(&h, 7 * h.zone_size());
    threads_append(&h, 12 * h.zone_size());
    h.close().unwrap();
}

#[test]
fn other_stacks_open_too() {
    // Disks that are not zoned: a regular device, written anywhere, no zones.
    let h = Handle::open("stack:striped:chunk=64k[2*nullb:size=16,zoned=0]").unwrap();
    assert_eq!(h.capacity(), 32 << 20);
    h.write_at(1 << 20, &data(5, 256 << 10)).unwrap();
    h.write_at(4096, &data(6, 4096)).unwrap();
    let mut back = vec![0u8; 256 << 10];
    h.read_at(1 << 20, &mut back).unwrap();
    assert_eq!(back, data(5, 256 << 10));
    // SMR disks' geometry under linear: each disk's engine the single issuer.
    let h = Handle::open("stack:linear[2*smr-30tb:size=1G,zone_size=16]").unwrap();
    assert_eq!(h.report().unwrap().len(), 128);
    threads_append(&h, 100 * h.zone_size());
}

#[test]
fn what_a_stack_refuses() {
    let e = Options::new().read_only(true).open(LINEAR).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert_eq!(e.errno(), EOPNOTSUPP);
    let e = zblk::sim::Sim::new(STRIPED, 1).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert!(e.to_string().contains("Handle::open runs a stack"), "{e}");
    // Members of different zone sizes do not stripe: a bad spec, saying why.
    let e = Handle::open("stack:striped:chunk=64k[nullb:zone_size=4,size=64; nullb:zone_size=8,size=64]").unwrap_err();
    assert!(matches!(e, Error::Spec { .. }), "{e:?}");
    assert_eq!(e.errno(), EINVAL, "{e}");
    // A policy the stack's top device cannot run (it does not promise a zone's
    // writes in order): refused at open.
    let e = Options::new().policy(zblk::IssuePolicy::Pipeline).open(LINEAR).unwrap_err();
    assert_eq!(e.errno(), EINVAL, "{e}");
}
