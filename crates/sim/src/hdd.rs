//! A hard disk timing model (SMR or conventional), in virtual time: a DiskSim-like
//! model small enough to read in one sitting.
//!
//! - **Layout**: zoned bit recording. LBAs run from the outer diameter (OD) to the
//!   inner (ID); the linear bit density is constant, so the media rate is
//!   proportional to the radius, from `od_rate` down to `id_rate`. The model uses one
//!   virtual surface whose track holds one revolution of data, and places an LBA at a
//!   radial position (fraction of the stroke) and an angle.
//! - **Seek**: Ruemmler & Wilkes' shape: `t1 + a·√d` for short seeks, `c + b·d` for
//!   long ones (d = fraction of the stroke), fitted to the datasheet's single-track,
//!   average and full-stroke times; writes add the datasheet's extra settle time.
//! - **Rotation**: exact, at `rpm`. After a seek the head waits for the target
//!   sector to come round; continuing where the last transfer ended costs nothing, but
//!   arriving late at the next sector costs (almost) a revolution, as on a real disk.
//! - **Interface**: a per-command overhead and a link (SATA 6 Gb/s: 600 MB/s) shared
//!   by all transfers; a command queue of `ncq_depth` tags.
//! - **Write-back cache**: with the write cache on, a write is acknowledged once its
//!   data is in the cache, if the dirty budget (`cache_bytes`, `cache_extents`) has
//!   room; otherwise it waits. Data contiguous with a cached extent merges into it.
//!   Dirty data is destaged in chunks by the policy of [`Destage`]. FLUSH waits until
//!   nothing is dirty; a FUA write goes to the media before it completes. A zone
//!   reset is non-queued and waits for the cache to be written back (M1). With the
//!   cache off, writes are written to the media before completing, scheduled by
//!   shortest positioning time among the queued commands (RPO).
//! - **Zone resume (M2)**: a media write that resumes a zone after the head wrote
//!   another one first re-acquires the zone's last shingled track: one revolution.
//! - **Reads**: from the cache when dirty data covers them, from the read-ahead
//!   buffer when the previous media read ran on into them, else from the media
//!   (shortest positioning time first among queued reads).
//!
//! Every parameter is documented with its source in the presets ([`HddParams::smr_30tb`],
//! [`HddParams::smr_20tb`]) and in `docs/calibration.md`.

use super::model::DeviceModel;
use std::collections::VecDeque;
use zblk_core::bio::{BioFlags, Op, Request};
use zblk_core::units::SECTOR_SIZE;

/// How dirty data leaves the write cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Destage {
    /// The destager picks, among the `window` oldest dirty extents, the one with the
    /// shortest positioning time (1: strictly oldest first).
    pub window: u32,
    /// Largest media write of one destage step; the rest of the extent follows.
    pub chunk_bytes: u64,
    /// Merge newly cached data into a dirty extent it continues (same zone stream).
    pub merge: bool,
}

/// The parameters of a disk. See the module documentation for what each does.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HddParams {
    /// Preset name.
    pub name: String,
    /// Capacity in bytes.
    pub capacity_bytes: u64,
    /// Spindle speed.
    pub rpm: f64,
    /// Media transfer rate at the outer diameter, bytes/s.
    pub od_rate: f64,
    /// Media transfer rate at the inner diameter, bytes/s.
    pub id_rate: f64,
    /// Single-track seek (read), ns.
    pub seek_track_ns: f64,
    /// Average seek (read, over random pairs of positions), ns.
    pub seek_avg_ns: f64,
    /// Full-stroke seek (read), ns.
    pub seek_full_ns: f64,
    /// Single-track seek (write, including the longer write settle), ns.
    pub write_seek_track_ns: f64,
    /// Average seek (write), ns.
    pub write_seek_avg_ns: f64,
    /// Full-stroke seek (write), ns.
    pub write_seek_full_ns: f64,
    /// Drive command processing per command, ns.
    pub cmd_overhead_ns: f64,
    /// Interface rate, bytes/s.
    pub link_rate: f64,
    /// Command queue depth (NCQ tags).
    pub ncq_depth: u32,
    /// Write cache enabled.
    pub write_cache: bool,
    /// Dirty budget of the write cache, in segments: a cached write command takes
    /// `ceil(bytes / segment_bytes)` segments until its data is destaged, whether or
    /// not it merged into an extent.
    pub cache_segments: u32,
    /// Size of a cache segment, bytes.
    pub segment_bytes: u64,
    /// Destage policy.
    pub destage: Destage,
    /// Read-ahead after a media read, bytes.
    pub readahead_bytes: u64,
    /// Zone size of the SMR layout, bytes (0: not zoned). See `reset_flushes` for
    /// what a reset does with the zone's cached data.
    pub zone_bytes: u64,
    /// Seed of the layout's unknowns: the zone advance, when `zone_advance` does not
    /// fix it (track skew and surface order are the drive's secret).
    pub layout_seed: u64,
    /// Zone advance, revolutions in [0, 1): how far each zone's first sector sits
    /// past where the continuous spiral of the previous zone would put it. A drive
    /// formats its zones alike (the same tracks per zone, the same skew at every
    /// track and head switch), so this is one number for the disk, not a draw per
    /// zone: the angle between two zones' sectors depends only on how far apart
    /// their LBAs are. That is what sets the rotational wait of every zone change
    /// in per-zone plugging's boundary alternation, the same at every boundary for
    /// a given queue depth (docs/calibration.md, *Revision 3*). `None`: drawn from
    /// `layout_seed` (the disk's formatting is unknown).
    pub zone_advance: Option<f64>,
    /// Zone resume cost, in revolutions: a media write that resumes a zone with
    /// data already written, after the head last wrote another zone, first spends
    /// this many revolutions re-acquiring the zone's last shingled track (the next
    /// track is placed relative to where the previous one was actually written).
    /// 0 disables it. See docs/calibration.md, mechanism M2.
    pub zone_resume_revs: f64,
    /// A zone reset is a non-queued command that first writes the cache back: it
    /// waits for the queue to drain and for dirty data to reach the media, and no
    /// command is queued behind it until it completes (false: the reset costs
    /// command processing and drops the zone's dirty data). Mechanism M1.
    pub reset_flushes: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Extent {
    start: u64, // byte offset
    len: u64,
    /// Cache segments the commands whose data this extent holds take.
    segs: u32,
}

impl Extent {
    fn end(&self) -> u64 {
        self.start + self.len
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Not started: waiting for cache room (cached write) or its turn.
    Waiting,
    /// Data moving over the link.
    Transferring,
    /// Needs the media: a read miss, or a write-through whose data is in the buffer.
    NeedMedia,
    /// Its media operation is in progress.
    OnMedia,
    /// Waits for the cache to be clean: FLUSH, or a FUA write already cached.
    FlushWait,
}

#[derive(Clone, Copy, Debug)]
struct Cmd {
    req: Request,
    stage: Stage,
}

#[derive(Clone, Copy, Debug)]
enum MediaOp {
    /// Destaging part of a dirty extent.
    Destage(Extent),
    /// A read or write-through for a command (index into `cmds` by request id).
    ForCmd(u64),
}

#[derive(Clone, Copy, Debug)]
struct Readahead {
    start: u64,
    /// Media time at which the read-ahead began streaming from `start`.
    t0: f64,
    /// Bytes per ns at `start`.
    rate: f64,
    /// Media time when it stopped (the media went to other work).
    stopped_at: Option<f64>,
}

/// What `unit_hash` draws the zone advance with, when the parameters leave it open.
const ZONE_ADVANCE_DRAW: u64 = 0x20e_adf;

/// A deterministic hash of `(seed, x)` to [0, 1) (splitmix64).
fn unit_hash(seed: u64, x: u64) -> f64 {
    let mut z = seed ^ x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

const MB: f64 = 1e6;
const MS: f64 = 1e6;
const US: f64 = 1e3;

impl HddParams {
    /// Mechanics and interface common to the 3.5" 7200 rpm enterprise SATA disks
    /// modelled here. Sources: the seek and latency figures of Western Digital's
    /// 7200 rpm enterprise OEM specifications (single-track seek 0.23 ms read /
    /// 0.32 ms write, average 7.4 ms read / 8.2 ms write, average latency 4.16 ms);
    /// full stroke ≈ 2× average (typical, not in the excerpt used); SATA 6 Gb/s with
    /// 8b/10b coding moves 600 MB/s; NCQ has 32 tags (ATA).
    fn enterprise_7200(name: &str, capacity_bytes: u64, destage: Destage) -> HddParams {
        HddParams {
            name: name.to_string(),
            capacity_bytes,
            rpm: 7200.0,
            od_rate: OD_RATE,
            // Inner/outer radius of a 3.5" recording band ≈ 0.45: the ID rate.
            id_rate: OD_RATE * 0.45,
            seek_track_ns: 0.23 * MS,
            seek_avg_ns: 7.4 * MS,
            seek_full_ns: 15.0 * MS,
            write_seek_track_ns: 0.32 * MS,
            write_seek_avg_ns: 8.2 * MS,
            write_seek_full_ns: 16.0 * MS,
            cmd_overhead_ns: CMD_OVERHEAD_NS,
            link_rate: 600.0 * MB,
            ncq_depth: 32,
            write_cache: true,
            cache_segments: CACHE_SEGMENTS,
            segment_bytes: 64 << 10,
            destage,
            readahead_bytes: 2 << 20,
            zone_bytes: 256 << 20,
            layout_seed: 0x5eed,
            zone_advance: None,
            zone_resume_revs: ZONE_RESUME_REVS,
            reset_flushes: true,
        }
    }

    /// The 30 TB host-managed SMR SATA disk of the single-issuer measurements. Its
    /// cache destages the best positioned of its 4 oldest dirty extents without
    /// merging commands of a zone stream: the published throughput falls as soon as
    /// writes of two zones interleave. The window and the zone advance are fitted
    /// (docs/calibration.md).
    pub fn smr_30tb() -> HddParams {
        let destage = Destage { window: DESTAGE_WINDOW_30TB, chunk_bytes: 1 << 20, merge: false };
        HddParams {
            zone_advance: Some(ZONE_ADVANCE_30TB),
            ..HddParams::enterprise_7200("SMR 30TB", 30_000_000_000_000, destage)
        }
    }

    /// The 20 TB host-managed SMR SATA disk (256 MiB zones) of the zone write
    /// plugging vs zone write locking measurements. Its cache destages by shortest
    /// positioning time over all dirty extents, merging zone streams: interleaved
    /// streams cost it little, and random zone writes are absorbed.
    pub fn smr_20tb() -> HddParams {
        let destage = Destage { window: u32::MAX, chunk_bytes: 1 << 20, merge: true };
        HddParams::enterprise_7200("SMR 20TB", 20_000_000_000_000, destage)
    }

    /// A conventional (CMR) 7200 rpm disk with the same mechanics, not zoned.
    pub fn cmr_hdd(capacity_bytes: u64) -> HddParams {
        let destage = Destage { window: u32::MAX, chunk_bytes: 1 << 20, merge: true };
        HddParams { zone_bytes: 0, ..HddParams::enterprise_7200("CMR HDD", capacity_bytes, destage) }
    }
}

/// Drive command processing per command: a typical SATA NCQ command exchange and
/// firmware handling (not fitted; the published points move by less than their
/// 10% tolerance for any value from 0 to 15 µs).
pub const CMD_OVERHEAD_NS: f64 = 10.0 * US;
/// Fitted (to the 20 TB disk's 4 KiB random writes): write cache segments, 7200 ×
/// 64 KiB = 450 MiB, within the 512 MB buffer of 20 TB class enterprise disks.
pub const CACHE_SEGMENTS: u32 = 7200;
/// Fitted (to the 30 TB disk's per-zone plugging points, QD 8 to 128: the most
/// within ±10 %, then the smallest worst error): the 30 TB disk destages the
/// shortest-positioning extent among its 4 oldest, unmerged.
pub const DESTAGE_WINDOW_30TB: u32 = 4;
/// Fitted together with the window (same points, same rule; docs/calibration.md,
/// *Revision 3*): the 30 TB disk's zone advance, revolutions. It sets the phase
/// between the two zones of per-zone plugging's boundary alternation at each QD.
pub const ZONE_ADVANCE_30TB: f64 = 0.20;
/// Fitted (to the QD1 sequential writes of both disks): media rate at the OD.
pub const OD_RATE: f64 = 248.0 * MB;
/// Zone resume cost (mechanism M2): one revolution, the time to read back the
/// zone's last written track once (physics; the mechanism itself is a structural
/// choice counted as a fitted degree of freedom in docs/calibration.md).
pub const ZONE_RESUME_REVS: f64 = 1.0;

/// The disk model. Implements [`DeviceModel`].
#[derive(Debug)]
pub struct HddModel {
    p: HddParams,
    rev_ns: f64,
    /// `p.zone_advance`, or the layout seed's draw of it.
    zone_advance: f64,
    n_tracks: f64,
    r_min: f64,
    seek: SeekCurve,
    write_seek: SeekCurve,
    /// Commands accepted (NCQ), in arrival order, and the ones waiting for a tag.
    cmds: Vec<Cmd>,
    backlog: VecDeque<Request>,
    link_free_at: f64,
    media_free_at: f64,
    media_op: Option<MediaOp>,
    /// Head position after the last media operation: LBA byte and time.
    head_byte: u64,
    head_time: f64,
    /// The zone the head last wrote (its last shingled track's position is known).
    last_write_zone: Option<u64>,
    /// Zone of the last write that reached the disk (for `arrival_switches`).
    last_arrival_zone: Option<u64>,
    dirty: VecDeque<Extent>,
    dirty_bytes: u64,
    dirty_segs: u32,
    reserved_segs: u32,
    readahead: Option<Readahead>,
    /// Completions scheduled: (time, request), unordered.
    pending: Vec<(f64, Request)>,
    /// Commands whose link transfer is in progress: (end time, request id, kind).
    transfers: Vec<(f64, u64, Transfer)>,
    now: f64,
    /// Counters for reports.
    pub stats: HddStats,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transfer {
    /// Write data into the cache; completes the command.
    IntoCache,
    /// Write data into the buffer for a write-through; then the media.
    IntoBuffer,
    /// Read data to the host; completes the command.
    ToHost,
}

/// What the disk did.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct HddStats {
    /// Media operations.
    pub media_ops: u64,
    /// Media operations that needed a seek.
    pub seeks: u64,
    /// Time spent seeking, ns.
    pub seek_ns: f64,
    /// Time spent waiting for rotation, ns.
    pub rotation_ns: f64,
    /// Time spent transferring to/from the media, ns.
    pub transfer_ns: f64,
    /// Bytes destaged from the cache.
    pub destaged_bytes: u64,
    /// Reads served from the read-ahead buffer or the cache.
    pub read_hits: u64,
    /// Writes cached.
    pub cached_writes: u64,
    /// Of which merged into a dirty extent they continue.
    pub merged_writes: u64,
    /// Most dirty extents at once.
    pub max_dirty_extents: u64,
    /// Most dirty bytes at once.
    pub max_dirty_bytes: u64,
    /// Most cache segments in use at once.
    pub max_dirty_segs: u64,
    /// Media writes that resumed a zone after writing another (mechanism M2).
    pub zone_resumes: u64,
    /// Time spent re-acquiring resumed zones, ns.
    pub resume_ns: f64,
    /// Zone resets executed.
    pub resets: u64,
    /// Writes that reached the disk for another zone than the write that reached it
    /// just before (the interleaving the host hands the disk, before any cache).
    pub arrival_switches: u64,
}

/// Ruemmler & Wilkes' seek curve, fitted to three datasheet figures.
#[derive(Clone, Copy, Debug)]
struct SeekCurve {
    t1: f64,
    a: f64,
    c: f64,
    b: f64,
    knee: f64,
    /// Distance of one track, as a fraction of the stroke.
    one_track: f64,
}

impl SeekCurve {
    /// Fits `t(d) = t1 + a·√d` (d ≤ knee) and `c + b·d` (d > knee), continuous at the
    /// knee, with `t(1) = full` and the average over random pairs of positions
    /// (density 2(1−d)) equal to `avg`.
    fn fit(t1: f64, avg: f64, full: f64, one_track: f64) -> SeekCurve {
        let knee = 0.2f64;
        // Unknowns a, b (c follows from t(1) = full: c = full − b). Continuity:
        // t1 + a·√k = full − b + b·k  →  a·√k + b(1 − k) = full − t1.
        // Mean: ∫0^k (t1 + a√d)·2(1−d) dd + ∫k^1 (full − b + b d)·2(1−d) dd = avg.
        let m0 = |lo: f64, hi: f64| 2.0 * ((hi - hi * hi / 2.0) - (lo - lo * lo / 2.0)); // ∫ 2(1−d)
        let m_sqrt = |lo: f64, hi: f64| {
            let f = |d: f64| 2.0 * (2.0 / 3.0 * d.powf(1.5) - 2.0 / 5.0 * d.powf(2.5));
            f(hi) - f(lo)
        };
        let m_lin = |lo: f64, hi: f64| {
            let f = |d: f64| 2.0 * (d * d / 2.0 - d * d * d / 3.0);
            f(hi) - f(lo)
        };
        // avg = t1·m0(0,k) + a·m_sqrt(0,k) + (full − b)·m0(k,1) + b·m_lin(k,1)
        // → a·m_sqrt(0,k) + b·(m_lin(k,1) − m0(k,1)) = avg − t1·m0(0,k) − full·m0(k,1)
        let (p1, q1, r1) = (knee.sqrt(), 1.0 - knee, full - t1);
        let (p2, q2, r2) =
            (m_sqrt(0.0, knee), m_lin(knee, 1.0) - m0(knee, 1.0), avg - t1 * m0(0.0, knee) - full * m0(knee, 1.0));
        let det = p1 * q2 - p2 * q1;
        let a = (r1 * q2 - r2 * q1) / det;
        let b = (p1 * r2 - p2 * r1) / det;
        SeekCurve { t1, a, c: full - b, b, knee, one_track }
    }

    fn time(&self, d: f64) -> f64 {
        if d < self.one_track {
            0.0
        } else if d <= self.knee {
            self.t1 + self.a * (d.max(self.one_track) - self.one_track).sqrt()
        } else {
            self.c + self.b * d
        }
    }
}

impl HddModel {
    /// A disk with parameters `p`, idle at time zero with the head at LBA 0.
    pub fn new(p: HddParams) -> HddModel {
        assert!(p.od_rate >= p.id_rate && p.id_rate > 0.0, "media rates must satisfy od >= id > 0");
        assert!(p.ncq_depth > 0 && p.destage.window > 0 && p.destage.chunk_bytes > 0, "bad HDD parameters");
        let rev_ns = 60e9 / p.rpm;
        let r_min = p.id_rate / p.od_rate;
        let avg_track = rev_ns * 1e-9 * (p.od_rate + p.id_rate) / 2.0;
        let n_tracks = p.capacity_bytes as f64 / avg_track;
        let seek = SeekCurve::fit(p.seek_track_ns, p.seek_avg_ns, p.seek_full_ns, 1.0 / n_tracks);
        let write_seek =
            SeekCurve::fit(p.write_seek_track_ns, p.write_seek_avg_ns, p.write_seek_full_ns, 1.0 / n_tracks);
        let zone_advance = match p.zone_advance {
            Some(a) => {
                assert!((0.0..1.0).contains(&a), "zone advance {a} is not in [0, 1) revolutions");
                a
            }
            None => unit_hash(p.layout_seed, ZONE_ADVANCE_DRAW),
        };
        HddModel {
            rev_ns,
            zone_advance,
            write_seek,
            n_tracks,
            r_min,
            seek,
            cmds: Vec::new(),
            backlog: VecDeque::new(),
            link_free_at: 0.0,
            media_free_at: 0.0,
            media_op: None,
            head_byte: 0,
            head_time: 0.0,
            last_write_zone: None,
            last_arrival_zone: None,
            dirty: VecDeque::new(),
            dirty_bytes: 0,
            dirty_segs: 0,
            reserved_segs: 0,
            readahead: None,
            pending: Vec::new(),
            transfers: Vec::new(),
            now: 0.0,
            stats: HddStats::default(),
            p,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &HddParams {
        &self.p
    }

    // ------------------------------------------------------------------ geometry

    /// Radius (OD = 1) of byte offset `b`: constant linear density means the data
    /// between the OD and radius r is proportional to 1 − r².
    fn radius(&self, b: u64) -> f64 {
        let x = (b as f64 / self.p.capacity_bytes as f64).clamp(0.0, 1.0);
        (1.0 - x * (1.0 - self.r_min * self.r_min)).sqrt()
    }

    /// Position of byte `b` as a fraction of the stroke from the OD.
    fn stroke(&self, b: u64) -> f64 {
        (1.0 - self.radius(b)) / (1.0 - self.r_min)
    }

    /// Angle of byte `b` in revolutions [0, 1): continuous within a zone (track skew
    /// matched to sequential access), each zone starting `zone_advance` further on
    /// than the previous one.
    fn angle(&self, b: u64) -> f64 {
        let origin = match self.p.zone_bytes {
            0 => 0.0,
            z => (b / z) as f64 * self.zone_advance,
        };
        (self.stroke(b) * self.n_tracks + origin).fract()
    }

    /// Media rate at byte `b`, bytes per ns.
    fn rate(&self, b: u64) -> f64 {
        self.p.od_rate * self.radius(b) * 1e-9
    }

    /// The sustained media rate over `len` bytes from `start`, MB/s: the bytes over the
    /// time the head needs to transfer them (track-to-track moves within a zone are
    /// hidden by the track skew, as in the model).
    pub fn sustained_mb_s(&self, start: u64, len: u64) -> f64 {
        assert!(len > 0, "an empty region has no rate");
        const STEPS: u64 = 256;
        let step = len.div_ceil(STEPS).max(1);
        let mut ns = 0.0;
        let mut b = start;
        while b < start + len {
            let n = step.min(start + len - b);
            ns += n as f64 / self.rate(b + n / 2);
            b += n;
        }
        len as f64 / ns * 1e9 / 1e6
    }

    /// Seek + settle + rotational wait to start a media access at byte `b` at or after
    /// time `t`, from the current head position.
    fn positioning(&self, b: u64, t: f64, write: bool) -> (f64, f64) {
        let d = (self.stroke(b) - self.stroke(self.head_byte)).abs();
        let seek = if write { self.write_seek.time(d) } else { self.seek.time(d) };
        // Whole revolutions leave the angle where it was: the resume cost adds to
        // the time before the rotational wait, not to the angle.
        let seek = seek + if write { self.resume_ns(b) } else { 0.0 };
        let arrive = t + seek;
        let head_angle = (arrive / self.rev_ns).fract();
        let mut wait = (self.angle(b) - head_angle).rem_euclid(1.0) * self.rev_ns;
        if seek == 0.0 && b == self.head_byte && (t - self.head_time).abs() < 1.0 {
            wait = 0.0; // continuing a transfer without a break
        }
        (seek, wait)
    }

    /// Mechanism M2: what a media write at `b` pays to resume its zone. Nothing for
    /// the zone the head last wrote, for a zone's first sector (its first track is
    /// not shingled onto anything written before the reset) or without zones.
    fn resume_ns(&self, b: u64) -> f64 {
        let z = self.p.zone_bytes;
        if z == 0 || self.p.zone_resume_revs == 0.0 || b % z == 0 || self.last_write_zone == Some(b / z) {
            return 0.0;
        }
        self.p.zone_resume_revs * self.rev_ns
    }

    // ------------------------------------------------------------------ scheduling

    fn cmd_index(&self, id: u64) -> Option<usize> {
        self.cmds.iter().position(|c| c.req.id.raw() == id)
    }

    fn complete_at(&mut self, t: f64, req: Request) {
        self.pending.push((t, req));
    }

    fn link_transfer(&mut self, bytes: u64, earliest: f64) -> f64 {
        let start = self.link_free_at.max(earliest);
        let end = start + self.p.cmd_overhead_ns + bytes as f64 / self.p.link_rate * 1e9;
        self.link_free_at = end;
        end
    }

    /// Segments a cached write of `bytes` takes (at most the whole cache, so that a
    /// huge write-zeroes can still pass through it).
    fn segments(&self, bytes: u64) -> u32 {
        (bytes.div_ceil(self.p.segment_bytes).max(1)).min(u64::from(self.p.cache_segments)) as u32
    }

    fn cache_room(&self, bytes: u64) -> bool {
        self.dirty_segs + self.reserved_segs + self.segments(bytes) <= self.p.cache_segments
    }

    /// Starts whatever can start at `self.now`: link transfers for waiting commands,
    /// and a media operation if the media is idle.
    fn schedule(&mut self) {
        loop {
            let before = (self.cmds.len(), self.backlog.len());
            self.admit_backlog();
            self.start_transfers();
            self.check_flushes();
            // A completed reset (non-queued) lets the commands held behind it in.
            if (self.cmds.len(), self.backlog.len()) == before {
                break;
            }
        }
        if self.media_op.is_none() {
            self.start_media();
        }
    }

    fn admit_backlog(&mut self) {
        while (self.cmds.len() as u32) < self.p.ncq_depth {
            let Some(&req) = self.backlog.front() else { break };
            if self.p.reset_flushes {
                // Mechanism M1: a reset is a non-queued command. It waits for the
                // queue to drain, and nothing is queued behind it until it is done.
                let reset_out = self.cmds.iter().any(|c| Self::is_reset(&c.req));
                if reset_out || (Self::is_reset(&req) && !self.cmds.is_empty()) {
                    break;
                }
            }
            self.backlog.pop_front();
            self.accept(req);
        }
    }

    fn is_reset(req: &Request) -> bool {
        matches!(req.op, Op::ZoneReset | Op::ZoneResetAll)
    }

    fn accept(&mut self, req: Request) {
        let stage = if req.op == Op::Flush { Stage::FlushWait } else { Stage::Waiting };
        self.cmds.push(Cmd { req, stage });
    }

    fn bytes(req: &Request) -> u64 {
        u64::from(req.nr_sectors) * SECTOR_SIZE
    }

    /// Waiting commands get the link in arrival order; a cached write first needs room
    /// in the dirty budget (and blocks the writes behind it: cache admission is FIFO).
    fn start_transfers(&mut self) {
        let mut i = 0;
        let mut writes_blocked = false;
        while i < self.cmds.len() {
            let c = self.cmds[i];
            if c.stage != Stage::Waiting {
                i += 1;
                continue;
            }
            let id = c.req.id.raw();
            let bytes = Self::bytes(&c.req);
            let payload = if c.req.op == Op::WriteZeroes { 0 } else { bytes };
            match c.req.op {
                Op::Write | Op::ZoneAppend | Op::WriteZeroes if self.p.write_cache => {
                    if writes_blocked || !self.cache_room(bytes) {
                        writes_blocked = true;
                        i += 1;
                        continue;
                    }
                    self.reserved_segs += self.segments(bytes);
                    let end = self.link_transfer(payload, self.now);
                    self.cmds[i].stage = Stage::Transferring;
                    self.transfers.push((end, id, Transfer::IntoCache));
                }
                Op::Write | Op::ZoneAppend | Op::WriteZeroes => {
                    let end = self.link_transfer(payload, self.now);
                    self.cmds[i].stage = Stage::Transferring;
                    self.transfers.push((end, id, Transfer::IntoBuffer));
                }
                Op::Read if self.read_hit(&c.req) => {
                    self.stats.read_hits += 1;
                    let end = self.link_transfer(bytes, self.now);
                    self.cmds[i].stage = Stage::Transferring;
                    self.transfers.push((end, id, Transfer::ToHost));
                }
                Op::Read if self.media_op.is_none() && self.streaming_hit(&c.req).is_some() => {
                    // The read-ahead is streaming into this read: the media keeps
                    // going until it has all of it, with no seek and no rotation.
                    let ready = self.streaming_hit(&c.req).expect("checked");
                    self.stats.read_hits += 1;
                    self.cmds[i].stage = Stage::OnMedia;
                    self.media_op = Some(MediaOp::ForCmd(id));
                    self.media_free_at = ready.max(self.now);
                    self.head_byte = c.req.end().bytes();
                    self.head_time = self.media_free_at;
                }
                Op::Read => self.cmds[i].stage = Stage::NeedMedia,
                Op::ZoneReset | Op::ZoneResetAll if self.p.reset_flushes => {
                    // Mechanism M1: the cache is written back first (the drive keeps
                    // the zone's write pointer consistent with its media); the reset
                    // then completes as a flush does, in `check_flushes`.
                    self.stats.resets += 1;
                    self.cmds[i].stage = Stage::FlushWait;
                }
                op => {
                    // Zone operations, discard: command processing only. A reset
                    // erases the zone, so its dirty data is dropped, not written.
                    if matches!(op, Op::ZoneReset | Op::ZoneResetAll) {
                        self.stats.resets += 1;
                        self.drop_dirty_for(&c.req);
                    }
                    let end = self.link_transfer(0, self.now);
                    self.cmds.remove(i);
                    self.complete_at(end, c.req);
                    continue;
                }
            }
            i += 1;
        }
    }

    /// A read is served without the media when dirty data or the read-ahead buffer
    /// already holds all of it.
    fn read_hit(&self, req: &Request) -> bool {
        let (s, e) = (req.sector.bytes(), req.sector.bytes() + Self::bytes(req));
        if self.dirty.iter().any(|x| x.start <= s && e <= x.end()) {
            return true;
        }
        let Some(ra) = self.readahead else { return false };
        let until = ra.stopped_at.unwrap_or(self.now).min(self.now);
        let avail = ((until - ra.t0).max(0.0) * ra.rate) as u64;
        let avail = avail.min(self.p.readahead_bytes);
        ra.start <= s && e <= ra.start + avail
    }

    /// When the read-ahead, still streaming, will have all of `req`: it starts
    /// inside what has been read ahead and ends within the read-ahead window.
    fn streaming_hit(&self, req: &Request) -> Option<f64> {
        let ra = self.readahead?;
        if ra.stopped_at.is_some() {
            return None;
        }
        let (s, e) = (req.sector.bytes(), req.end().bytes());
        let streamed = ((self.now - ra.t0).max(0.0) * ra.rate) as u64;
        let inside = s >= ra.start && s <= ra.start + streamed && e - ra.start <= self.p.readahead_bytes;
        inside.then(|| ra.t0 + (e - ra.start) as f64 / ra.rate)
    }

    /// A reset throws away the zone's dirty data (it is being erased).
    fn drop_dirty_for(&mut self, req: &Request) {
        let (lo, hi) = if req.op == Op::ZoneResetAll || self.p.zone_bytes == 0 {
            (0, u64::MAX)
        } else {
            (req.sector.bytes(), req.sector.bytes() + self.p.zone_bytes)
        };
        let mut kept = VecDeque::with_capacity(self.dirty.len());
        for x in self.dirty.drain(..) {
            if x.start >= lo && x.start < hi {
                self.dirty_bytes -= x.len;
                self.dirty_segs -= x.segs;
            } else {
                kept.push_back(x);
            }
        }
        self.dirty = kept;
    }

    fn check_flushes(&mut self) {
        let clean = self.dirty_bytes == 0 && !matches!(self.media_op, Some(MediaOp::Destage(_)));
        let no_cached_writes_in_flight = !self.transfers.iter().any(|t| t.2 == Transfer::IntoCache);
        if !(clean && no_cached_writes_in_flight) {
            return;
        }
        let mut i = 0;
        while i < self.cmds.len() {
            if self.cmds[i].stage == Stage::FlushWait {
                let c = self.cmds.remove(i);
                let end = self.link_transfer(0, self.now);
                self.complete_at(end, c.req);
            } else {
                i += 1;
            }
        }
    }

    /// Picks the next media operation: commands that need the media (reads, write
    /// through) by shortest positioning time; else, or when writes wait for cache
    /// room, a destage step.
    fn start_media(&mut self) {
        let t = self.now.max(self.media_free_at);
        let writes_blocked = self.p.write_cache
            && self
                .cmds
                .iter()
                .any(|c| c.stage == Stage::Waiting && matches!(c.req.op, Op::Write | Op::ZoneAppend | Op::WriteZeroes));
        let fg = (0..self.cmds.len()).filter(|&i| self.cmds[i].stage == Stage::NeedMedia);
        let best = fg.min_by(|&a, &b| {
            let pa = self.positioning_total(&self.cmds[a].req, t);
            let pb = self.positioning_total(&self.cmds[b].req, t);
            pa.total_cmp(&pb)
        });
        let destage_first = !self.dirty.is_empty() && (best.is_none() || writes_blocked);
        if destage_first {
            self.start_destage(t);
            return;
        }
        let Some(best) = best else { return };
        let req = self.cmds[best].req;
        self.cmds[best].stage = Stage::OnMedia;
        self.media_access(t, req.sector.bytes(), Self::bytes(&req), req.op != Op::Read, MediaOp::ForCmd(req.id.raw()));
    }

    fn positioning_total(&self, req: &Request, t: f64) -> f64 {
        let (s, w) = self.positioning(req.sector.bytes(), t, req.op != Op::Read);
        s + w
    }

    fn start_destage(&mut self, t: f64) {
        let window = (self.p.destage.window as usize).min(self.dirty.len());
        let pick = (0..window)
            .min_by(|&a, &b| {
                let pa = self.positioning(self.dirty[a].start, t, true);
                let pb = self.positioning(self.dirty[b].start, t, true);
                (pa.0 + pa.1).total_cmp(&(pb.0 + pb.1))
            })
            .expect("dirty data to destage");
        let x = self.dirty[pick];
        let chunk = x.len.min(self.p.destage.chunk_bytes);
        // Segments of the data the chunk covers are freed with it.
        let segs = if chunk == x.len { x.segs } else { ((u64::from(x.segs) * chunk / x.len) as u32).min(x.segs) };
        let part = Extent { start: x.start, len: chunk, segs };
        if chunk == x.len {
            self.dirty.remove(pick);
        } else {
            self.dirty[pick] = Extent { start: x.start + chunk, len: x.len - chunk, segs: x.segs - segs };
        }
        self.dirty_bytes -= chunk;
        self.dirty_segs -= segs;
        self.media_access(t, part.start, part.len, true, MediaOp::Destage(part));
    }

    /// Positions and transfers at `b..b+len` starting no earlier than `t`.
    fn media_access(&mut self, t: f64, b: u64, len: u64, write: bool, op: MediaOp) {
        if let Some(ra) = &mut self.readahead {
            ra.stopped_at.get_or_insert(t);
        }
        let (seek, wait) = self.positioning(b, t, write);
        let resume = if write { self.resume_ns(b) } else { 0.0 };
        if resume > 0.0 {
            self.stats.zone_resumes += 1;
            self.stats.resume_ns += resume;
        }
        if write && self.p.zone_bytes != 0 {
            self.last_write_zone = Some(b / self.p.zone_bytes);
        }
        let seek = seek - resume;
        let xfer = len as f64 / self.rate(b);
        self.stats.media_ops += 1;
        if seek > 0.0 {
            self.stats.seeks += 1;
        }
        self.stats.seek_ns += seek;
        self.stats.rotation_ns += wait;
        self.stats.transfer_ns += xfer;
        let end = t + seek + resume + wait + xfer;
        self.media_free_at = end;
        self.media_op = Some(op);
        self.head_byte = b + len;
        self.head_time = end;
        if !write {
            self.readahead = Some(Readahead { start: b + len, t0: end, rate: self.rate(b + len), stopped_at: None });
        }
    }

    /// The media operation in progress finished at `self.now`.
    fn media_done(&mut self) {
        let op = self.media_op.take().expect("media op");
        match op {
            MediaOp::Destage(x) => {
                self.stats.destaged_bytes += x.len;
            }
            MediaOp::ForCmd(id) => {
                let i = self.cmd_index(id).expect("media op for a known command");
                let c = self.cmds[i];
                if c.req.op == Op::Read {
                    let end = c.req.end().bytes();
                    if self.readahead.is_some_and(|ra| ra.stopped_at.is_none() && ra.start <= end) {
                        // Streamed from the read-ahead: it keeps streaming on.
                    } else {
                        self.readahead =
                            Some(Readahead { start: end, t0: self.now, rate: self.rate(end), stopped_at: None });
                    }
                    let end = self.link_transfer(Self::bytes(&c.req), self.now);
                    self.transfers.push((end, id, Transfer::ToHost));
                } else {
                    self.cmds.remove(i);
                    self.complete_at(self.now, c.req);
                }
            }
        }
    }

    fn transfer_done(&mut self, id: u64, kind: Transfer) {
        let i = self.cmd_index(id).expect("transfer for a known command");
        match kind {
            Transfer::IntoCache => {
                let req = self.cmds[i].req;
                let bytes = Self::bytes(&req);
                let segs = self.segments(bytes);
                self.reserved_segs -= segs;
                self.insert_dirty(Extent { start: req.sector.bytes(), len: bytes, segs });
                if req.flags.contains(BioFlags::FUA) {
                    // Forced unit access: complete once the data is on the media,
                    // after the zone's earlier data (the cache drains in order).
                    self.cmds[i].stage = Stage::FlushWait;
                } else {
                    self.cmds.remove(i);
                    self.complete_at(self.now, req);
                }
            }
            Transfer::IntoBuffer => {
                // Data in the buffer: the write-through now needs the media.
                self.cmds[i].stage = Stage::NeedMedia;
            }
            Transfer::ToHost => {
                let c = self.cmds.remove(i);
                self.complete_at(self.now, c.req);
            }
        }
    }

    fn insert_dirty(&mut self, x: Extent) {
        self.dirty_bytes += x.len;
        self.dirty_segs += x.segs;
        self.stats.cached_writes += 1;
        self.stats.max_dirty_bytes = self.stats.max_dirty_bytes.max(self.dirty_bytes);
        if self.p.destage.merge {
            if let Some(prev) = self.dirty.iter_mut().find(|d| d.end() == x.start) {
                prev.len += x.len;
                prev.segs += x.segs;
                self.stats.merged_writes += 1;
                return;
            }
        }
        self.dirty.push_back(x);
        self.stats.max_dirty_extents = self.stats.max_dirty_extents.max(self.dirty.len() as u64);
        self.stats.max_dirty_segs = self.stats.max_dirty_segs.max(u64::from(self.dirty_segs));
    }

    /// Runs internal events up to `until`.
    fn run_to(&mut self, until: f64, done: &mut Vec<Request>) {
        loop {
            let next_xfer = self.transfers.iter().map(|t| t.0).fold(f64::INFINITY, f64::min);
            let next_media = if self.media_op.is_some() { self.media_free_at } else { f64::INFINITY };
            let t = next_xfer.min(next_media);
            if t > until {
                break;
            }
            self.now = self.now.max(t);
            if next_media <= next_xfer {
                self.media_done();
            } else {
                let k = self.transfers.iter().position(|x| x.0 == next_xfer).expect("transfer");
                let (_, id, kind) = self.transfers.swap_remove(k);
                self.transfer_done(id, kind);
            }
            self.schedule();
        }
        self.now = self.now.max(until);
        let mut due: Vec<(f64, Request)> = Vec::new();
        self.pending.retain(|&(t, r)| {
            if t <= until {
                due.push((t, r));
                false
            } else {
                true
            }
        });
        due.sort_by(|a, b| a.0.total_cmp(&b.0));
        done.extend(due.into_iter().map(|(_, r)| r));
    }
}

impl DeviceModel for HddModel {
    fn submit(&mut self, now_ns: u64, req: &Request) {
        let mut scratch = Vec::new();
        self.run_to(now_ns as f64, &mut scratch);
        // Completions due now stay pending: give them back to the heap of the caller's
        // next advance by keeping them in `pending`.
        for r in scratch {
            self.pending.push((now_ns as f64, r));
        }
        self.now = now_ns as f64;
        if matches!(req.op, Op::Write | Op::ZoneAppend) && self.p.zone_bytes != 0 {
            let z = req.sector.bytes() / self.p.zone_bytes;
            if self.last_arrival_zone.is_some_and(|l| l != z) {
                self.stats.arrival_switches += 1;
            }
            self.last_arrival_zone = Some(z);
        }
        self.backlog.push_back(*req);
        self.schedule();
    }

    fn next_event_ns(&self) -> Option<u64> {
        let next_xfer = self.transfers.iter().map(|t| t.0).fold(f64::INFINITY, f64::min);
        let next_media = if self.media_op.is_some() { self.media_free_at } else { f64::INFINITY };
        let next_done = self.pending.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let t = next_xfer.min(next_media).min(next_done);
        t.is_finite().then(|| t.ceil() as u64)
    }

    fn advance(&mut self, now_ns: u64, done: &mut Vec<Request>) {
        self.run_to(now_ns as f64, done);
    }

    fn describe(&self) -> String {
        format!(
            "simulated {} ({:.0} TB, {} rpm, {:.0}-{:.0} MB/s, write cache {})",
            self.p.name,
            self.p.capacity_bytes as f64 / 1e12,
            self.p.rpm,
            self.p.od_rate / 1e6,
            self.p.id_rate / 1e6,
            if self.p.write_cache { "on" } else { "off" }
        )
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let s = &self.stats;
        vec![
            ("media_ops", s.media_ops as f64),
            ("seeks", s.seeks as f64),
            ("seek_s", s.seek_ns / 1e9),
            ("rotation_s", s.rotation_ns / 1e9),
            ("media_transfer_s", s.transfer_ns / 1e9),
            ("destaged_bytes", s.destaged_bytes as f64),
            ("cached_writes", s.cached_writes as f64),
            ("merged_writes", s.merged_writes as f64),
            ("read_hits", s.read_hits as f64),
            ("max_dirty_bytes", s.max_dirty_bytes as f64),
            ("zone_resumes", s.zone_resumes as f64),
            ("resume_s", s.resume_ns / 1e9),
            ("resets", s.resets as f64),
            ("arrival_switches", s.arrival_switches as f64),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zblk_core::bio::ReqId;
    use zblk_core::units::Sector;

    const MIB: u64 = 1 << 20;
    /// Rounding of virtual time to whole nanoseconds, per command.
    const HOST_SLACK_NS: f64 = 1e3;

    fn req(id: u64, op: Op, byte: u64, bytes: u64) -> Request {
        Request {
            id: ReqId::unissued(id),
            op,
            sector: Sector(byte / SECTOR_SIZE),
            nr_sectors: (bytes / SECTOR_SIZE) as u32,
            flags: BioFlags::NONE,
            user_data: 0,
            bio_offset: 0,
        }
    }

    /// Runs `reqs` keeping `qd` in flight, each next one submitted when one
    /// completes; returns each request's completion time (ns) by id.
    fn run_qd(m: &mut HddModel, reqs: &[Request], qd: usize) -> Vec<u64> {
        let mut done_at = vec![0u64; reqs.len()];
        let mut next = 0;
        let mut now = 0u64;
        let mut inflight = 0;
        let mut done = Vec::new();
        while next < reqs.len() || inflight > 0 {
            while inflight < qd && next < reqs.len() {
                m.submit(now, &reqs[next]);
                next += 1;
                inflight += 1;
            }
            now = m.next_event_ns().expect("requests in flight");
            m.advance(now, &mut done);
            for r in done.drain(..) {
                done_at[r.id.raw() as usize] = now;
                inflight -= 1;
            }
        }
        done_at
    }

    fn disk(write_cache: bool) -> HddModel {
        HddModel::new(HddParams { write_cache, ..HddParams::smr_30tb() })
    }

    #[test]
    fn seek_curve_matches_its_datasheet_figures() {
        let p = HddParams::smr_30tb();
        let m = HddModel::new(p.clone());
        for (curve, track, avg, full) in [
            (m.seek, p.seek_track_ns, p.seek_avg_ns, p.seek_full_ns),
            (m.write_seek, p.write_seek_track_ns, p.write_seek_avg_ns, p.write_seek_full_ns),
        ] {
            assert!((curve.time(1.0) - full).abs() < 1.0, "full stroke");
            assert!((curve.time(curve.one_track) - track).abs() < 1.0, "single track");
            // Mean over random pairs of positions: distance density 2(1 - d).
            let n = 200_000;
            let mean: f64 = (0..n)
                .map(|i| {
                    let d = (i as f64 + 0.5) / n as f64;
                    curve.time(d) * 2.0 * (1.0 - d) / n as f64
                })
                .sum();
            assert!((mean / avg - 1.0).abs() < 0.01, "average seek {mean} vs {avg}");
            // Monotonic and continuous at the knee.
            let k = curve.knee;
            assert!((curve.time(k - 1e-9) - curve.time(k + 1e-9)).abs() < 1e3);
            let mut last = 0.0;
            for i in 1..1000 {
                let t = curve.time(i as f64 / 1000.0);
                assert!(t >= last, "seek time falls at {i}");
                last = t;
            }
        }
    }

    #[test]
    fn media_rate_falls_from_outer_to_inner_diameter() {
        let m = disk(true);
        let cap = m.params().capacity_bytes;
        let od = m.sustained_mb_s(0, 256 * MIB);
        let id = m.sustained_mb_s(cap - 256 * MIB, 256 * MIB);
        assert!((od / (OD_RATE / 1e6) - 1.0).abs() < 0.001, "OD {od}");
        assert!((id / (OD_RATE * 0.45 / 1e6) - 1.0).abs() < 0.01, "ID {id}");
        let mid = m.sustained_mb_s(cap / 2, 256 * MIB);
        assert!(id < mid && mid < od);
    }

    #[test]
    fn write_through_at_qd1_loses_a_revolution_per_command() {
        // Without a cache, each sequential write reaches the media after the head
        // has passed its first sector: it waits almost a whole revolution.
        let mut m = disk(false);
        let reqs: Vec<Request> = (0..64).map(|i| req(i, Op::Write, i * MIB, MIB)).collect();
        let t = run_qd(&mut m, &reqs, 1);
        let per = (t[63] - t[31]) as f64 / 32.0;
        let xfer = MIB as f64 / (OD_RATE * 1e-9);
        let rev = 60e9 / 7200.0;
        assert!(per > xfer + 0.8 * rev && per < xfer + 1.1 * rev, "{per} ns per write");
    }

    #[test]
    fn write_cache_acknowledges_on_insert_and_flush_waits_for_the_media() {
        let mut m = disk(true);
        let mut reqs: Vec<Request> = (0..16).map(|i| req(i, Op::Write, i * MIB, MIB)).collect();
        reqs.push(req(16, Op::Flush, 0, 0));
        let t = run_qd(&mut m, &reqs, 1);
        // 16 MiB fit in the cache: each write costs its link transfer, not the media.
        let link = MIB as f64 / 600e6 * 1e9;
        assert!((t[15] as f64) < 16.0 * (link + 20e3 + HOST_SLACK_NS), "writes took {} ns", t[15]);
        // The flush completes only once all 16 MiB are on the media.
        let media = 16.0 * MIB as f64 / (OD_RATE * 1e-9);
        assert!(t[16] as f64 >= media, "flush at {} ns, media needs {media} ns", t[16]);
        assert_eq!(m.stats.destaged_bytes, 16 * MIB);
    }

    #[test]
    fn fua_write_completes_after_the_media() {
        let mut m = disk(true);
        let mut fua = req(0, Op::Write, 0, MIB);
        fua.flags = BioFlags::FUA;
        let t = run_qd(&mut m, &[fua], 1);
        assert!(t[0] as f64 >= MIB as f64 / (OD_RATE * 1e-9), "FUA completed at {} ns", t[0]);
        let t = run_qd(&mut disk(true), &[req(0, Op::Write, 0, MIB)], 1);
        assert!((t[0] as f64) < MIB as f64 / (OD_RATE * 1e-9), "cached write at {} ns", t[0]);
    }

    #[test]
    fn full_cache_throttles_writes_to_the_media_rate() {
        let mut m = disk(true);
        let n = 3072u64; // 3 GiB: the cache (450 MiB) is full long before the second half
        let reqs: Vec<Request> = (0..n).map(|i| req(i, Op::Write, i * MIB, MIB)).collect();
        let t = run_qd(&mut m, &reqs, 4);
        let late = (t[n as usize - 1] - t[n as usize / 2]) as f64 / (n / 2 - 1) as f64;
        let media = MIB as f64 / (m.rate((n / 2) * MIB));
        assert!((late / media - 1.0).abs() < 0.02, "{late} ns per MiB vs media {media}");
    }

    #[test]
    fn ncq_reordering_speeds_up_random_reads() {
        let cap = HddParams::smr_30tb().capacity_bytes;
        let reqs: Vec<Request> =
            (0..400).map(|i| req(i, Op::Read, (unit_hash(7, i) * (cap / 4096) as f64) as u64 * 4096, 4096)).collect();
        let t1 = *run_qd(&mut disk(true), &reqs, 1).iter().max().unwrap();
        let t32 = *run_qd(&mut disk(true), &reqs, 32).iter().max().unwrap();
        // QD1: seek + half a revolution each (~12 ms); QD32: shortest positioning
        // time first, more than twice the IOPS.
        let per1 = t1 as f64 / 400.0;
        assert!(per1 > 10e6 && per1 < 15e6, "QD1 random read {per1} ns");
        assert!(t32 * 2 < t1, "QD32 {t32} ns vs QD1 {t1} ns");
    }

    #[test]
    fn a_reset_writes_the_cache_back_before_it_completes() {
        // Mechanism M1: nothing cached escapes the media; the reset is non-queued.
        let mut m = disk(true);
        let zone = 256 * MIB;
        let mut reqs: Vec<Request> = (0..32).map(|i| req(i, Op::Write, zone + i * MIB, MIB)).collect();
        reqs.push(req(32, Op::ZoneReset, zone, 0));
        reqs.push(req(33, Op::Write, 2 * zone, MIB));
        let t = run_qd(&mut m, &reqs, 4);
        assert_eq!(m.stats.resets, 1);
        assert!(m.stats.destaged_bytes >= 32 * MIB, "destaged {}", m.stats.destaged_bytes);
        let media = 32.0 * MIB as f64 / (OD_RATE * 1e-9);
        assert!(t[32] as f64 >= media, "reset at {} ns, the cached 32 MiB need {media} ns", t[32]);
        // Queued after the reset, the next write is not accepted before it completes.
        assert!(t[33] > t[32], "write at {} ns, reset at {} ns", t[33], t[32]);
    }

    #[test]
    fn without_m1_a_reset_drops_the_zones_dirty_data() {
        let mut m = HddModel::new(HddParams { reset_flushes: false, ..HddParams::smr_30tb() });
        let zone = 256 * MIB;
        let mut reqs: Vec<Request> = (0..32).map(|i| req(i, Op::Write, zone + i * MIB, MIB)).collect();
        reqs.push(req(32, Op::ZoneReset, zone, 0));
        reqs.push(req(33, Op::Flush, 0, 0));
        run_qd(&mut m, &reqs, 1);
        assert!(m.stats.destaged_bytes < 32 * MIB, "destaged {}", m.stats.destaged_bytes);
    }

    /// Write-through 1 MiB writes alternating between two zones, each past its
    /// first sector: time per write with `revs` revolutions of resume cost.
    fn alternating_write_ns(revs: f64) -> (f64, HddStats) {
        let mut m = HddModel::new(HddParams { write_cache: false, zone_resume_revs: revs, ..HddParams::smr_30tb() });
        let zone = 256 * MIB;
        let reqs: Vec<Request> = (0..40).map(|i| req(i, Op::Write, (i % 2) * zone + (1 + i / 2) * MIB, MIB)).collect();
        let t = run_qd(&mut m, &reqs, 1);
        ((t[39] - t[19]) as f64 / 20.0, m.stats)
    }

    #[test]
    fn resuming_a_zone_costs_a_revolution() {
        // Mechanism M2: every write here resumes the zone the head did not write last.
        let rev = 60e9 / 7200.0;
        let (with, s) = alternating_write_ns(1.0);
        let (without, s0) = alternating_write_ns(0.0);
        assert_eq!(s0.zone_resumes, 0);
        assert!(s.zone_resumes >= 39, "{} resumes", s.zone_resumes);
        assert!((with - without - rev).abs() < 0.05 * rev, "{with} vs {without} ns per write");
        // Continuing the zone last written, or starting a zone at its first sector,
        // costs no resume.
        let mut m = disk(false);
        let zone = 256 * MIB;
        let reqs: Vec<Request> = (0..8).map(|i| req(i, Op::Write, 3 * zone + i * MIB, MIB)).collect();
        run_qd(&mut m, &reqs, 1);
        assert_eq!(m.stats.zone_resumes, 0);
    }

    #[test]
    fn the_same_layout_seed_replays_exactly() {
        // Write-through, so that every write meets the media (a 200 MiB run fits in
        // the write cache, where the layout makes no difference).
        let reqs: Vec<Request> =
            (0..200).map(|i| req(i, Op::Write, (i % 7) * 256 * MIB + (i / 7) * MIB, MIB)).collect();
        let drawn = |layout_seed| {
            HddModel::new(HddParams { layout_seed, zone_advance: None, write_cache: false, ..HddParams::smr_30tb() })
        };
        let a = run_qd(&mut drawn(1), &reqs, 8);
        assert_eq!(a, run_qd(&mut drawn(1), &reqs, 8));
        assert_ne!(a, run_qd(&mut drawn(99), &reqs, 8), "the layout seed draws the zone advance");
        // A fixed advance leaves the seed nothing to draw.
        let fixed = |layout_seed| HddModel::new(HddParams { layout_seed, write_cache: false, ..HddParams::smr_30tb() });
        assert_eq!(run_qd(&mut fixed(1), &reqs, 8), run_qd(&mut fixed(99), &reqs, 8));
    }

    /// The zone advance is one number for the disk: the angle between two zones'
    /// sectors depends on how far apart their LBAs are, not on which zones they
    /// are. So per-zone plugging's boundary alternation at a given QD (the tail of
    /// zone n against the head of zone n + 1, QD − 1 MiB apart) meets the same
    /// rotational phase at every boundary, and that phase moves with the QD.
    #[test]
    fn the_angle_between_two_zones_depends_only_on_their_lba_distance() {
        let m = HddModel::new(HddParams { zone_advance: Some(0.2), ..HddParams::smr_30tb() });
        let zone = 256 * MIB;
        let phase = |n: u64, gap: u64| (m.angle((n + 1) * zone) - m.angle((n + 1) * zone - gap)).rem_euclid(1.0);
        for gap in [63 * MIB, 127 * MIB] {
            let p0 = phase(0, gap);
            for n in 1..32 {
                // The media rate falls by 0.02 % over 32 zones at the OD: the phase
                // drifts by far less than a degree.
                let d = (phase(n, gap) - p0 + 0.5).rem_euclid(1.0) - 0.5;
                assert!(
                    d.abs() < 0.01,
                    "gap {} MiB: boundary {n} phase {:.3} against {p0:.3}",
                    gap / MIB,
                    phase(n, gap)
                );
            }
        }
        let (p64, p128) = (phase(0, 63 * MIB), phase(0, 127 * MIB));
        assert!((p64 - p128).abs() > 0.05, "QD 64 and QD 128 meet different phases: {p64:.3} {p128:.3}");
    }
}
