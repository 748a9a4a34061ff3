//! The metadata replay sweep: the metadata of an image copied back, in part, from
//! older copies of the same image, as a user restoring a backup over part of it, or a
//! disk that dropped flushed writes of some metadata sectors, would leave it. Every
//! checksum passes: what must catch a rollback is the metadata's parts bearing
//! witness against each other.
//!
//! One image goes through nine states (writes, flushes, a reset, a finish, an open
//! zone, each closed cleanly, and two taken while it was open, as a killed process
//! leaves them). Onto the newest (a flushed write, then closed cleanly; or the same
//! left open by a killed process), every subset of its five parts (both
//! superblocks, table A, table B, the live header, the live entries) is copied back
//! from each older state, then every single 512-byte sector of metadata that differs,
//! and the image opened as `zblk check` opens it (read-only) and as a writer opens it
//! (read-write), in the same boot and after a restart; then repaired as `zblk check
//! -y` does, which must take the state the read-only open showed and leave the image
//! clean. A case is:
//!
//! - *same*: the newest zone state, no WARNING (whatever was repaired);
//! - *same, warned*: the newest zone state, but the parts contradict each other, so
//!   it cannot be proven the newest: the WARNING says so;
//! - *warned*: an older state with the rollback said: the read-only open's first
//!   line is a WARNING that flushed writes, resets and finishes may be undone, and the
//!   read-write open is refused (`check` exits 4);
//! - *refused*: neither open succeeds;
//! - *full replay*: every part that differs from the newest copied back: the file is
//!   the older image, byte for byte; nothing inside the file can tell it
//!   (docs/images.md says what would);
//! - *cut commit* (the killed image, after a restart only): every witness of the last
//!   commit's completion copied back (its durable table, both superblocks, the live
//!   table with its witness), leaving only the live header's announcement of it: the
//!   picture a power cut during that commit leaves, which loses the commit too;
//! - *silent rollback*: an open gives an older zone state and says nothing of it.
//!
//! Silent rollbacks must be 0. `cargo test --release -p zblk-dev --test replay_sweep
//! -- --nocapture` prints the counts.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use zblk_core::bio::{Op, Request};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::ZoneInfo;
use zblk_dev::file::format::{
    ImageId, Layout, LiveHeader, LiveState, SUPERBLOCK_BYTES, Superblock, TABLE_HEADER_BYTES, Table,
};
use zblk_dev::file::zeroing::ZeroingSetup;
use zblk_dev::file::{CreateOptions, FileImage, ImageErrorKind, ImageOptions};
use zblk_dev::{Device, IoBuf};

const BOOT: [u8; 36] = *b"00000000-0000-4000-8000-000000replay";
const OTHER_BOOT: [u8; 36] = *b"11111111-1111-4111-8111-111111replay";

/// Sectors in a zone.
const ZS: u64 = 2048;

fn params() -> GeometryParams {
    GeometryParams {
        capacity_bytes: 8 << 20,
        zone_size_bytes: 1 << 20,
        nr_conv: 1,
        max_open: 4,
        max_active: 6,
        max_append_sectors: 0,
        ..GeometryParams::default()
    }
}

fn options(read_only: bool, boot: [u8; 36]) -> ImageOptions {
    ImageOptions {
        read_only,
        direct: false,
        boot_id: Some(boot),
        zeroing: ZeroingSetup::NoWriteZeroes,
        ..ImageOptions::default()
    }
}

fn exec(img: &FileImage, op: Op, sector: u64, bytes: usize, fill: u8) {
    let data = vec![fill; bytes];
    let buf = if bytes == 0 { IoBuf::None } else { IoBuf::Write(&data) };
    img.execute(&Request::direct(op, Sector(sector), (bytes / 512) as u32), buf)
        .unwrap_or_else(|s| panic!("{op:?} at {sector}: {s:?}"));
}

fn read_meta(p: &Path, len: u64) -> Vec<u8> {
    let mut m = vec![0u8; len as usize];
    std::fs::File::open(p).unwrap().read_exact_at(&mut m, 0).unwrap();
    m
}

/// The image's states, oldest first, each as the metadata bytes and a name; the
/// last is the newest, after a flushed write: closed cleanly, or (`killed`) as the
/// process writing it leaves it when it is killed (the file at `p` is left so).
fn history(p: &Path, meta_len: u64, killed: bool) -> Vec<(&'static str, Vec<u8>)> {
    FileImage::create(p, &CreateOptions { geometry: params(), rotational: false, force: false, preallocate: false })
        .unwrap();
    let mut states = vec![("created", read_meta(p, meta_len))];
    type Step = (&'static str, &'static [(Op, u64, usize, u8)], bool);
    // (name, requests, taken while open: the live table ahead of the durable ones)
    let steps: &[Step] = &[
        ("zone 1 written, flushed", &[(Op::Write, ZS, 8192, 1), (Op::Flush, 0, 0, 0)], false),
        ("zone 2 written, flushed", &[(Op::Write, 2 * ZS, 4096, 2), (Op::Flush, 0, 0, 0)], false),
        ("open: zone 3 written, not flushed", &[(Op::Write, 3 * ZS, 4096, 3)], true),
        ("zone 2 reset", &[(Op::ZoneReset, 2 * ZS, 0, 0)], false),
        ("zone 3 finished", &[(Op::ZoneFinish, 3 * ZS, 0, 0)], false),
        (
            "open: zone 4 written, flushed, zone 5 opened",
            &[(Op::Write, 4 * ZS, 4096, 4), (Op::Flush, 0, 0, 0), (Op::ZoneOpen, 5 * ZS, 0, 0)],
            true,
        ),
        ("zone 6 written, flushed", &[(Op::Write, 6 * ZS, 4096, 6), (Op::Flush, 0, 0, 0)], false),
        ("newest: zone 1 written again, flushed", &[(Op::Write, ZS + 16, 4096, 7), (Op::Flush, 0, 0, 0)], killed),
    ];
    for &(name, reqs, live) in steps {
        let img = FileImage::open(p, &options(false, BOOT)).unwrap();
        for &(op, sector, bytes, fill) in reqs {
            exec(&img, op, sector, bytes, fill);
        }
        if live {
            states.push((name, read_meta(p, meta_len)));
        }
        if live && name.starts_with("newest") {
            // The file as a kill leaves it: the close below is undone.
            let copy = p.with_extension("killed");
            std::fs::copy(p, &copy).unwrap();
            img.close().unwrap();
            std::fs::rename(&copy, p).unwrap();
            continue;
        }
        img.close().unwrap();
        if !live {
            states.push((name, read_meta(p, meta_len)));
        }
    }
    states
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Same,
    SameWarned,
    Warned,
    Refused,
    FullReplay,
    AsOlder,
    CutCommit,
    EntriesSameBoot,
    AsOtherImage,
    Silent,
}

/// What an open gave: the zones and what it said, or why it was refused.
type Opened = Result<(Vec<ZoneInfo>, Vec<String>), ImageErrorKind>;

fn open(p: &Path, read_only: bool, boot: [u8; 36]) -> Opened {
    FileImage::open(p, &options(read_only, boot)).map(|img| (img.zones(), img.repairs().to_vec())).map_err(|e| e.kind)
}

/// A class of cases that nothing in the file can tell from an honest older state
/// (see the module documentation): the outcome it is counted as, and the zone state
/// it gives (`None`: whatever the copied-back entries say).
type Undetectable<'a> = Option<(Outcome, Option<&'a [ZoneInfo]>)>;

/// Opens the image at `p` read-only (as `zblk check`) then read-write (as a writer)
/// in `boot`, says what a user is told, then repairs it as `zblk check -y` does.
fn judge(p: &Path, newest: &[ZoneInfo], class: Undetectable, boot: [u8; 36], what: &str) -> Outcome {
    let unsaid = |zones: &[ZoneInfo]| match class {
        Some((o, z)) if z.is_none_or(|z| z == zones) => o,
        _ => Outcome::Silent,
    };
    let ro = open(p, true, boot);
    let rw = open(p, false, boot);
    let warned = |said: &[String]| {
        let first = said.first().map_or("", String::as_str);
        assert!(
            !first.starts_with("WARNING") || first.contains("may be undone"),
            "{what}: a WARNING that does not say what may be lost: {first}"
        );
        first.starts_with("WARNING")
    };
    let outcome = match (&ro, &rw) {
        (Err(_), Err(_)) => Outcome::Refused,
        (Ok((zones, said)), Err(ImageErrorKind::MayLoseData(_))) if warned(said) => {
            if zones == newest {
                Outcome::SameWarned
            } else {
                Outcome::Warned
            }
        }
        (Ok((zones, said)), _) if zones != newest && !warned(said) => unsaid(zones),
        (_, Ok((zones, _))) if zones != newest => unsaid(zones),
        (Ok((_, said)), Ok(_)) if !warned(said) => Outcome::Same,
        (ro, rw) => panic!("{what}: read-only {ro:?}, read-write {rw:?}"),
    };
    if outcome == Outcome::Silent {
        eprintln!("SILENT ROLLBACK: {what}: read-only {ro:?}");
    }
    if outcome != Outcome::Refused {
        // `zblk check --repair -y`, then `zblk check`: the state the read-only open
        // showed, taken, and every copy agreeing afterwards.
        let img = FileImage::open(p, &ImageOptions { accept_rollback: true, ..options(false, boot) })
            .unwrap_or_else(|e| panic!("{what}: repair: {e}"));
        let repaired = img.zones();
        img.close().unwrap();
        if let Ok((zones, _)) = &ro {
            assert_eq!(&repaired, zones, "{what}: the repair took another state than the read-only open showed");
        }
        match open(p, false, boot) {
            Ok((zones, said)) => {
                assert!(said.is_empty() && zones == repaired, "{what}: not clean after the repair: {said:?}")
            }
            Err(e) => panic!("{what}: refused after the repair: {e}"),
        }
    }
    outcome
}

/// The identity of the image whose metadata is `meta`.
fn id_of(meta: &[u8]) -> ImageId {
    Superblock::decode(&meta[..SUPERBLOCK_BYTES as usize]).unwrap().0.id
}

/// The commit number of durable table `slot` of the metadata `meta`, and the zones
/// it records.
fn table_zones(meta: &[u8], layout: &Layout, geo: &Geometry, slot: usize) -> (u64, Vec<ZoneInfo>) {
    let at = layout.table_offset[slot] as usize;
    let t = Table::decode(&meta[at..at + layout.table_bytes as usize], geo.nr_zones(), id_of(meta)).unwrap();
    (t.seq, t.entries.iter().enumerate().map(|(z, e)| e.info(geo, ZoneNo(z as u32))).collect())
}

/// The five parts of the metadata: name, first byte, end.
fn parts(layout: &Layout) -> [(&'static str, u64, u64); 5] {
    let hdr = layout.live_offset + TABLE_HEADER_BYTES;
    [
        ("superblocks", 0, 2 * SUPERBLOCK_BYTES),
        ("table A", layout.table_offset[0], layout.table_offset[0] + layout.table_bytes),
        ("table B", layout.table_offset[1], layout.table_offset[1] + layout.table_bytes),
        ("live header", layout.live_offset, hdr),
        ("live entries", hdr, layout.live_offset + layout.table_bytes),
    ]
}

/// Runs the sweep onto the newest state, closed cleanly or left by a kill; returns
/// the count of each outcome by kind of case (subsets of parts, single sectors).
fn sweep(killed: bool) -> BTreeMap<(&'static str, Outcome), usize> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("img");
    let geo = Geometry::new(&params()).unwrap();
    let layout = Layout::of(&geo);
    let meta_len = layout.live_offset + layout.table_bytes;
    let states = history(&p, meta_len, killed);
    let (newest_name, newest) = states.last().cloned().unwrap();
    assert!(newest_name.starts_with("newest"));
    let expect = open(&p, true, BOOT).unwrap().0;
    // The table of the last commit, and the state the other one records (the commit
    // before): what a power cut during the last commit leaves.
    let tables = [0, 1].map(|slot| table_zones(&newest, &layout, &geo, slot));
    let last = if tables[0].0 > tables[1].0 { 0 } else { 1 };
    let before_last = tables[1 - last].1.clone();
    let hdr = layout.live_offset + TABLE_HEADER_BYTES;
    let parts = parts(&layout);
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let mut counts: BTreeMap<(&str, Outcome), usize> = BTreeMap::new();
    // The live entries, and the live table's last sector, which holds its witness.
    let (live_end, witness) = (meta_len as usize, meta_len as usize - 512);
    let entries = hdr as usize..witness;
    // What each older state gives after a restart when it was left open (the live
    // table is then not trusted).
    let mut left_open = Vec::new();
    for (_, older) in &states {
        let open_header =
            LiveHeader::decode(&older[layout.live_offset as usize..], id_of(older)).state != LiveState::Clean;
        f.write_all_at(older, 0).unwrap();
        left_open.push(open_header.then(|| open(&p, true, OTHER_BOOT).unwrap().0));
    }
    f.write_all_at(&newest, 0).unwrap();
    let last = layout.table_offset[last] as usize..(layout.table_offset[last] + layout.table_bytes) as usize;
    let mut try_meta = |kind: &'static str, meta: &[u8], i: usize, what: &str| {
        let older = &states[i].1;
        if meta == newest.as_slice() {
            return;
        }
        let from = |bytes: &[u8], r: std::ops::Range<usize>| meta[r.clone()] == bytes[r];
        // Every witness of the last commit's completion copied back: its table, the
        // superblocks, the live table's witness.
        let sb = 0..2 * SUPERBLOCK_BYTES as usize;
        let cut_witnesses = from(older, sb) && from(older, last.clone()) && from(older, witness..live_end);
        // Everything copied back but live entries (not their witness).
        let but_entries = from(older, 0..entries.start) && from(older, witness..live_end);
        // Live entries copied back, not the live header nor the entries' witness.
        let entries_only = !from(&newest, entries.clone())
            && from(&newest, layout.live_offset as usize..entries.start)
            && from(&newest, witness..live_end);
        for boot in [BOOT, OTHER_BOOT] {
            // Each open below may repair the metadata: every case starts from its own.
            f.write_all_at(meta, 0).unwrap();
            let what = format!("{what}{}", if boot == BOOT { "" } else { ", after a restart" });
            let restart = boot == OTHER_BOOT;
            let class = if restart && but_entries && left_open[i].is_some() {
                Some((Outcome::AsOlder, left_open[i].as_deref()))
            } else if killed && restart && cut_witnesses {
                Some((Outcome::CutCommit, Some(before_last.as_slice())))
            } else if killed && !restart && entries_only {
                Some((Outcome::EntriesSameBoot, None))
            } else {
                None
            };
            let outcome = if meta == older { Outcome::FullReplay } else { judge(&p, &expect, class, boot, &what) };
            *counts.entry((kind, outcome)).or_default() += 1;
        }
        f.write_all_at(&newest, 0).unwrap();
    };
    for (i, (name, older)) in states[..states.len() - 1].iter().enumerate() {
        for set in 1u32..32 {
            let mut meta = newest.clone();
            let mut names = Vec::new();
            for (i, &(part, lo, hi)) in parts.iter().enumerate() {
                if set & (1 << i) != 0 {
                    meta[lo as usize..hi as usize].copy_from_slice(&older[lo as usize..hi as usize]);
                    names.push(part);
                }
            }
            try_meta("subsets", &meta, i, &format!("{} from \"{name}\"", names.join(" + ")));
        }
        // The live entries a sector at a time (a disk that kept some of them),
        // beside every subset of the other parts.
        for set in 0u32..16 {
            for s in (hdr as usize..meta_len as usize).step_by(512) {
                let lo = s.max(hdr as usize);
                let hi = (s - s % 512 + 512).min(meta_len as usize);
                if older[lo..hi] == newest[lo..hi] {
                    continue;
                }
                let mut meta = newest.clone();
                let mut names = Vec::new();
                for (i, &(part, plo, phi)) in parts[..4].iter().enumerate() {
                    if set & (1 << i) != 0 {
                        meta[plo as usize..phi as usize].copy_from_slice(&older[plo as usize..phi as usize]);
                        names.push(part);
                    }
                }
                meta[lo..hi].copy_from_slice(&older[lo..hi]);
                let what = format!(
                    "{}live entries at bytes {lo}..{hi} from \"{name}\"",
                    names.iter().map(|n| format!("{n} + ")).collect::<String>()
                );
                try_meta("subsets with a sector of live entries", &meta, i, &what);
            }
        }
        for s in (0..meta_len as usize).step_by(512) {
            if older[s..s + 512] != newest[s..s + 512] {
                let mut meta = newest.clone();
                meta[s..s + 512].copy_from_slice(&older[s..s + 512]);
                try_meta("sectors", &meta, i, &format!("sector at byte {s} from \"{name}\""));
            }
        }
    }
    f.write_all_at(&newest, 0).unwrap();
    assert_eq!(judge(&p, &expect, None, BOOT, "the newest image"), Outcome::Same);
    let newest = if killed { "left by a kill" } else { "closed cleanly" };
    for kind in ["subsets", "subsets with a sector of live entries", "sectors"] {
        let of_kind = || counts.iter().filter(|((k, _), _)| *k == kind);
        let line: Vec<String> = of_kind().map(|((_, o), n)| format!("{o:?} {n}")).collect();
        let total: usize = of_kind().map(|(_, n)| n).sum();
        eprintln!(
            "replay sweep onto the image {newest}, {kind} from {} older states: {total} cases (two boots each): {}",
            states.len() - 1,
            line.join(", ")
        );
    }
    counts
}

fn count(counts: &BTreeMap<(&str, Outcome), usize>, outcome: Outcome) -> usize {
    counts.iter().filter(|((_, o), _)| *o == outcome).map(|(_, n)| n).sum()
}

/// The image closed cleanly after its last flushed write: no rollback goes unsaid.
#[test]
fn replayed_onto_an_image_closed_cleanly() {
    let counts = sweep(false);
    assert_eq!(count(&counts, Outcome::Silent), 0, "silent rollbacks (listed above)");
    assert!(count(&counts, Outcome::Warned) > 0, "no rollback was ever tried");
}

/// The same image left open by a killed process: no rollback goes unsaid but the
/// picture a power cut during the last commit leaves, after a restart.
#[test]
fn replayed_onto_an_image_left_by_a_kill() {
    let counts = sweep(true);
    assert_eq!(count(&counts, Outcome::Silent), 0, "silent rollbacks (listed above)");
    assert!(count(&counts, Outcome::Warned) > 0, "no rollback was ever tried");
}

/// Another image of the same geometry at `p`, taken to `commits` commits by flushed
/// writes to zones 7 and 1 (where the image swept has other data), closed cleanly or
/// left by a kill; its metadata. `format2`: then rewritten as an image of format 2
/// would hold it (no identity, every check value recomputed without one).
fn other_image(p: &Path, meta_len: u64, commits: u64, killed: bool, format2: bool) -> Vec<u8> {
    FileImage::create(p, &CreateOptions { geometry: params(), rotational: false, force: true, preallocate: false })
        .unwrap();
    let img = FileImage::open(p, &options(false, BOOT)).unwrap();
    for k in 0.. {
        if img.durable_seq() >= commits {
            break;
        }
        let zone = if k % 2 == 0 { 7 } else { 1 };
        exec(&img, Op::Write, zone * ZS + 8 * (k / 2), 4096, 0x40 + k as u8);
        exec(&img, Op::Flush, 0, 0, 0);
    }
    assert_eq!(img.durable_seq(), commits);
    let mut meta = read_meta(p, meta_len);
    img.close().unwrap();
    if !killed {
        meta = read_meta(p, meta_len);
    }
    if format2 {
        let layout = Layout::of(&Geometry::new(&params()).unwrap());
        for at in zblk_dev::file::format::SUPERBLOCK_OFFSETS {
            let sb = &mut meta[at as usize..(at + SUPERBLOCK_BYTES) as usize];
            sb[8] = 2;
            sb[122..138].fill(0);
        }
        // The tags beside each table sector's check value: none in format 2.
        for at in layout.table_offset {
            for s in (at..at + layout.table_bytes).step_by(512) {
                meta[s as usize + 508..s as usize + 512].fill(0);
            }
        }
        zblk_dev::file::format::reseal(&mut meta, &layout, Geometry::new(&params()).unwrap().nr_zones());
    }
    meta
}

/// Parts of other images of the same geometry (with fewer, as many and more commits
/// than the image swept, closed cleanly or left by a kill, of format 3 and of format
/// 2) copied onto the newest state: every subset of the five parts, and every single
/// 512-byte sector that differs. Nothing of them may pass for the image's state: each
/// case gives the newest state or is warned or refused, and a case where any part
/// copied differs says so (a WARNING, or a refusal); only the other image copied
/// whole is that image ("as the other image").
fn sweep_other_images(killed: bool) -> BTreeMap<(&'static str, Outcome), usize> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("img");
    let geo = Geometry::new(&params()).unwrap();
    let layout = Layout::of(&geo);
    let meta_len = layout.live_offset + layout.table_bytes;
    let states = history(&p, meta_len, killed);
    let newest = states.last().unwrap().1.clone();
    let expect = open(&p, true, BOOT).unwrap().0;
    let commits = FileImage::open(&p, &options(true, BOOT)).unwrap().durable_seq();
    let q = dir.path().join("other");
    let mut others = Vec::new();
    for (name, n, killed, format2) in [
        ("fewer commits", commits - 3, false, false),
        ("as many commits", commits, false, false),
        ("more commits", commits + 3, false, false),
        ("more commits, left by a kill", commits + 3, true, false),
        ("more commits, format 2", commits + 3, false, true),
    ] {
        others.push((name, other_image(&q, meta_len, n, killed, format2)));
    }
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
    let mut counts: BTreeMap<(&str, Outcome), usize> = BTreeMap::new();
    let mut try_meta = |kind: &'static str, meta: &[u8], other: &[u8], what: &str| {
        for boot in [BOOT, OTHER_BOOT] {
            f.write_all_at(meta, 0).unwrap();
            let what = format!("{what}{}", if boot == BOOT { "" } else { ", after a restart" });
            let outcome = if meta == other { Outcome::AsOtherImage } else { judge(&p, &expect, None, boot, &what) };
            assert!(
                matches!(outcome, Outcome::SameWarned | Outcome::Warned | Outcome::Refused | Outcome::AsOtherImage),
                "{what}: {outcome:?}: a part of another image went unsaid"
            );
            *counts.entry((kind, outcome)).or_default() += 1;
        }
        f.write_all_at(&newest, 0).unwrap();
    };
    let parts = parts(&layout);
    for (name, other) in &others {
        for set in 1u32..32 {
            let mut meta = newest.clone();
            let mut names = Vec::new();
            for (i, &(part, lo, hi)) in parts.iter().enumerate() {
                if set & (1 << i) != 0 {
                    meta[lo as usize..hi as usize].copy_from_slice(&other[lo as usize..hi as usize]);
                    names.push(part);
                }
            }
            if meta != newest {
                try_meta("subsets", &meta, other, &format!("{} from the other image with {name}", names.join(" + ")));
            }
        }
        for s in (0..meta_len as usize).step_by(512) {
            if other[s..s + 512] != newest[s..s + 512] {
                let mut meta = newest.clone();
                meta[s..s + 512].copy_from_slice(&other[s..s + 512]);
                try_meta("sectors", &meta, other, &format!("sector at byte {s} from the other image with {name}"));
            }
        }
    }
    let newest = if killed { "left by a kill" } else { "closed cleanly" };
    for kind in ["subsets", "sectors"] {
        let of_kind = || counts.iter().filter(|((k, _), _)| *k == kind);
        let line: Vec<String> = of_kind().map(|((_, o), n)| format!("{o:?} {n}")).collect();
        let total: usize = of_kind().map(|(_, n)| n).sum();
        eprintln!(
            "other images onto the image {newest}, {kind} from {} other images: {total} cases (two boots each): {}",
            others.len(),
            line.join(", ")
        );
    }
    counts
}

/// Parts of other images onto the image closed cleanly: never its state, always said.
#[test]
fn other_images_onto_an_image_closed_cleanly() {
    let counts = sweep_other_images(false);
    assert_eq!(count(&counts, Outcome::Silent), 0, "silent rollbacks (listed above)");
}

/// Parts of other images onto the image left by a kill: never its state, always said.
#[test]
fn other_images_onto_an_image_left_by_a_kill() {
    let counts = sweep_other_images(true);
    assert_eq!(count(&counts, Outcome::Silent), 0, "silent rollbacks (listed above)");
}

/// An image of format 2 (made before identities) opens as before, read-only and
/// read-write, says nothing, takes writes and stays format 2.
#[test]
fn an_image_of_format_2_opens_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("old");
    let geo = Geometry::new(&params()).unwrap();
    let layout = Layout::of(&geo);
    let meta_len = layout.live_offset + layout.table_bytes;
    let meta = other_image(&p, meta_len, 4, false, true);
    std::fs::OpenOptions::new().write(true).open(&p).unwrap().write_all_at(&meta, 0).unwrap();
    let (zones, said) = open(&p, true, OTHER_BOOT).unwrap();
    assert!(said.is_empty(), "{said:?}");
    let img = FileImage::open(&p, &options(false, OTHER_BOOT)).unwrap();
    assert!(img.identity().is_none() && img.repairs().is_empty(), "{:?}", img.repairs());
    assert_eq!(img.zones(), zones);
    exec(&img, Op::Write, 2 * ZS, 4096, 5);
    exec(&img, Op::Flush, 0, 0, 0);
    img.close().unwrap();
    let (zones, said) = open(&p, true, BOOT).unwrap();
    assert!(said.is_empty(), "{said:?}");
    assert_eq!(zones[2].wp, zones[2].start + 8);
    let meta = read_meta(&p, meta_len);
    assert_eq!((meta[8], meta[4096 + 8]), (2, 2), "still format 2");
    assert_eq!(id_of(&meta), ImageId::NONE);
}
