//! Every invalid input gets a clear error, and nothing panics: a table per layer
//! (geometry, device parameters, BIOs, fio-like jobs).

use zblk_core::engine::{Action, Engine, EngineConfig};
use zblk_core::geometry::{Geometry, GeometryParams};
use zblk_core::params::DeviceParams;
use zblk_core::testing::base_params as base;
use zblk_core::{Bio, BioFlags, Op, Rule, Sector, Status};
use zblk_sim::{JobSpec, Rw, ZoneMode};

#[test]
fn geometry_refusals_name_the_parameter() {
    type Edit = fn(&mut GeometryParams);
    let cases: &[(&str, Edit, &str)] = &[
        ("block size not 512/4096", |p| p.lbs_bytes = 1024, "blocksize"),
        ("zero capacity", |p| p.capacity_bytes = 0, "size"),
        ("capacity not block aligned", |p| p.capacity_bytes = (8 << 20) + 100, "size"),
        (
            "4k device, 512 B multiple",
            |p| {
                p.lbs_bytes = 4096;
                p.capacity_bytes = (8 << 20) + 512;
            },
            "size",
        ),
        ("zone size not a power of two", |p| p.zone_size_bytes = 3 << 20, "zone_size"),
        ("zone size zero", |p| p.zone_size_bytes = 0, "zone_size"),
        (
            "zone smaller than a block",
            |p| {
                p.lbs_bytes = 4096;
                p.zone_size_bytes = 2048;
            },
            "zone_size",
        ),
        ("zone larger than device", |p| p.zone_size_bytes = 16 << 20, "zone_size"),
        ("capacity above zone size", |p| p.zone_capacity_bytes = 2 << 20, "zone_capacity"),
        (
            "capacity not block aligned",
            |p| {
                p.lbs_bytes = 4096;
                p.zone_capacity_bytes = (512 << 10) + 512;
            },
            "zone_capacity",
        ),
        ("all zones conventional", |p| p.nr_conv = 8, "zone_nr_conv"),
        ("more conventional than zones", |p| p.nr_conv = 100, "zone_nr_conv"),
        (
            "open limit above active",
            |p| {
                p.max_open = 4;
                p.max_active = 2;
            },
            "zone_max_open",
        ),
        (
            "append limit below a block",
            |p| {
                p.lbs_bytes = 4096;
                p.max_append_sectors = 4;
            },
            "zone_append_max_sectors",
        ),
        ("max_sectors zero", |p| p.max_sectors = 0, "max_sectors"),
        (
            "max_sectors not a block multiple",
            |p| {
                p.lbs_bytes = 4096;
                p.max_sectors = 12;
            },
            "max_sectors",
        ),
    ];
    for (what, edit, param) in cases {
        let mut p = base();
        edit(&mut p);
        let err = Geometry::new(&p).expect_err(what);
        assert_eq!(err.param, *param, "{what}: {err}");
        assert!(!err.message.is_empty());
        assert!(err.to_string().starts_with(param), "{what}: message '{err}' does not lead with the parameter");
    }
    Geometry::new(&base()).expect("the base geometry is valid");
}

#[test]
fn device_parameter_refusals_name_the_parameter() {
    let cases = [
        ("zone_size=3", "zone_size"),
        ("zone_size=64,size=32", "zone_size"),
        ("zone_capacity=128,zone_size=64", "zone_capacity"),
        ("zone_nr_conv=1000000", "zone_nr_conv"),
        ("zone_max_open=9,zone_max_active=3", "zone_max_open"),
        ("blocksize=2048", "blocksize"),
        ("size=0", "size"),
        ("memory_backed=yes", "memory_backed"),
        ("zone_size=-1", "zone_size"),
        ("unknown_param=1", "unknown_param"),
        ("zoned", "zoned"),
        ("size=1x", "size"),
    ];
    for (text, param) in cases {
        let mut p = DeviceParams::default();
        let err = match p.apply(text) {
            Err(e) => e,
            Ok(()) => p.validate().expect_err(text),
        };
        assert_eq!(err.param, param, "{text}: {err}");
    }
}

fn refusal(engine: &mut Engine, bio: Bio) -> Option<Status> {
    engine.submit(bio);
    let mut status = None;
    while let Some(a) = engine.poll_action() {
        if let Action::Complete(c) = a {
            status = c.result.err();
        }
        assert!(!matches!(a, Action::Issue(_)), "{bio:?} reached the device");
    }
    status
}

#[test]
fn bio_refusals_have_kernel_statuses_and_never_reach_the_device() {
    let geo = Geometry::new(&GeometryParams { lbs_bytes: 4096, ..base() }).unwrap();
    let zone = geo.zone_sectors();
    let cases = [
        ("read past the end", Bio::read(Sector(geo.nr_sectors() - 8), 16, 0), Status::Invalid, Rule::BeyondEnd),
        ("read far past the end", Bio::read(Sector(u64::MAX - 4), 8, 0), Status::Invalid, Rule::BeyondEnd),
        ("misaligned start", Bio::read(Sector(1), 8, 0), Status::Invalid, Rule::NotBlockAligned),
        ("misaligned length", Bio::read(Sector(0), 4, 0), Status::Invalid, Rule::NotBlockAligned),
        ("zero length write", Bio::write(Sector(zone), 0, 0), Status::Invalid, Rule::LengthZero),
        ("append to a conventional zone", Bio::append(Sector(0), 8, 0), Status::Invalid, Rule::Conventional),
        ("append not at a zone start", Bio::append(Sector(zone + 8), 8, 0), Status::Invalid, Rule::NotZoneStart),
        ("append above the limit", Bio::append(Sector(zone), 72, 0), Status::Invalid, Rule::AppendOverLimit),
        (
            "append past the zone",
            Bio::append(Sector(zone), (zone + 8) as u32, 0),
            Status::Invalid,
            Rule::AppendOverLimit,
        ),
        (
            "reset not at a zone start",
            Bio::zone_op(Op::ZoneReset, Sector(zone + 8), 0),
            Status::Invalid,
            Rule::NotZoneStart,
        ),
        (
            "reset of a conventional zone",
            Bio::zone_op(Op::ZoneReset, Sector(0), 0),
            Status::Invalid,
            Rule::Conventional,
        ),
        (
            "finish past the end",
            Bio::zone_op(Op::ZoneFinish, Sector(geo.nr_sectors()), 0),
            Status::Invalid,
            Rule::BeyondEnd,
        ),
        ("flush with data", Bio { nr_sectors: 8, ..Bio::flush(0) }, Status::Invalid, Rule::UnexpectedLength),
        (
            "zone op with a length",
            Bio { nr_sectors: 8, ..Bio::zone_op(Op::ZoneOpen, Sector(zone), 0) },
            Status::Invalid,
            Rule::UnexpectedLength,
        ),
        (
            "discard of a sequential zone",
            Bio { op: Op::Discard, ..Bio::write(Sector(zone), 8, 0) },
            Status::Invalid,
            Rule::DiscardSequential,
        ),
        ("unaligned write", Bio::write(Sector(zone + 8), 8, 0), Status::Unaligned, Rule::NotAtWp { wp: Sector(zone) }),
    ];
    for (what, bio, status, rule) in cases {
        let mut e = Engine::new_empty(&geo, EngineConfig::default());
        let got = refusal(&mut e, bio);
        assert_eq!(got, Some(status), "{what}");
        // The refusal names the rule the engine applied, for the message.
        assert_eq!(got.and_then(Status::rule), Some(rule), "{what}");
        assert_eq!(status.errno_name(), if status == Status::Unaligned { "EIO" } else { "EINVAL" });
    }
    // Zone operations on a regular device are not supported.
    let regular = Geometry::new(&GeometryParams { zoned: false, ..base() }).unwrap();
    for bio in [Bio::append(Sector(0), 8, 0), Bio::zone_op(Op::ZoneReset, Sector(0), 0)] {
        let mut e = Engine::new_empty(&regular, EngineConfig::default());
        assert_eq!(refusal(&mut e, bio), Some(Status::NotSupported));
    }
    // A flag does not make an invalid BIO valid.
    let mut e = Engine::new_empty(&geo, EngineConfig::default());
    assert_eq!(refusal(&mut e, Bio::read(Sector(1), 8, 0).with_flags(BioFlags::FUA)), Some(Status::Invalid));
}

/// Submits `bio`, completes every request it issues with success, and returns its
/// result.
fn through(engine: &mut Engine, bio: Bio) -> Result<Sector, Status> {
    engine.submit(bio);
    let mut result = None;
    while let Some(a) = engine.poll_action() {
        match a {
            Action::Issue(r) => engine.complete(r.id, Ok(r.sector)),
            Action::Complete(c) => result = Some(c.result),
            _ => {}
        }
    }
    result.expect("the BIO completed")
}

#[test]
fn host_refusals_name_the_rule_with_the_plugs_write_pointer() {
    // Zones of 1 MiB, 768 KiB writable: a write past the capacity stays in its zone.
    let geo = Geometry::new(&GeometryParams { zone_capacity_bytes: 768 << 10, max_sectors: 2048, ..base() }).unwrap();
    let (zone, cap) = (geo.zone_sectors(), geo.zone_capacity(zblk_core::ZoneNo(1)));
    let mut e = Engine::new_empty(&geo, EngineConfig::default());
    assert_eq!(through(&mut e, Bio::write(Sector(zone), 8, 0)), Ok(Sector(zone)));
    let rule = |r: Result<Sector, Status>| r.err().and_then(Status::rule);
    let wp = Sector(zone + 8);
    assert_eq!(rule(through(&mut e, Bio::write(Sector(zone + 16), 8, 0))), Some(Rule::NotAtWp { wp }));
    assert_eq!(rule(through(&mut e, Bio::write(wp, cap as u32, 0))), Some(Rule::PastCapacity { wp }));
    // An emulated append that does not fit: what is left of the zone ends at wp.
    assert_eq!(rule(through(&mut e, Bio::append(Sector(zone), (cap - 4) as u32, 0))), Some(Rule::PastCapacity { wp }));
    assert_eq!(through(&mut e, Bio::zone_op(Op::ZoneFinish, Sector(zone), 0)), Ok(Sector(zone)));
    assert_eq!(rule(through(&mut e, Bio::write(wp, 8, 0))), Some(Rule::ZoneFull));
}

#[test]
fn job_refusals_name_fios_option() {
    let geo = Geometry::new(&base()).unwrap();
    let regular = Geometry::new(&GeometryParams { zoned: false, ..base() }).unwrap();
    let ok = JobSpec { size_bytes: Some(4 << 20), offset_bytes: 1 << 20, ..JobSpec::default() };
    let cases: Vec<(&str, JobSpec, &Geometry, &str)> = vec![
        ("bs zero", JobSpec { bs_bytes: 0, ..ok.clone() }, &geo, "bs"),
        ("bs not block aligned", JobSpec { bs_bytes: 1000, ..ok.clone() }, &geo, "bs"),
        ("bs above zone capacity", JobSpec { bs_bytes: 2 << 20, ..ok.clone() }, &geo, "bs"),
        ("iodepth zero", JobSpec { iodepth: 0, ..ok.clone() }, &geo, "iodepth"),
        ("numjobs zero", JobSpec { numjobs: 0, ..ok.clone() }, &geo, "numjobs"),
        ("offset past the end", JobSpec { offset_bytes: 64 << 20, ..ok.clone() }, &geo, "offset"),
        ("offset not on a zone", JobSpec { offset_bytes: 4096, ..ok.clone() }, &geo, "offset"),
        ("region past the end", JobSpec { size_bytes: Some(64 << 20), ..ok.clone() }, &geo, "size"),
        ("region ends mid zone", JobSpec { size_bytes: Some(3 << 19), ..ok.clone() }, &geo, "size"),
        ("io_size zero", JobSpec { io_size_bytes: Some(0), ..ok.clone() }, &geo, "io_size"),
        ("runtime zero", JobSpec { runtime_ns: Some(0), ..ok.clone() }, &geo, "runtime"),
        ("zbd on a regular device", ok.clone(), &regular, "zonemode"),
        (
            "zbd writes to conventional zones",
            JobSpec { offset_bytes: 0, size_bytes: Some(1 << 20), ..ok.clone() },
            &geo,
            "offset",
        ),
    ];
    for (what, job, g, option) in cases {
        let err = job.validate(g).expect_err(what);
        assert_eq!(err.option, option, "{what}: {err}");
    }
    ok.validate(&geo).expect("the base job is valid");
    let reads = JobSpec { rw: Rw::RandRead, zonemode: ZoneMode::None, ..ok };
    reads.validate(&regular).expect("plain reads on a regular device are fine");
}
