//! The parameters of a disk and the presets of the disks the experiments model:
//! mechanics, interface, write cache and the SMR layout's mechanisms (zone resume M2,
//! flushing reset M1), each with its source or the measurements it is fitted to.

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
