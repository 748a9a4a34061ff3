//! The order in which a striped device's members receive the pieces of a split BIO,
//! on the guest kernel (Linux 6.12 or 7.3, `ZBLK_VM_KERNEL`) and in zblk's stack
//! (`zblk trace --stack`), piece for piece.
//!
//! In the guest, an md raid0 of two null_blk members (64 KiB chunks; raid0 caps md0's
//! requests at a chunk) takes a 1 MiB direct read and a 1 MiB direct write, each 32
//! KiB past a chunk boundary, so that every request crosses one; blktrace on the
//! members records the BIOs queued to each (`Q`), in time order. `zblk trace` runs the
//! same geometry with split remainders at the head of the submission list (the
//! default) and at the tail. What each does (docs/linux73.md, "Split order"):
//!
//! - Linux 7.3: md0 advertises its chunk as `chunk_sectors`, so the block layer cuts
//!   at chunk boundaries before raid0 sees the BIO: 32 KiB, then whole chunks, in
//!   ascending order.
//! - Linux 6.12: md0 has no `chunk_sectors`; each 64 KiB request crosses a chunk and
//!   raid0 splits it, queueing the part past the boundary before the part ahead of it:
//!   md0's sectors 128, 64, 256, 192, ...
//! - zblk, head: ascending, the pieces cut at `max_sectors` and again at the chunk (32
//!   KiB each); tail: the remainder of the first cut queued behind the next request.
//!
//! So zblk's head order is 7.3's order of bytes, not its pieces, and neither of zblk's
//! orders is 6.12's. zblk's default with the remainder put at the tail on purpose
//! (`split-remainder-tail`, planted) is told apart from 7.3's order.
//!
//! Runs when the VM is ready (see `common/vm.rs`); says SKIPPED otherwise.

// Tests print to the test harness, which captures it (the zblk command itself
// writes only through its output layer, src/out.rs).
#![allow(clippy::disallowed_macros)]

mod common;

use common::vm;
use std::process::Command;

/// Two non-zoned null_blk members of 1 GB.
const NULLB: &str = "nr_devices=2 gb=1 memory_backed=0 zoned=0 max_sectors=256";

/// The same geometry in zblk's stack, md0's cap at a chunk (128 sectors) given to the
/// members, since zblk's striped device takes its members' `max_sectors`.
const STACK: &str = "striped:chunk=64k[2*nullb:size=1024,zoned=0,max_sectors=128]";

/// Sectors of a chunk.
const CHUNK: u64 = 128;

/// One piece as a member queued it: (member, 'R' or 'W', sector, sectors).
type Piece = (usize, char, u64, u64);

/// The guest: md0 over the members, blktrace on both (its buffers in the guest's
/// tmpfs: the share cannot be mapped), a 1 MiB direct read at 32 KiB and write at 4
/// MiB + 32 KiB.
const GUEST: &str = r#"
mount -t debugfs none /sys/kernel/debug 2>/dev/null
mdadm --build /dev/md0 --level=0 --raid-devices=2 --chunk=64 /dev/nullb0 /dev/nullb1 || exit 1
cat /sys/block/md0/queue/max_sectors_kb > $S/md0.max_sectors_kb
mkdir -p /tmp/bt; blktrace -d /dev/nullb0 -d /dev/nullb1 -D /tmp/bt > $S/blktrace.log 2>&1 & B=$!; sleep 2
dd if=/dev/md0 of=/dev/null bs=1M count=1 iflag=direct,skip_bytes skip=32768 status=none || exit 1
dd if=/dev/zero of=/dev/md0 bs=1M count=1 oflag=direct,seek_bytes seek=4227072 status=none || exit 1
sleep 1; kill -INT $B; wait $B
cd /tmp/bt && blkparse -i nullb0 -i nullb1 -f "%T.%9t %M,%m %a %d %S %n\n" > $S/members.txt
"#;

/// The pieces queued to the members (`Q` lines of blkparse's `%T.%9t %M,%m %a %d %S
/// %n`), by time; metadata reads of a few sectors (mdadm's, udev's) left out.
fn kernel_pieces(text: &str) -> Vec<Piece> {
    let mut rows: Vec<(f64, Piece)> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 6 || f[2] != "Q" {
                return None;
            }
            let member = f[1].split_once(',')?.1.parse().ok()?;
            let rw = if f[3].contains('W') { 'W' } else { 'R' };
            let (sector, n) = (f[4].parse().ok()?, f[5].parse().ok()?);
            (n >= 64).then_some((f[0].parse().ok()?, (member, rw, sector, n)))
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    rows.into_iter().map(|r| r.1).collect()
}

/// The pieces queued to the members in `zblk trace` (`Q` lines of devices 8,0 and
/// 8,16, in the trace's order).
fn zblk_pieces(trace: &str) -> Vec<Piece> {
    trace
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let member = match *f.first()? {
                "8,0" => 0,
                "8,16" => 1,
                _ => return None,
            };
            (f.get(5) == Some(&"Q")).then_some(())?;
            let rw = if f[6].contains('W') { 'W' } else { 'R' };
            Some((member, rw, f[7].parse().ok()?, f[9].parse().ok()?))
        })
        .collect()
}

/// `zblk trace` of the guest's two BIOs, remainders at `order`'s end of the list, with
/// `mutation` planted (or none).
fn zblk_trace(order: &str, mutation: Option<&str>) -> Vec<Piece> {
    let mut pieces = Vec::new();
    for (rw, offset) in [("read", "32k"), ("write", "4128k")] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_zblk"));
        cmd.args(["trace", "--stack", STACK, "--rw", rw, "--bs", "1M", "--size", "1M", "--offset", offset]).args([
            "--split_order",
            order,
            "--actions",
            "Q",
        ]);
        if let Some(m) = mutation {
            cmd.env("ZBLK_MUTATION", m);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "zblk trace: {}", String::from_utf8_lossy(&out.stderr));
        pieces.extend(zblk_pieces(&String::from_utf8_lossy(&out.stdout)));
    }
    pieces
}

/// md0's sector of the start of a piece on a member.
fn md0_sector(p: &Piece) -> u64 {
    (p.2 / CHUNK) * 2 * CHUNK + p.0 as u64 * CHUNK + p.2 % CHUNK
}

/// md0's sectors of the pieces of each request (read, then write), in queued order.
fn md0_orders(pieces: &[Piece]) -> [Vec<u64>; 2] {
    ['R', 'W'].map(|rw| pieces.iter().filter(|p| p.1 == rw).map(md0_sector).collect())
}

/// Whether each request's pieces were queued in ascending order of md0's sectors.
fn ascending(pieces: &[Piece]) -> bool {
    md0_orders(pieces).iter().all(|o| o.is_sorted())
}

/// Whether each request's pieces came in pairs, the part past a chunk boundary queued
/// before the part ahead of it (md raid0 splitting a request that crosses a chunk).
fn pairs_reversed(pieces: &[Piece]) -> bool {
    md0_orders(pieces).iter().all(|o| {
        o.len() % 2 == 0
            && o.chunks(2).all(|c| c[0] % CHUNK == 0 && c[0] == c[1] + CHUNK / 2)
            && o.chunks(2).map(|c| c[1]).is_sorted()
    })
}

#[test]
fn split_pieces_reach_the_members_in_the_order_each_kernel_gives() {
    let script = match vm::ready() {
        Ok(script) => script,
        Err(why) => return vm::skipped("split_pieces_reach_the_members_in_the_order_each_kernel_gives", &why),
    };
    let dir = tempfile::Builder::new().prefix("zblk-split-vm").tempdir_in("/var/tmp").unwrap();
    let share = dir.path();
    let guest = format!("S={}\n{GUEST}", share.display());
    let log = vm::run_guest(&script, share, NULLB, &["--modules", "raid0"], &guest);
    let file = |f: &str| std::fs::read_to_string(share.join(f)).unwrap_or_else(|e| panic!("{f}: {e}\n{log}"));
    assert_eq!(file("md0.max_sectors_kb").trim(), "64", "raid0 caps md0's requests at a chunk");
    let kernel = kernel_pieces(&file("members.txt"));
    let head = zblk_trace("head", None);
    let tail = zblk_trace("tail", None);
    let k = vm::kernel();
    eprintln!(
        "Linux {k}: {:?}\nzblk head: {:?}\nzblk tail: {:?}",
        md0_orders(&kernel),
        md0_orders(&head),
        md0_orders(&tail)
    );
    // Every byte of both requests reached a member once.
    let bytes = |p: &[Piece]| p.iter().map(|x| x.3).sum::<u64>();
    assert_eq!(bytes(&kernel), 2 * 2048, "{kernel:?}\n{}", file("members.txt"));
    assert_eq!(bytes(&head), 2 * 2048);
    // zblk: head ascending, tail not, in pieces of half a chunk (cut at max_sectors,
    // then at the chunk).
    assert!(ascending(&head) && !ascending(&tail), "head {head:?}\ntail {tail:?}");
    assert!(head.iter().all(|p| p.3 == CHUNK / 2), "{head:?}");
    assert!(!pairs_reversed(&tail), "zblk's tail order is not 6.12's raid0 order either");
    match k.as_str() {
        // Cut at chunk boundaries before raid0: ascending, 32 KiB then whole chunks;
        // zblk's head order of bytes, with larger pieces.
        "7.3" => {
            assert!(ascending(&kernel), "{:?}", md0_orders(&kernel));
            assert!(kernel.iter().filter(|p| p.3 == CHUNK).count() >= 28, "whole chunks: {kernel:?}");
            assert_ne!(kernel, head, "the same order, other pieces");
        }
        // raid0 queues the part past the chunk boundary first.
        _ => {
            assert!(pairs_reversed(&kernel), "{:?}", md0_orders(&kernel));
            assert!(!ascending(&kernel));
        }
    }
    // The check bites: zblk's default order with the remainder put at the tail on
    // purpose is not ascending, which 7.3's order is.
    if zblk_core::mutation::AVAILABLE {
        assert!(!ascending(&zblk_trace("head", Some("split-remainder-tail"))), "split-remainder-tail planted");
    }
}

#[test]
fn pieces_are_read_from_blkparse_and_from_zblk_trace() {
    let bp =
        "0.000000100 254,1 Q RS 0 128\n0.000000050 254,0 Q RS 0 128\n0.0 254,0 Q R 8 8\n0.000000200 254,0 D RS 0 128\n";
    assert_eq!(kernel_pieces(bp), [(0, 'R', 0, 128), (1, 'R', 0, 128)]);
    let zt = "# x\n  8,0    0        3     0.000000000     0  Q   R 0 + 128 [job0]\n\
              9,0    0        1     0.000000000     0  Q   R 0 + 2048 [job0]\n\
              8,16   0        3     0.000000000     0  Q   W 128 + 128 [job0]\n";
    assert_eq!(zblk_pieces(zt), [(0, 'R', 0, 128), (1, 'W', 128, 128)]);
    // 6.12's raid0 order of a request at md0 sector 64: 128, 64, 256, 192.
    let reversed = [(1, 'R', 0, 64), (0, 'R', 64, 64), (0, 'R', 128, 64), (1, 'R', 64, 64)];
    assert_eq!(md0_orders(&reversed)[0], [128, 64, 256, 192]);
    assert!(pairs_reversed(&reversed) && !ascending(&reversed));
    let up = [(0, 'R', 64, 64), (1, 'R', 0, 128), (0, 'R', 128, 128)];
    assert!(ascending(&up) && !pairs_reversed(&up));
}
