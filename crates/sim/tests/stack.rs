//! Stacked devices, scenario by scenario: a 2 MiB read split at max_sectors 1 MiB
//! and at a 512 KiB chunk, zoned writes through linear and striped devices at high
//! queue depth, zone operations, appends and flushes through a stack, data landing
//! where the mapping says.

use zblk_core::bio::{Bio, Op, Status};
use zblk_core::stack::{
    DevKind, SplitOrder, Stack, StackAction, StackConfig, StackSpec, TraceAction, TraceEvent, nullb_disk,
};
use zblk_core::units::{Sector, ZoneNo};
use zblk_core::zone::ZoneCond;
use zblk_sim::{SeqJob, SeqJobs, Sim, StackSimConfig, null_model};
use zblk_workload::pattern::{self, Decoded};

fn spec(text: &str) -> StackSpec {
    StackSpec::parse(text, &mut nullb_disk).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn stack(text: &str, order: SplitOrder) -> Stack {
    spec(text).build(StackConfig { split_order: order, ..StackConfig::default() }, None).unwrap().stack
}

fn sim(text: &str, order: SplitOrder, seed: u64) -> Sim {
    let built = spec(text).build(StackConfig { split_order: order, ..StackConfig::default() }, None).unwrap();
    Sim::with_stack(built, StackSimConfig { check: true, trace: true, ..StackSimConfig::new(seed) }, &mut null_model)
}

/// Drives a stack synchronously: every request completes at once, in issue order.
/// Returns the recorded events.
fn run_sync(st: &mut Stack, bios: &[Bio]) -> Vec<TraceEvent> {
    st.record_events(true);
    let mut events = Vec::new();
    for (i, b) in bios.iter().enumerate() {
        st.submit(st.top(), *b, i as u32);
        while let Some(a) = st.poll_action() {
            match a {
                StackAction::Issue { dev, req } => st.complete(dev, req.id, Ok(req.sector)),
                StackAction::Complete(c) => assert!(c.result.is_ok(), "{c:?}"),
                StackAction::ReportZone { .. } => panic!("no zone reports expected"),
                StackAction::Anticipate { dev, token, .. } => st.anticipation_expired(dev, token),
            }
        }
        st.take_events(&mut events);
    }
    events
}

/// Offsets in KiB, within the submitted BIO, of the pieces in the order they are
/// remapped onto disks.
fn disk_order_kib(st: &Stack, events: &[TraceEvent], action: fn(&TraceAction) -> bool) -> Vec<u32> {
    events
        .iter()
        .filter(|e| action(&e.action) && st.info(e.dev).kind == DevKind::Disk)
        .map(|e| e.bio_offset / 2)
        .collect()
}

const SPLIT_EXAMPLE: &str = "striped:chunk=512k[2*nullb:size=64,zoned=0,max_sectors=2048]";

#[test]
fn two_mib_read_head_order_is_ascending() {
    let mut st = stack(SPLIT_EXAMPLE, SplitOrder::Head);
    assert_eq!(st.info(st.top()).limits.max_sectors, 2048, "max_sectors 1 MiB stacked from the disks");
    let ev = run_sync(&mut st, &[Bio::read(Sector(0), 4096, 0)]);
    let remapped = disk_order_kib(&st, &ev, |a| matches!(a, TraceAction::Remap { .. }));
    let issued = disk_order_kib(&st, &ev, |a| *a == TraceAction::Issue);
    assert_eq!(remapped, vec![0, 512, 1024, 1536]);
    assert_eq!(issued, vec![0, 512, 1024, 1536]);
    assert_eq!(st.stats().splits, 3);
}

#[test]
fn two_mib_read_tail_order_is_not() {
    let mut st = stack(SPLIT_EXAMPLE, SplitOrder::Tail);
    let ev = run_sync(&mut st, &[Bio::read(Sector(0), 4096, 0)]);
    assert_eq!(disk_order_kib(&st, &ev, |a| matches!(a, TraceAction::Remap { .. })), vec![0, 1024, 512, 1536]);
    assert_eq!(disk_order_kib(&st, &ev, |a| *a == TraceAction::Issue), vec![0, 1024, 512, 1536]);
}

#[test]
fn two_mib_read_trace_lines() {
    let mut st = stack(SPLIT_EXAMPLE, SplitOrder::Head);
    let ev = run_sync(&mut st, &[Bio::read(Sector(0), 4096, 0)]);
    let mut w = zblk_core::stack::TraceWriter::new(&st);
    let lines: Vec<String> = ev.iter().map(|e| w.line(e)).collect();
    assert_eq!(lines[0], "  9,0    0        1     0.000000000     0  Q   R 0 + 4096 [job0]");
    assert_eq!(lines[1], "  9,0    0        2     0.000000000     0  X   R 0 / 2048 [job0]");
    assert!(
        lines.iter().any(|l| l == "  8,16   0        1     0.000000000     0  A   R 0 + 1024 <- (9,0) 1024"),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l == "  8,0    0        4     0.000000000     0  D   R 0 + 1024 [job0]"),
        "{lines:#?}"
    );
}

fn zoned_write_errors(text: &str, order: SplitOrder, seed: u64) -> (u64, u64, Sim) {
    let mut s = sim(text, order, seed);
    let top = s.stack().top();
    let geo = s.stack().info(top).geometry.clone();
    // One writer at queue depth 64 writing the first 4 zones, BIOs of 64 KiB to 3 MiB
    // so that they cross chunk and zone boundaries and exceed max_sectors.
    let job = SeqJob {
        op: Op::Write,
        offset: Sector(0),
        len_sectors: 4 * geo.zone_sectors(),
        bs_min_sectors: 128,
        bs_max_sectors: 6144,
        iodepth: 64,
    };
    let mut w = SeqJobs::new(&[job], geo.lbs_sectors(), seed);
    s.run(&mut w);
    let t = w.total();
    assert_eq!(t.ios, w.results()[0].ios);
    (t.unaligned, t.errors, s)
}

const ZONED_LINEAR: &str = "linear[nullb:size=64,zone_size=4,memory_backed=1,max_sectors=1024@8m; \
                            nullb:size=64,zone_size=4,memory_backed=1,max_sectors=1024]";
const ZONED_STRIPED: &str = "striped:chunk=256k[4*nullb:size=64,zone_size=2,memory_backed=1,max_sectors=2048]";

#[test]
fn zoned_writes_through_linear_at_qd64() {
    let mut tail_total = 0;
    for seed in 1..=4 {
        let (unaligned, errors, s) = zoned_write_errors(ZONED_LINEAR, SplitOrder::Head, seed);
        assert_eq!((unaligned, errors), (0, 0), "seed {seed}: head order");
        let top = s.stack().top();
        for z in 0..4 {
            let info = s.report_zone(top, ZoneNo(z)).unwrap();
            assert_eq!(info.cond, ZoneCond::Full, "seed {seed}: zone {z} {info:?}");
        }
        assert_eq!(s.report_zone(top, ZoneNo(4)).unwrap().cond, ZoneCond::Empty);
        let (tail_unaligned, _, _) = zoned_write_errors(ZONED_LINEAR, SplitOrder::Tail, seed);
        eprintln!("seed {seed}: linear over a zoned disk, tail order: {tail_unaligned} unaligned write errors");
        tail_total += tail_unaligned;
    }
    assert!(tail_total > 0, "tail order showed no unaligned write");
}

#[test]
fn zoned_writes_through_striped_at_qd64() {
    let mut tail_total = 0;
    for seed in 1..=4 {
        let (unaligned, errors, s) = zoned_write_errors(ZONED_STRIPED, SplitOrder::Head, seed);
        assert_eq!((unaligned, errors), (0, 0), "seed {seed}: head order");
        let top = s.stack().top();
        let info = s.report_zone(top, ZoneNo(3)).unwrap();
        assert_eq!((info.cond, info.wp), (ZoneCond::Full, info.start + info.len), "seed {seed}");
        let (tail_unaligned, tail_errors, _) = zoned_write_errors(ZONED_STRIPED, SplitOrder::Tail, seed);
        eprintln!(
            "seed {seed}: striped over zoned disks, tail order: {tail_unaligned} unaligned ({tail_errors} errors)"
        );
        tail_total += tail_unaligned;
    }
    // The tail order puts the pieces of a large write out of order on the members:
    // their zone write plugs refuse them.
    assert!(tail_total > 0, "tail order showed no unaligned write");
}

#[test]
fn data_lands_where_the_mapping_says() {
    for text in [ZONED_LINEAR, ZONED_STRIPED] {
        let mut s = sim(text, SplitOrder::Head, 7);
        let top = s.stack().top();
        let lbs = s.stack().info(top).geometry.lbs_sectors();
        let mut w = SeqJobs::new(
            &[SeqJob {
                op: Op::Write,
                offset: Sector(0),
                len_sectors: 20_000,
                bs_min_sectors: 8,
                bs_max_sectors: 3000,
                iodepth: 16,
            }],
            lbs,
            7,
        );
        s.run(&mut w);
        // Every sector holds its write's stamp and its index in the write, in order:
        // stamps never go down, and within a stamp the index counts up by one.
        let mut buf = vec![0u8; 512];
        let mut prev: Option<(u64, u32)> = None;
        for sector in 0..20_000u64 {
            s.peek(top, Sector(sector), &mut buf);
            let Decoded::Data((stamp, k)) = pattern::decode(&buf) else {
                panic!("{text}: sector {sector} not written")
            };
            if let Some((ps, pk)) = prev {
                assert!(
                    stamp == ps && k == pk + 1 || stamp == ps + 1 && k == 0,
                    "{text}: sector {sector}: {stamp},{k}"
                );
            }
            prev = Some((stamp, k));
        }
        // Reading it back through the stack checks every sector against the disks'
        // checkers (which know what each disk was told to store).
        let mut r = SeqJobs::new(
            &[SeqJob {
                op: Op::Read,
                offset: Sector(0),
                len_sectors: 20_000,
                bs_min_sectors: 8,
                bs_max_sectors: 4096,
                iodepth: 8,
            }],
            lbs,
            8,
        );
        s.run(&mut r);
        assert_eq!(r.total().errors, 0);
        assert!(s.stats().checks > 20_000);
    }
}

fn one(s: &mut Sim, bio: Bio) -> Result<Sector, Status> {
    s.submit(bio, 0, 1);
    s.run_until_idle();
    let c = s.take_completions();
    assert_eq!(c.len(), 1, "{c:?}");
    c[0].result
}

#[test]
fn zone_operations_append_and_flush_through_the_stack() {
    let mut s = sim(ZONED_STRIPED, SplitOrder::Head, 3);
    let top = s.stack().top();
    let zs = s.stack().info(top).geometry.zone_sectors();
    assert_eq!(zs, 4 * 4096);
    assert_eq!(one(&mut s, Bio::write(Sector(zs), 1024, 0)), Ok(Sector(zs)));
    let z1 = s.report_zone(top, ZoneNo(1)).unwrap();
    assert_eq!((z1.cond, z1.wp), (ZoneCond::ImpOpen, Sector(zs + 1024)));
    // A write that is not at the write pointer is refused by a member's plug.
    assert_eq!(one(&mut s, Bio::write(Sector(zs + 256), 256, 0)), Err(Status::Unaligned));
    assert_eq!(one(&mut s, Bio::zone_op(Op::ZoneFinish, Sector(zs), 0)), Ok(Sector(zs)));
    assert_eq!(s.report_zone(top, ZoneNo(1)).unwrap().cond, ZoneCond::Full);
    assert_eq!(one(&mut s, Bio::zone_op(Op::ZoneReset, Sector(zs), 0)), Ok(Sector(zs)));
    assert_eq!(s.report_zone(top, ZoneNo(1)).unwrap().cond, ZoneCond::Empty);
    assert_eq!(one(&mut s, Bio::append(Sector(0), 8, 0)), Err(Status::NotSupported));
    assert_eq!(one(&mut s, Bio::flush(0)), Ok(Sector(0)));
    assert_eq!(one(&mut s, Bio::write(Sector(0), 4096, 0)), Ok(Sector(0)));
    assert_eq!(one(&mut s, Bio::zone_op(Op::ZoneResetAll, Sector(0), 0)), Ok(Sector(0)));
    assert_eq!(s.report_zone(top, ZoneNo(0)).unwrap().cond, ZoneCond::Empty);
    for d in s.stack().devices().filter(|(_, i)| i.kind == DevKind::Disk).map(|(d, _)| d).collect::<Vec<_>>() {
        assert_eq!(s.disk(d).zones().unwrap().nr_active(), 0);
    }

    // Appends through a linear device land in the mapped zone and report the
    // linear device's sector.
    let mut l = sim(ZONED_LINEAR, SplitOrder::Head, 4);
    let ltop = l.stack().top();
    let lz = l.stack().info(ltop).geometry.zone_sectors();
    assert_eq!(one(&mut l, Bio::append(Sector(13 * lz), 16, 0)), Ok(Sector(13 * lz)));
    assert_eq!(one(&mut l, Bio::append(Sector(13 * lz), 16, 0)), Ok(Sector(13 * lz + 16)));
    let info = l.report_zone(ltop, ZoneNo(13)).unwrap();
    assert_eq!((info.start, info.wp), (Sector(13 * lz), Sector(13 * lz + 32)));
    // Out of range, misaligned, zone ops off a zone start: refused at the top.
    assert_eq!(one(&mut l, Bio::read(Sector(1 << 40), 8, 0)), Err(Status::Invalid));
    assert_eq!(one(&mut l, Bio::zone_op(Op::ZoneReset, Sector(5), 0)), Err(Status::Invalid));
}

#[test]
fn regular_stack_refuses_zone_operations() {
    let mut s = sim("linear[2*nullb:size=16,zoned=0]", SplitOrder::Head, 1);
    assert_eq!(one(&mut s, Bio::zone_op(Op::ZoneReset, Sector(0), 0)), Err(Status::NotSupported));
    assert_eq!(one(&mut s, Bio::read(Sector(32767), 2, 0)), Ok(Sector(32767)));
    assert_eq!(one(&mut s, Bio::write(Sector(32760), 16, 0)), Ok(Sector(32760)));
    assert_eq!(one(&mut s, Bio::flush(0)), Ok(Sector(0)));
}

#[test]
fn a_bio_for_a_device_not_in_the_stack_is_refused() {
    let mut st = stack(SPLIT_EXAMPLE, SplitOrder::Head);
    st.submit(zblk_core::stack::DevId(99), Bio::read(Sector(0), 8, 42), 0);
    let c = st.poll_action();
    assert!(
        matches!(c, Some(StackAction::Complete(zblk_core::Completion { user_data: 42, result: Err(s) })) if s == Status::Invalid),
        "{c:?}"
    );
    assert_eq!(st.stats().invalid, 1);
}

#[test]
fn an_append_through_a_linear_device_over_a_striped_one_is_refused() {
    // The linear device remaps the append to the striped device, which cannot
    // spread it over its members: it fails there, and no member is written.
    let mut s = sim("linear[striped:chunk=64k[2*nullb:size=64,zone_size=4,memory_backed=1]]", SplitOrder::Head, 2);
    let top = s.stack().top();
    let zs = s.stack().info(top).geometry.zone_sectors();
    assert_eq!(one(&mut s, Bio::append(Sector(zs), 8, 0)), Err(Status::NotSupported));
    assert_eq!(s.report_zone(top, ZoneNo(1)).unwrap().cond, ZoneCond::Empty);
    assert_eq!(one(&mut s, Bio::write(Sector(zs), 8, 0)), Ok(Sector(zs)));
}
